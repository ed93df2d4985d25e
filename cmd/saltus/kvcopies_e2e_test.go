package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// TestServeKVEventsCopies (issue 31: the engine's word as vLLM gives
// it): saltus listens for publishers (--kv-events-listen); a publisher
// speaking for engine e0 sends what a vLLM engine sends (map layout, int
// hashes) when (1) two requests computed one new prefix at once (vLLM
// caches two copies, each stored) and one copy is evicted, and (2) its
// offloading connector copied a prefix to its CPU tier (medium CPU, no
// token ids, blocks of 32 tokens named by bytes) before its GPU evicted
// it. Both prefixes stay e0's; once the CPU tier evicts the second, it
// is e0's no more. A prefix whose one GPU copy is evicted is not e0's
// either.
func TestServeKVEventsCopies(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("tcp://127.0.0.1:%d", freeLoopbackPort(t))
	var sims []*vllmsim.Sim
	byURL := map[string]int{}
	for i := range 2 {
		s := startSimAt(t, fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t)), func(c *vllmsim.Config) { c.Seed = int64(i + 1) })
		sims = append(sims, s)
		byURL[s.URL()] = i
	}
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.KVEventsListen = listen
		for i, sim := range sims {
			c.Backends = append(c.Backends, fmt.Sprintf("e%d=%s", i, sim.URL()))
		}
	})
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: listen,
		Topic: "kv@" + strings.TrimPrefix(sims[0].URL(), "http://") + "@llama3", Encoding: kvevents.MapEncoding}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const blocks = 16
	next := uint64(1)
	// store is a GPU BlockStored of ids (blocks of 16), hashes from h,
	// after parent (0: none).
	store := func(ids []int, h, parent uint64) kvevents.Event {
		e := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: 16, Medium: kvevents.Some("GPU")}
		for _, id := range ids {
			e.Tokens = append(e.Tokens, uint32(id))
		}
		for i := range len(ids) / 16 {
			e.Hashes = append(e.Hashes, kvevents.IntHash(h+uint64(i)))
		}
		if parent != 0 {
			e.Parent = kvevents.Some(kvevents.IntHash(parent))
		}
		return e
	}
	removed := func(medium string, hs ...kvevents.Hash) kvevents.Event {
		return kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: hs, Medium: kvevents.Some(medium)}
	}
	gpuHashes := func(h uint64) []kvevents.Hash {
		var hs []kvevents.Hash
		for i := blocks - 1; i >= 0; i-- { // vLLM frees a request's blocks last first
			hs = append(hs, kvevents.IntHash(h+uint64(i)))
		}
		return hs
	}
	// digest is the 32 bytes whose int form (vLLM's: the low 64 bits) is v.
	digest := func(v uint64) kvevents.Hash {
		var b [32]byte
		for i := range 8 {
			b[24+i] = byte(v >> (56 - 8*i))
		}
		h, _ := kvevents.BytesHash(b[:])
		return h
	}
	publish := func(evs ...kvevents.Event) {
		t.Helper()
		if !pub.Publish(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs}) {
			t.Fatal("publisher queue full")
		}
	}
	explain := func(ids []int) (int, int) {
		t.Helper()
		a := s.adm(t, "POST", "/admin/explain?path=/v1/completions", idPrompt(t, append(append([]int(nil), ids...), 1, 2, 3)))
		var d struct {
			URL           string `json:"url"`
			MatchedBlocks int    `json:"matched_blocks"`
		}
		if a.status != 200 || json.Unmarshal([]byte(a.body), &d) != nil {
			t.Fatalf("explain: %d %s", a.status, a.body)
		}
		return byURL[strings.TrimSuffix(d.URL, "/")], d.MatchedBlocks
	}
	// applied publishes a marker after the batches before it and waits
	// until saltus holds it: the view applies batches in order, and the
	// marker continues the prefix's first block, so its insert runs on
	// the same loop as theirs, after them.
	applied := func(first []int, firstHash uint64) {
		t.Helper()
		m := append(append([]int(nil), first[:16]...), idRange(int(900+next), 16)...)
		h := 50_000 + next
		next++
		publish(store(m[16:], h, firstHash))
		waitLong(t, "the marker batch applied", func() bool { _, got := explain(m); return got == 2 })
	}

	// ZMQ drops what a publisher sends before it is connected: warm up.
	warm := idRange(800, 32)
	waitLong(t, "the publisher's first batch applied", func() bool {
		publish(store(warm, 40_000, 0))
		b, m := explain(warm)
		return b == 0 && m == 2
	})

	// (1) Two copies, one evicted.
	p := idRange(801, blocks*16)
	publish(store(p, 1000, 0), store(p, 1000, 0))
	publish(removed("GPU", gpuHashes(1000)...))
	applied(p, 1000)
	if b, m := explain(p); b != 0 || m != blocks {
		t.Errorf("two copies, one evicted: engine %d, %d blocks matched, want 0 and %d", b, m, blocks)
	}
	// (2) Offloaded to the CPU tier, then evicted from the GPU.
	q := idRange(802, blocks*16)
	publish(store(q, 2000, 0))
	cpu := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: 32, Medium: kvevents.Some("CPU"), Tokens: []uint32{}}
	for i := 1; i < blocks; i += 2 {
		cpu.Hashes = append(cpu.Hashes, digest(2000+uint64(i)))
	}
	publish(cpu)
	publish(removed("GPU", gpuHashes(2000)...))
	applied(q, 2000)
	if b, m := explain(q); b != 0 || m != blocks {
		t.Errorf("offloaded, evicted from the GPU: engine %d, %d blocks matched, want 0 and %d", b, m, blocks)
	}
	for k := range 4 {
		a := do(t, "POST", "http://"+s.addr+"/v1/completions", idPrompt(t, append(append([]int(nil), q...), idRange(810+k, 8)...)))
		if a.status != 200 || byURL[a.backend] != 0 {
			t.Errorf("offloaded prefix through saltus: %d from engine %d, want 200 from 0", a.status, byURL[a.backend])
		}
	}
	// The CPU tier evicts its last 2 blocks (4 of the GPU's).
	publish(removed("CPU", cpu.Hashes[len(cpu.Hashes)-2:]...))
	waitLong(t, "the CPU tier's eviction", func() bool { _, m := explain(q); return m == blocks-4 })
	// (3) One copy, evicted: no longer e0's.
	r := idRange(803, blocks*16)
	publish(store(r, 3000, 0))
	waitLong(t, "a third prefix stored", func() bool { _, m := explain(r); return m == blocks })
	publish(removed("GPU", gpuHashes(3000)...))
	waitLong(t, "its only copy evicted", func() bool { _, m := explain(r); return m == 0 })
	if got := s.metrics(t)[`saltus_kvview_unusable_total{reason="copy_unknown"}`]; got != 0 {
		t.Errorf("copy_unknown %v, want 0", got)
	}
}

