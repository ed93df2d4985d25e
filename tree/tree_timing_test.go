package tree

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/zeebo/xxh3"
)

const promptTokens = 4096 // 256 blocks of 16

func randTokens(r *rand.Rand, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(128000))
	}
	return t
}

func BenchmarkBlockKeys(b *testing.B) {
	toks := randTokens(rand.New(rand.NewPCG(1, 1)), promptTokens)
	dst := make([]uint64, 0, promptTokens/DefaultBlockSize)
	seed := ModelSeed("meta-llama/Meta-Llama-3-8B-Instruct")
	b.SetBytes(int64(len(toks) * 4))
	b.ReportAllocs()
	for b.Loop() {
		dst = BlockKeys(dst[:0], seed, toks, DefaultBlockSize)
	}
}

// BenchmarkBlockKeysXXH3 is the baseline BlockKeys replaced: xxh3 of each
// 64-byte block seeded with the previous key. Compare ns/op in one run.
func BenchmarkBlockKeysXXH3(b *testing.B) {
	toks := randTokens(rand.New(rand.NewPCG(1, 1)), promptTokens)
	dst := make([]uint64, 0, promptTokens/DefaultBlockSize)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&toks[0])), len(toks)*4)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		dst = dst[:0]
		key := uint64(1)
		for i := 0; i+64 <= len(raw); i += 64 {
			key = xxh3.HashSeed(raw[i:i+64], key)
			dst = append(dst, key)
		}
	}
}

// routeTable returns a tree with at least routes nodes, shaped like chat
// traffic: 500 system prompts of 32 blocks, conversations of 2-6 turns of
// 4-24 blocks learned turn by turn, 8 backends. It also returns a 256-block
// prompt whose chain is stored as 16 nodes (a boundary every 16 blocks)
// held by 4 backends.
func routeTable(tb testing.TB, routes int) (*Tree, []uint64) {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.MaxBlocks = 1 << 26
	tr := mustNew(tb, cfg)
	r := rand.New(rand.NewPCG(2, 2))
	seed := ModelSeed("bench")
	sys := make([][]int32, 500)
	for i := range sys {
		sys[i] = randTokens(r, 32*DefaultBlockSize)
	}
	var chain []uint64
	var bounds []int
	now := int64(1)
	for tr.Stats().Nodes < routes {
		toks := append([]int32(nil), sys[r.IntN(len(sys))]...)
		bounds = append(bounds[:0], 32)
		backend := r.IntN(8)
		for turn := 2 + r.IntN(5); turn > 0; turn-- {
			toks = append(toks, randTokens(r, (4+r.IntN(21))*DefaultBlockSize)...)
			chain = BlockKeys(chain[:0], seed, toks, DefaultBlockSize)
			bounds = append(bounds, len(chain))
			now++
			if err := tr.Insert(chain, bounds, backend, Local, now); err != nil {
				tb.Fatal(err)
			}
		}
	}
	prompt := BlockKeys(nil, seed, randTokens(r, promptTokens), DefaultBlockSize)
	bounds = bounds[:0]
	for i := 16; i < len(prompt); i += 16 {
		bounds = append(bounds, i)
	}
	for backend := 0; backend < 4; backend++ {
		if err := tr.Insert(prompt, bounds, backend, Local, now); err != nil {
			tb.Fatal(err)
		}
	}
	return tr, prompt
}

func BenchmarkMatch(b *testing.B) {
	tr, prompt := routeTable(b, 100_000)
	b.Logf("table: %+v", tr.Stats())
	hits := make([]Hit, 0, 16)
	b.Run("hit256", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hits, _ = tr.Match(hits[:0], prompt, 2)
		}
		if len(hits) != 4 || hits[0].Blocks != 256 {
			b.Fatalf("hits = %v, want 4 backends at 256 blocks", hits)
		}
	})
	miss := append(append([]uint64(nil), prompt[:32]...), prompt[33:]...)
	b.Run("diverge32", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hits, _ = tr.Match(hits[:0], miss, 2)
		}
		if len(hits) != 4 || hits[0].Blocks != 32 {
			b.Fatalf("hits = %v, want 4 backends at 32 blocks", hits)
		}
	})
	cold := BlockKeys(nil, 99, randTokens(rand.New(rand.NewPCG(3, 3)), promptTokens), DefaultBlockSize)
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hits, _ = tr.Match(hits[:0], cold, 2)
		}
	})
}

