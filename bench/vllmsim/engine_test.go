package vllmsim

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// virtual is a simulated clock that never sleeps: a step ends the moment
// it starts, in real time.
type virtual struct {
	mu sync.Mutex
	t  time.Duration
	// onStep, if set, runs at the start of every step's sleep (on the
	// scheduler goroutine).
	onStep func()
}

func (v *virtual) now() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.t
}

func (v *virtual) sleepUntil(t time.Duration, stop <-chan struct{}) bool {
	if v.onStep != nil {
		v.onStep()
	}
	select {
	case <-stop:
		return false
	default:
	}
	v.mu.Lock()
	v.t = max(v.t, t)
	v.mu.Unlock()
	return true
}

// testEngine builds an engine on a virtual clock; start runs its
// scheduler until the test ends (submit before start to queue requests
// that the first step sees together).
func testEngine(t *testing.T, mutate func(*Config)) (e *engine, v *virtual, start func()) {
	t.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	v = &virtual{}
	e = newEngine(cfg, v, newEngineMetrics(metrics.NewSet(), ""))
	start = func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); e.run(ctx) }() // a test's stand-in for Sim.Start's group
		t.Cleanup(func() { cancel(); <-done })
	}
	return e, v, start
}

// distinctKeys is the keys of an n-token prompt whose blocks no other tag
// shares.
func distinctKeys(tag uint64, n, bs int) []uint64 {
	keys := make([]uint64, n/bs)
	for i := range keys {
		keys[i] = tag<<32 | uint64(i)
	}
	return keys
}

// wait blocks until s ends and returns its final state.
func wait(s *seq) int32 {
	for s.state.Load() == seqActive {
		<-s.notify
	}
	return s.state.Load()
}

// runOne submits an n-token prompt and waits for its end; it returns the
// TTFT, the cached tokens and the mean time per output token after the
// first.
func runOne(t *testing.T, e *engine, keys []uint64, n, maxTokens int) (ttft time.Duration, cached int, perToken time.Duration) {
	t.Helper()
	s := newSeq(keys, n, maxTokens, nil)
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	if got := wait(s); got != seqDone {
		t.Fatalf("state %d, want done", got)
	}
	// The engine is idle now: the virtual clock stays at the end of the
	// step of the last token. (Reading it at each notify raced with a
	// scheduler that ran ahead: a seq done before the loop's last read
	// left an early time.)
	last := e.clk.now()
	if p := int(s.produced.Load()); p != maxTokens {
		t.Fatalf("%d tokens, want %d", p, maxTokens)
	}
	if maxTokens > 1 {
		perToken = (last - s.first) / time.Duration(maxTokens-1)
	}
	return s.first - s.arrived, s.cached, perToken
}

// TestProfileTTFT: an idle 4,096-token prompt. a100-13b: a miss costs
// 500 ms ± 20 %, a hit at most 40 ms, decoding ≈ 25 ms a token at batch
// 1; h100-8b is faster at all three.
func TestProfileTTFT(t *testing.T) {
	t.Parallel()
	for _, prof := range ProfileNames() {
		t.Run(prof, func(t *testing.T) {
			t.Parallel()
			e, _, start := testEngine(t, func(c *Config) { c.Profile = Profiles[prof] })
			start()
			keys := distinctKeys(1, 4096, 16)
			miss, cached, perTok := runOne(t, e, keys, 4096, 20)
			if cached != 0 {
				t.Fatalf("cold cache: %d cached", cached)
			}
			hit, cached, _ := runOne(t, e, keys, 4096, 20)
			// All 256 blocks are cached, but the last token is recomputed
			// in whole blocks: 255 blocks hit.
			if cached != 4080 {
				t.Fatalf("identical prompt: %d cached, want 4080", cached)
			}
			t.Logf("%s: 4,096-token prompt: miss %v, hit %v, decode %v/token at batch 1", prof, miss, hit, perTok)
			switch prof {
			case "a100-13b":
				if miss < 400*time.Millisecond || miss > 600*time.Millisecond {
					t.Errorf("miss TTFT %v, want 500 ms ± 20 %%", miss)
				}
				if hit > 40*time.Millisecond {
					t.Errorf("hit TTFT %v, want ≤ 40 ms", hit)
				}
				if perTok < 20*time.Millisecond || perTok > 30*time.Millisecond {
					t.Errorf("decode %v a token at batch 1, want ≈ 25 ms", perTok)
				}
			case "h100-8b":
				if miss > 250*time.Millisecond || hit > 20*time.Millisecond || perTok > 12*time.Millisecond || miss < 5*hit {
					t.Errorf("miss %v, hit %v, decode %v: want faster than a100-13b, with a clear hit/miss gap", miss, hit, perTok)
				}
			default:
				t.Fatalf("no bounds for profile %s", prof)
			}
		})
	}
}

