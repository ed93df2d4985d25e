package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/saltus-lb/saltus/tree"
)

func viewFleet(n int) []View {
	bs := make([]View, n)
	for i := range bs {
		url := fmt.Sprintf("http://10.0.0.%d:8000", i+1)
		bs[i] = View{ID: i, URL: url, URLHash: URLHash(url), Routable: true}
	}
	return bs
}

// testPolicy is ranvier's (the tests of this file are of the rule prefix
// had before issue 11); cost_test.go's costPolicy is prefix's.
var testPolicy = Config{Kind: Ranvier, LoadFactor: 2, LoadFloor: 4, MaxCandidates: 3,
	BlockSize: 16, Concurrency: 256, QueueWait: 0.2, LoadTokens: 500, LoadSlack: 0.5}

func randKeys(r *rand.Rand, n int) []uint64 {
	k := make([]uint64, n)
	for i := range k {
		k[i] = r.Uint64()
	}
	return k
}

func TestDecideTree(t *testing.T) {
	t.Parallel()
	keys := []uint64{1, 2, 3, 4, 5, 6}
	var s Scratch
	f := func(bs []View, hits []tree.Hit, wantID, wantMatched int, wantReason string) {
		t.Helper()
		d := Decide(testPolicy, bs, hits, keys, true, &s)
		if d.Backend != wantID || d.MatchedBlocks != wantMatched || d.Reason != wantReason || d.TotalBlocks != 6 {
			t.Fatalf("hits %v: got %+v, want backend %d matched %d %s", hits, d, wantID, wantMatched, wantReason)
		}
		if d.Candidates[0] != d.Backend || d.URL != bs[indexOf(bs, d.Backend)].URL {
			t.Fatalf("candidates %v url %q for backend %d", d.Candidates, d.URL, d.Backend)
		}
	}
	bs := viewFleet(4)
	// The deepest holder wins.
	f(bs, []tree.Hit{{Backend: 1, Blocks: 2}, {Backend: 3, Blocks: 5}, {Backend: 2, Blocks: 4}}, 3, 5, ReasonTree)
	// Equal depth: fewer in-flight, then lower id.
	bs[1].InFlight, bs[3].InFlight = 1, 0
	f(bs, []tree.Hit{{Backend: 1, Blocks: 5}, {Backend: 3, Blocks: 5}}, 3, 5, ReasonTree)
	bs[3].InFlight = 1
	f(bs, []tree.Hit{{Backend: 3, Blocks: 5}, {Backend: 1, Blocks: 5}}, 1, 5, ReasonTree)
	// An unroutable holder is skipped for the next deepest.
	bs = viewFleet(4)
	bs[3].Routable = false
	f(bs, []tree.Hit{{Backend: 3, Blocks: 6}, {Backend: 0, Blocks: 2}}, 0, 2, ReasonTree)
	// A holder no longer in the Set is skipped too; with no holder left:
	// the hash.
	hashOnly := Decide(testPolicy, bs, nil, keys, true, &s)
	f(bs, []tree.Hit{{Backend: 3, Blocks: 6}, {Backend: 9, Blocks: 6}}, hashOnly.Backend, 0, ReasonHash)
	if hashOnly.Backend == 3 {
		t.Fatal("hash picked the unroutable backend")
	}
}

func TestDecideHashStableAndOrderFree(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	bs := viewFleet(8)
	var s1, s2 Scratch
	counts := make([]int, 8)
	const n = 8000
	for range n {
		keys := randKeys(r, 1+r.IntN(10))
		d1 := Decide(testPolicy, bs, nil, keys, true, &s1)
		// Another replica, whose Set lists the same URLs in another
		// order and under other IDs, picks the same URL.
		other := slices.Clone(bs)
		r.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })
		for i := range other {
			other[i].ID = 100 + i
		}
		d2 := Decide(testPolicy, other, nil, keys, true, &s2)
		if d1.URL != d2.URL || d1.Reason != ReasonHash {
			t.Fatalf("replicas disagree: %+v vs %+v", d1, d2)
		}
		counts[d1.Backend]++
	}
	for i, c := range counts {
		if c < n/8*8/10 || c > n/8*12/10 {
			t.Fatalf("backend %d got %d of %d cold prefixes: %v", i, c, n, counts)
		}
	}
}

func TestDecideHashUsesFirstFourBlocks(t *testing.T) {
	t.Parallel()
	bs := viewFleet(16)
	var s Scratch
	r := rand.New(rand.NewPCG(3, 4))
	moved := 0
	for range 200 {
		keys := randKeys(r, 8)
		d := Decide(testPolicy, bs, nil, keys, true, &s)
		tail := slices.Clone(keys)
		tail[5] ^= 1 // a different conversation after block 4
		if Decide(testPolicy, bs, nil, tail, true, &s).Backend != d.Backend {
			t.Fatal("blocks after the fourth changed the cold pick")
		}
		head := slices.Clone(keys)
		head[2] ^= 1
		if Decide(testPolicy, bs, nil, head, true, &s).Backend != d.Backend {
			moved++
		}
	}
	if moved < 150 {
		t.Fatalf("a change within the first four blocks moved only %d of 200", moved)
	}
}

func TestDecideAddBackendMovesOneNth(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	bs := viewFleet(9)
	var s Scratch
	const n = 9000
	moved := 0
	for range n {
		keys := randKeys(r, 4)
		before := Decide(testPolicy, bs[:8], nil, keys, true, &s).Backend
		after := Decide(testPolicy, bs, nil, keys, true, &s).Backend
		if before != after {
			moved++
			if after != 8 {
				t.Fatalf("a key moved from %d to %d, not to the new backend", before, after)
			}
		}
	}
	// Expect n/9 = 1000; allow ±20 %.
	if moved < 800 || moved > 1200 {
		t.Fatalf("adding a 9th backend moved %d of %d keys, want ~%d", moved, n, n/9)
	}
}

