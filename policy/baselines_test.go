package shard

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/tree"
)

func TestConfigPolicy(t *testing.T) {
	t.Parallel()
	for _, name := range Policies() {
		c := DefaultConfig()
		c.Policy = name
		if err := c.Validate(); err != nil {
			t.Errorf("policy %q: %v", name, err)
		}
		k, ok := parsePolicy(name)
		if !ok || Policies()[k] != name {
			t.Errorf("parsePolicy(%q) = %d, %v", name, k, ok)
		}
	}
	if DefaultConfig().Policy != PolicyPrefix || Policies()[0] != PolicyPrefix {
		t.Fatal("prefix is not the default")
	}
	for _, bad := range []string{"", "round-robin", "Prefix", "random"} {
		c := DefaultConfig()
		c.Policy = bad
		want := `shard: Policy must be one of prefix, round_robin, least_request, consistent_hash, body_hash, ranvier, got "` + bad + `"`
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Errorf("policy %q: %v, want %s", bad, err, want)
		}
	}
}

func TestDecideRoundRobin(t *testing.T) {
	t.Parallel()
	p := policy{kind: kindRoundRobin, maxCandidates: 3}
	keys := []uint64{1, 2, 3}
	var s scratch
	bs := viewFleet(4)
	bs[0].inFlight = 100 // load plays no part
	hits := deepHits(bs)
	f := func(wantID int, wantCands ...int) {
		t.Helper()
		d := decide(p, bs, hits, keys, true, &s)
		if d.Backend != wantID || d.Reason != ReasonRoundRobin || d.MatchedBlocks != 0 || d.TotalBlocks != 3 ||
			d.Diverted || d.Preferred != -1 || d.URL != bs[indexOf(bs, wantID)].url {
			t.Fatalf("got %+v, want backend %d", d, wantID)
		}
		if wantCands != nil && !slices.Equal(d.Candidates, wantCands) {
			t.Fatalf("backend %d: candidates %v, want %v", wantID, d.Candidates, wantCands)
		}
	}
	// In Set order, wrapping; the tree's hits are ignored.
	f(0, 0, 1, 2)
	f(1, 1, 2, 3)
	f(2)
	f(3, 3, 0, 1)
	f(0)
	f(1)
	// An unhealthy or draining backend is skipped, its turn going to the
	// next routable one; the others keep an even share.
	bs[2].routable = false
	f(3, 3, 0, 1)
	f(0, 0, 1, 3)
	f(1, 1, 3, 0)
	f(3)
	bs[0].routable = false
	f(1, 1, 3)
	f(3, 3, 1)
	f(1)
	bs[0].routable, bs[2].routable = true, true
	f(2, 2, 3, 0)
	// The cursor survives a shrinking Set (it wraps).
	s.rr = 7
	f(3, 3, 0, 1)
	two := viewFleet(2)
	s.rr = 3
	if d := decide(p, two, nil, nil, false, &s); d.Backend != 1 || d.TotalBlocks != 0 || !slices.Equal(d.Candidates, []int{1, 0}) {
		t.Fatalf("two backends: %+v", d)
	}
	// Nothing routable.
	for i := range bs {
		bs[i].routable = false
	}
	rr := s.rr
	if d := decide(p, bs, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil || s.rr != rr {
		t.Fatalf("none routable: %+v, cursor %d → %d", d, rr, s.rr)
	}
}

// deepHits gives every backend a deep hit, which the non-prefix policies
// must ignore.
func deepHits(bs []view) []tree.Hit {
	var hits []tree.Hit
	for _, b := range bs {
		hits = append(hits, tree.Hit{Backend: b.id, Blocks: 3})
	}
	return hits
}

func TestDecideLeastRequestPicksLessLoaded(t *testing.T) {
	t.Parallel()
	p := policy{kind: kindLeastRequest, maxCandidates: 3}
	keys := []uint64{1, 2}
	s := scratch{rng: rand.New(rand.NewPCG(7, 8))}
	// Two backends: both are always drawn; the less loaded wins.
	bs := viewFleet(2)
	bs[0].inFlight = 5
	for range 50 {
		d := decide(p, bs, deepHits(bs), keys, true, &s)
		if d.Backend != 1 || d.Reason != ReasonLeastRequest || d.MatchedBlocks != 0 || d.TotalBlocks != 2 ||
			!slices.Equal(d.Candidates, []int{1, 0}) || d.Diverted {
			t.Fatalf("got %+v", d)
		}
	}
	// Five backends, one unroutable: the draws replayed from a source of
	// the same seed predict every pick (ties: the first drawn).
	bs = viewFleet(5)
	for i, l := range []int64{3, 1, 1, 4, 0} {
		bs[i].inFlight = l
	}
	bs[3].routable = false
	routable := []int{0, 1, 2, 4}
	s.rng = rand.New(rand.NewPCG(9, 10))
	ref := rand.New(rand.NewPCG(9, 10))
	seen := map[[2]int]bool{}
	for range 200 {
		a, b := drawTwo(ref, len(routable))
		want := routable[a]
		if bs[routable[b]].inFlight < bs[want].inFlight {
			want = routable[b]
		}
		seen[[2]int{routable[a], routable[b]}] = true
		d := decide(p, bs, nil, keys, true, &s)
		if d.Backend != want {
			t.Fatalf("drew %d and %d: got %d, want %d", routable[a], routable[b], d.Backend, want)
		}
		// Candidates: the others by load, then id; never the unroutable.
		var wantCands []int
		for _, id := range []int{4, 1, 2, 0} {
			if id != want && len(wantCands) < 2 {
				wantCands = append(wantCands, id)
			}
		}
		if !slices.Equal(d.Candidates, append([]int{want}, wantCands...)) {
			t.Fatalf("backend %d: candidates %v", want, d.Candidates)
		}
	}
	if len(seen) != 12 { // every ordered pair of the four routable ones
		t.Fatalf("draws covered %d ordered pairs, want 12", len(seen))
	}
	// One routable backend serves alone, without a draw; none: -1.
	one := viewFleet(3)
	one[0].routable, one[2].routable = false, false
	if d := decide(p, one, nil, keys, true, &s); d.Backend != 1 || !slices.Equal(d.Candidates, []int{1}) {
		t.Fatalf("one routable: %+v", d)
	}
	one[1].routable = false
	if d := decide(p, one, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil {
		t.Fatalf("none routable: %+v", d)
	}
}

func TestDecideLeastRequestFavoursLowLoad(t *testing.T) {
	t.Parallel()
	p := policy{kind: kindLeastRequest, maxCandidates: 3}
	s := scratch{rng: rand.New(rand.NewPCG(11, 12))}
	const n, draws = 8, 16000
	bs := viewFleet(n)
	for i := range bs {
		bs[i].inFlight = int64(i) // backend i is the i-th least loaded
	}
	counts := make([]int, n)
	for range draws {
		counts[decide(p, bs, nil, nil, false, &s).Backend]++
	}
	// Power of two choices: backend r wins when drawn with a more loaded
	// one, probability 2(n-1-r)/(n(n-1)): 25 % for the least loaded, 0 for
	// the most loaded. Allow ±15 % of each expectation.
	for r, c := range counts {
		want := float64(draws) * 2 * float64(n-1-r) / float64(n*(n-1))
		if float64(c) < want*0.85 || float64(c) > want*1.15 {
			t.Fatalf("backend %d (load %d) won %d of %d, want ~%.0f: %v", r, r, c, draws, want, counts)
		}
	}
	// An idle fleet (all ties) is spread evenly, not biased to low IDs.
	for i := range bs {
		bs[i].inFlight = 0
	}
	clear(counts)
	for range draws {
		counts[decide(p, bs, nil, nil, false, &s).Backend]++
	}
	for i, c := range counts {
		if c < draws/n*85/100 || c > draws/n*115/100 {
			t.Fatalf("idle fleet: backend %d won %d of %d: %v", i, c, draws, counts)
		}
	}
}

var chPolicy = policy{kind: kindConsistentHash, maxCandidates: 3}

func TestHashCapacity(t *testing.T) {
	t.Parallel()
	f := func(total int64, n int, want int64) {
		t.Helper()
		if got := hashCapacity(total, n); got != want {
			t.Fatalf("hashCapacity(%d, %d) = %d, want %d", total, n, got, want)
		}
	}
	f(0, 4, 1)    // ⌈1.25 × 1/4⌉: an idle fleet takes one each
	f(7, 4, 3)    // ⌈2.5⌉
	f(8, 4, 3)    // ⌈2.8125⌉
	f(10, 4, 4)   // ⌈3.4375⌉
	f(15, 4, 5)   // exactly 5
	f(99, 10, 13) // ⌈12.5⌉
	f(0, 1, 2)
	f(3, 1, 5)
}

func TestDecideConsistentHashStable(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 14))
	bs := viewFleet(8)
	var s, s2 scratch
	counts := make([]int, 8)
	const n = 8000
	for range n {
		keys := randKeys(r, 5+r.IntN(8)) // a fifth block at least
		d := decide(chPolicy, bs, deepHits(bs), keys, true, &s)
		if d.Reason != ReasonConsistentHash || d.MatchedBlocks != 0 || d.TotalBlocks != len(keys) || d.Diverted {
			t.Fatalf("got %+v", d)
		}
		// Blocks after the fourth do not move it.
		tail := slices.Clone(keys)
		tail[len(tail)-1] ^= 1
		if e := decide(chPolicy, bs, nil, tail, true, &s); e.Backend != d.Backend {
			t.Fatalf("a later block moved the pick from %d to %d", d.Backend, e.Backend)
		}
		// The prefix policy places the same cold prefix on the same
		// backend, with the same order after it.
		if e := decide(testPolicy, bs, nil, keys, true, &s2); e.Reason != ReasonHash || !slices.Equal(e.Candidates, d.Candidates) {
			t.Fatalf("prefix's cold pick %v, consistent_hash's %v", e.Candidates, d.Candidates)
		}
		counts[d.Backend]++
	}
	// Distinct prefixes spread evenly: ±15 % of n/8 each.
	for i, c := range counts {
		if c < n/8*85/100 || c > n/8*115/100 {
			t.Fatalf("backend %d got %d of %d prefixes: %v", i, c, n, counts)
		}
	}
	// No keys (no full block, a non-routed endpoint): the least loaded,
	// reason fallback.
	bs[0].inFlight, bs[1].inFlight = 2, 0
	if d := decide(chPolicy, bs, nil, nil, false, &s); d.Backend != 1 || d.Reason != ReasonFallback {
		t.Fatalf("no keys: %+v", d)
	}
}

