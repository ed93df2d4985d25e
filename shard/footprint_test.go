package shard

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// A group counts on a backend from its second use within the window, at
// its longest prompt; it leaves the sum when swept after the window, and
// a new group is refused when the table is full.
func TestFootprints(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 21))
	a, b := &backend.Backend{ID: 0}, &backend.Backend{ID: 1}
	win := int64(time.Second)
	f := newFootprints(2, win)
	doc := randKeys(r, 100)
	if f.touch(doc, a, 1600, 0) == nil || a.Footprint() != 0 {
		t.Fatalf("one use counts: %d", a.Footprint())
	}
	f.touch(doc[:50], a, 800, 10) // a shorter cut of the same prefix
	if a.Footprint() != 1600 {
		t.Fatalf("second use: %d, want 1600", a.Footprint())
	}
	longer := append(doc[:100:100], randKeys(r, 10)...)
	f.touch(longer, a, 1760, 20)
	if a.Footprint() != 1760 {
		t.Fatalf("a longer prompt: %d, want 1760", a.Footprint())
	}
	f.touch(doc, b, 1600, 30)
	if b.Footprint() != 0 || len(f.m) != 2 {
		t.Fatalf("b: %d, entries %d", b.Footprint(), len(f.m))
	}
	if f.touch(randKeys(r, 8), a, 128, 40) != nil {
		t.Fatal("a third pair fits a table of 2")
	}
	// The home is the backend the group went to last.
	bs := viewFleet(2)
	if h := f.scan(doc, bs, 50); h != 1 {
		t.Fatalf("home %d, want 1", h)
	}
	if h := f.scan(randKeys(r, 8), bs, 50); h != -1 {
		t.Fatalf("home of an unknown group %d", h)
	}
	if h := f.scan(doc, bs, 30+win+1); h != -1 {
		t.Fatalf("home past the window %d", h)
	}
	// Unused for a window: a fresh start (one use does not count) and,
	// swept, gone.
	f.touch(doc, a, 1600, 20+win+1)
	if a.Footprint() != 0 {
		t.Fatalf("reuse after the window: %d", a.Footprint())
	}
	f.sweep(20+3*win, 100)
	if a.Footprint() != 0 || b.Footprint() != 0 || len(f.m) != 0 {
		t.Fatalf("after the sweep: %d %d, entries %d", a.Footprint(), b.Footprint(), len(f.m))
	}
}

// The pinned account: the first request of a group on a backend pins its
// whole prompt as the group's base, the others their tails; the base goes
// with the group's last request, whatever order they end in.
func TestPinnedAccount(t *testing.T) {
	t.Parallel()
	f := newFootprints(8, int64(time.Minute))
	b := &backend.Backend{ID: 0}
	doc := randKeys(rand.New(rand.NewPCG(4, 4)), 200)
	var first, second, third pinned
	first.acquire(f.touch(doc, b, 3200, 0), 3200, 3200)
	second.acquire(f.touch(doc, b, 3264, 1), 3264, 64)
	third.acquire(f.touch(doc, b, 3216, 2), 3216, 16)
	if got := b.Pinned(); got != 3200+64+16 {
		t.Fatalf("pinned %d, want %d", got, 3200+64+16)
	}
	first.release()
	first.release() // once per acquire
	if got := b.Pinned(); got != 3200+64+16 {
		t.Fatalf("after the first ended: pinned %d, want the base and the tails still in flight, %d", got, 3200+64+16)
	}
	second.release()
	third.release()
	if got := b.Pinned(); got != 0 {
		t.Fatalf("all ended: pinned %d", got)
	}
	// A group in flight keeps its entry past the window.
	first.acquire(f.touch(doc, b, 3200, 10), 3200, 0)
	f.sweep(10+int64(2*time.Minute), 100)
	if len(f.m) != 1 {
		t.Fatalf("swept an entry in flight")
	}
	var v [1]policy.View
	v[0].ID = b.ID
	f.scan(doc, v[:], 10)
	if !v[0].Shared {
		t.Errorf("scan: group in flight not marked")
	}
	first.release()
	f.sweep(10+int64(2*time.Minute), 100)
	if len(f.m) != 0 || b.Pinned() != 0 {
		t.Fatalf("after the end: entries %d, pinned %d", len(f.m), b.Pinned())
	}
}
