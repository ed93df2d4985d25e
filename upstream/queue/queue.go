package queue

import (
	"fmt"
	"math"
	"time"
)

// Priorities outside [MinPriority, MaxPriority] are clamped to the nearest
// end: requests beyond it share the end's class. The clamp keeps a class's
// priority in an int32 and the classes few enough to name; vLLM documents
// no range for its field and small integers are what clients send.
const (
	MinPriority = -1000
	MaxPriority = 1000
)

// Bounds of a Push's weight and cost, so that cost/weight, the virtual time
// an entry costs its tenant, stays finite and within float64 precision of
// the class's virtual time: that grows by about one span per pop and
// starts again from 0 whenever the class empties, so with spans near 1 it
// stays exact far beyond any busy period.
const (
	minWeight = 1e-3
	maxWeight = 1e3
	minCost   = 1e-3
	maxCost   = 1e6
)

// Band groups priorities for metric labels: the classes present may be any
// of 2,001 priorities, too many for a label, and three bands say what an
// operator needs (are the urgent ones waiting, is the bulk waiting).
type Band uint8

const (
	High   Band = iota // priority < 0: served before every normal request
	Normal             // priority 0, and requests without the field
	Low                // priority > 0
	NumBands
)

func (b Band) String() string {
	return [...]string{"high", "normal", "low"}[b]
}

// BandOf returns the band of a request's priority.
func BandOf(priority int) Band {
	switch {
	case priority < 0:
		return High
	case priority == 0:
		return Normal
	}
	return Low
}

// Stats is a snapshot of the queue's counters.
type Stats struct {
	Pushed  uint64 // entries accepted by Push
	Refused uint64 // Push calls refused because the queue was full
	Popped  uint64 // entries returned by Pop
	// Requeued counts entries queued again by Requeue (not in Pushed).
	Requeued uint64
	Removed  uint64 // entries taken out by Remove
	Expired  uint64 // entries returned by Expire
	// Evicted counts tenant records dropped while their tenant still owed
	// virtual time (see [Queue]): at MaxEntries records, a new tenant's
	// record replaces the idle one that waited longest.
	Evicted uint64
	// Tenants is the number of tenant records: a record per (priority
	// class, tenant) with entries queued, plus idle ones still owing.
	Tenants int
}

// none is the null index of the slabs' intrusive links.
const none = -1

// entry is one queued request. A free entry has flow == none.
type entry[T any] struct {
	item    T
	arrival int64   // now at Push, in the caller's nanoseconds (a requeued entry's first Push)
	pushed  int64   // now at Push or Requeue: Pop's waited counts from it
	seq     uint64  // Push order, the tie-break between tenants
	span    float64 // cost/weight: virtual time charged when dispatched
	gen     uint32  // bumped when the slot is freed; half of the id
	flow    int32   // the tenant record it is queued in
	// passed counts the times PopPrefer took a later entry of its tenant
	// ahead of it (at most its maxPassed).
	passed uint16
	// prev, next link the tenant's FIFO; older, newer the arrival list.
	prev, next, older, newer int32
}

// flowKey names a tenant record: fair share is kept per priority class.
type flowKey struct {
	prio   int32
	tenant string
}

// flow is one tenant's state inside one priority class.
type flow struct {
	key        flowKey
	class      int32
	head, tail int32 // FIFO of its queued entries
	n          int32 // entries queued
	heapIdx    int32 // position in its class's heap; none while idle
	start      float64
	headArr    int64 // the head entry's arrival and seq, copied for the heap
	headSeq    uint64
	finish     float64
	// An idle flow (n == 0, finish > its class's vtime) is on its class's
	// idle list (cPrev, cNext) and on the queue's (gPrev, gNext).
	cPrev, cNext, gPrev, gNext int32
}

