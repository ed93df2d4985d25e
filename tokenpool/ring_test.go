package tokenpool

import (
	"runtime"
	"sync"
	"testing"
)

func TestRingBounds(t *testing.T) {
	t.Parallel()
	r := newRing(4)
	jobs := make([]job, 6)
	for i := range 4 {
		if !r.push(&jobs[i]) {
			t.Fatalf("push %d into a ring of 4 failed", i)
		}
	}
	if r.push(&jobs[4]) || r.len() != 4 {
		t.Fatalf("push into a full ring succeeded (len %d)", r.len())
	}
	if r.pop() != &jobs[0] || !r.push(&jobs[4]) {
		t.Fatal("pop then push: wrong order or no room")
	}
	for i := 1; i <= 4; i++ {
		if j := r.pop(); j != &jobs[i] {
			t.Fatalf("pop %d: got job %p, want %p", i, j, &jobs[i])
		}
	}
	if r.pop() != nil || r.len() != 0 {
		t.Fatal("pop from an empty ring returned a job")
	}
	if r.slots[0] != nil || r.slots[1] != nil {
		t.Fatal("popped slots still pin their jobs")
	}
}

// TestRingSPSC: one producer and one consumer at once keep order and lose
// nothing (run with -race: the slot accesses must be ordered by head and
// tail).
func TestRingSPSC(t *testing.T) {
	t.Parallel()
	const n = 20000
	r := newRing(8)
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i].missBytes = i
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the producer; joined below
		defer wg.Done()
		for i := 0; i < n; {
			if r.push(&jobs[i]) {
				i++
			} else {
				runtime.Gosched() // full: let the consumer run (2-core CI)
			}
		}
	}()
	for want := 0; want < n; {
		j := r.pop()
		if j == nil {
			runtime.Gosched()
			continue
		}
		if j.missBytes != want {
			t.Fatalf("popped job %d, want %d", j.missBytes, want)
		}
		want++
	}
	wg.Wait()
}

// len returns the number of queued jobs; exact only for a quiet ring.
// Any goroutine.
func (r *ring) len() int { return int(r.tail.Load() - r.head.Load()) }
