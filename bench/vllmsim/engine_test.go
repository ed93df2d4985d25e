package vllmsim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// virtual is a simulated clock: steps advance it without sleeping.
type virtual struct {
	mu  sync.Mutex
	now time.Time
}

func (v *virtual) sleep(d time.Duration, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return false
	default:
	}
	v.mu.Lock()
	v.now = v.now.Add(d)
	v.mu.Unlock()
	return true
}

func (v *virtual) read() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// testEngine runs an engine on a virtual clock until the test ends.
func testEngine(t *testing.T, mutate func(*Config)) (*engine, *virtual) {
	t.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(cfg)
	v := &virtual{now: time.Unix(1000, 0)}
	e.clock, e.now = v.sleep, v.read
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e, v
}

// promptKeys is a prompt of n tokens whose blocks are unique to tag.
func promptKeys(tag uint64, n, bs int) []uint64 {
	keys := make([]uint64, n/bs)
	for i := range keys {
		keys[i] = tag<<32 | uint64(i)
	}
	return keys
}

// run submits a request at the virtual now and returns its TTFT and
// the tokens cached at admission, after its last token.
func run(t *testing.T, e *engine, v *virtual, keys []uint64, prompt, maxTokens int) (ttft time.Duration, cached int, perToken time.Duration) {
	t.Helper()
	s := &seq{keys: keys, prompt: prompt, maxTokens: maxTokens, tokens: make(chan int, maxTokens), gone: make(chan struct{})}
	start := v.read()
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range s.tokens {
		n++
	}
	if n != maxTokens {
		t.Fatalf("%d tokens, want %d", n, maxTokens)
	}
	if maxTokens > 1 {
		perToken = s.last.Sub(s.first) / time.Duration(maxTokens-1)
	}
	return s.first.Sub(start), s.cached, perToken
}

// TestProfileTTFT: an idle 4,096-token prompt on a100-13b: a miss costs
// 500 ms ± 20 %, a hit ≤ 40 ms; decode ≈ 25 ms per token at batch 1.
func TestProfileTTFT(t *testing.T) {
	for _, prof := range ProfileNames() {
		t.Run(prof, func(t *testing.T) {
			e, v := testEngine(t, func(c *Config) { c.Profile = Profiles[prof] })
			keys := promptKeys(1, 4096, 16)
			miss, cached, perTok := run(t, e, v, keys, 4096, 20)
			if cached != 0 {
				t.Fatalf("cold cache: %d cached", cached)
			}
			hit, cached, _ := run(t, e, v, keys, 4096, 20)
			if cached != 4095 {
				t.Fatalf("identical prompt: %d cached, want 4095 (all but the last token)", cached)
			}
			t.Logf("%s: miss %v hit %v decode %v/token", prof, miss, hit, perTok)
			switch prof {
			case "a100-13b":
				if miss < 400*time.Millisecond || miss > 600*time.Millisecond || hit > 40*time.Millisecond {
					t.Fatalf("miss %v (want 400-600 ms), hit %v (want ≤ 40 ms)", miss, hit)
				}
				if perTok < 20*time.Millisecond || perTok > 30*time.Millisecond {
					t.Fatalf("decode %v per token at batch 1, want ≈ 25 ms", perTok)
				}
			case "h100-8b":
				if miss >= 300*time.Millisecond || hit > 20*time.Millisecond || miss < 5*hit {
					t.Fatalf("h100: miss %v hit %v: want faster than a100 and a clear gap", miss, hit)
				}
			}
		})
	}
}

// TestEvictionWhenFull: six 4,000-token prompts in a 16,384-token cache:
// the oldest is evicted (tails first: the fifth takes only the first
// prompt's last blocks), the newest still cached.
func TestEvictionWhenFull(t *testing.T) {
	e, v := testEngine(t, nil)
	for tag := uint64(1); tag <= 5; tag++ {
		run(t, e, v, promptKeys(tag, 4000, 16), 4000, 4)
	}
	if n := e.kv.prefix(promptKeys(1, 4000, 16)); n == 0 || n == 250 {
		t.Fatalf("after five prompts the first keeps %d blocks: want its head, not its tail", n)
	}
	run(t, e, v, promptKeys(6, 4000, 16), 4000, 4)
	if n := e.kv.prefix(promptKeys(1, 4000, 16)); n != 0 {
		t.Fatalf("oldest prompt still has %d cached blocks", n)
	}
	if n := e.kv.prefix(promptKeys(6, 4000, 16)); n != 250 {
		t.Fatalf("newest prompt has %d of 250 blocks cached", n)
	}
	if e.kv.evicted == 0 || e.kv.used > e.kv.capacity {
		t.Fatalf("evicted %d used %d capacity %d", e.kv.evicted, e.kv.used, e.kv.capacity)
	}
	// The first prompt again: a miss, and its TTFT shows it.
	ttft, cached, _ := run(t, e, v, promptKeys(1, 4000, 16), 4000, 2)
	if cached != 0 || ttft < 400*time.Millisecond {
		t.Fatalf("evicted prompt again: cached %d ttft %v", cached, ttft)
	}
}