func TestDecideLoad(t *testing.T) {
	t.Parallel()
	keys := []uint64{11, 12, 13}
	var s Scratch
	bs := viewFleet(5)
	hits := []tree.Hit{{Backend: 2, Blocks: 3}, {Backend: 4, Blocks: 1}}
	// Median 2: bound max(2×2, 4) = 4. Backend 2 at 5 is skipped for the
	// least loaded (1 and 3 at 0: the lower id).
	for i, l := range []int64{2, 0, 5, 0, 2} {
		bs[i].InFlight = l
	}
	d := Decide(testPolicy, bs, hits, keys, true, &s)
	if d.Backend != 1 || !d.Diverted || d.Preferred != 2 || d.Reason != ReasonTree || d.MatchedBlocks != 0 {
		t.Fatalf("got %+v", d)
	}
	// At the bound it stays.
	bs[2].InFlight = 4
	d = Decide(testPolicy, bs, hits, keys, true, &s)
	if d.Backend != 2 || d.Diverted || d.Preferred != -1 || d.MatchedBlocks != 3 {
		t.Fatalf("got %+v", d)
	}
	// The floor: an idle fleet does not divert a target with 3 in flight.
	for i := range bs {
		bs[i].InFlight = 0
	}
	bs[2].InFlight = 3
	if d = Decide(testPolicy, bs, hits, keys, true, &s); d.Backend != 2 || d.Diverted {
		t.Fatalf("idle fleet: got %+v", d)
	}
	// Diverted to a backend that holds part of the prefix: its depth.
	for i, l := range []int64{9, 9, 30, 9, 1} {
		bs[i].InFlight = l
	}
	if d = Decide(testPolicy, bs, hits, keys, true, &s); d.Backend != 4 || !d.Diverted || d.MatchedBlocks != 1 {
		t.Fatalf("got %+v", d)
	}
	// The least loaded is never diverted from.
	one := viewFleet(1)
	one[0].InFlight = 100
	if d = Decide(testPolicy, one, nil, keys, true, &s); d.Backend != 0 || d.Diverted {
		t.Fatalf("single backend: got %+v", d)
	}
}

func TestDecideFallbackAndNone(t *testing.T) {
	t.Parallel()
	var s Scratch
	bs := viewFleet(4)
	keys := []uint64{7, 8}
	hits := []tree.Hit{{Backend: 0, Blocks: 2}}
	// Without the tree: the hash's pick, reason fallback.
	h := Decide(testPolicy, bs, nil, keys, true, &s)
	d := Decide(testPolicy, bs, hits, keys, false, &s)
	if d.Backend != h.Backend || d.Reason != ReasonFallback || d.MatchedBlocks != 0 {
		t.Fatalf("got %+v, hash %+v", d, h)
	}
	// No keys: the least loaded, then by load.
	for i, l := range []int64{3, 1, 2, 1} {
		bs[i].InFlight = l
	}
	d = Decide(testPolicy, bs, nil, nil, false, &s)
	if d.Backend != 1 || d.Reason != ReasonFallback || d.TotalBlocks != 0 || !slices.Equal(d.Candidates, []int{1, 3, 2}) {
		t.Fatalf("got %+v", d)
	}
	// Candidates with keys: target, then rendezvous order, unroutable left
	// out, at most three.
	bs[2].Routable = false
	d = Decide(testPolicy, bs, nil, keys, true, &s)
	if len(d.Candidates) != 3 || slices.Contains(d.Candidates, 2) || d.Candidates[0] != d.Backend {
		t.Fatalf("candidates %v", d.Candidates)
	}
	// Nothing routable.
	for i := range bs {
		bs[i].Routable = false
	}
	if d = Decide(testPolicy, bs, hits, keys, true, &s); d.Backend != -1 || d.Candidates != nil {
		t.Fatalf("got %+v", d)
	}
}

func TestLoadBound(t *testing.T) {
	t.Parallel()
	f := func(loads []int64, want int64) {
		t.Helper()
		if got := loadBound(testPolicy, slices.Clone(loads)); got != want {
			t.Fatalf("loadBound(%v) = %d, want %d", loads, got, want)
		}
	}
	f([]int64{0}, 4)
	f([]int64{10, 0, 3}, 6)
	f([]int64{1, 2, 3, 4}, 5)
	f([]int64{8, 8}, 16)
}

// Requests without a key sent one at a time to an idle fleet take the
// least loaded backends in turn, not the lowest id every time.
func TestDecideKeylessTiesTakeTurns(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	p := Config{Kind: Prefix, LoadFactor: 2, LoadFloor: 4, MaxCandidates: 3}
	var s Scratch
	seen := map[int]bool{}
	for range 4 {
		d := Decide(p, bs, nil, nil, false, &s)
		if d.Reason != ReasonFallback {
			t.Fatalf("reason %s", d.Reason)
		}
		seen[d.Backend] = true
	}
	if len(seen) != 4 {
		t.Fatalf("4 keyless requests to an idle fleet went to %v, want 4 backends", seen)
	}
	bs[2].InFlight = -1 // less loaded than the rest: it wins every time
	for range 3 {
		if d := Decide(p, bs, nil, nil, false, &s); d.Backend != 2 {
			t.Fatalf("went to %d, want the least loaded 2", d.Backend)
		}
	}
}