// class is one priority's share of the queue.
type class struct {
	prio    int32
	heapIdx int32 // position in q.classHeap
	n       int   // entries queued
	// vtime is the class's virtual time: the start tag of the entry it
	// dispatched last.
	vtime float64
	// heap of the class's flows with entries, by (start, headArr, headSeq).
	heap               []int32
	idleHead, idleTail int32
}

// Queue is the gateway queue of one model pool: requests wait in it while
// no engine of the pool has a free slot, and [Queue.Pop] says which one
// goes when a slot frees.
//
// # Order
//
// Pop takes the lowest priority class first (vLLM's "priority" field:
// lower is served first; requests without it are priority 0). Priority is
// strict: a class is served only while every lower one is empty, as vLLM's
// own priority scheduling does, so a steady stream of urgent requests can
// starve the rest.
//
// Inside a class, tenants share by start-time fair queuing (SFQ, Goyal,
// Vin and Cheng, SIGCOMM 1996). Every entry costs its tenant
// span = cost/weight of virtual time. The class keeps a virtual time v:
// the start tag of the entry it dispatched last. A tenant's first queued
// entry gets the start tag S = max(v, F), F being the finish tag
// (S + span) of the tenant's last dispatched entry; Pop dispatches the
// smallest start tag, ties by arrival, and the tenant's next entry then
// gets S = F. Inside a tenant, entries leave in arrival order. This gives:
//
//   - Shares by weight, not by client count: two tenants with entries
//     queued throughout an interval are dispatched in proportion to their
//     weights whatever their backlogs (44 queued against 4 interleave 1:1);
//     SFQ bounds the gap between their weighted services (sum of costs
//     dispatched / weight) by the largest span of each, which the tests
//     check pop by pop. The caller passes the tenant's configured weight
//     with every Push; each entry is charged at its own.
//   - No banked credit: a tenant that was idle starts at the class's
//     virtual time, not at the tag it would have had.
//   - No charge for what was not served: an entry removed or expired before
//     its dispatch does not move its tenant's finish tag (tags are given
//     to a tenant's head entry only, so removal never leaves a gap).
//   - Work conserving: Pop returns an entry whenever one is queued.
//
// # Bounds
//
// At most MaxEntries entries; Push refuses past it. A tenant record lives
// while its tenant has entries in the class, and after that while it still
// owes virtual time (F > v), so that a tenant cannot skip its turn by
// going idle for a moment. Records are bounded by MaxEntries: when a new
// tenant comes to a full set of records, the idle record that waited
// longest is dropped (counted in Stats.Evicted), forgiving at most one
// entry's span. A class that empties drops its records: with nothing
// queued no one's tag matters (SFQ sets v to the largest finish tag when
// idle, so every tenant starts afresh).
//
// # Time
//
// now is the caller's clock in nanoseconds (the loop's tick time). A now
// smaller than one seen before is taken as the latest one seen, so entries
// stay in arrival order and waits are never negative.
//
// Loop only: a Queue has no locks.
type Queue[T any] struct {
	cfg     Config
	entries []entry[T]
	flows   []flow
	classes []class

	// free slots of each slab, reused before growing it.
	freeEntries, freeFlows, freeClasses []int32

	flowIdx  map[flowKey]int32
	classIdx map[int32]int32
	// classHeap holds the classes with entries, by priority.
	classHeap []int32

	// arrival list of every queued entry, oldest first.
	oldest, newest int32
	// global idle list of flows, longest idle first.
	idleHead, idleTail int32

	n     int
	bands [NumBands]int
	seq   uint64
	now   int64
	stats Stats
}