// TestStepFormula: TTFT and inter-token times are exactly the step
// formula's.
func TestStepFormula(t *testing.T) {
	t.Parallel()
	p := Profiles["a100-13b"]
	t.Run("chunked prefill", func(t *testing.T) {
		t.Parallel()
		e, _, start := testEngine(t, nil)
		start()
		// 10,000 tokens in chunks of 2,048: 5 steps.
		ttft, _, _ := runOne(t, e, distinctKeys(1, 10000, 16), 10000, 1)
		if want := 5*p.StepBase + 10000*p.PrefillPerToken; ttft != want {
			t.Fatalf("TTFT %v, want 5 steps = %v", ttft, want)
		}
	})
	t.Run("decode slows with batch", func(t *testing.T) {
		t.Parallel()
		e, v, start := testEngine(t, nil)
		const batch = 16
		var seqs []*seq
		for i := range batch {
			s := newSeq(distinctKeys(uint64(i+1), 64, 16), 64, 10, nil)
			seqs = append(seqs, s)
			if err := e.submit(s); err != nil {
				t.Fatal(err)
			}
		}
		start()
		for _, s := range seqs {
			wait(s)
		}
		// One prefill step for all 16 (1,024 tokens), then 9 decode
		// steps of 16 requests.
		want := (p.StepBase + batch*64*p.PrefillPerToken) + 9*(p.StepBase+batch*p.DecodePerSeq)
		if got := v.now(); got != want {
			t.Fatalf("16 requests of 10 tokens took %v, want %v", got, want)
		}
		if per := p.StepBase + batch*p.DecodePerSeq; per != 70*time.Millisecond {
			t.Fatalf("a decode step at batch 16 takes %v, want 70 ms (25 ms at batch 1)", per)
		}
	})
}

// TestEvictionWhenFull: 4,000-token prompts in a 16,384-token cache: the
// fifth evicts the first prompt's tail (least recent first), the sixth
// the rest of it, and the first prompt is a miss again.
func TestEvictionWhenFull(t *testing.T) {
	t.Parallel()
	e, _, start := testEngine(t, nil)
	start()
	for tag := uint64(1); tag <= 4; tag++ {
		runOne(t, e, distinctKeys(tag, 4000, 16), 4000, 4)
	}
	if n := e.kv.prefix(distinctKeys(1, 4000, 16)); n != 250 {
		t.Fatalf("four prompts fill 1,000 of 1,024 blocks: the first keeps %d of 250, want all", n)
	}
	runOne(t, e, distinctKeys(5, 4000, 16), 4000, 4)
	if n := e.kv.prefix(distinctKeys(1, 4000, 16)); n == 0 || n == 250 {
		t.Fatalf("after the fifth prompt the first keeps %d blocks: want its head, not its tail", n)
	}
	runOne(t, e, distinctKeys(6, 4000, 16), 4000, 4)
	if n := e.kv.prefix(distinctKeys(1, 4000, 16)); n != 0 {
		t.Fatalf("the oldest prompt still has %d cached blocks", n)
	}
	if n := e.kv.prefix(distinctKeys(6, 4000, 16)); n != 250 {
		t.Fatalf("the newest prompt has %d of 250 blocks cached", n)
	}
	if e.kv.evicted == 0 || e.kv.used > e.kv.capacity {
		t.Fatalf("evicted %d, used %d of %d", e.kv.evicted, e.kv.used, e.kv.capacity)
	}
	ttft, cached, _ := runOne(t, e, distinctKeys(1, 4000, 16), 4000, 2)
	if cached != 0 || ttft < 400*time.Millisecond {
		t.Fatalf("the evicted prompt again: cached %d, TTFT %v: want a miss", cached, ttft)
	}
}

