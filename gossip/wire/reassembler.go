package wire

import (
	"fmt"
	"slices"
	"time"
)

// defaultMaxUnits bounds what all incomplete routes of a Reassembler
// buffer together, in units of 8 bytes: 1<<20 units is 8 MiB, as much as
// one chain of MaxChain blocks. maxPending × MaxChain × 8 bytes (32 GiB
// for 4,096 entries) is no bound at all.
const defaultMaxUnits = 1 << 20

// partUnits is what a buffered part costs beyond its keys and bounds: its
// record (a part index, an offset, a slice header) and its allocation,
// rounded up to 8-byte units. It keeps parts of one key from buffering a
// million records within the budget.
const partUnits = 4

// A Reassembler joins the parts of split routes on the receiving side.
//
// Parts are identified by (node, Seq). They may come in any order and more
// than once (memberlist retransmits): a duplicate is ignored. When every
// part is in, Add returns the whole route and forgets it. A part that
// disagrees with the earlier parts of its route (Op, Backend, Age, Keep,
// Parts or Total differ, or its blocks overlap theirs or leave a gap
// between adjacent parts) drops the whole entry: Dropped.
//
// Bounds, each with its counter:
//   - at most maxPending incomplete routes: a new one over it evicts the
//     oldest (Evicted);
//   - at most 1<<20 buffered units of 8 bytes (8 MiB) over all entries,
//     a key or a bound costing one unit and a part's record four: over it
//     the oldest entries go (Evicted), the one just added to included if
//     it is the oldest;
//   - an entry whose first part came more than timeout ago goes at the
//     next Add (Expired), however many parts it has.
//
// So its memory is at most about 8 MiB plus maxPending small entries. A
// duplicate part that arrives after its route completed starts an entry
// that never completes: it expires or is evicted like any other.
//
// # Concurrency
//
// A Reassembler is owned by one goroutine (or guarded by its owner's
// mutex); it has no locks.
type Reassembler struct {
	maxPending int
	maxUnits   int
	timeout    time.Duration

	pending        map[pendingKey]*pending
	oldest, newest *pending // entries by first arrival, oldest first
	units          int      // buffered by all entries
	stats          ReassemblyStats
}

// ReassemblyStats counts what a Reassembler did.
type ReassemblyStats struct {
	Completed uint64 // split routes joined and returned
	Dropped   uint64 // parts refused: invalid, or inconsistent with their entry (which is dropped with them)
	Evicted   uint64 // entries evicted over maxPending or the buffer bound
	Expired   uint64 // entries whose first part came over timeout ago
	Pending   int    // incomplete routes held now
	Buffered  int    // 8-byte units buffered now (keys, bounds, part records)
}

type pendingKey struct {
	node string
	seq  uint64
}

// pending is one incomplete split route.
type pending struct {
	key        pendingKey
	first      time.Time // arrival of its first part
	prev, next *pending  // the Reassembler's arrival list

	op        Op
	backend   uint64
	age, keep uint32
	parts     uint16
	total     uint32
	bounds    []uint32 // part 0's, copied; nil until it arrives
	got       []piece  // received parts, ascending by part index
	units     int      // buffered by this entry
}

// piece is one received part's blocks, copied.
type piece struct {
	part   uint16
	offset uint32
	keys   []uint64
}

func (p *piece) end() uint64 { return uint64(p.offset) + uint64(len(p.keys)) }

// NewReassembler returns a Reassembler holding at most maxPending
// incomplete routes, each for at most timeout after its first part. It
// panics ("BUG: ...") when maxPending < 1 or timeout ≤ 0: both are the
// caller's constants.
func NewReassembler(maxPending int, timeout time.Duration) *Reassembler {
	if maxPending < 1 {
		panic(fmt.Sprintf("BUG: wire: NewReassembler: maxPending %d, want at least 1", maxPending))
	}
	if timeout <= 0 {
		panic(fmt.Sprintf("BUG: wire: NewReassembler: timeout %v, want > 0", timeout))
	}
	return &Reassembler{
		maxPending: maxPending,
		maxUnits:   defaultMaxUnits,
		timeout:    timeout,
		pending:    make(map[pendingKey]*pending),
	}
}

// Stats returns the counters and the current size.
func (r *Reassembler) Stats() ReassemblyStats {
	s := r.stats
	s.Pending = len(r.pending)
	s.Buffered = r.units
	return s
}

