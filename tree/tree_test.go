package tree

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func hits(tb testing.TB, tr *Tree, chain []uint64, now int64) []Hit {
	tb.Helper()
	got, _ := tr.Match(nil, chain, now)
	sortHits(got)
	return got
}

// hitsNoTime is hits without Hit.Used, which TestHitUsed checks.
func hitsNoTime(tb testing.TB, tr *Tree, chain []uint64, now int64) []Hit {
	tb.Helper()
	got := hits(tb, tr, chain, now)
	for i := range got {
		got[i].Used = 0
	}
	return got
}

func wantHits(tb testing.TB, tr *Tree, chain []uint64, now int64, want ...Hit) {
	tb.Helper()
	if got := hitsNoTime(tb, tr, chain, now); !slices.Equal(got, want) {
		tb.Fatalf("Match = %v, want %v", got, want)
	}
	if err := tr.check(); err != nil {
		tb.Fatal(err)
	}
}

func insert(tb testing.TB, tr *Tree, chain []uint64, bounds []int, b int, o Origin, now int64) {
	tb.Helper()
	if err := tr.Insert(chain, bounds, b, o, now); err != nil {
		tb.Fatal(err)
	}
	if err := tr.check(); err != nil {
		tb.Fatal(err)
	}
}

// seq returns a chain of n blocks whose content is identified by tag.
func seq(tag int32, n int) []uint64 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = tag*1000 + int32(i)
	}
	return BlockKeys(nil, 1, toks, 1)
}

// tokens returns n distinct ids identified by tag.
func tokens(tag int32, n int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = tag*1000 + int32(i)
	}
	return toks
}

func TestMatchLongestPrefix(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, DefaultConfig())
	sys := tokens(1, 8)
	a := BlockKeys(nil, 1, append(slices.Clone(sys), tokens(2, 8)...), 1)
	b := BlockKeys(nil, 1, append(slices.Clone(sys), tokens(3, 4)...), 1)
	wantHits(t, tr, a, 1)
	insert(t, tr, a, []int{8}, 0, Local, 1)
	wantHits(t, tr, a, 2, Hit{Backend: 0, Blocks: 16, Origin: Local})
	wantHits(t, tr, a[:5], 2, Hit{Backend: 0, Blocks: 5, Origin: Local})
	// b shares the 8-block system prompt, then diverges.
	wantHits(t, tr, b, 2, Hit{Backend: 0, Blocks: 8, Origin: Local})
	insert(t, tr, b, nil, 1, Remote, 3)
	wantHits(t, tr, b, 4, Hit{Backend: 0, Blocks: 8, Origin: Local}, Hit{Backend: 1, Blocks: 12, Origin: Remote})
	wantHits(t, tr, a, 4, Hit{Backend: 0, Blocks: 16, Origin: Local}, Hit{Backend: 1, Blocks: 8, Origin: Remote})
	// A longer request reports what is held.
	long := BlockKeys(nil, 1, append(append(slices.Clone(sys), tokens(2, 8)...), tokens(9, 9)...), 1)
	got, depth := tr.Match(nil, long, 5)
	if depth != 16 || len(got) != 2 {
		t.Fatalf("Match(long) = %v depth %d, want 2 hits, depth 16", got, depth)
	}
	// Another model's seed shares nothing.
	other := BlockKeys(nil, 2, append(slices.Clone(sys), tokens(2, 8)...), 1)
	wantHits(t, tr, other, 5)
	if s := tr.Stats(); s.Nodes != 3 || s.Blocks != 20 || s.HoldersLocal != 2 || s.HoldersRemote != 2 {
		t.Fatalf("Stats = %+v, want 3 nodes, 20 blocks, 2 local and 2 remote holders", s)
	}
}

