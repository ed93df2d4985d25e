package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// copyRecent rebuilds src's routes in a new tree as remote holders, as a
// joining peer does with a snapshot, and returns it with the routes seen.
func copyRecent(t *testing.T, src *Tree, now int64, limit int) (*Tree, int) {
	t.Helper()
	dst, err := New(src.Config())
	if err != nil {
		t.Fatal(err)
	}
	type route struct {
		keys   []uint64
		bounds []int
		b      int
		used   int64
	}
	var rs []route
	n := src.Recent(now, limit, 1<<30, func(keys []uint64, bounds []int, b int, o Origin, used int64) bool {
		rs = append(rs, route{slices.Clone(keys), slices.Clone(bounds), b, used})
		return true
	})
	// Oldest first, as Recent's doc asks, so that a full node keeps the
	// most recent holders.
	for _, r := range slices.Backward(rs) {
		if err := dst.Insert(r.keys, r.bounds, r.b, Remote, r.used); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.check(); err != nil {
		t.Fatal(err)
	}
	return dst, n
}

func TestRecentRebuildsMatches(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	// Room for every backend on a node: with a full node, the source may
	// keep a backend on a deep node after losing it on the prefix (the
	// cap dropped it there), which an insert of the deep chain restores.
	cfg := DefaultConfig()
	cfg.MaxHolders = 8
	src, _ := New(cfg)
	var chains [][]uint64
	now := int64(1)
	for i := range 300 {
		// Conversations over a few shared prefixes: a shared system
		// prompt, then turns; several backends per prefix.
		base := seq(int32(rng.IntN(5)), 8)
		turns := seq(int32(100+i), 1+rng.IntN(20))
		chain := append(slices.Clone(base), turns...)
		bounds := []int{8, 8 + rng.IntN(len(turns))}
		o := Local
		if rng.IntN(3) == 0 {
			o = Remote
		}
		now++
		insert(t, src, chain, bounds, rng.IntN(6), o, now)
		chains = append(chains, chain)
	}
	dst, n := copyRecent(t, src, now, 1<<30)
	if n == 0 {
		t.Fatal("Recent reported no route")
	}
	for _, c := range chains {
		for _, cut := range []int{len(c), 8, 3, len(c) - 1} {
			a, b := hitsNoOrigin(t, src, c[:cut], now), hitsNoOrigin(t, dst, c[:cut], now)
			if !slices.Equal(a, b) {
				t.Fatalf("chain %x… cut %d: source %v, snapshot %v", c[0], cut, a, b)
			}
		}
	}
}

func hitsNoOrigin(t *testing.T, tr *Tree, chain []uint64, now int64) []Hit {
	got := hitsNoTime(t, tr, chain, now)
	for i := range got {
		got[i].Origin = 0
	}
	return got
}

func TestRecentOrderAndBounds(t *testing.T) {
	t.Parallel()
	tr, _ := New(DefaultConfig())
	a, b, c := seq(1, 4), seq(2, 4), seq(3, 4)
	insert(t, tr, a, nil, 0, Local, 1)
	insert(t, tr, b, nil, 1, Remote, 2)
	insert(t, tr, c, nil, 2, Local, 3)
	tr.Match(nil, a, 4) // a is now the most recent local route

	type rt struct {
		first uint64
		b     int
		o     Origin
	}
	var got []rt
	tr.Recent(5, 10, 100, func(keys []uint64, _ []int, b int, o Origin, _ int64) bool {
		got = append(got, rt{keys[0], b, o})
		return true
	})
	want := []rt{{a[0], 0, Local}, {c[0], 2, Local}, {b[0], 1, Remote}}
	if !slices.Equal(got, want) {
		t.Fatalf("Recent order = %v, want %v (local first, most recent first)", got, want)
	}
	if n := tr.Recent(5, 2, 100, func([]uint64, []int, int, Origin, int64) bool { return true }); n != 2 {
		t.Fatalf("limit 2 reported %d", n)
	}
	if n := tr.Recent(5, 10, 1, func([]uint64, []int, int, Origin, int64) bool { return true }); n != 1 {
		t.Fatalf("maxVisit 1 reported %d, want 1", n)
	}
	// Expired holders are not reported.
	if n := tr.Recent(int64(DefaultConfig().TTL)+10, 10, 100, func([]uint64, []int, int, Origin, int64) bool { return true }); n != 0 {
		t.Fatalf("after the TTL Recent reported %d routes", n)
	}
}

func TestRecentDeepestOnly(t *testing.T) {
	t.Parallel()
	tr, _ := New(DefaultConfig())
	sys := seq(1, 4)
	conv := append(slices.Clone(sys), seq(2, 3)...)
	insert(t, tr, conv, []int{4}, 0, Local, 1) // backend 0 holds sys and the turn
	insert(t, tr, sys, nil, 1, Local, 2)       // backend 1 only sys
	var got [][2]int
	tr.Recent(3, 10, 100, func(keys []uint64, bounds []int, b int, _ Origin, _ int64) bool {
		got = append(got, [2]int{b, len(keys)})
		if b == 0 && !slices.Equal(bounds, []int{4}) {
			t.Errorf("bounds of the turn = %v, want [4]", bounds)
		}
		return true
	})
	slices.SortFunc(got, func(x, y [2]int) int { return x[0] - y[0] })
	if want := [][2]int{{0, 7}, {1, 4}}; !slices.Equal(got, want) {
		t.Fatalf("routes (backend, blocks) = %v, want %v: backend 0 once, at its deepest", got, want)
	}
}
