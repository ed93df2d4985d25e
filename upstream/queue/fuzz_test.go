package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// model is the slice-based reference: the same rules as Queue, computed by
// scanning every entry. It has no record bound: while Queue has evicted no
// record (Stats.Evicted == 0) the two must agree on every answer, and
// after that the fuzz test checks only what eviction cannot change.
type model struct {
	maxEntries, maxExpire int
	maxWait               int64
	now                   int64
	seq                   uint64
	entries               []mEntry // queued, in arrival order
	vtime                 map[int32]float64
	finish, start         map[flowKey]float64
}

type mEntry struct {
	id      uint64
	item    int
	key     flowKey
	arrival int64
	pushed  int64
	seq     uint64
	span    float64
	passed  int
}

func (m *model) clock(now int64) int64 {
	m.now = max(m.now, now)
	return m.now
}

// head returns the index of key's oldest entry, or -1.
func (m *model) head(key flowKey) int {
	return slices.IndexFunc(m.entries, func(e mEntry) bool { return e.key == key })
}

// push is Queue.PushAt (arrival math.MaxInt64: Push).
func (m *model) push(item, priority int, tenant string, weight, cost float64, arrival, now int64) bool {
	if len(m.entries) >= m.maxEntries {
		return false
	}
	now = m.clock(now)
	m.insert(mEntry{0, item, flowKey{clampPriority(priority), tenant}, min(arrival, now), now, m.seq, span(cost, weight), 0})
	m.seq++
	return true
}

// insert places e among the entries by arrival, then seq, and tags its
// tenant's head: max(v, F) for a tenant with none queued; a new head
// never takes a later tag than the one it displaces.
func (m *model) insert(e mEntry) {
	key := e.key
	active := m.head(key) >= 0
	i := slices.IndexFunc(m.entries, func(o mEntry) bool {
		return o.arrival > e.arrival || o.arrival == e.arrival && o.seq > e.seq
	})
	if i < 0 {
		i = len(m.entries)
	}
	m.entries = slices.Insert(m.entries, i, e)
	tag := max(m.vtime[key.prio], m.finish[key])
	switch {
	case !active:
		m.start[key] = tag
	case m.head(key) == i:
		m.start[key] = min(m.start[key], tag)
	}
}

// next returns the index of the entry Pop takes.
func (m *model) next() int {
	best := -1
	for i, e := range m.entries {
		if m.head(e.key) != i {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := m.entries[best]
		switch {
		case e.key.prio != b.key.prio:
			if e.key.prio < b.key.prio {
				best = i
			}
		case m.start[e.key] != m.start[b.key]:
			if m.start[e.key] < m.start[b.key] {
				best = i
			}
		case e.arrival != b.arrival:
			if e.arrival < b.arrival {
				best = i
			}
		case e.seq < b.seq:
			best = i
		}
	}
	return best
}

// nextPrefer returns the index of the entry PopPrefer takes, and counts
// the passes of the tenant's entries before it.
func (m *model) nextPrefer(window, maxPassed int, prefer func(int) bool) int {
	h := m.next()
	key := m.entries[h].key
	pick, seen := h, 0
	for i := h; i < len(m.entries) && seen < window; i++ {
		if m.entries[i].key != key {
			continue
		}
		seen++
		if m.entries[i].passed >= maxPassed || prefer(m.entries[i].item) {
			pick = i
			break
		}
	}
	for i := h; i < pick; i++ {
		if m.entries[i].key == key {
			m.entries[i].passed++
		}
	}
	return pick
}

// requeue queues e again (Queue.Requeue): at its place by seq, its
// tenant refunded its span.
func (m *model) requeue(e mEntry, now int64) bool {
	if len(m.entries) >= m.maxEntries {
		return false
	}
	m.finish[e.key] = max(m.finish[e.key]-e.span, 0)
	e.pushed = m.clock(now)
	e.arrival = min(e.arrival, e.pushed)
	e.passed = 0
	m.insert(e)
	return true
}

// take removes entry i; served says Pop dispatched it.
func (m *model) take(i int, served bool) mEntry {
	e := m.entries[i]
	wasHead := m.head(e.key) == i
	if served {
		m.vtime[e.key.prio] = max(m.vtime[e.key.prio], m.start[e.key])
		m.finish[e.key] = m.start[e.key] + e.span
	}
	m.entries = slices.Delete(m.entries, i, i+1)
	if !slices.ContainsFunc(m.entries, func(o mEntry) bool { return o.key.prio == e.key.prio }) {
		// An empty class starts afresh.
		delete(m.vtime, e.key.prio)
		for k := range m.finish {
			if k.prio == e.key.prio {
				delete(m.finish, k)
			}
		}
	}
	if served && !wasHead {
		// PopPrefer took it ahead of its tenant's head, which stays.
		m.start[e.key] = max(m.vtime[e.key.prio], m.finish[e.key])
	}
	if wasHead {
		if m.head(e.key) >= 0 {
			m.start[e.key] = max(m.vtime[e.key.prio], m.finish[e.key])
		} else {
			delete(m.start, e.key)
		}
	}
	return e
}

// FuzzQueue decodes the input as operations (push, pop, remove, time
// passing, expire, requeue of a popped entry) on a small queue and compares it with the model after
// each; every item must leave exactly once, by pop, remove or expire.
func FuzzQueue(f *testing.F) {
	f.Add([]byte{4, 1, 0, 0, 0, 5, 0, 1, 0, 2, 3, 0, 2, 4, 20, 5, 2, 2})
	f.Add([]byte{16, 3, 0, 0, 0, 0, 1, 4, 0, 2, 0, 0, 3, 8, 1, 9, 2, 2, 2, 0, 1, 0, 2, 2, 2, 2})
	f.Add([]byte{2, 2, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 2, 0, 4, 0, 2, 2, 0, 5, 0, 2, 2, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 || len(data) > 4096 {
			return
		}
		runModel(t, data)
	})
}

// TestQueueModel runs random operation sequences through the model test,
// so plain `go test` covers what FuzzQueue explores.
func TestQueueModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(30, 2))
	evicted, exact := 0, 0
	for range 300 {
		data := make([]byte, 2+r.IntN(600))
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		// Mostly pushes and pops, so queues get long and tenants many.
		for i := 2; i < len(data); i += 3 {
			if r.IntN(3) > 0 {
				data[i] = byte(r.IntN(3)) // push, push, pop
			}
		}
		if s := runModel(t, data); s.Evicted > 0 {
			evicted++
		} else {
			exact++
		}
	}
	if evicted == 0 || exact == 0 {
		t.Errorf("%d runs evicted a record, %d did not: want both kinds", evicted, exact)
	}
}