func TestInsertIdempotent(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, DefaultConfig())
	c := seq(1, 40)
	insert(t, tr, c, []int{10, 20, 20, 0, -3, 40, 99}, 3, Local, 1)
	before := tr.Stats()
	if before.Nodes != 3 {
		t.Fatalf("nodes = %d, want 3 (boundaries 10, 20, end)", before.Nodes)
	}
	for i := 0; i < 3; i++ {
		insert(t, tr, c, []int{20, 10}, 3, Local, int64(2+i))
	}
	if after := tr.Stats(); after != before {
		t.Fatalf("Stats after re-insert = %+v, want %+v", after, before)
	}
	// Re-insert refreshed the holder: it is still visible one TTL after
	// the first insert.
	ttl := int64(DefaultConfig().TTL)
	wantHits(t, tr, c, 1+ttl, Hit{Backend: 3, Blocks: 40, Origin: Local})
	wantHits(t, tr, c, 4+ttl)
}

func TestLocalUpgradesRemote(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, DefaultConfig())
	c := seq(1, 4)
	insert(t, tr, c, nil, 0, Remote, 1)
	insert(t, tr, c, nil, 0, Local, 2)
	insert(t, tr, c, nil, 0, Remote, 3)
	wantHits(t, tr, c, 4, Hit{Backend: 0, Blocks: 4, Origin: Local})
}

func TestHolderCap(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxHolders = 2
	tr := mustNew(t, cfg)
	c := seq(1, 4)
	insert(t, tr, c, nil, 0, Local, 1)
	insert(t, tr, c, nil, 1, Remote, 2)
	insert(t, tr, c, nil, 2, Local, 3) // evicts the remote one, though newer
	wantHits(t, tr, c, 4, Hit{Backend: 0, Blocks: 4, Origin: Local}, Hit{Backend: 2, Blocks: 4, Origin: Local})
	insert(t, tr, c, nil, 3, Local, 5) // evicts the least recently used local
	wantHits(t, tr, c, 6, Hit{Backend: 2, Blocks: 4, Origin: Local}, Hit{Backend: 3, Blocks: 4, Origin: Local})
	insert(t, tr, c, nil, 4, Remote, 7) // a remote one may evict a local one
	wantHits(t, tr, c, 8, Hit{Backend: 3, Blocks: 4, Origin: Local}, Hit{Backend: 4, Blocks: 4, Origin: Remote})
	if got := tr.Stats().HolderDrops[DropCap]; got != 3 {
		t.Fatalf("HolderDrops[cap] = %d, want 3", got)
	}
}

func TestCapacityEvictsLeastRecentlyMatched(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxBlocks = 12
	tr := mustNew(t, cfg)
	a, b, c, d := seq(1, 4), seq(2, 4), seq(3, 4), seq(4, 4)
	insert(t, tr, a, nil, 0, Local, 1)
	insert(t, tr, b, nil, 1, Local, 2)
	insert(t, tr, c, nil, 2, Local, 3)
	wantHits(t, tr, a, 4, Hit{Backend: 0, Blocks: 4, Origin: Local}) // a is now the most recent
	insert(t, tr, d, nil, 3, Local, 5)                               // over capacity: b goes
	wantHits(t, tr, b, 6)
	wantHits(t, tr, a, 6, Hit{Backend: 0, Blocks: 4, Origin: Local})
	wantHits(t, tr, c, 6, Hit{Backend: 2, Blocks: 4, Origin: Local})
	wantHits(t, tr, d, 6, Hit{Backend: 3, Blocks: 4, Origin: Local})
	s := tr.Stats()
	if s.NodeEvictions[EvictCapacityLocal] != 1 || s.BlockEvictions[EvictCapacityLocal] != 4 || s.Blocks != 12 {
		t.Fatalf("Stats = %+v, want one local node (4 blocks) evicted, 12 blocks stored", s)
	}
}