func BenchmarkInsert(b *testing.B) {
	tr, prompt := routeTable(b, 100_000)
	var bounds []int
	for i := 16; i < len(prompt); i += 16 {
		bounds = append(bounds, i)
	}
	b.Run("refresh256", func(b *testing.B) {
		b.ReportAllocs()
		now := int64(10)
		for b.Loop() {
			now++
			if err := tr.Insert(prompt, bounds, 1, Local, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new256", func(b *testing.B) {
		// A fresh 256-block chain per op, in a full tree: every insert
		// also evicts about 256 blocks.
		cfg := DefaultConfig()
		cfg.MaxBlocks = 200_000
		full := mustNew(b, cfg)
		r := rand.New(rand.NewPCG(4, 4))
		chains := make([][]uint64, 64)
		for i := range chains {
			chains[i] = BlockKeys(nil, 5, randTokens(r, promptTokens), DefaultBlockSize)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			c := chains[i%len(chains)]
			c[0] = uint64(i) // a new prefix every time
			if err := full.Insert(c, bounds, i%8, Local, int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDemote: a pending route's removal (or an engine's
// contradiction) on a 256-block chain with a node every 16 blocks, then
// the insert that restores it (Demote alone would find nothing to drop
// after the first op).
func BenchmarkDemote(b *testing.B) {
	tr, prompt := routeTable(b, 100_000)
	var bounds []int
	for i := 16; i < len(prompt); i += 16 {
		bounds = append(bounds, i)
	}
	b.ReportAllocs()
	now := int64(10)
	for b.Loop() {
		now++
		if err := tr.Insert(prompt, bounds, 1, Local, now); err != nil {
			b.Fatal(err)
		}
		if tr.Demote(prompt, 1, 32, now) == 0 {
			b.Fatal("nothing demoted")
		}
	}
}

// BenchmarkMemoryPerBlock fills a tree to 1,000,000 blocks and reports the
// live heap per stored block.
func BenchmarkMemoryPerBlock(b *testing.B) {
	for _, tc := range []struct {
		name  string
		nodeB int // blocks per node: boundaries every nodeB blocks
	}{
		{"chat", 0},
		{"node-per-4-blocks", 4},
		{"node-per-block", 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				perBlock, s := fill(b, 1_000_000, tc.nodeB)
				b.ReportMetric(perBlock, "heapB/block")
				b.ReportMetric(float64(s.BytesInUse)/float64(s.Blocks), "estB/block")
				b.ReportMetric(float64(s.Nodes), "nodes")
			}
		})
	}
}

// fill inserts chains until the tree holds blocks blocks and returns the
// heap growth per block. nodeB 0 means the chat shape of routeTable.
func fill(tb testing.TB, blocks, nodeB int) (float64, Stats) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cfg := DefaultConfig()
	cfg.MaxBlocks = blocks
	tr := mustNew(tb, cfg)
	r := rand.New(rand.NewPCG(6, 6))
	seed := ModelSeed("mem")
	sys := make([][]int32, 200)
	for i := range sys {
		sys[i] = randTokens(r, 32*DefaultBlockSize)
	}
	var chain []uint64
	var bounds []int
	now := int64(0)
	for tr.Stats().Blocks < blocks {
		toks := append([]int32(nil), sys[r.IntN(len(sys))]...)
		bounds = append(bounds[:0], 32)
		for turn := 2 + r.IntN(5); turn > 0; turn-- {
			toks = append(toks, randTokens(r, (4+r.IntN(21))*DefaultBlockSize)...)
			chain = BlockKeys(chain[:0], seed, toks, DefaultBlockSize)
			bounds = append(bounds, len(chain))
			if nodeB > 0 {
				bounds = bounds[:0]
				for i := nodeB; i < len(chain); i += nodeB {
					bounds = append(bounds, i)
				}
			}
			now++
			if err := tr.Insert(chain, bounds, r.IntN(8), Local, now); err != nil {
				tb.Fatal(err)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	s := tr.Stats()
	runtime.KeepAlive(tr)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(s.Blocks), s
}

func ExampleTree() {
	tr, _ := New(DefaultConfig())
	seed := ModelSeed("llama-3-8b")
	system := make([]int32, 64) // 4 blocks of a system prompt
	question := append(system, make([]int32, 40)...)
	chain := BlockKeys(nil, seed, question, DefaultBlockSize)
	// Backend 2 answered: it now holds the prompt; the system prompt
	// ends at block 4.
	_ = tr.Insert(chain, []int{len(system) / DefaultBlockSize}, 2, Local, 1)
	hits, depth := tr.Match(nil, chain, 2)
	fmt.Println(len(chain), depth, hits)
	// Output: 6 6 [{2 6 local 1 0}]
}

// BenchmarkMaintain measures one Maintain call with a budget of 1,024 slots
// on a 100,000-node table in steady state (holders live): the pause a shard
// loop takes per maintenance tick.
func BenchmarkMaintain(b *testing.B) {
	tr, _ := routeTable(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		if w := tr.Maintain(2, 1024); w != 1024 {
			b.Fatalf("Maintain did %d units, want 1024", w)
		}
	}
}