// saltedPrompt is idPrompt with vLLM's cache_salt.
func saltedPrompt(t *testing.T, ids []int, salt string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "llama3", "prompt": ids, "max_tokens": 2, "cache_salt": salt})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeKVEventsCacheSalt: four simulated engines keep salted prompts'
// blocks apart, as vLLM does, and publish them with their salt. One
// prompt placed on two engines directly under two tenants' salts is
// routed, per tenant, to the engine that holds it under that tenant's
// salt (≥ 90 %); through saltus unsalted, it matches no engine's blocks.
func TestServeKVEventsCacheSalt(t *testing.T) {
	t.Parallel()
	e := startEvented(t, 4, nil, nil)
	e.warm(t)
	p := idRange(901, 32*16)
	holder := map[string]int{"tenant-a": 1, "tenant-b": 3}
	for salt, h := range holder {
		before := e.blocks(t, h)
		if a := do(t, "POST", e.sims[h].URL()+"/v1/completions", saltedPrompt(t, p, salt)); a.status != 200 {
			t.Fatalf("engine %d directly: %d %s", h, a.status, a.body)
		}
		waitLong(t, fmt.Sprintf("engine %d's salted blocks in its view", h), func() bool { return e.blocks(t, h) >= before+31 })
	}
	hits, total := 0, 0
	for salt, h := range holder {
		for k := range 5 {
			ids := append(append([]int(nil), p...), idRange(910+k, 20)...)
			a := do(t, "POST", "http://"+e.s.addr+"/v1/completions", saltedPrompt(t, ids, salt))
			if a.status != 200 {
				t.Fatalf("%s through saltus: %d %s", salt, a.status, a.body)
			}
			total++
			if e.byURL[a.backend] == h {
				hits++
			}
		}
	}
	if hits*10 < total*9 {
		t.Fatalf("%d of %d salted requests went to the engine holding their tenant's prefix, want ≥ 90 %%", hits, total)
	}
	t.Logf("%d of %d salted requests to their tenant's holder", hits, total)
	a := e.s.adm(t, "POST", "/admin/explain?path=/v1/completions", idPrompt(t, append(append([]int(nil), p...), 1, 2)))
	var d struct {
		MatchedBlocks int `json:"matched_blocks"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &d) != nil || d.MatchedBlocks != 0 {
		t.Errorf("the prompt unsalted: %d %s, want 0 blocks matched", a.status, a.body)
	}
}