func TestCapacityEvictsRemoteFirst(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxBlocks = 12
	tr := mustNew(t, cfg)
	a, r, b, c := seq(1, 4), seq(2, 4), seq(3, 4), seq(4, 4)
	insert(t, tr, a, nil, 0, Local, 1)
	insert(t, tr, r, nil, 1, Remote, 2) // newer than a, but remote
	insert(t, tr, b, nil, 2, Local, 3)
	insert(t, tr, c, nil, 3, Local, 4)
	wantHits(t, tr, r, 5)
	wantHits(t, tr, a, 5, Hit{Backend: 0, Blocks: 4, Origin: Local})
	if s := tr.Stats(); s.NodeEvictions[EvictCapacityRemote] != 1 || s.HoldersRemote != 0 {
		t.Fatalf("Stats = %+v, want one remote eviction and no remote holders", s)
	}
	// A remote insert into a tree full of local routes evicts itself.
	insert(t, tr, seq(5, 4), nil, 1, Remote, 6)
	wantHits(t, tr, seq(5, 4), 7)
	wantHits(t, tr, a, 7, Hit{Backend: 0, Blocks: 4, Origin: Local})
}

func TestCapacityTrimsAtBoundaries(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxBlocks = 16
	tr := mustNew(t, cfg)
	conv := seq(1, 12) // system prompt 4, turn one 4, turn two 4
	insert(t, tr, conv, []int{4, 8}, 0, Local, 1)
	insert(t, tr, seq(2, 4), nil, 1, Local, 2) // 16 blocks: full
	insert(t, tr, seq(3, 4), nil, 2, Local, 3) // the turn-two leaf goes
	wantHits(t, tr, conv, 4, Hit{Backend: 0, Blocks: 8, Origin: Local})
	insert(t, tr, seq(4, 4), nil, 3, Local, 5) // seq 2 is older than conv now
	wantHits(t, tr, conv, 6, Hit{Backend: 0, Blocks: 8, Origin: Local})
	wantHits(t, tr, seq(2, 4), 6)
	// Matching conv made it the most recent: seq 3 and 4 go first.
	insert(t, tr, seq(5, 8), nil, 3, Local, 7)
	wantHits(t, tr, seq(3, 4), 8)
	wantHits(t, tr, seq(4, 4), 8)
	insert(t, tr, seq(6, 4), nil, 3, Local, 9) // then turn one
	wantHits(t, tr, conv, 10, Hit{Backend: 0, Blocks: 4, Origin: Local})
	insert(t, tr, seq(7, 8), nil, 3, Local, 11) // seq 5, not the recent conv
	wantHits(t, tr, conv, 12, Hit{Backend: 0, Blocks: 4, Origin: Local})
	wantHits(t, tr, seq(5, 8), 12)
}

func TestInsertTruncatesToCapacity(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxBlocks = 10
	tr := mustNew(t, cfg)
	c := seq(1, 25)
	insert(t, tr, c, []int{5, 20}, 0, Local, 1)
	wantHits(t, tr, c, 2, Hit{Backend: 0, Blocks: 10, Origin: Local})
}

