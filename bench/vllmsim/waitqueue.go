package vllmsim

import "container/heap"

// waitQueue holds the waiting requests in the order the scheduler admits
// them, as vLLM V1's request queues (vllm/v1/core/sched/request_queue.py):
// by arrival under fcfs (FCFSRequestQueue); under the priority policy by
// (priority, arrival), lower first (PriorityRequestQueue, a heap on
// Request's ordering). One binary heap serves both: under fcfs every
// request compares as priority 0, so arrival alone orders them.
//
// # Concurrency
//
// Guarded by engine.mu: submit pushes, the scheduler peeks and pops.
type waitQueue struct {
	byPriority bool   // the priority policy: compare seq.priority first
	seqs       []*seq // a heap (container/heap) on less
	arrivals   uint64 // arrival numbers given so far: ties on priority go to the lower
}

// shrinkAbove is the capacity an emptied queue drops rather than keeps:
// a burst up to MaxWaiting (a million at most) does not pin its slice.
const shrinkAbove = 1024

// Len, Less, Swap, Push and Pop are heap.Interface's, for container/heap
// only; the engine uses push, peek, pop and drain.
func (q *waitQueue) Len() int { return len(q.seqs) }

func (q *waitQueue) Less(i, j int) bool {
	a, b := q.seqs[i], q.seqs[j]
	if q.byPriority && a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.arrival < b.arrival
}

func (q *waitQueue) Swap(i, j int) { q.seqs[i], q.seqs[j] = q.seqs[j], q.seqs[i] }

func (q *waitQueue) Push(x any) { q.seqs = append(q.seqs, x.(*seq)) }

func (q *waitQueue) Pop() any {
	n := len(q.seqs) - 1
	s := q.seqs[n]
	q.seqs[n] = nil // the queue does not keep an admitted seq alive
	q.seqs = q.seqs[:n]
	return s
}

// push queues s after every request queued before it.
func (q *waitQueue) push(s *seq) {
	q.arrivals++
	s.arrival = q.arrivals
	heap.Push(q, s)
}

// peek returns the request to admit next; nil when none waits.
func (q *waitQueue) peek() *seq {
	if len(q.seqs) == 0 {
		return nil
	}
	return q.seqs[0]
}

// pop removes the request peek returns.
func (q *waitQueue) pop() {
	heap.Pop(q)
	if len(q.seqs) == 0 && cap(q.seqs) > shrinkAbove {
		q.seqs = nil
	}
}

// drain empties the queue and returns what waited, in no order.
func (q *waitQueue) drain() []*seq {
	left := q.seqs
	q.seqs = nil
	return left
}
