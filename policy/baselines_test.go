package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/tree"
)

func TestDecideRoundRobin(t *testing.T) {
	t.Parallel()
	p := Config{Kind: RoundRobin, MaxCandidates: 3}
	keys := []uint64{1, 2, 3}
	var s Scratch
	bs := viewFleet(4)
	bs[0].InFlight = 100 // load plays no part
	hits := deepHits(bs)
	f := func(wantID int, wantCands ...int) {
		t.Helper()
		d := Decide(p, bs, hits, keys, true, &s)
		if d.Backend != wantID || d.Reason != ReasonRoundRobin || d.MatchedBlocks != 0 || d.TotalBlocks != 3 ||
			d.Diverted || d.Preferred != -1 || d.URL != bs[indexOf(bs, wantID)].URL {
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
	bs[2].Routable = false
	f(3, 3, 0, 1)
	f(0, 0, 1, 3)
	f(1, 1, 3, 0)
	f(3)
	bs[0].Routable = false
	f(1, 1, 3)
	f(3, 3, 1)
	f(1)
	bs[0].Routable, bs[2].Routable = true, true
	f(2, 2, 3, 0)
	// The cursor survives a shrinking Set (it wraps).
	s.Turn = 7
	f(3, 3, 0, 1)
	two := viewFleet(2)
	s.Turn = 3
	if d := Decide(p, two, nil, nil, false, &s); d.Backend != 1 || d.TotalBlocks != 0 || !slices.Equal(d.Candidates, []int{1, 0}) {
		t.Fatalf("two backends: %+v", d)
	}
	// Nothing routable.
	for i := range bs {
		bs[i].Routable = false
	}
	rr := s.Turn
	if d := Decide(p, bs, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil || s.Turn != rr {
		t.Fatalf("none routable: %+v, cursor %d → %d", d, rr, s.Turn)
	}
}

// deepHits gives every backend a deep hit, which the non-prefix policies
// must ignore.
func deepHits(bs []View) []tree.Hit {
	var hits []tree.Hit
	for _, b := range bs {
		hits = append(hits, tree.Hit{Backend: b.ID, Blocks: 3})
	}
	return hits
}

func TestDecideLeastRequestPicksLessLoaded(t *testing.T) {
	t.Parallel()
	p := Config{Kind: LeastRequest, MaxCandidates: 3}
	keys := []uint64{1, 2}
	s := Scratch{Rand: rand.New(rand.NewPCG(7, 8))}
	// Two backends: both are always drawn; the less loaded wins.
	bs := viewFleet(2)
	bs[0].InFlight = 5
	for range 50 {
		d := Decide(p, bs, deepHits(bs), keys, true, &s)
		if d.Backend != 1 || d.Reason != ReasonLeastRequest || d.MatchedBlocks != 0 || d.TotalBlocks != 2 ||
			!slices.Equal(d.Candidates, []int{1, 0}) || d.Diverted {
			t.Fatalf("got %+v", d)
		}
	}
	// Five backends, one unroutable: the draws replayed from a source of
	// the same seed predict every pick (ties: the first drawn).
	bs = viewFleet(5)
	for i, l := range []int64{3, 1, 1, 4, 0} {
		bs[i].InFlight = l
	}
	bs[3].Routable = false
	routable := []int{0, 1, 2, 4}
	s.Rand = rand.New(rand.NewPCG(9, 10))
	ref := rand.New(rand.NewPCG(9, 10))
	seen := map[[2]int]bool{}
	for range 200 {
		a, b := drawTwo(ref, len(routable))
		want := routable[a]
		if bs[routable[b]].InFlight < bs[want].InFlight {
			want = routable[b]
		}
		seen[[2]int{routable[a], routable[b]}] = true
		d := Decide(p, bs, nil, keys, true, &s)
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
	one[0].Routable, one[2].Routable = false, false
	if d := Decide(p, one, nil, keys, true, &s); d.Backend != 1 || !slices.Equal(d.Candidates, []int{1}) {
		t.Fatalf("one routable: %+v", d)
	}
	one[1].Routable = false
	if d := Decide(p, one, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil {
		t.Fatalf("none routable: %+v", d)
	}
}

func TestDecideLeastRequestFavoursLowLoad(t *testing.T) {
	t.Parallel()
	p := Config{Kind: LeastRequest, MaxCandidates: 3}
	s := Scratch{Rand: rand.New(rand.NewPCG(11, 12))}
	const n, draws = 8, 16000
	bs := viewFleet(n)
	for i := range bs {
		bs[i].InFlight = int64(i) // backend i is the i-th least loaded
	}
	counts := make([]int, n)
	for range draws {
		counts[Decide(p, bs, nil, nil, false, &s).Backend]++
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
		bs[i].InFlight = 0
	}
	clear(counts)
	for range draws {
		counts[Decide(p, bs, nil, nil, false, &s).Backend]++
	}
	for i, c := range counts {
		if c < draws/n*85/100 || c > draws/n*115/100 {
			t.Fatalf("idle fleet: backend %d won %d of %d: %v", i, c, draws, counts)
		}
	}
}

var chPolicy = Config{Kind: ConsistentHash, MaxCandidates: 3}

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
	var s, s2 Scratch
	counts := make([]int, 8)
	const n = 8000
	for range n {
		keys := randKeys(r, 5+r.IntN(8)) // a fifth block at least
		d := Decide(chPolicy, bs, deepHits(bs), keys, true, &s)
		if d.Reason != ReasonConsistentHash || d.MatchedBlocks != 0 || d.TotalBlocks != len(keys) || d.Diverted {
			t.Fatalf("got %+v", d)
		}
		// Blocks after the fourth do not move it.
		tail := slices.Clone(keys)
		tail[len(tail)-1] ^= 1
		if e := Decide(chPolicy, bs, nil, tail, true, &s); e.Backend != d.Backend {
			t.Fatalf("a later block moved the pick from %d to %d", d.Backend, e.Backend)
		}
		// The prefix policy places the same cold prefix on the same
		// backend, with the same order after it.
		if e := Decide(testPolicy, bs, nil, keys, true, &s2); e.Reason != ReasonHash || !slices.Equal(e.Candidates, d.Candidates) {
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
	bs[0].InFlight, bs[1].InFlight = 2, 0
	if d := Decide(chPolicy, bs, nil, nil, false, &s); d.Backend != 1 || d.Reason != ReasonFallback {
		t.Fatalf("no keys: %+v", d)
	}
}

func TestDecideConsistentHashBound(t *testing.T) {
	t.Parallel()
	var s Scratch
	bs := viewFleet(4)
	keys := []uint64{21, 22, 23, 24, 25}
	order := rendezvous(nil, bs, keys)
	o := make([]int, len(order)) // backend IDs in the key's order
	for k, sc := range order {
		o[k] = bs[sc.i].ID
	}
	f := func(loads [4]int64, want int, wantCands []int) {
		t.Helper()
		for k, l := range loads {
			bs[order[k].i].InFlight = l
		}
		d := Decide(chPolicy, bs, nil, keys, true, &s)
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
	bs[order[0].i].Routable = false
	for k := range 4 {
		bs[order[k].i].InFlight = 0
	}
	if d := Decide(chPolicy, bs, nil, keys, true, &s); d.Backend != o[1] || d.Diverted || !slices.Equal(d.Candidates, o[1:]) {
		t.Fatalf("first unroutable: %+v, order %v", d, o)
	}
	for i := range bs {
		bs[i].Routable = false
	}
	if d := Decide(chPolicy, bs, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil {
		t.Fatalf("none routable: %+v", d)
	}

	// Property: over random loads, the pick is the first in order below
	// the capacity, and never above it after taking the request.
	r := rand.New(rand.NewPCG(15, 16))
	bs = viewFleet(6)
	for range 2000 {
		var total int64
		for i := range bs {
			bs[i].InFlight = int64(r.IntN(20))
			if r.IntN(4) == 0 {
				bs[i].InFlight = int64(r.IntN(200)) // a hot one
			}
			total += bs[i].InFlight
		}
		keys := randKeys(r, 4)
		limit := hashCapacity(total, len(bs))
		d := Decide(chPolicy, bs, nil, keys, true, &s)
		for _, sc := range rendezvous(nil, bs, keys) {
			if bs[sc.i].ID == d.Backend {
				break
			}
			if bs[sc.i].InFlight < limit {
				t.Fatalf("skipped backend %d at %d in flight, capacity %d", bs[sc.i].ID, bs[sc.i].InFlight, limit)
			}
		}
		if got := bs[indexOf(bs, d.Backend)].InFlight + 1; got > limit {
			t.Fatalf("backend %d would have %d in flight, capacity %d", d.Backend, got, limit)
		}
	}
}

func TestDecideConsistentHashAddBackendMovesOneNth(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(17, 18))
	bs := viewFleet(9)
	var s Scratch
	const n = 9000
	moved := 0
	for range n {
		keys := randKeys(r, 5)
		before := Decide(chPolicy, bs[:8], nil, keys, true, &s).Backend
		after := Decide(chPolicy, bs, nil, keys, true, &s).Backend
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

// TestParse: every name parses to its Kind and back, prefix first (the
// default); anything else is refused. (shard's TestConfigPolicy checks
// the Config.Policy values.)
func TestParse(t *testing.T) {
	t.Parallel()
	for i, name := range Names() {
		k, ok := Parse(name)
		if !ok || int(k) != i || k.String() != name || Names()[k] != name {
			t.Errorf("Parse(%q) = %d (%s), %v", name, k, k, ok)
		}
	}
	if Names()[0] != "prefix" || Prefix.String() != "prefix" {
		t.Fatal("prefix is not first")
	}
	for _, bad := range []string{"", "round-robin", "Prefix", "random"} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if got := Kind(len(Names())).String(); got != "unknown" {
		t.Errorf("an unknown Kind is %q", got)
	}
	n := Names()
	n[0] = "changed"
	if Names()[0] != "prefix" {
		t.Fatal("Names returned its own array")
	}
}

// TestConfigValidate: a valid Config passes; each knob out of range is
// reported, by name.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := testPolicy.Validate(); err != nil {
		t.Fatalf("testPolicy: %v", err)
	}
	f := func(field string, set func(*Config)) {
		t.Helper()
		p := testPolicy
		set(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "policy: "+field+" ") {
			t.Errorf("%s: %v", field, err)
		}
	}
	f("Kind", func(p *Config) { p.Kind = Kind(len(Names())) })
	f("LoadFactor", func(p *Config) { p.LoadFactor = 0.5 })
	f("LoadFactor", func(p *Config) { p.LoadFactor = math.NaN() })
	f("LoadFloor", func(p *Config) { p.LoadFloor = -1 })
	f("MaxCandidates", func(p *Config) { p.MaxCandidates = 0 })
	f("Concurrency", func(p *Config) { p.Concurrency = 0 })
	f("QueueWait", func(p *Config) { p.QueueWait = 0 })
	f("LoadSlack", func(p *Config) { p.LoadSlack = math.Inf(1) })
	f("LoadSlack", func(p *Config) { p.LoadSlack = -0.1 })
	f("LoadTokens", func(p *Config) { p.LoadTokens = -1 })
	f("KVTokens", func(p *Config) { p.KVTokens = -1 })
}