func TestTTL(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.TTL = time.Duration(100)
	tr := mustNew(t, cfg)
	c := seq(1, 8)
	insert(t, tr, c, []int{4}, 0, Local, 0)
	insert(t, tr, c[:4], nil, 1, Local, 50)
	wantHits(t, tr, c, 99, Hit{Backend: 0, Blocks: 8, Origin: Local}, Hit{Backend: 1, Blocks: 4, Origin: Local})
	wantHits(t, tr, c, 100, Hit{Backend: 1, Blocks: 4, Origin: Local}) // backend 0 expired
	tr.Maintain(120, 100)
	if s := tr.Stats(); s.Nodes != 1 || s.NodeEvictions[EvictEmpty] != 1 || s.HolderDrops[DropExpired] != 2 {
		t.Fatalf("after Maintain: %+v, want 1 node, 1 empty eviction, 2 expired holders", s)
	}
	wantHits(t, tr, c, 149, Hit{Backend: 1, Blocks: 4, Origin: Local})
	wantHits(t, tr, c, 150)
	tr.Maintain(150, 100)
	if s := tr.Stats(); s.Nodes != 0 || s.Blocks != 0 || s.HoldersLocal != 0 {
		t.Fatalf("after second Maintain: %+v, want an empty tree", s)
	}
	if err := tr.check(); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveBackendBounded(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, DefaultConfig())
	const n = 1000
	for i := 0; i < n; i++ {
		insert(t, tr, seq(int32(i), 3), nil, i%2, Local, 1)
	}
	insert(t, tr, seq(0, 3), nil, 1, Local, 2)
	if err := tr.RemoveBackend(0); err != nil {
		t.Fatal(err)
	}
	wantHits(t, tr, seq(0, 3), 3, Hit{Backend: 1, Blocks: 3, Origin: Local}) // invisible at once
	wantHits(t, tr, seq(2, 3), 3)
	calls := 0
	for tr.Stats().HoldersLocal > n/2+1 {
		if w := tr.Maintain(3, 64); w > 64 || w == 0 {
			t.Fatalf("Maintain did %d units, budget 64", w)
		}
		calls++
		if calls > 100 {
			t.Fatalf("removal not done after %d calls: %+v", calls, tr.Stats())
		}
	}
	if calls < n/64 {
		t.Fatalf("removal took %d calls of budget 64 for %d nodes: budget not honoured", calls, n)
	}
	s := tr.Stats()
	if s.Nodes != n/2+1 || s.HolderDrops[DropBackendRemoved] != n/2 {
		t.Fatalf("Stats = %+v, want %d nodes and %d dropped holders", s, n/2+1, n/2)
	}
	// The index is reusable at once.
	insert(t, tr, seq(2, 3), nil, 0, Local, 4)
	wantHits(t, tr, seq(2, 3), 5, Hit{Backend: 0, Blocks: 3, Origin: Local})
	wantHits(t, tr, seq(0, 3), 5, Hit{Backend: 1, Blocks: 3, Origin: Local})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, DefaultConfig())
	c := seq(1, 2)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{tr.Insert(c, nil, -1, Local, 1), "backend index -1"},
		{tr.Insert(c, nil, 1024, Local, 1), "backend index 1024"},
		{tr.Insert(c, nil, 1, 0, 1), "invalid origin"},
		{tr.Insert(c, nil, 1, Local, -1), "time -1 outside"},
		{tr.Insert(c, nil, 1, Local, 1<<62), "outside [0, 2^62)"},
		{tr.Insert(c, nil, 1, 4, 1), "invalid origin"},
		{tr.RemoveBackend(5000), "backend index 5000"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want it to mention %q", tc.err, tc.want)
		}
	}
	bad := func(mut func(*Config), field string) {
		t.Helper()
		cfg := DefaultConfig()
		mut(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("New: %v, want an error naming %s", err, field)
		}
	}
	bad(func(c *Config) { c.MaxBlocks = 0 }, "MaxBlocks")
	bad(func(c *Config) { c.MaxHolders = 256 }, "MaxHolders")
	bad(func(c *Config) { c.TTL = 0 }, "TTL")
	bad(func(c *Config) { c.MaxBackends = 1<<16 + 1 }, "MaxBackends")
}

func randomOps(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

// TestOracle runs random operation sequences against the naive model.
func TestOracle(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		ops := decodeOps(randomOps(r, 3000), 6)
		for _, h := range []int{1, 2, 4} {
			runOracle(t, ops, h)
		}
	}
}

// TestCapacityProperty checks, under heavy eviction, that the structure
// stays sound and that no hit is ever deeper than what its backend really
// inserted (an unbounded oracle).
func TestCapacityProperty(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 2))
		runCapacity(t, decodeOps(randomOps(r, 3000), 6), 1+r.IntN(30))
	}
}