// New returns an empty queue, or an error naming the invalid field of cfg.
func New[T any](cfg Config) (*Queue[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Queue[T]{
		cfg:      cfg,
		flowIdx:  map[flowKey]int32{},
		classIdx: map[int32]int32{},
		oldest:   none, newest: none,
		idleHead: none, idleTail: none,
	}, nil
}

// Seq returns the arrival number the next Push takes. Loop only.
func (q *Queue[T]) Seq() uint64 { return q.seq }

// StartSeq sets the arrival number of the next Push: a queue that replaces
// a dropped one starts past the numbers the old one gave, so that the
// Tickets of its entries still order against the new one's. Only while
// empty, and never backwards. Loop only.
func (q *Queue[T]) StartSeq(seq uint64) {
	if q.n == 0 {
		q.seq = max(q.seq, seq)
	}
}

// Len returns the number of entries queued. Loop only.
func (q *Queue[T]) Len() int { return q.n }

// LenBand returns the number of entries queued in a band. Loop only.
func (q *Queue[T]) LenBand(b Band) int {
	if b >= NumBands {
		return 0
	}
	return q.bands[b]
}

// Oldest returns how long the entry queued longest has waited at now; 0
// when the queue is empty. Loop only.
func (q *Queue[T]) Oldest(now int64) time.Duration {
	if q.oldest == none {
		return 0
	}
	now = max(now, q.now) // as clock, without moving it
	return time.Duration(now - q.entries[q.oldest].arrival)
}

// Stats returns the queue's counters. Loop only.
func (q *Queue[T]) Stats() Stats {
	s := q.stats
	s.Tenants = len(q.flowIdx)
	return s
}

// Push queues item for tenant at priority and returns its id for Remove.
// ok is false, and nothing is kept, when MaxEntries entries are queued: the
// caller refuses the request. weight scales the tenant's share (1 is the
// default); cost is what the request costs its tenant (1 per request, or
// an estimate of its work). A weight or cost that is not a positive
// number counts as 1; weight is clamped to [0.001, 1000] and cost to
// [0.001, 10^6]; priority is clamped to [MinPriority, MaxPriority].
//
// The queue keeps tenant as a map key: it must not alias memory the caller
// reuses. Loop only.
func (q *Queue[T]) Push(item T, priority int, tenant string, weight, cost float64, now int64) (id uint64, ok bool) {
	return q.PushAt(item, priority, tenant, weight, cost, math.MaxInt64, now)
}

// PushAt is Push for an item that arrived at arrival (now if later): one
// that was sent to the engines before it had to wait (every engine
// refused it as full) takes its place among the entries by that arrival,
// ahead of the ones that arrived after it, and Oldest and Expire count
// from it; Pop's waited counts from now. Loop only.
func (q *Queue[T]) PushAt(item T, priority int, tenant string, weight, cost float64, arrival, now int64) (id uint64, ok bool) {
	if id, ok = q.add(item, priority, tenant, arrival, now, q.seq, span(cost, weight), 0); ok {
		q.seq++
		q.stats.Pushed++
	}
	return id, ok
}

// add queues item for tenant at priority as an entry that arrived at
// arrival (now if later) with seq and span sp, its tenant first given back
// refund of virtual time (Requeue's); it refuses past MaxEntries.
func (q *Queue[T]) add(item T, priority int, tenant string, arrival, now int64, seq uint64, sp, refund float64) (id uint64, ok bool) {
	if q.n >= q.cfg.MaxEntries {
		q.stats.Refused++
		return 0, false
	}
	now = q.clock(now)
	prio := clampPriority(priority)
	ci := q.classFor(prio)
	fi := q.flowFor(ci, prio, tenant)
	ei := q.allocEntry()

	e := &q.entries[ei]
	e.item, e.arrival, e.pushed, e.seq, e.span, e.flow, e.passed = item, min(arrival, now), now, seq, sp, fi, 0
	f := &q.flows[fi]
	f.finish = max(f.finish-refund, 0)
	q.place(ei, prio)
	return uint64(e.gen)<<32 | uint64(ei), true
}

// Pop removes and returns the next entry (see [Queue] for the order) and
// how long it waited. ok is false when the queue is empty. An entry past
// MaxWait that Expire has not reached yet is still returned: a slot is free
// now, which serves its client better than a refusal. Loop only.
func (q *Queue[T]) Pop(now int64) (item T, waited time.Duration, ok bool) {
	item, waited, _, ok = q.PopTicket(now)
	return item, waited, ok
}

// Ticket is the place of an entry Pop returned: its first arrival, its
// order among arrivals and what its dispatch charged its tenant. Requeue
// takes it to queue the entry again where it was.
type Ticket struct {
	arrival int64
	seq     uint64
	span    float64
}

// Valid reports whether t came from a Pop (the zero Ticket did not).
func (t Ticket) Valid() bool { return t.span > 0 }

// PopTicket is Pop, with the popped entry's Ticket. Loop only.
func (q *Queue[T]) PopTicket(now int64) (item T, waited time.Duration, t Ticket, ok bool) {
	if q.n == 0 {
		return item, 0, t, false
	}
	ci := q.classHeap[0]
	fi := q.classes[ci].heap[0]
	return q.take(now, ci, fi, q.flows[fi].head)
}

// PopPrefer is PopTicket, except that among the first window entries of
// the tenant Pop serves next it takes the first that prefer accepts (the
// engine that has a slot free holds its prefix, say), ahead of the
// tenant's entries before it. The priority classes and the tenants' fair
// shares are those of Pop: only the order inside the tenant moves, and
// each entry is charged its own span. An entry passed over maxPassed
// times goes first when its turn comes within the window, so an entry leaves at
// most maxPassed of its tenant's dispatches later than in Pop's order.
// With no entry accepted it is Pop. O(window) more than Pop. Loop only.
func (q *Queue[T]) PopPrefer(now int64, window, maxPassed int, prefer func(T) bool) (item T, waited time.Duration, t Ticket, ok bool) {
	if q.n == 0 {
		return item, 0, t, false
	}
	ci := q.classHeap[0]
	fi := q.classes[ci].heap[0]
	f := &q.flows[fi]
	pick := f.head
	for ei, i := f.head, 0; ei != none && i < window; ei, i = q.entries[ei].next, i+1 {
		e := &q.entries[ei]
		if int(e.passed) >= maxPassed || prefer(e.item) {
			pick = ei
			break
		}
	}
	for ei := f.head; ei != pick; ei = q.entries[ei].next {
		if e := &q.entries[ei]; e.passed < math.MaxUint16 {
			e.passed++
		}
	}
	return q.take(now, ci, fi, pick)
}

// take pops entry ei of tenant record fi in class ci, charging the
// tenant its span from its start tag (fair queuing's dispatch of the
// tenant's head, whichever of its entries goes).
func (q *Queue[T]) take(now int64, ci, fi, ei int32) (item T, waited time.Duration, t Ticket, ok bool) {
	now = q.clock(now)
	c := &q.classes[ci]
	f := &q.flows[fi]
	e := &q.entries[ei]
	c.vtime = max(c.vtime, f.start)
	f.finish = f.start + e.span
	item, waited = e.item, time.Duration(now-e.pushed)
	t = Ticket{arrival: e.arrival, seq: e.seq, span: e.span}
	head := f.head == ei
	q.unlink(ei)
	if !head {
		// The head stays and is tagged from the finish just charged, as
		// unlink tags a new head.
		f.start = max(c.vtime, f.finish)
		q.flowFix(c, int(f.heapIdx))
	}
	q.stats.Popped++
	if q.classes[ci].n > 0 {
		q.sweep(ci, 2)
	}
	return item, waited, t, true
}

// Requeue queues item again where the entry Pop returned with t was (its
// dispatch found no engine with room: every one refused it as full). It
// goes ahead of its tenant's entries that arrived after it, takes its
// first arrival's place in the arrival order (Oldest and Expire count
// from that arrival; Pop's waited from now), and its tenant gets back the
// virtual time its dispatch was charged: it was not served. priority and
// tenant are the ones it was pushed with. ok is false, and nothing is
// kept, when MaxEntries entries are queued or t is not valid. O(n) in
// the entries that arrived after it. Loop only.
func (q *Queue[T]) Requeue(item T, priority int, tenant string, t Ticket, now int64) (id uint64, ok bool) {
	if !t.Valid() {
		q.stats.Refused++
		return 0, false
	}
	// The refund: its dispatch was charged, and it was not served.
	if id, ok = q.add(item, priority, tenant, t.arrival, now, t.seq, t.span, t.span); ok {
		q.stats.Requeued++
	}
	return id, ok
}

// place links entry ei (its fields set) into the arrival list and its
// tenant's FIFO after the entries that arrived before it (a Push's came
// last: at the ends, at once; an earlier one walks back over the later
// arrivals), makes its tenant active, and counts it. A tenant's
// head is tagged max(v, F) when its tenant was idle; a requeued entry that
// becomes the head never takes a later tag than the head it displaces.
func (q *Queue[T]) place(ei int32, prio int32) {
	e := &q.entries[ei]
	q.insertInOrder(ei, &q.oldest, &q.newest, arrivalLinks[T])
	f := &q.flows[e.flow]
	c := &q.classes[f.class]
	q.insertInOrder(ei, &f.head, &f.tail, fifoLinks[T])
	tag := max(c.vtime, f.finish)
	switch {
	case f.n == 0:
		f.start, f.headArr, f.headSeq = tag, e.arrival, e.seq
		f.heapIdx = int32(len(c.heap))
		c.heap = append(c.heap, e.flow)
		q.flowUp(c, int(f.heapIdx))
	case f.head == ei:
		f.start, f.headArr, f.headSeq = min(f.start, tag), e.arrival, e.seq
		q.flowFix(c, int(f.heapIdx))
	}
	f.n++
	c.n++
	q.n++
	q.bands[bandOf(prio)]++
}

// insertInOrder links entry ei into a list in arrival order (arrival,
// then seq) whose ends are *first and *last, after the entries that
// arrived before it, walking from the last; links gives an entry's links
// toward the first and the last.
func (q *Queue[T]) insertInOrder(ei int32, first, last *int32, links func(*entry[T]) (back, fwd *int32)) {
	e := &q.entries[ei]
	after, before := *last, int32(none)
	for after != none && e.before(&q.entries[after]) {
		before = after
		back, _ := links(&q.entries[after])
		after = *back
	}
	back, fwd := links(&q.entries[ei])
	*back, *fwd = after, before
	if before == none {
		*last = ei
	} else {
		b, _ := links(&q.entries[before])
		*b = ei
	}
	if after == none {
		*first = ei
	} else {
		_, f := links(&q.entries[after])
		*f = ei
	}
}

// before reports whether e arrived before o: an earlier arrival, or the
// same with a smaller seq.
func (e *entry[T]) before(o *entry[T]) bool {
	return e.arrival < o.arrival || e.arrival == o.arrival && e.seq < o.seq
}

// arrivalLinks and fifoLinks are an entry's links in the arrival list
// and in its tenant's FIFO (insertInOrder).
func arrivalLinks[T any](e *entry[T]) (back, fwd *int32) { return &e.older, &e.newer }
func fifoLinks[T any](e *entry[T]) (back, fwd *int32)    { return &e.prev, &e.next }

// Remove takes the entry id out of the queue (its client left) and reports
// whether it was queued; ids of entries already popped, removed or expired
// report false. Its cost is not charged to its tenant. O(log n). Loop
// only.
func (q *Queue[T]) Remove(id uint64) bool {
	slot := uint32(id)
	if uint64(slot) >= uint64(len(q.entries)) {
		return false
	}
	e := &q.entries[slot]
	if e.flow == none || e.gen != uint32(id>>32) {
		return false
	}
	q.unlink(int32(slot))
	q.stats.Removed++
	return true
}

// Expire removes the entries that waited longer than MaxWait, oldest first,
// and appends them to dst: the caller refuses each. It returns at most
// MaxExpirePerCall entries; more may be due, so the caller calls it on
// every tick (or again). O(k log n) for k entries returned. Loop only.
func (q *Queue[T]) Expire(now int64, dst []T) []T {
	now = q.clock(now)
	for k := 0; k < q.cfg.MaxExpirePerCall && q.oldest != none; k++ {
		ei := q.oldest
		e := &q.entries[ei]
		if now-e.arrival <= int64(q.cfg.MaxWait) {
			break
		}
		dst = append(dst, e.item)
		q.unlink(ei)
		q.stats.Expired++
	}
	return dst
}

// clock returns now, or the latest now seen if it is larger.
func (q *Queue[T]) clock(now int64) int64 {
	if now < q.now {
		return q.now
	}
	q.now = now
	return now
}

// unlink takes a queued entry out of every structure and frees its slot.
// Pop sets the flow's finish tag before calling it; Remove and Expire
// leave it, so an entry not served is not charged.
func (q *Queue[T]) unlink(ei int32) {
	e := &q.entries[ei]
	fi := e.flow
	f := &q.flows[fi]
	ci := f.class
	c := &q.classes[ci]

	if e.older == none {
		q.oldest = e.newer
	} else {
		q.entries[e.older].newer = e.newer
	}
	if e.newer == none {
		q.newest = e.older
	} else {
		q.entries[e.newer].older = e.older
	}

	wasHead := f.head == ei
	if e.prev == none {
		f.head = e.next
	} else {
		q.entries[e.prev].next = e.next
	}
	if e.next == none {
		f.tail = e.prev
	} else {
		q.entries[e.next].prev = e.prev
	}
	f.n--
	c.n--
	q.n--
	q.bands[bandOf(c.prio)]--

	var zero T
	e.item = zero // do not pin the caller's request
	e.flow = none
	e.gen++
	if e.gen == 0 { // ids are never 0
		e.gen = 1
	}
	q.freeEntries = append(q.freeEntries, ei)

	switch {
	case c.n == 0:
		q.dropClass(ci)
	case f.n == 0:
		q.flowRemove(c, int(f.heapIdx))
		if f.finish > c.vtime {
			q.idle(fi)
		} else {
			q.freeFlow(fi)
		}
	case wasHead:
		h := &q.entries[f.head]
		f.start, f.headArr, f.headSeq = max(c.vtime, f.finish), h.arrival, h.seq
		q.flowFix(c, int(f.heapIdx))
	}
}

// classFor returns the class of prio, creating it empty.
func (q *Queue[T]) classFor(prio int32) int32 {
	if ci, ok := q.classIdx[prio]; ok {
		return ci
	}
	var ci int32
	if n := len(q.freeClasses); n > 0 {
		ci = q.freeClasses[n-1]
		q.freeClasses = q.freeClasses[:n-1]
	} else {
		ci = int32(len(q.classes))
		q.classes = append(q.classes, class{})
	}
	c := &q.classes[ci]
	c.prio, c.n, c.vtime = prio, 0, 0
	c.heap = c.heap[:0]
	c.idleHead, c.idleTail = none, none
	q.classIdx[prio] = ci
	c.heapIdx = int32(len(q.classHeap))
	q.classHeap = append(q.classHeap, ci)
	q.classUp(int(c.heapIdx))
	return ci
}

// dropClass forgets an empty class and every tenant record in it.
func (q *Queue[T]) dropClass(ci int32) {
	c := &q.classes[ci]
	for _, fi := range c.heap {
		q.freeFlow(fi)
	}
	c.heap = c.heap[:0]
	for fi := c.idleHead; fi != none; {
		next := q.flows[fi].cNext
		q.globalUnlink(fi)
		q.freeFlow(fi)
		fi = next
	}
	c.idleHead, c.idleTail = none, none
	q.classRemove(int(c.heapIdx))
	delete(q.classIdx, c.prio)
	q.freeClasses = append(q.freeClasses, ci)
}

// flowFor returns the tenant's record in class ci, creating it or waking
// it from idle.
func (q *Queue[T]) flowFor(ci, prio int32, tenant string) int32 {
	key := flowKey{prio, tenant}
	if fi, ok := q.flowIdx[key]; ok {
		if q.flows[fi].n == 0 {
			q.classUnlink(fi)
			q.globalUnlink(fi)
		}
		return fi
	}
	if len(q.flowIdx) >= q.cfg.MaxEntries {
		// Records with entries are at most Len() < MaxEntries, so an idle
		// one exists.
		if q.idleHead == none {
			panic(fmt.Sprintf("BUG: queue: %d tenant records, %d entries, none idle", len(q.flowIdx), q.n))
		}
		fi := q.idleHead
		q.classUnlink(fi)
		q.globalUnlink(fi)
		q.freeFlow(fi)
		q.stats.Evicted++
	}
	var fi int32
	if n := len(q.freeFlows); n > 0 {
		fi = q.freeFlows[n-1]
		q.freeFlows = q.freeFlows[:n-1]
	} else {
		fi = int32(len(q.flows))
		q.flows = append(q.flows, flow{})
	}
	q.flows[fi] = flow{
		key: key, class: ci,
		head: none, tail: none, heapIdx: none,
		cPrev: none, cNext: none, gPrev: none, gNext: none,
	}
	q.flowIdx[key] = fi
	return fi
}

func (q *Queue[T]) freeFlow(fi int32) {
	delete(q.flowIdx, q.flows[fi].key)
	q.flows[fi].key = flowKey{} // do not keep the tenant's string
	q.freeFlows = append(q.freeFlows, fi)
}

// idle appends an empty flow that still owes virtual time to its class's
// idle list and to the queue's.
func (q *Queue[T]) idle(fi int32) {
	f := &q.flows[fi]
	f.heapIdx = none
	c := &q.classes[f.class]
	f.cPrev, f.cNext = c.idleTail, none
	if c.idleTail == none {
		c.idleHead = fi
	} else {
		q.flows[c.idleTail].cNext = fi
	}
	c.idleTail = fi
	f.gPrev, f.gNext = q.idleTail, none
	if q.idleTail == none {
		q.idleHead = fi
	} else {
		q.flows[q.idleTail].gNext = fi
	}
	q.idleTail = fi
}

func (q *Queue[T]) classUnlink(fi int32) {
	f := &q.flows[fi]
	c := &q.classes[f.class]
	if f.cPrev == none {
		c.idleHead = f.cNext
	} else {
		q.flows[f.cPrev].cNext = f.cNext
	}
	if f.cNext == none {
		c.idleTail = f.cPrev
	} else {
		q.flows[f.cNext].cPrev = f.cPrev
	}
	f.cPrev, f.cNext = none, none
}

func (q *Queue[T]) globalUnlink(fi int32) {
	f := &q.flows[fi]
	if f.gPrev == none {
		q.idleHead = f.gNext
	} else {
		q.flows[f.gPrev].gNext = f.gNext
	}
	if f.gNext == none {
		q.idleTail = f.gPrev
	} else {
		q.flows[f.gNext].gPrev = f.gPrev
	}
	f.gPrev, f.gNext = none, none
}

// sweep looks at up to k of class ci's idle records, longest idle first:
// one whose finish tag the class's virtual time has reached owes nothing
// and is forgotten, another goes to the back of the class's list. Pop calls
// it, so records are forgotten as the virtual time passes them, in
// bounded work.
func (q *Queue[T]) sweep(ci int32, k int) {
	c := &q.classes[ci]
	for ; k > 0 && c.idleHead != none; k-- {
		fi := c.idleHead
		q.classUnlink(fi)
		if q.flows[fi].finish <= c.vtime {
			q.globalUnlink(fi)
			q.freeFlow(fi)
			continue
		}
		f := &q.flows[fi]
		f.cPrev = c.idleTail
		if c.idleTail == none {
			c.idleHead = fi
		} else {
			q.flows[c.idleTail].cNext = fi
		}
		c.idleTail = fi
	}
}

func (q *Queue[T]) allocEntry() int32 {
	if n := len(q.freeEntries); n > 0 {
		ei := q.freeEntries[n-1]
		q.freeEntries = q.freeEntries[:n-1]
		return ei
	}
	q.entries = append(q.entries, entry[T]{gen: 1})
	return int32(len(q.entries) - 1)
}

func clampPriority(p int) int32 {
	return int32(min(max(p, MinPriority), MaxPriority))
}

func bandOf(prio int32) Band { return BandOf(int(prio)) }

// span returns the virtual time an entry of this cost and weight costs its
// tenant, with the clamps Push documents.
func span(cost, weight float64) float64 {
	if !(weight > 0) { // also NaN
		weight = 1
	}
	if !(cost > 0) {
		cost = 1
	}
	return min(max(cost, minCost), maxCost) / min(max(weight, minWeight), maxWeight)
}

// Heaps with positions kept in the elements, so an element anywhere in a
// heap is fixed or removed in O(log n).

func (q *Queue[T]) flowLess(a, b int32) bool {
	fa, fb := &q.flows[a], &q.flows[b]
	if fa.start != fb.start {
		return fa.start < fb.start
	}
	if fa.headArr != fb.headArr {
		return fa.headArr < fb.headArr
	}
	return fa.headSeq < fb.headSeq
}

func (q *Queue[T]) flowSwap(c *class, i, j int) {
	c.heap[i], c.heap[j] = c.heap[j], c.heap[i]
	q.flows[c.heap[i]].heapIdx = int32(i)
	q.flows[c.heap[j]].heapIdx = int32(j)
}

func (q *Queue[T]) flowUp(c *class, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.flowLess(c.heap[i], c.heap[p]) {
			return
		}
		q.flowSwap(c, i, p)
		i = p
	}
}

