package backend

import (
	"testing"
	"time"
)

// TestLearnSlots: the running limit is learned from scrapes that show
// requests waiting, at once with the KV cache under half used, after
// slotsSeen agreeing scrapes below slotsKVRoom, never with the cache
// (nearly) full; running more clears it.
func TestLearnSlots(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, "http://127.0.0.1:1")
	set := func(running, waiting int64, kv float64) {
		b.SetEngine(EngineLoad{Running: running, Waiting: waiting, KVUsage: kv, Until: time.Now().Add(time.Hour)})
	}
	set(4, 0, 0.1)
	if got := b.Slots(); got != 0 {
		t.Fatalf("nothing waiting: slots %d, want 0", got)
	}
	set(4, 3, 0.2)
	if got := b.Slots(); got != 4 {
		t.Fatalf("waiting, cache a fifth used: slots %d, want 4", got)
	}
	set(5, 0, 0.2)
	if got := b.Slots(); got != 0 {
		t.Fatalf("running 5 over 4: slots %d, want cleared", got)
	}
	// KV-bound: a full cache teaches nothing; a fairly full one only
	// once slotsSeen scrapes agree.
	for range 10 {
		set(3, 2, 0.95)
	}
	if got := b.Slots(); got != 0 {
		t.Fatalf("waiting on a full cache: slots %d, want 0", got)
	}
	for i := range slotsSeen - 1 {
		set(int64(3+i%2), 1, 0.7) // varying: KV room, not a limit
	}
	if got := b.Slots(); got != 0 {
		t.Fatalf("varying counts: slots %d, want 0", got)
	}
	for range slotsSeen {
		set(6, 1, 0.7)
	}
	if got := b.Slots(); got != 6 {
		t.Fatalf("%d agreeing scrapes: slots %d, want 6", slotsSeen, got)
	}
}

// TestObserveService: the first answer sets the mean, later ones move it
// by serviceWeight; non-positive durations are ignored.
func TestObserveService(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, "http://127.0.0.1:1")
	if b.Service() != 0 {
		t.Fatalf("unobserved: %v", b.Service())
	}
	b.ObserveService(2 * time.Second)
	b.ObserveService(0)
	if got := b.Service(); got != 2*time.Second {
		t.Fatalf("one sample: %v", got)
	}
	b.ObserveService(4 * time.Second)
	want := 2*time.Second + time.Duration(serviceWeight*float64(2*time.Second))
	if got := b.Service(); got != want {
		t.Fatalf("two samples: %v, want %v", got, want)
	}
}