func runCapacity(t *testing.T, ops []op, maxBlocks int) {
	t.Helper()
	const ttl = 300
	cfg := DefaultConfig()
	cfg.MaxHolders, cfg.TTL, cfg.MaxBackends, cfg.MaxBlocks = 2, ttl, 8, maxBlocks
	tr := mustNew(t, cfg)
	truth := newOracle(1<<30, ttl)
	now := int64(1000)
	var got []Hit
	for i, o := range ops {
		now++
		chain := symChain(o.syms)
		switch o.kind {
		case 0:
			if err := tr.Insert(chain, o.bounds, int(o.backend), o.origin, now); err != nil {
				t.Fatal(err)
			}
			truth.insert(chain[:min(len(chain), maxBlocks)], o.backend, o.origin, now)
		case 1:
			got, _ = tr.Match(got[:0], chain, now)
			want := truth.match(chain, now)
			for _, h := range got {
				j := slices.IndexFunc(want, func(w Hit) bool { return w.Backend == h.Backend })
				if j < 0 || want[j].Blocks < h.Blocks {
					t.Fatalf("op %d: hit %v not backed by truth %v", i, h, want)
				}
			}
		case 2:
			if err := tr.RemoveBackend(int(o.backend)); err != nil {
				t.Fatal(err)
			}
			truth.epochs[o.backend]++
		case 3:
			tr.Maintain(now, o.n)
		case 4:
			now += int64(o.n)
		case 5:
			tr.Demote(chain, int(o.backend), o.n, now)
			// The tree drops at least the chain's prefixes deeper than
			// keep (more on a straddling node): the truth drops those.
			for d := max(o.n, 0) + 1; d <= len(chain); d++ {
				k := prefixKey(chain[:d])
				if hs, ok := truth.m[k]; ok {
					truth.m[k] = slices.DeleteFunc(hs, func(h oholder) bool { return h.backend == o.backend })
				}
			}
		}
		if err := tr.check(); err != nil {
			t.Fatalf("op %d (%+v): %v", i, o, err)
		}
	}
}

func TestPackedSizes(t *testing.T) {
	t.Parallel()
	// BenchmarkMemoryPerBlock's worst shape depends on these; see node.
	if n, h := unsafe.Sizeof(node{}), unsafe.Sizeof(holder{}); n != 40 || h != 12 {
		t.Fatalf("sizeof node %d, holder %d; want 40 and 12", n, h)
	}
	var h holder
	for _, tc := range []struct {
		now  int64
		o    Origin
		conf bool
	}{{0, Local, false}, {1<<61 + 12345, Remote, false}, {time.Now().UnixNano(), Local, true}, {maxTime, Remote, false}, {maxTime, Local, true}, {1, Local, true}} {
		h.set(tc.now, tc.o, tc.conf)
		if h.lastUsed() != tc.now || h.origin() != tc.o || h.confirmed() != tc.conf {
			t.Fatalf("set(%d, %v, %v) read back %d, %v, %v", tc.now, tc.o, tc.conf, h.lastUsed(), h.origin(), h.confirmed())
		}
	}
}

// Hit.Used is the last insert's time of the holder at the deepest block
// Match reports for it.
func TestHitUsed(t *testing.T) {
	tr := mustNew(t, DefaultConfig())
	a := BlockKeys(nil, 1, tokens(1, 8), 1)
	insert(t, tr, a[:4], nil, 0, Local, 10)
	insert(t, tr, a, nil, 0, Local, 20) // refreshes the first 4 blocks' holder too
	insert(t, tr, a[:4], nil, 1, Local, 30)
	got := hits(t, tr, a, 40)
	want := []Hit{{Backend: 0, Blocks: 8, Origin: Local, Used: 20}, {Backend: 1, Blocks: 4, Origin: Local, Used: 30}}
	if !slices.Equal(got, want) {
		t.Fatalf("Match = %v, want %v", got, want)
	}
	insert(t, tr, a, nil, 0, Local, 50)
	if got := hits(t, tr, a, 60); got[0].Used != 50 {
		t.Errorf("after a refresh Used = %d, want 50", got[0].Used)
	}
}