// TestQueueingAtMaxNumSeqs: with 2 running at most, 4 requests at once:
// two wait, and the later ones' first tokens come a whole request later.
func TestQueueingAtMaxNumSeqs(t *testing.T) {
	t.Parallel()
	e, v, start := testEngine(t, func(c *Config) { c.MaxNumSeqs = 2 })
	var peakRunning, peakWaiting int64
	v.onStep = func() {
		peakRunning = max(peakRunning, e.nRunning.Load())
		peakWaiting = max(peakWaiting, e.nWaiting.Load())
	}
	var seqs []*seq
	for tag := uint64(1); tag <= 4; tag++ {
		s := newSeq(distinctKeys(tag, 512, 16), 512, 30, nil)
		seqs = append(seqs, s)
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	start()
	for _, s := range seqs {
		wait(s)
	}
	if peakRunning != 2 || peakWaiting != 2 {
		t.Fatalf("peak running %d, waiting %d: want 2 and 2", peakRunning, peakWaiting)
	}
	t1, t3 := seqs[0].first-seqs[0].arrived, seqs[2].first-seqs[2].arrived
	// The third starts when the first two have made 30 tokens (~29 ms
	// each at batch 2).
	if t3 < t1+29*28*time.Millisecond {
		t.Fatalf("third request's TTFT %v vs the first's %v: it should wait for a slot", t3, t1)
	}
}

// TestWaitsForKV: a request that does not fit beside the running ones
// waits (no preemption), and nothing behind it jumps the queue.
func TestWaitsForKV(t *testing.T) {
	t.Parallel()
	e, _, start := testEngine(t, func(c *Config) { c.KVTokens = 4096 })
	big := newSeq(distinctKeys(1, 3000, 16), 3000, 50, nil)  // 191 blocks with output
	big2 := newSeq(distinctKeys(2, 3000, 16), 3000, 50, nil) // does not fit beside big
	small := newSeq(distinctKeys(3, 100, 16), 100, 5, nil)   // would fit, but is behind big2
	for _, s := range []*seq{big, big2, small} {
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	start()
	for _, s := range []*seq{big, big2, small} {
		wait(s)
	}
	bigEnd := big.first + 49*(e.cfg.StepBase+e.cfg.DecodePerSeq)
	if big2.first <= bigEnd {
		t.Fatalf("second big request's first token at %v, before the first one ended (%v)", big2.first, bigEnd)
	}
	if small.first < big2.first {
		t.Fatalf("the small request (first token %v) jumped the big one (%v)", small.first, big2.first)
	}
}

// TestClientGoneFreesSlot: a running request whose client left releases
// its slot and blocks; its computed prompt stays cached.
func TestClientGoneFreesSlot(t *testing.T) {
	t.Parallel()
	e, v, start := testEngine(t, nil)
	s := newSeq(distinctKeys(7, 1024, 16), 1024, 1000, nil)
	left := make(chan struct{})
	v.onStep = func() {
		if s.produced.Load() > 0 {
			<-left // hold the steps until the client has left
		}
	}
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	start()
	for s.produced.Load() == 0 {
		<-s.notify
	}
	s.cancelled.Store(true)
	close(left)
	if got := wait(s); got != seqAborted {
		t.Fatalf("state %d, want aborted", got)
	}
	if p := s.produced.Load(); p >= 1000 {
		t.Fatalf("%d tokens produced: the request was not dropped", p)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.nRunning.Load() != 0 || e.usage.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("running %d, usage %v after the client left", e.nRunning.Load(), e.usage.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if n := e.kv.prefix(s.keys); n != 64 { // the scheduler is idle now
		t.Fatalf("%d of 64 computed blocks stay cached", n)
	}
}

// TestQueueBoundAndClose: MaxWaiting bounds the queue; when the
// scheduler stops, waiting requests end aborted and submit refuses.
func TestQueueBoundAndClose(t *testing.T) {
	t.Parallel()
	e, _, _ := testEngine(t, func(c *Config) { c.MaxWaiting = 2 })
	a, b := newSeq(nil, 10, 5, nil), newSeq(nil, 10, 5, nil)
	for _, s := range []*seq{a, b} {
		if err := e.submit(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.submit(newSeq(nil, 10, 5, nil)); !errors.Is(err, errQueueFull) {
		t.Fatalf("third submit: %v, want errQueueFull", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.run(ctx) // stops before its first step
	if wait(a) != seqAborted || wait(b) != seqAborted {
		t.Fatal("waiting requests did not end aborted")
	}
	if err := e.submit(newSeq(nil, 10, 5, nil)); !errors.Is(err, errClosed) {
		t.Fatalf("submit after stop: %v, want errClosed", err)
	}
}

// TestChunkBlocksCachedEarly: blocks of a chunked prefill become hits as
// each chunk completes, before the prompt's first token.
func TestChunkBlocksCachedEarly(t *testing.T) {
	t.Parallel()
	e, v, start := testEngine(t, nil)
	keys := distinctKeys(1, 8192, 16)
	var after []int // cached leading blocks at each step's start
	v.onStep = func() { after = append(after, e.kv.prefix(keys)) }
	s := newSeq(keys, 8192, 1, nil)
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	start()
	wait(s)
	if want := []int{0, 128, 256, 384}; len(after) != len(want) || after[1] != want[1] || after[2] != want[2] || after[3] != want[3] {
		t.Fatalf("cached blocks at each step's start %v, want %v (2,048 tokens a chunk)", after, want)
	}
}

// TestKVCacheReserve: pinned blocks are never evicted; a reservation that
// cannot fit changes nothing; release frees the tail first.
func TestKVCacheReserve(t *testing.T) {
	t.Parallel()
	c := newKVCache(10)
	a, b := []uint64{1, 2, 3, 4}, []uint64{5, 6, 7, 8}
	if !c.reserve(a, 2) {
		t.Fatal("a does not fit an empty cache")
	}
	c.computed(a, 0, len(a), nil, "", "")
	if c.reserve(b, 1) {
		t.Fatal("b (5 blocks) fits beside a pinned a (6 blocks) in 10")
	}
	if c.used != 6 || c.free != 0 {
		t.Fatalf("a failed reservation changed used %d free %d", c.used, c.free)
	}
	c.release(a, 2)
	if c.used != 4 || c.free != 4 || c.usage() != 0 {
		t.Fatalf("after release: used %d free %d usage %v", c.used, c.free, c.usage())
	}
	if !c.reserve(b, 4) { // needs 8 of 10: evicts 2 of a, its tail
		t.Fatal("b does not fit after a was released")
	}
	if c.prefix(a) != 2 || c.evicted != 2 {
		t.Fatalf("a keeps %d leading blocks, evicted %d: the tail should go first", c.prefix(a), c.evicted)
	}
	c.computed(b, 0, len(b), nil, "", "")
	c.release(b, 4)
	if !c.reserve(a[:2], 0) || c.free != 4 { // re-pinning takes a's head off the free list
		t.Fatalf("free %d after re-pinning a's head", c.free)
	}
	// A block under computation is shared, not a hit, and not freed by
	// one of its two users.
	c2 := newKVCache(4)
	first := c2.reserve([]uint64{9}, 0)
	second := c2.reserve([]uint64{9}, 0) // a second request, same block
	if !first || !second || c2.used != 1 || c2.prefix([]uint64{9}) != 0 {
		t.Fatalf("shared uncomputed block: used %d prefix %d", c2.used, c2.prefix([]uint64{9}))
	}
	c2.release([]uint64{9}, 0)
	if c2.used != 1 {
		t.Fatal("one user's release dropped a block the other still computes")
	}
	c2.release([]uint64{9}, 0)
	if c2.used != 0 {
		t.Fatal("an uncomputed block nobody uses stayed")
	}
}

// TestPriorityScheduling: one running slot, taken by x; h (priority 5)
// and then l (priority 1) arrive while x runs. The priority policy
// serves l before the earlier h, fcfs h first. With one slot a request
// is admitted when the one before it has ended, so the simulated times
// of the first tokens give the completion order.
func TestPriorityScheduling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy     string
		lowerFirst bool // l before h
	}{{PolicyPriority, true}, {PolicyFCFS, false}} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			e, v, start := testEngine(t, func(c *Config) { c.MaxNumSeqs, c.SchedulingPolicy = 1, tc.policy })
			inStep := make(chan struct{}, 1)
			release := make(chan struct{})
			v.onStep = func() {
				select {
				case inStep <- struct{}{}:
				default:
				}
				<-release // the first step waits until h and l wait
			}
			x := newSeq(distinctKeys(1, 64, 16), 64, 3, nil)
			h := newSeq(distinctKeys(2, 64, 16), 64, 3, nil)
			l := newSeq(distinctKeys(3, 64, 16), 64, 3, nil)
			h.priority, l.priority = 5, 1
			if err := e.submit(x); err != nil {
				t.Fatal(err)
			}
			start()
			<-inStep // x runs its first step
			for _, s := range []*seq{h, l} {
				if err := e.submit(s); err != nil {
					t.Fatal(err)
				}
			}
			if r, w := e.nRunning.Load(), e.nWaiting.Load(); r != 1 || w != 2 {
				t.Fatalf("running %d, waiting %d: want x running, h and l waiting", r, w)
			}
			close(release)
			for _, s := range []*seq{x, h, l} {
				if wait(s) != seqDone {
					t.Fatal("a request did not finish")
				}
			}
			first, second, want := h, l, "h (arrived first)"
			if tc.lowerFirst {
				first, second, want = l, h, "l (priority 1)"
			}
			// Each runs 3 tokens: the next one's first token is at least
			// 2 decode steps after this one's.
			gap := 2 * (e.cfg.StepBase + e.cfg.DecodePerSeq)
			if first.first-x.first < gap || second.first-first.first < gap {
				t.Errorf("first tokens x %v, h %v, l %v: want x, then %s, then the other, each after the one before ended",
					x.first, h.first, l.first, want)
			}
		})
	}
}
