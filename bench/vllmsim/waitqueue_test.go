package vllmsim

import (
	"slices"
	"testing"
)

// TestWaitQueueOrder: fcfs pops by arrival whatever the priorities; the
// priority policy by (priority, arrival), lower first, also for requests
// pushed between pops; an emptied large queue lets its slice go.
func TestWaitQueueOrder(t *testing.T) {
	t.Parallel()
	f := func(byPriority bool, prios []int64, want []int) {
		t.Helper()
		q := waitQueue{byPriority: byPriority}
		seqs := make([]*seq, len(prios))
		for i, p := range prios {
			seqs[i] = &seq{priority: p}
			q.push(seqs[i])
		}
		var got []int
		for q.peek() != nil {
			got = append(got, slices.Index(seqs, q.peek()))
			q.pop()
		}
		if !slices.Equal(got, want) || q.Len() != 0 {
			t.Errorf("byPriority %v, priorities %v: popped %v, want %v", byPriority, prios, got, want)
		}
	}
	f(false, []int64{5, 0, -3, 5, 1}, []int{0, 1, 2, 3, 4})
	f(true, []int64{5, 0, -3, 5, 1}, []int{2, 1, 4, 0, 3})
	f(true, []int64{0, 0, 0}, []int{0, 1, 2})
	f(true, nil, nil)

	q := waitQueue{byPriority: true}
	a, b, c := &seq{priority: 2}, &seq{priority: 2}, &seq{priority: 1}
	q.push(a)
	q.push(b)
	if q.peek() != a {
		t.Fatal("equal priorities: the earlier is not first")
	}
	q.pop()
	q.push(c) // arrives after b, served before it
	if q.peek() != c {
		t.Fatal("a lower priority pushed later is not first")
	}
	q.pop()
	if q.peek() != b {
		t.Fatal("b lost")
	}
	q.pop()

	for range shrinkAbove + 1 {
		q.push(&seq{})
	}
	left := q.drain()
	if len(left) != shrinkAbove+1 || q.Len() != 0 || q.seqs != nil {
		t.Fatalf("drain: %d left, %d queued", len(left), q.Len())
	}
	for range shrinkAbove + 1 {
		q.push(&seq{})
	}
	for q.peek() != nil {
		q.pop()
	}
	if q.seqs != nil {
		t.Fatalf("an emptied queue keeps a slice of capacity %d", cap(q.seqs))
	}
}