func TestDemote(t *testing.T) {
	t.Parallel()
	f := func(bounds []int, keep, wantRemoved, wantBlocks0, wantBlocks1 int) {
		t.Helper()
		tr := mustNew(t, DefaultConfig())
		chain := symChain([]int32{1, 2, 3, 4, 5, 6, 7, 8})
		if err := tr.Insert(chain, bounds, 0, Local, 10); err != nil {
			t.Fatal(err)
		}
		if err := tr.Insert(chain, nil, 1, Local, 10); err != nil {
			t.Fatal(err)
		}
		if got := tr.Demote(chain, 0, keep, 11); got != wantRemoved {
			t.Fatalf("Demote(keep %d) removed %d, want %d", keep, got, wantRemoved)
		}
		if got := tr.Stats().HolderDrops[DropDemoted]; got != uint64(wantRemoved) {
			t.Fatalf("HolderDrops[demoted] = %d, want %d", got, wantRemoved)
		}
		hits, _ := tr.Match(nil, chain, 12)
		sortHits(hits)
		var b0, b1 int
		for _, h := range hits {
			if h.Backend == 0 {
				b0 = h.Blocks
			} else {
				b1 = h.Blocks
			}
		}
		if b0 != wantBlocks0 || b1 != wantBlocks1 {
			t.Fatalf("after Demote(keep %d): backend 0 holds %d, 1 holds %d; want %d and %d", keep, b0, b1, wantBlocks0, wantBlocks1)
		}
		if err := tr.check(); err != nil {
			t.Fatal(err)
		}
	}
	// Nodes [0,2) [2,5) [5,8): keep at a node end keeps exactly that.
	f([]int{2, 5}, 5, 1, 5, 8)
	f([]int{2, 5}, 2, 2, 2, 8)
	// A straddling node loses the holder: keep 3 inside [2,5) keeps 2.
	f([]int{2, 5}, 3, 2, 2, 8)
	// keep ≤ 0 drops the whole path; keep ≥ the chain drops nothing.
	f([]int{2, 5}, 0, 3, 0, 8)
	f([]int{2, 5}, -1, 3, 0, 8)
	f([]int{2, 5}, 8, 0, 8, 8)
	// One node for the whole chain: any keep below it drops it.
	f(nil, 7, 1, 0, 8)
}

func TestDemoteEmptiedNodesMaintained(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, DefaultConfig())
	chain := symChain([]int32{1, 2, 3, 4})
	if err := tr.Insert(chain, []int{2}, 3, Local, 10); err != nil {
		t.Fatal(err)
	}
	if got := tr.Demote(chain, 3, 2, 11); got != 1 {
		t.Fatalf("removed %d, want 1", got)
	}
	tr.Maintain(12, 100)
	if s := tr.Stats(); s.Nodes != 1 || s.Blocks != 2 || s.NodeEvictions[EvictEmpty] != 1 {
		t.Fatalf("after Maintain: %d nodes, %d blocks, %d emptied; want 1, 2, 1", s.Nodes, s.Blocks, s.NodeEvictions[EvictEmpty])
	}
	if err := tr.check(); err != nil {
		t.Fatal(err)
	}
	// Out-of-range backends remove nothing.
	if tr.Demote(chain, -1, 0, 12) != 0 || tr.Demote(chain, 1<<20, 0, 12) != 0 {
		t.Fatal("Demote of an invalid backend removed holders")
	}
}

// wantHitsUsed is wantHits with Hit.Used.
func wantHitsUsed(tb testing.TB, tr *Tree, chain []uint64, now int64, want ...Hit) {
	tb.Helper()
	if got := hits(tb, tr, chain, now); !slices.Equal(got, want) {
		tb.Fatalf("Match = %v, want %v", got, want)
	}
	if err := tr.check(); err != nil {
		tb.Fatal(err)
	}
}