func TestDecideConsistentHashBound(t *testing.T) {
	t.Parallel()
	var s scratch
	bs := viewFleet(4)
	keys := []uint64{21, 22, 23, 24, 25}
	order := rendezvous(nil, bs, keys)
	o := make([]int, len(order)) // backend IDs in the key's order
	for k, sc := range order {
		o[k] = bs[sc.i].id
	}
	f := func(loads [4]int64, want int, wantCands []int) {
		t.Helper()
		for k, l := range loads {
			bs[order[k].i].inFlight = l
		}
		d := decide(chPolicy, bs, nil, keys, true, &s)
		diverted := want != o[0]
		if d.Backend != want || d.Diverted != diverted || (diverted && d.Preferred != o[0]) || (!diverted && d.Preferred != -1) ||
			!slices.Equal(d.Candidates, wantCands) || d.Reason != ReasonConsistentHash {
			t.Fatalf("loads %v (in key order %v): got %+v, want %d candidates %v", loads, o, d, want, wantCands)
		}
	}
	// Idle: the first in order.
	f([4]int64{0, 0, 0, 0}, o[0], []int{o[0], o[1], o[2]})
	// Capacity ⌈1.25 × 9/4⌉ = 3: 2 in flight may take one more.
	f([4]int64{2, 2, 2, 2}, o[0], []int{o[0], o[1], o[2]})
	// Capacity ⌈1.25 × 10/4⌉ = 4: 3 may take one more.
	f([4]int64{3, 2, 2, 2}, o[0], []int{o[0], o[1], o[2]})
	// Capacity ⌈1.25 × 11/4⌉ = 4: 4 may not; the next in order takes it.
	f([4]int64{4, 2, 2, 2}, o[1], []int{o[1], o[2], o[3]})
	// Capacity ⌈1.25 × 15/4⌉ = 5: the first two are full; the walk goes
	// on, and the retries wrap to the skipped.
	f([4]int64{5, 5, 2, 2}, o[2], []int{o[2], o[3], o[0]})
	// Capacity ⌈1.25 × 2/4⌉ = 1: on a nearly idle fleet one request in
	// flight is the average's bound already.
	f([4]int64{1, 0, 0, 0}, o[1], []int{o[1], o[2], o[3]})
	// An unroutable backend is not in the order; the others keep theirs.
	bs[order[0].i].routable = false
	for k := range 4 {
		bs[order[k].i].inFlight = 0
	}
	if d := decide(chPolicy, bs, nil, keys, true, &s); d.Backend != o[1] || d.Diverted || !slices.Equal(d.Candidates, o[1:]) {
		t.Fatalf("first unroutable: %+v, order %v", d, o)
	}
	for i := range bs {
		bs[i].routable = false
	}
	if d := decide(chPolicy, bs, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil {
		t.Fatalf("none routable: %+v", d)
	}

	// Property: over random loads, the pick is the first in order below
	// the capacity, and never above it after taking the request.
	r := rand.New(rand.NewPCG(15, 16))
	bs = viewFleet(6)
	for range 2000 {
		var total int64
		for i := range bs {
			bs[i].inFlight = int64(r.IntN(20))
			if r.IntN(4) == 0 {
				bs[i].inFlight = int64(r.IntN(200)) // a hot one
			}
			total += bs[i].inFlight
		}
		keys := randKeys(r, 4)
		limit := hashCapacity(total, len(bs))
		d := decide(chPolicy, bs, nil, keys, true, &s)
		for _, sc := range rendezvous(nil, bs, keys) {
			if bs[sc.i].id == d.Backend {
				break
			}
			if bs[sc.i].inFlight < limit {
				t.Fatalf("skipped backend %d at %d in flight, capacity %d", bs[sc.i].id, bs[sc.i].inFlight, limit)
			}
		}
		if got := bs[indexOf(bs, d.Backend)].inFlight + 1; got > limit {
			t.Fatalf("backend %d would have %d in flight, capacity %d", d.Backend, got, limit)
		}
	}
}

func TestDecideConsistentHashAddBackendMovesOneNth(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(17, 18))
	bs := viewFleet(9)
	var s scratch
	const n = 9000
	moved := 0
	for range n {
		keys := randKeys(r, 5)
		before := decide(chPolicy, bs[:8], nil, keys, true, &s).Backend
		after := decide(chPolicy, bs, nil, keys, true, &s).Backend
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

func TestDecidePolicyReasonsAreMetrics(t *testing.T) {
	t.Parallel()
	for _, name := range Policies() {
		if k, _ := parsePolicy(name); k.usesTree() {
			continue // its reasons are tree, hash, override, fallback
		}
		if !slices.Contains(reasonNames[:], name) {
			t.Errorf("policy %q is not a saltus_route_decisions_total reason", name)
		}
		if strings.ContainsAny(name, " /") {
			t.Errorf("policy %q would break X-Saltus-Route", name)
		}
	}
}