func runModel(t *testing.T, data []byte) Stats {
	t.Helper()
	cfg := Config{
		MaxEntries:       int(data[0]%16) + 1,
		MaxWait:          50 * time.Millisecond,
		MaxExpirePerCall: int(data[1]%4) + 1,
	}
	data = data[2:]
	q, err := New[int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{
		maxEntries: cfg.MaxEntries, maxExpire: cfg.MaxExpirePerCall, maxWait: int64(cfg.MaxWait),
		vtime: map[int32]float64{}, finish: map[flowKey]float64{}, start: map[flowKey]float64{},
	}
	priorities := []int{0, 0, -1, 1, 2, -5000, 5000, 0}
	weights := []float64{1, 2, 0.5, 0}
	costs := []float64{1, 3, -1}
	var ids []uint64
	type popped struct {
		e mEntry
		t Ticket
	}
	var pops []popped        // popped entries that may be requeued
	left := map[int]string{} // item -> how it left
	items := 0
	now := int64(0)
	leave := func(item int, how string) {
		t.Helper()
		if item < 0 || item >= items {
			t.Fatalf("%s returned item %d, never pushed", how, item)
		}
		if prev, ok := left[item]; ok {
			t.Fatalf("item %d left twice: %s, then %s", item, prev, how)
		}
		left[item] = how
	}
	byte1 := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	for i := 0; i < len(data); i++ {
		exact := q.Stats().Evicted == 0
		op, arg, arg2 := data[i]%8, byte1(i+1), byte1(i+2)
		var desc string
		switch op {
		case 0, 1: // push; op 1 with arg2's top bits: an arrival before now (PushAt)
			i += 2
			prio, tenant := priorities[arg%8], fmt.Sprint("t", arg>>3%4)
			w, c := weights[arg2%4], costs[arg2>>2%3]
			arrival := int64(math.MaxInt64)
			if op == 1 && arg2>>5 != 0 {
				arrival = now - int64(arg2>>5)*ms/2
			}
			desc = fmt.Sprintf("push(%d, prio %d, %s, w %v, c %v, arrival %d, now %d)", items, prio, tenant, w, c, arrival, now)
			id, ok := q.PushAt(items, prio, tenant, w, c, arrival, now)
			if ok != m.push(items, prio, tenant, w, c, arrival, now) {
				t.Fatalf("%s: ok %v, model disagrees", desc, ok)
			}
			if ok {
				if id == 0 || slices.Contains(ids, id) { // ids are never reused
					t.Fatalf("%s: id %#x given before", desc, id)
				}
				m.entries[slices.IndexFunc(m.entries, func(e mEntry) bool { return e.item == items })].id = id
				ids = append(ids, id)
				items++
			}
		case 2: // pop
			desc = "pop"
			item, waited, ticket, ok := q.PopTicket(now)
			if !ok {
				if len(m.entries) != 0 {
					t.Fatalf("pop: empty, model holds %d", len(m.entries))
				}
				break
			}
			leave(item, "pop")
			i := slices.IndexFunc(m.entries, func(e mEntry) bool { return e.item == item })
			if i < 0 {
				t.Fatalf("pop returned %d, not queued", item)
			}
			want := m.next()
			got := m.entries[i]
			if exact && i != want {
				t.Fatalf("pop returned %d, model wants %d", item, m.entries[want].item)
			}
			// What eviction cannot change: the lowest priority class goes
			// first, and a tenant's entries leave in order.
			if got.key.prio != m.entries[want].key.prio || m.head(got.key) != i {
				t.Fatalf("pop returned %d (%v), not the head of the first class", item, got.key)
			}
			if waited != time.Duration(m.clock(now)-got.pushed) {
				t.Fatalf("pop %d waited %v, want %v", item, waited, time.Duration(m.now-got.pushed))
			}
			pops = append(pops, popped{m.take(i, true), ticket})
		case 7: // pop preferring items ≡ arg (mod 3) among window entries
			i += 2
			window, maxPassed, mod := int(arg2%5)+1, int(arg2>>3%4), int(arg%3)
			prefer := func(item int) bool { return item%3 == mod }
			desc = fmt.Sprintf("popPrefer(window %d, maxPassed %d, mod %d)", window, maxPassed, mod)
			item, waited, ticket, ok := q.PopPrefer(now, window, maxPassed, prefer)
			if !ok {
				if len(m.entries) != 0 {
					t.Fatalf("%s: empty, model holds %d", desc, len(m.entries))
				}
				break
			}
			leave(item, "popPrefer")
			i := slices.IndexFunc(m.entries, func(e mEntry) bool { return e.item == item })
			if i < 0 {
				t.Fatalf("%s returned %d, not queued", desc, item)
			}
			h := m.next()
			want := m.nextPrefer(window, maxPassed, prefer)
			got := m.entries[i]
			if exact && i != want {
				t.Fatalf("%s returned %d, model wants %d", desc, item, m.entries[want].item)
			}
			// What eviction cannot change: the lowest priority class goes
			// first.
			if got.key.prio != m.entries[h].key.prio {
				t.Fatalf("%s returned %d (%v), not of the first class", desc, item, got.key)
			}
			if waited != time.Duration(m.clock(now)-got.pushed) {
				t.Fatalf("%s: %d waited %v, want %v", desc, item, waited, time.Duration(m.now-got.pushed))
			}
			pops = append(pops, popped{m.take(i, true), ticket})
		case 3: // remove
			i++
			if len(ids) == 0 {
				break
			}
			id := ids[int(arg)%len(ids)]
			desc = fmt.Sprintf("remove(%#x)", id)
			j := slices.IndexFunc(m.entries, func(e mEntry) bool { return e.id == id })
			if got := q.Remove(id); got != (j >= 0) {
				t.Fatalf("%s = %v, model holds it: %v", desc, got, j >= 0)
			}
			if j >= 0 {
				leave(m.take(j, false).item, "remove")
			}
		case 4: // time passes; 255 sends the clock back
			i++
			if arg == 255 {
				now -= 5 * ms
			} else {
				now += int64(arg) * ms / 4
			}
		case 6: // requeue a popped entry (every engine refused it)
			i++
			if len(pops) == 0 {
				break
			}
			k := int(arg) % len(pops)
			p := pops[k]
			pops = slices.Delete(pops, k, k+1)
			desc = fmt.Sprintf("requeue(%d, %v)", p.e.item, p.e.key)
			id, ok := q.Requeue(p.e.item, int(p.e.key.prio), p.e.key.tenant, p.t, now)
			if ok != m.requeue(p.e, now) {
				t.Fatalf("%s: ok %v, model disagrees", desc, ok)
			}
			if ok {
				if id == 0 || slices.Contains(ids, id) {
					t.Fatalf("%s: id %#x given before", desc, id)
				}
				j := slices.IndexFunc(m.entries, func(e mEntry) bool { return e.item == p.e.item })
				m.entries[j].id = id
				ids = append(ids, id)
				delete(left, p.e.item) // back in: it leaves again
			}
		case 5: // expire
			desc = "expire"
			got := q.Expire(now, nil)
			var want []int
			m.clock(now)
			for len(want) < m.maxExpire && len(m.entries) > 0 && m.now-m.entries[0].arrival > m.maxWait {
				want = append(want, m.take(0, false).item)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("expire = %v, model %v", got, want)
			}
			for _, item := range got {
				leave(item, "expire")
			}
		}
		if err := q.check(); err != nil {
			t.Fatalf("after %s: %v", desc, err)
		}
		if q.Len() != len(m.entries) {
			t.Fatalf("after %s: Len %d, model %d", desc, q.Len(), len(m.entries))
		}
		var bands [NumBands]int
		for _, e := range m.entries {
			bands[bandOf(e.key.prio)]++
		}
		for b := range NumBands {
			if q.LenBand(b) != bands[b] {
				t.Fatalf("after %s: LenBand(%v) %d, model %d", desc, b, q.LenBand(b), bands[b])
			}
		}
	}
	for {
		item, _, ok := q.Pop(now)
		if !ok {
			break
		}
		leave(item, "drain")
	}
	if len(left) != items {
		t.Fatalf("%d items pushed, %d left", items, len(left))
	}
	s := q.Stats()
	if s.Tenants != 0 || s.Pushed != uint64(items) || s.Popped+s.Removed+s.Expired != uint64(items)+s.Requeued {
		t.Fatalf("drained: %+v, %d items", s, items)
	}
	return s
}