// Engine inserts confirm a holder (Hit.Confirmed, issue 31); routing's
// inserts extend or refresh it without taking the confirmation away; a
// split keeps it on both halves; Demote, RemoveBackend and expiry drop
// it; it is a Local holder everywhere else.
func TestConfirmed(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.TTL = 1000
	tr := mustNew(t, cfg)
	a := seq(1, 8)
	insert(t, tr, a[:4], nil, 0, Engine, 10)
	wantHitsUsed(t, tr, a, 11, Hit{Backend: 0, Blocks: 4, Origin: Local, Used: 10, Confirmed: 4})

	// Routing extends the chain: the guess is deeper, the confirmation
	// stays at 4; the engine's blocks are refreshed with it.
	insert(t, tr, a, nil, 0, Local, 20)
	wantHitsUsed(t, tr, a, 21, Hit{Backend: 0, Blocks: 8, Origin: Local, Used: 20, Confirmed: 4})
	wantHitsUsed(t, tr, a[:4], 21, Hit{Backend: 0, Blocks: 4, Origin: Local, Used: 20, Confirmed: 4})

	// A remote sighting refreshes and keeps it too.
	insert(t, tr, a[:4], nil, 0, Remote, 30)
	wantHitsUsed(t, tr, a[:4], 31, Hit{Backend: 0, Blocks: 4, Origin: Local, Used: 30, Confirmed: 4})

	// The engine confirms the rest; a split inside the confirmed edge
	// (another backend's boundary) keeps both halves confirmed.
	insert(t, tr, a, nil, 0, Engine, 40)
	wantHitsUsed(t, tr, a, 41, Hit{Backend: 0, Blocks: 8, Origin: Local, Used: 40, Confirmed: 8})
	insert(t, tr, a[:6], nil, 1, Local, 50)
	wantHitsUsed(t, tr, a, 51,
		Hit{Backend: 0, Blocks: 8, Origin: Local, Used: 40, Confirmed: 8},
		Hit{Backend: 1, Blocks: 6, Origin: Local, Used: 50})
	wantHitsUsed(t, tr, a[:6], 51,
		Hit{Backend: 0, Blocks: 6, Origin: Local, Used: 40, Confirmed: 6},
		Hit{Backend: 1, Blocks: 6, Origin: Local, Used: 50})
	if s := tr.Stats(); s.HoldersLocal != 5 || s.HoldersRemote != 0 {
		t.Fatalf("holders local/remote %d/%d, want 5/0 (confirmed ones are local)", s.HoldersLocal, s.HoldersRemote)
	}

	// Recent reports a confirmed holder as a local one (gossip and the
	// saved table carry no confirmation).
	tr.Recent(52, 10, 100, func(_ []uint64, _ []int, b int, o Origin, _ int64) bool {
		if o != Local {
			t.Errorf("Recent: backend %d origin %v, want local", b, o)
		}
		return true
	})

	// Demote drops the confirmation with the holder; a later guess is
	// not confirmed.
	tr.Demote(a, 0, 6, 60)
	wantHitsUsed(t, tr, a, 61,
		Hit{Backend: 0, Blocks: 6, Origin: Local, Used: 40, Confirmed: 6},
		Hit{Backend: 1, Blocks: 6, Origin: Local, Used: 50})
	insert(t, tr, a, nil, 0, Local, 70)
	wantHitsUsed(t, tr, a, 71,
		Hit{Backend: 0, Blocks: 8, Origin: Local, Used: 70, Confirmed: 6},
		Hit{Backend: 1, Blocks: 6, Origin: Local, Used: 50})

	// RemoveBackend: what is inserted after is a guess.
	if err := tr.RemoveBackend(0); err != nil {
		t.Fatal(err)
	}
	insert(t, tr, a, nil, 0, Local, 80)
	wantHitsUsed(t, tr, a, 81,
		Hit{Backend: 0, Blocks: 8, Origin: Local, Used: 80},
		Hit{Backend: 1, Blocks: 6, Origin: Local, Used: 50})

	// An expired confirmed holder relearned by routing is a guess.
	b := seq(2, 4)
	insert(t, tr, b, nil, 2, Engine, 100)
	insert(t, tr, b, nil, 2, Local, 1200)
	wantHitsUsed(t, tr, b, 1201, Hit{Backend: 2, Blocks: 4, Origin: Local, Used: 1200})
}

// A new holder on a full node replaces a guess before a confirmed
// holder, however old.
func TestConfirmedVictim(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxHolders = 2
	tr := mustNew(t, cfg)
	a := seq(1, 4)
	insert(t, tr, a, nil, 0, Engine, 10)
	insert(t, tr, a, nil, 1, Local, 20)
	insert(t, tr, a, nil, 2, Local, 30)
	wantHitsUsed(t, tr, a, 31,
		Hit{Backend: 0, Blocks: 4, Origin: Local, Used: 10, Confirmed: 4},
		Hit{Backend: 2, Blocks: 4, Origin: Local, Used: 30})
}