func (q *Queue[T]) flowDown(c *class, i int) bool {
	i0, n := i, len(c.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.flowLess(c.heap[r], c.heap[l]) {
			m = r
		}
		if !q.flowLess(c.heap[m], c.heap[i]) {
			break
		}
		q.flowSwap(c, i, m)
		i = m
	}
	return i > i0
}

func (q *Queue[T]) flowFix(c *class, i int) {
	if !q.flowDown(c, i) {
		q.flowUp(c, i)
	}
}

func (q *Queue[T]) flowRemove(c *class, i int) {
	last := len(c.heap) - 1
	if i != last {
		q.flowSwap(c, i, last)
	}
	q.flows[c.heap[last]].heapIdx = none
	c.heap = c.heap[:last]
	if i != last {
		q.flowFix(c, i)
	}
}

func (q *Queue[T]) classLess(a, b int32) bool {
	return q.classes[a].prio < q.classes[b].prio
}

func (q *Queue[T]) classSwap(i, j int) {
	h := q.classHeap
	h[i], h[j] = h[j], h[i]
	q.classes[h[i]].heapIdx = int32(i)
	q.classes[h[j]].heapIdx = int32(j)
}

func (q *Queue[T]) classUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.classLess(q.classHeap[i], q.classHeap[p]) {
			return
		}
		q.classSwap(i, p)
		i = p
	}
}

func (q *Queue[T]) classDown(i int) bool {
	i0, n := i, len(q.classHeap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.classLess(q.classHeap[r], q.classHeap[l]) {
			m = r
		}
		if !q.classLess(q.classHeap[m], q.classHeap[i]) {
			break
		}
		q.classSwap(i, m)
		i = m
	}
	return i > i0
}

func (q *Queue[T]) classRemove(i int) {
	last := len(q.classHeap) - 1
	if i != last {
		q.classSwap(i, last)
	}
	q.classes[q.classHeap[last]].heapIdx = none
	q.classHeap = q.classHeap[:last]
	if i != last && !q.classDown(i) {
		q.classUp(i)
	}
}