// Add takes a route from node. A whole route (Parts ≤ 1) is returned as it
// is, ok. A part is buffered (its slices copied: p may alias a Message
// that the next Decode reuses), and when it is the last one missing, Add
// returns the whole route, ok: Keys of every part in order, Bounds of part
// 0, Parts 1, Part, Offset and Seq 0, in freshly allocated slices the
// caller may keep. now (a monotonic clock: time.Now) drives expiry.
func (r *Reassembler) Add(node string, p Route, now time.Time) (whole Route, ok bool) {
	r.expire(now)
	if p.Parts <= 1 {
		return p, true
	}
	key := pendingKey{node, p.Seq}
	e := r.pending[key]
	if !validPart(&p) || (e != nil && !e.sameRoute(&p)) {
		r.stats.Dropped++
		if e != nil {
			r.remove(e)
		}
		return Route{}, false
	}
	if e == nil {
		if len(r.pending) >= r.maxPending {
			r.remove(r.oldest)
			r.stats.Evicted++
		}
		e = &pending{
			key: key, first: now,
			op: p.Op, backend: p.Backend, age: p.Age, keep: p.Keep, parts: p.Parts, total: p.Total,
		}
		r.pending[key] = e
		r.push(e)
	}

	i, found := slices.BinarySearchFunc(e.got, p.Part, func(x piece, part uint16) int { return int(x.part) - int(part) })
	if found {
		if g := &e.got[i]; g.offset != p.Offset || len(g.keys) != len(p.Keys) {
			r.stats.Dropped++ // not a retransmission: another chain under the same Seq
			r.remove(e)
		}
		return Route{}, false
	}
	if !e.fits(i, &p) {
		r.stats.Dropped++
		r.remove(e)
		return Route{}, false
	}
	units := len(p.Keys) + partUnits
	if p.Part == 0 {
		e.bounds = slices.Clone(p.Bounds)
		units += len(p.Bounds)
	}
	e.got = slices.Insert(e.got, i, piece{part: p.Part, offset: p.Offset, keys: slices.Clone(p.Keys)})
	e.units += units
	r.units += units

	if len(e.got) == int(e.parts) {
		whole = e.join()
		r.remove(e)
		r.stats.Completed++
		return whole, true
	}
	for r.units > r.maxUnits {
		o := r.oldest
		r.remove(o)
		r.stats.Evicted++
		if o == e {
			break
		}
	}
	return Route{}, false
}

// validPart reports whether p is a valid part on its own, as Decode
// checks it: a Reassembler may be fed routes that did not come through
// Decode, and it must not panic or join garbage.
func validPart(p *Route) bool {
	end := uint64(p.Offset) + uint64(len(p.Keys))
	switch {
	case p.Op != OpInsert && p.Op != OpDemote,
		p.Parts > MaxParts, p.Part >= p.Parts, p.Seq == 0,
		p.Total > MaxChain, len(p.Keys) == 0, end > uint64(p.Total),
		p.Part == 0 && p.Offset != 0,
		p.Op == OpDemote && p.Keep > p.Total:
		return false
	}
	if p.Part == 0 {
		prev := uint32(0)
		for _, b := range p.Bounds {
			if b <= prev || b > p.Total {
				return false
			}
			prev = b
		}
	}
	return true
}

// sameRoute reports whether p belongs to the same route as e's parts.
func (e *pending) sameRoute(p *Route) bool {
	return p.Op == e.op && p.Backend == e.backend && p.Age == e.age && p.Keep == e.keep &&
		p.Parts == e.parts && p.Total == e.total
}

// fits reports whether p, not received yet, lies where its index says
// among the parts received, which sit before and from position i: after
// the blocks of the part before it and before those of the part after it,
// touching them when their indices are adjacent; and the last part ends
// the chain.
func (e *pending) fits(i int, p *Route) bool {
	q := piece{part: p.Part, offset: p.Offset, keys: p.Keys}
	if q.part == e.parts-1 && q.end() != uint64(e.total) {
		return false
	}
	if i > 0 {
		b := &e.got[i-1]
		if b.end() > uint64(q.offset) || (b.part+1 == q.part && b.end() != uint64(q.offset)) {
			return false
		}
	}
	if i < len(e.got) {
		a := &e.got[i]
		if q.end() > uint64(a.offset) || (q.part+1 == a.part && q.end() != uint64(a.offset)) {
			return false
		}
	}
	return true
}

// join returns the whole route of a complete entry. Its parts are
// contiguous from 0 to total (part 0 at offset 0, each adjacent pair
// touching, the last ending at total), so their keys are the chain.
func (e *pending) join() Route {
	keys := make([]uint64, 0, e.total)
	for i := range e.got {
		keys = append(keys, e.got[i].keys...)
	}
	return Route{
		Op: e.op, Backend: e.backend, Age: e.age, Keep: e.keep,
		Keys: keys, Bounds: e.bounds, Parts: 1, Total: e.total,
	}
}

// expire drops the entries whose first part came over timeout ago. The
// list is in arrival order, so it stops at the first young one: each
// entry is looked at once more than it is added, amortized.
func (r *Reassembler) expire(now time.Time) {
	for r.oldest != nil && now.Sub(r.oldest.first) > r.timeout {
		r.remove(r.oldest)
		r.stats.Expired++
	}
}

func (r *Reassembler) push(e *pending) {
	e.prev = r.newest
	if r.newest != nil {
		r.newest.next = e
	} else {
		r.oldest = e
	}
	r.newest = e
}

// remove forgets e and what it buffered.
func (r *Reassembler) remove(e *pending) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		r.oldest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		r.newest = e.prev
	}
	e.prev, e.next = nil, nil
	delete(r.pending, e.key)
	r.units -= e.units
}
