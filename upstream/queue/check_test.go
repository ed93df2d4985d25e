package queue

import "fmt"

// check verifies every structural invariant of q and returns the first
// violation.
func (q *Queue[T]) check() error {
	// Arrival list: every queued entry once, oldest first.
	n, prev := 0, int32(none)
	for ei := q.oldest; ei != none; ei = q.entries[ei].newer {
		e := &q.entries[ei]
		switch {
		case e.flow == none:
			return fmt.Errorf("entry %d on the arrival list is free", ei)
		case e.older != prev:
			return fmt.Errorf("entry %d older %d, want %d", ei, e.older, prev)
		case prev != none && !q.entries[prev].before(e):
			return fmt.Errorf("entry %d out of arrival order", ei)
		case !(e.span > 0):
			return fmt.Errorf("entry %d span %v", ei, e.span)
		}
		prev = ei
		if n++; n > len(q.entries) {
			return fmt.Errorf("arrival list loops")
		}
	}
	if q.newest != prev {
		return fmt.Errorf("newest %d, list ends at %d", q.newest, prev)
	}
	if n != q.n {
		return fmt.Errorf("arrival list has %d entries, Len %d", n, q.n)
	}
	free := map[int32]bool{}
	for _, ei := range q.freeEntries {
		if free[ei] || q.entries[ei].flow != none {
			return fmt.Errorf("free entry %d listed twice or live", ei)
		}
		free[ei] = true
	}
	if len(free)+q.n != len(q.entries) {
		return fmt.Errorf("%d free + %d live != %d slots", len(free), q.n, len(q.entries))
	}

	// Tenant records.
	if len(q.flowIdx) > q.cfg.MaxEntries {
		return fmt.Errorf("%d tenant records > MaxEntries %d", len(q.flowIdx), q.cfg.MaxEntries)
	}
	perClass := map[int32]int{}
	idleRecords := 0
	var bands [NumBands]int
	for key, fi := range q.flowIdx {
		f := &q.flows[fi]
		if f.key != key {
			return fmt.Errorf("record %d key %v indexed as %v", fi, f.key, key)
		}
		ci, ok := q.classIdx[key.prio]
		if !ok || ci != f.class {
			return fmt.Errorf("record %v in class %d, index says %d (%v)", key, f.class, ci, ok)
		}
		c := &q.classes[ci]
		k, prev := 0, int32(none)
		for ei := f.head; ei != none; ei = q.entries[ei].next {
			e := &q.entries[ei]
			switch {
			case e.flow != fi:
				return fmt.Errorf("entry %d in record %d's FIFO says %d", ei, fi, e.flow)
			case e.prev != prev:
				return fmt.Errorf("entry %d prev %d, want %d", ei, e.prev, prev)
			case prev != none && !q.entries[prev].before(e):
				return fmt.Errorf("record %v FIFO out of order", key)
			}
			prev = ei
			if k++; k > len(q.entries) {
				return fmt.Errorf("record %v FIFO loops", key)
			}
		}
		switch {
		case f.tail != prev:
			return fmt.Errorf("record %v tail %d, FIFO ends at %d", key, f.tail, prev)
		case int(f.n) != k:
			return fmt.Errorf("record %v n %d, FIFO has %d", key, f.n, k)
		}
		perClass[ci] += k
		bands[bandOf(key.prio)] += k
		if k > 0 {
			switch {
			case f.heapIdx < 0 || int(f.heapIdx) >= len(c.heap) || c.heap[f.heapIdx] != fi:
				return fmt.Errorf("record %v heapIdx %d wrong", key, f.heapIdx)
			case f.headSeq != q.entries[f.head].seq || f.headArr != q.entries[f.head].arrival:
				return fmt.Errorf("record %v head (%d, %d), its head's (%d, %d)", key, f.headArr, f.headSeq, q.entries[f.head].arrival, q.entries[f.head].seq)
			case f.start < c.vtime:
				return fmt.Errorf("record %v start %v behind vtime %v", key, f.start, c.vtime)
			case f.start < f.finish:
				return fmt.Errorf("record %v start %v before its finish %v", key, f.start, f.finish)
			case f.cPrev != none || f.cNext != none || f.gPrev != none || f.gNext != none:
				return fmt.Errorf("record %v with entries is on an idle list", key)
			}
		} else {
			idleRecords++
			if f.heapIdx != none {
				return fmt.Errorf("idle record %v in a heap", key)
			}
		}
	}
	if bands != q.bands {
		return fmt.Errorf("bands %v, counted %v", q.bands, bands)
	}

	// Idle lists: the queue's holds every idle record once, and so do the
	// classes' together.
	g := 0
	prev = none
	for fi := q.idleHead; fi != none; fi = q.flows[fi].gNext {
		f := &q.flows[fi]
		if f.n != 0 || f.gPrev != prev || q.flowIdx[f.key] != fi {
			return fmt.Errorf("record %d on the idle list: n %d gPrev %d want %d", fi, f.n, f.gPrev, prev)
		}
		prev = fi
		if g++; g > len(q.flows) {
			return fmt.Errorf("idle list loops")
		}
	}
	if q.idleTail != prev || g != idleRecords {
		return fmt.Errorf("idle list: %d records, tail %d; %d idle records", g, q.idleTail, idleRecords)
	}

	// Classes.
	if len(q.classIdx) != len(q.classHeap) {
		return fmt.Errorf("%d classes, heap of %d", len(q.classIdx), len(q.classHeap))
	}
	ci2 := 0
	for prio, ci := range q.classIdx {
		c := &q.classes[ci]
		switch {
		case c.prio != prio:
			return fmt.Errorf("class %d prio %d indexed as %d", ci, c.prio, prio)
		case c.n == 0 || c.n != perClass[ci]:
			return fmt.Errorf("class %d n %d, records hold %d", prio, c.n, perClass[ci])
		case q.classHeap[c.heapIdx] != ci:
			return fmt.Errorf("class %d heapIdx wrong", prio)
		}
		for i := 1; i < len(c.heap); i++ {
			if q.flowLess(c.heap[i], c.heap[(i-1)/2]) {
				return fmt.Errorf("class %d heap order broken at %d", prio, i)
			}
		}
		k, prev := 0, int32(none)
		for fi := c.idleHead; fi != none; fi = q.flows[fi].cNext {
			f := &q.flows[fi]
			if f.class != ci || f.n != 0 || f.cPrev != prev {
				return fmt.Errorf("class %d idle list broken at record %d", prio, fi)
			}
			prev = fi
			if k++; k > len(q.flows) {
				return fmt.Errorf("class %d idle list loops", prio)
			}
		}
		if c.idleTail != prev {
			return fmt.Errorf("class %d idle tail %d, list ends at %d", prio, c.idleTail, prev)
		}
		ci2 += k
	}
	if ci2 != idleRecords {
		return fmt.Errorf("class idle lists hold %d, %d idle records", ci2, idleRecords)
	}
	for i := 1; i < len(q.classHeap); i++ {
		if q.classLess(q.classHeap[i], q.classHeap[(i-1)/2]) {
			return fmt.Errorf("class heap order broken at %d", i)
		}
	}
	return nil
}
