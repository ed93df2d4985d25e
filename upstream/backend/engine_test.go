package backend

import (
	"testing"
	"time"
)

// TestLearnSlots: the running limit is learned once slotsSeen scrapes
// show the engine at the most it was ever seen running while requests
// wait, with KV room; not from requests waiting below that count (they
// came between two scheduler steps) nor on a (nearly) full cache; running
// more clears it.
func TestLearnSlots(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, "http://127.0.0.1:1")
	set := func(running, waiting int64, kv float64) {
		b.SetEngine(EngineLoad{Running: running, Waiting: waiting, KVUsage: kv, Until: time.Now().Add(time.Hour)})
	}
	set(4, 0, 0.1)
	for range slotsSeen - 1 {
		set(4, 3, 0.2)
	}
	if got := b.Slots(); got != 0 {
		t.Fatalf("%d scrapes at the limit: slots %d, want 0 yet", slotsSeen-1, got)
	}
	set(4, 3, 0.2)
	if got := b.Slots(); got != 4 {
		t.Fatalf("%d scrapes at the limit: slots %d, want 4", slotsSeen, got)
	}
	set(5, 0, 0.2)
	if got := b.Slots(); got != 0 {
		t.Fatalf("running 5 over 4: slots %d, want cleared", got)
	}
	for range 10 {
		set(3, 2, 0.2) // below the most seen (5): between two steps
		set(5, 2, 0.95)
	}
	if got := b.Slots(); got != 0 {
		t.Fatalf("waiting below the most seen, or on a full cache: slots %d, want 0", got)
	}
	for range slotsSeen {
		set(5, 1, 0.7)
	}
	if got := b.Slots(); got != 5 {
		t.Fatalf("%d scrapes at 5 with room: slots %d, want 5", slotsSeen, got)
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

// TestFullMarkEndsWithASlot: a full mark the engine gave no Retry-After
// for ends when one of its requests ends (its room is back); one its
// Retry-After set, or a later one that outlasts it, stays until its time.
func TestFullMarkEndsWithASlot(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	f := func(name string, mark func(b *Backend), freedAt time.Time, fullAfter bool) {
		t.Helper()
		b := &Backend{}
		b.inFlight.Store(1)
		mark(b)
		b.slotFreed(freedAt)
		if got := b.Full(freedAt); got != fullAfter {
			t.Errorf("%s: full after a slot freed: %v, want %v (until %v)", name, got, fullAfter, b.FullUntil().Sub(t0))
		}
		if b.InFlight() != 0 {
			t.Errorf("%s: in flight %d after slotFreed", name, b.InFlight())
		}
		if !b.Limited() {
			t.Errorf("%s: no longer Limited", name)
		}
	}
	at := t0.Add(100 * time.Millisecond)
	f("soft", func(b *Backend) { b.markFull(t0, fullFor, true) }, at, false)
	f("Retry-After", func(b *Backend) { b.markFull(t0, 3*time.Second, false) }, at, true)
	f("soft, then Retry-After", func(b *Backend) {
		b.markFull(t0, fullFor, true)
		b.markFull(t0, 3*time.Second, false)
	}, at, true)
	f("Retry-After, then a shorter soft", func(b *Backend) {
		b.markFull(t0, 3*time.Second, false)
		b.markFull(t0, fullFor, true) // shorter: ignored
	}, at, true)
	f("soft, expired", func(b *Backend) { b.markFull(t0, fullFor, true) }, t0.Add(2*fullFor), false)
	f("never full", func(b *Backend) { b.SetMaxConcurrency(2) }, at, false)
}

// Free counts the requests decided for a backend and not sent yet: a
// burst decided on one loop must not all pass a limit of 1.
func TestFreeCountsDecided(t *testing.T) {
	t.Parallel()
	b := &Backend{}
	b.SetMaxConcurrency(1)
	now := time.Now()
	if !b.Free(now) {
		t.Fatal("idle backend with a limit of 1 not free")
	}
	b.AddDecided(1)
	if b.Free(now) {
		t.Fatal("free with one request decided for it at a limit of 1")
	}
	b.AddDecided(-1)
	b.inFlight.Store(1)
	if b.Free(now) {
		t.Fatal("free with one request in flight at a limit of 1")
	}
}

// TestEngineQueue: with Config.EngineQueue a backend takes its learned
// slots plus that many requests at once (a lower configured cap wins);
// nothing until the slots are learned; -1 and a Retune to it lift it.
func TestEngineQueue(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, func(c *Config) { c.EngineQueue = 1 })
	b := mustAdd(t, s, "http://127.0.0.1:1")
	now := time.Now()
	if b.Limited() || b.Limit(now) != 0 {
		t.Fatalf("slots not learned: limited %v, limit %d, want none", b.Limited(), b.Limit(now))
	}
	for range slotsSeen {
		b.SetEngine(EngineLoad{Running: 4, Waiting: 2, KVUsage: 0.3, Until: now.Add(time.Hour)})
	}
	if !b.Limited() || b.Limit(now) != 5 {
		t.Fatalf("4 slots, engine queue 1: limited %v, limit %d, want 5", b.Limited(), b.Limit(now))
	}
	b.inFlight.Store(5)
	if b.Free(now) {
		t.Fatal("5 in flight of 5: free")
	}
	b.SetMaxConcurrency(3)
	if got := b.Limit(now); got != 3 {
		t.Fatalf("a cap of 3 under 5: limit %d", got)
	}
	b.SetMaxConcurrency(0)
	cfg := s.cfg
	cfg.EngineQueue = -1
	if err := s.Retune(cfg); err != nil {
		t.Fatal(err)
	}
	if b.Limited() || !b.Free(now) {
		t.Fatalf("engine queue -1: limited %v, free %v, want no limit", b.Limited(), b.Free(now))
	}
	cfg.EngineQueue = MaxEngineQueue + 1
	if s.Retune(cfg) == nil {
		t.Fatal("engine queue past its bound accepted")
	}
}