// TestQueueingAtMaxNumSeqs: with 2 slots, 4 requests at once: two wait,
// and the later ones get their first token later.
func TestQueueingAtMaxNumSeqs(t *testing.T) {
	e, v := testEngine(t, func(c *Config) { c.MaxNumSeqs, c.MaxBatchedTokens = 2, 2048 })
	var peakRunning, peakWaiting int
	e.clock = func(d time.Duration, stop <-chan struct{}) bool {
		r, w, _, _, _ := e.stats()
		peakRunning, peakWaiting = max(peakRunning, r), max(peakWaiting, w)
		return v.sleep(d, stop)
	}
	var seqs []*seq
	start := v.read()
	for tag := uint64(1); tag <= 4; tag++ {
		s := &seq{keys: promptKeys(tag, 512, 16), prompt: 512, maxTokens: 30, tokens: make(chan int, 30), gone: make(chan struct{})}
		seqs = append(seqs, s)
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range seqs {
		for range s.tokens {
		}
	}
	if peakRunning != 2 || peakWaiting < 1 {
		t.Fatalf("peak running %d waiting %d: want 2 running and some waiting", peakRunning, peakWaiting)
	}
	t1, t3 := seqs[0].first.Sub(start), seqs[2].first.Sub(start)
	if t3 <= t1+500*time.Millisecond {
		t.Fatalf("third request's TTFT %v vs first's %v: it should wait for a slot (30 tokens × ~28 ms)", t3, t1)
	}
}

// TestClientGoneFreesSlot: a request whose client left releases its
// blocks and slot.
func TestClientGoneFreesSlot(t *testing.T) {
	e, _ := testEngine(t, nil)
	s := &seq{keys: promptKeys(7, 1024, 16), prompt: 1024, maxTokens: 1000, tokens: make(chan int, 1000), gone: make(chan struct{})}
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	<-s.tokens
	close(s.gone)
	for range s.tokens {
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		running, _, usage, _, _ := e.stats()
		if running == 0 && usage == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("running %d usage %v after the client left", running, usage)
		}
		time.Sleep(time.Millisecond)
	}
	if e.kv.prefix(s.keys) != 64 {
		t.Fatal("the computed prompt should stay cached")
	}
}

// TestKVCacheReserve: pinned blocks are never evicted; a reservation that
// cannot fit changes nothing.
func TestKVCacheReserve(t *testing.T) {
	c := newKVCache(10)
	a, b := []uint64{1, 2, 3, 4}, []uint64{5, 6, 7, 8}
	if !c.reserve(a, 2) {
		t.Fatal("a does not fit an empty cache")
	}
	c.computed(a)
	if c.reserve(b, 1) {
		t.Fatal("b (5 blocks) fits next to a pinned a (6 blocks) in 10")
	}
	if c.used != 6 || c.free != 0 {
		t.Fatalf("a failed reservation changed used %d free %d", c.used, c.free)
	}
	c.release(a, 2)
	if c.used != 4 || c.free != 4 || c.usage() != 0 {
		t.Fatalf("after release: used %d free %d usage %v", c.used, c.free, c.usage())
	}
	if !c.reserve(b, 4) { // needs 8: evicts 2 of a, the least recent (its tail)
		t.Fatal("b does not fit after a was released")
	}
	if c.prefix(a) != 2 || c.evicted != 2 {
		t.Fatalf("a keeps %d leading blocks, evicted %d: the tail should go first", c.prefix(a), c.evicted)
	}
	// Re-pinning cached blocks takes them off the free list.
	c.computed(b)
	c.release(b, 4)
	if !c.reserve(a[:2], 0) || c.free != 4 {
		t.Fatalf("free %d after re-pinning a's head", c.free)
	}
}
