package tokenpool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules/leakcheck"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	llamaOnce sync.Once
	llamaTok  *tokenizer.Tokenizer
	llamaErr  error
)

// llama3 loads the test tokenizer once per test binary (~0.7 s).
func llama3(tb testing.TB) *tokenizer.Tokenizer {
	tb.Helper()
	llamaOnce.Do(func() { llamaTok, llamaErr = tokenizer.Load("testdata/models/llama3/tokenizer.json.gz") })
	if llamaErr != nil {
		tb.Fatal(llamaErr)
	}
	return llamaTok
}

// fakeLoop stands for a shard's event loop: the goroutine that owns it
// calls Tokenize and runs what the workers post (runOne), as gnet's loop
// runs what Execute queued. post never blocks; a full queue is a bug the
// test reports.
type fakeLoop struct{ q chan func() }

func newLoop() *fakeLoop { return &fakeLoop{q: make(chan func(), 4096)} }

func (l *fakeLoop) post(f func()) {
	select {
	case l.q <- f:
	default:
		panic("fakeLoop: post queue over its bound")
	}
}

// runOne runs the next posted completion, waiting for it.
func (l *fakeLoop) runOne(tb testing.TB) {
	tb.Helper()
	if err := l.wait(); err != nil {
		tb.Fatal(err)
	}
}

// wait is runOne for a goroutine other than the test's. A completion
// already posted runs without a timer (benchmarks call this per request).
func (l *fakeLoop) wait() error {
	select {
	case f := <-l.q:
		f()
		return nil
	default:
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case f := <-l.q:
		f()
		return nil
	case <-t.C:
		return errors.New("no completion posted within 10 s")
	}
}

// gated is an Encoder that stalls on text starting with "STALL" until
// release is closed, telling entered first.
type gated struct {
	enc     Encoder
	entered chan string
	release chan struct{}
}

func newGated(enc Encoder) *gated {
	return &gated{enc: enc, entered: make(chan string, 16), release: make(chan struct{})}
}

func (g *gated) Encode(dst []int32, text string) []int32 {
	if strings.HasPrefix(text, "STALL") {
		g.entered <- text
		<-g.release
	}
	return g.enc.Encode(dst, text)
}

// newTestPool builds a pool over loops, closing it at cleanup.
func newTestPool(tb testing.TB, cfg Config, enc Encoder, loops ...*fakeLoop) *Pool {
	tb.Helper()
	var posts []func(func())
	for _, l := range loops {
		posts = append(posts, l.post)
	}
	p, err := New(cfg, enc, posts, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return p
}

// want is what the tokenizer says for segs, tokenized one by one.
func want(enc Encoder, segs []string) (ids []int32, ends []int) {
	for _, s := range segs {
		ids = enc.Encode(ids, s)
		ends = append(ends, len(ids))
	}
	return ids, ends
}

func checkIDs(tb testing.TB, enc Encoder, r Result, segs []string, path Path) {
	tb.Helper()
	ids, ends := want(enc, segs)
	if r.Reason != ReasonNone || r.Path != path {
		tb.Fatalf("result reason %v path %v, want none and %v", r.Reason, r.Path, path)
	}
	if !slices.Equal(r.IDs, ids) || !slices.Equal(r.Ends, ends) {
		tb.Fatalf("path %v: ids %v ends %v, want %v %v", path, r.IDs, r.Ends, ids, ends)
	}
}

// collector records completions by request number, to check exactly once.
type collector struct {
	got   map[int]Result
	calls map[int]int
}

func newCollector() *collector { return &collector{got: map[int]Result{}, calls: map[int]int{}} }

func (c *collector) done(i int) func(Result) {
	return func(r Result) { c.got[i] = r; c.calls[i]++ }
}

const (
	sysPrompt = "You are a helpful assistant. Answer briefly and cite sources."
	turn1     = "What is the capital of France? Please explain the history too."
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	f := func(mod func(*Config), field string) {
		t.Helper()
		c := DefaultConfig()
		mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("Validate = %v, want an error naming %s", err, field)
		}
	}
	f(func(c *Config) { c.CacheBytes = 0 }, "CacheBytes")
	f(func(c *Config) { c.MaxSegmentBytes = -1 }, "MaxSegmentBytes")
	f(func(c *Config) { c.RingSize = 100 }, "RingSize")
	f(func(c *Config) { c.RingSize = 0 }, "RingSize")
	f(func(c *Config) { c.MaxInFlight = 0 }, "MaxInFlight")
	f(func(c *Config) { c.LocalMaxBytes = -1 }, "LocalMaxBytes")
	f(func(c *Config) { c.MaxJobBytes = 0 }, "MaxJobBytes")
	f(func(c *Config) { c.TokenBudget = 0 }, "TokenBudget")
	if _, err := New(DefaultConfig(), nil, nil, nil); err == nil {
		t.Fatal("New with no shards succeeded")
	}
	if _, err := New(DefaultConfig(), nil, []func(func()){nil}, nil); err == nil || !strings.Contains(err.Error(), "posts[0]") {
		t.Fatalf("New with a nil post: %v", err)
	}
}

// TestPaths walks one shard through every path of stage 4 and checks ids
// and counters: own worker, cache, cross-shard, local, and each bail-out.
func TestPaths(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	g := newGated(tok)
	l0, l1 := newLoop(), newLoop()
	cfg := DefaultConfig()
	cfg.RingSize = 1
	cfg.LocalMaxBytes = 200
	p := newTestPool(t, cfg, g, l0, l1)
	s0, s1 := p.Shard(0), p.Shard(1)
	c := newCollector()
	var r Result

	// 1. Own worker, then 2. the cache.
	segs := []string{sysPrompt, turn1}
	if s0.Tokenize(&r, segs, c.done(1)) {
		t.Fatal("a miss completed synchronously")
	}
	l0.runOne(t)
	checkIDs(t, tok, c.got[1], segs, PathOwn)
	if !s0.Tokenize(&r, segs, c.done(99)) {
		t.Fatal("a cached request went to a worker")
	}
	checkIDs(t, tok, r, segs, PathCache)

	// 3. Cross-shard: worker 0 stalls on a job, job A fills its ring
	// (size 1), so job B goes to worker 1.
	if s0.Tokenize(&r, []string{"STALL zero"}, c.done(2)) {
		t.Fatal("sync")
	}
	<-g.entered
	segsA := []string{sysPrompt, "job A: a question about Go channels"}
	segsB := []string{"job B: hello", sysPrompt, "world"}
	s0.Tokenize(&r, segsA, c.done(3))
	if s0.Tokenize(&r, segsB, c.done(4)) {
		t.Fatal("sync")
	}
	l0.runOne(t) // B, by worker 1
	checkIDs(t, tok, c.got[4], segsB, PathCross)

	// 4. Local: worker 1 stalls too, C fills shard 0's ring at worker 1,
	// so D finds every ring full and is tokenized on the loop.
	s1.Tokenize(&r, []string{"STALL one"}, c.done(5))
	<-g.entered
	s0.Tokenize(&r, []string{"job C"}, c.done(6))
	segsD := []string{sysPrompt, "job D, short enough for the loop"}
	if !s0.Tokenize(&r, segsD, c.done(7)) {
		t.Fatal("D was queued with every ring full")
	}
	checkIDs(t, tok, r, segsD, PathLocal)

	// 5. Bail-outs: too long for the loop; local permit held elsewhere.
	long := strings.Repeat("x", cfg.LocalMaxBytes+1)
	if !s0.Tokenize(&r, []string{long}, c.done(8)) || r.Reason != ReasonTooLong || len(r.IDs) != 0 {
		t.Fatalf("long miss with full rings: %+v", r)
	}
	p.localBusy.Store(true) // another loop is tokenizing
	if !s0.Tokenize(&r, []string{"job E"}, c.done(9)) || r.Reason != ReasonBusy {
		t.Fatalf("miss with full rings and the permit taken: %+v", r)
	}
	p.localBusy.Store(false)

	// Release the workers: zero, A, one, C complete, each once.
	close(g.release)
	for range 3 {
		l0.runOne(t)
	}
	l1.runOne(t)
	checkIDs(t, tok, c.got[2], []string{"STALL zero"}, PathOwn)
	checkIDs(t, tok, c.got[3], segsA, PathOwn)
	checkIDs(t, tok, c.got[5], []string{"STALL one"}, PathOwn)
	checkIDs(t, tok, c.got[6], []string{"job C"}, PathCross)
	for i, n := range c.calls {
		if n != 1 {
			t.Errorf("request %d completed %d times", i, n)
		}
	}
	if len(c.calls) != 6 { // 1-6 from workers; none for 7-9 (synchronous)
		t.Errorf("completions for %v, want 1-6", c.calls)
	}

	st := s0.Stats()
	want := Stats{
		Requests:  9,
		CacheHits: 2 + 1 + 1 + 1, CacheMisses: 2 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1,
		OwnJobs: 3, CrossJobs: 2, Local: 1,
		RingFull:   1 + 1 + 2 + 2 + 2, // B, C (own ring full); D, long, E (both full)
		WorkerJobs: 3,                 // worker 0 ran 1, zero and A; B and C ran on worker 1
	}
	want.Bailouts[ReasonTooLong], want.Bailouts[ReasonBusy] = 1, 1
	if st.Requests != want.Requests || st.CacheHits != want.CacheHits || st.CacheMisses != want.CacheMisses ||
		st.OwnJobs != want.OwnJobs || st.CrossJobs != want.CrossJobs || st.Local != want.Local ||
		st.RingFull != want.RingFull || st.Bailouts != want.Bailouts || st.WorkerJobs != want.WorkerJobs ||
		st.ShutdownDrops != 0 {
		t.Errorf("shard 0 stats\n got %+v\nwant %+v", st, want)
	}
	if n := st.Latency.Count(); n != 6 { // 1, 2, 3, 4, 6 by workers; 7 local
		t.Errorf("latency observations = %d, want 6", n)
	}
	if s1 := s1.Stats(); s1.OwnJobs != 1 || s1.WorkerJobs != 3 { // STALL one; B, C, STALL one
		t.Errorf("shard 1 stats %+v", s1)
	}
	// Every miss is now cached on shard 0, as the tokenizer says.
	for _, segs := range [][]string{segsA, segsB, segsD, {"job C"}} {
		if !s0.Tokenize(&r, segs, c.done(100)) {
			t.Fatalf("%q not cached after its completion", segs)
		}
		checkIDs(t, tok, r, segs, PathCache)
	}
}

// TestInputsCopied: segments that alias a buffer the loop reuses (as
// gnet's Peek does) may be overwritten as soon as Tokenize returns, on the
// worker path and the local path alike.
func TestInputsCopied(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	g := newGated(tok)
	l := newLoop()
	cfg := DefaultConfig()
	cfg.RingSize = 4
	cfg.MaxInFlight = 2 // the third request skips the rings: local, uncloned
	p := newTestPool(t, cfg, g, l)
	s := p.Shard(0)
	c := newCollector()
	var r Result
	borrowed := func(text string) (string, []byte) {
		buf := []byte(text)
		return unsafe.String(&buf[0], len(buf)), buf
	}
	s.Tokenize(&r, []string{"STALL"}, c.done(0))
	<-g.entered
	queuedText := "the worker reads this after the buffer changed"
	seg, buf := borrowed(queuedText)
	if s.Tokenize(&r, []string{seg}, c.done(1)) {
		t.Fatal("sync")
	}
	localText := "tokenized on the loop, cached, then overwritten"
	seg2, buf2 := borrowed(localText)
	if !s.Tokenize(&r, []string{seg2}, c.done(2)) || r.Path != PathLocal {
		t.Fatalf("want the local path: %+v", r)
	}
	checkIDs(t, tok, r, []string{localText}, PathLocal)
	if st := s.Stats(); st.InFlightFull != 1 || st.RingFull != 0 {
		t.Fatalf("stats %+v, want the local path through MaxInFlight", st)
	}
	for i := range buf {
		buf[i] = 'X'
	}
	for i := range buf2 {
		buf2[i] = 'Y'
	}
	close(g.release)
	l.runOne(t)
	l.runOne(t)
	checkIDs(t, tok, c.got[1], []string{queuedText}, PathOwn)
	for _, text := range []string{queuedText, localText} {
		if !s.Tokenize(&r, []string{text}, nil) {
			t.Fatalf("%q not cached under its original text", text)
		}
		checkIDs(t, tok, r, []string{text}, PathCache)
	}
}

// TestTooLarge: a request whose missing text exceeds MaxJobBytes bails out
// at once and posts nothing; cached segments do not count against it.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	l := newLoop()
	cfg := DefaultConfig()
	cfg.MaxJobBytes = len(sysPrompt)
	p := newTestPool(t, cfg, tok, l)
	s := p.Shard(0)
	c := newCollector()
	var r Result
	s.Tokenize(&r, []string{sysPrompt}, c.done(0)) // exactly the bound: goes
	l.runOne(t)
	checkIDs(t, tok, c.got[0], []string{sysPrompt}, PathOwn)
	if !s.Tokenize(&r, []string{sysPrompt, sysPrompt + "!"}, c.done(1)) || r.Reason != ReasonTooLarge {
		t.Fatalf("over MaxJobBytes: %+v", r)
	}
	if len(l.q) != 0 || len(c.calls) != 1 {
		t.Fatal("a request over MaxJobBytes was queued")
	}
	if st := s.Stats(); st.Bailouts[ReasonTooLarge] != 1 || st.OwnJobs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBurstRingFull: a burst of misses on one shard with every worker
// stalled fills each ring exactly, then bails out; the queued jobs all
// complete with the tokenizer's ids once the workers resume.
func TestBurstRingFull(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	const shards, ringSize, burst = 3, 4, 40
	g := newGated(tok)
	loops := []*fakeLoop{newLoop(), newLoop(), newLoop()}
	cfg := DefaultConfig()
	cfg.RingSize = ringSize
	p := newTestPool(t, cfg, g, loops...)
	c := newCollector()
	var r Result
	for i := range shards {
		p.Shard(i).Tokenize(&r, []string{fmt.Sprint("STALL ", i)}, c.done(1000+i))
		<-g.entered
	}
	p.localBusy.Store(true) // the local fallback is taken too
	s := p.Shard(0)
	queued := 0
	for i := range burst {
		segs := []string{sysPrompt, fmt.Sprintf("burst request %d", i)}
		if s.Tokenize(&r, segs, c.done(i)) {
			if r.Reason != ReasonBusy {
				t.Fatalf("request %d: %+v, want a busy bail-out", i, r)
			}
			continue
		}
		queued++
	}
	p.localBusy.Store(false)
	if queued != shards*ringSize {
		t.Fatalf("%d jobs queued, want %d (every ring exactly full)", queued, shards*ringSize)
	}
	st := s.Stats()
	over := uint64(burst - queued)
	if st.OwnJobs != 1+ringSize || st.CrossJobs != (shards-1)*ringSize ||
		st.Bailouts[ReasonBusy] != over ||
		// each cross-shard job found the own ring full (round-robin fills
		// the other rings evenly); each bail-out found all of them full
		st.RingFull != (shards-1)*ringSize+over*shards {
		t.Fatalf("stats %+v (over %d)", st, over)
	}
	close(g.release)
	for range queued + 1 {
		loops[0].runOne(t)
	}
	for i := 1; i < shards; i++ {
		loops[i].runOne(t)
	}
	for i := range burst {
		if n := c.calls[i]; (i < queued && n != 1) || (i >= queued && n != 0) {
			t.Fatalf("request %d completed %d times", i, n)
		}
		if i < queued {
			want := PathOwn
			if i >= ringSize {
				want = PathCross
			}
			checkIDs(t, tok, c.got[i], []string{sysPrompt, fmt.Sprintf("burst request %d", i)}, want)
		}
	}
}

// TestStalledWorker: while a shard's worker is stuck, its misses still get
// exact ids through the other workers, and the stuck job completes later.
func TestStalledWorker(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	g := newGated(tok)
	l0, l1 := newLoop(), newLoop()
	cfg := DefaultConfig()
	cfg.RingSize = 2
	cfg.LocalMaxBytes = 0 // no local fallback: a full set of rings bails out
	p := newTestPool(t, cfg, g, l0, l1)
	s := p.Shard(0)
	c := newCollector()
	var r Result
	s.Tokenize(&r, []string{"STALL"}, c.done(0))
	<-g.entered
	s.Tokenize(&r, []string{"own 1"}, c.done(1))
	s.Tokenize(&r, []string{"own 2"}, c.done(2)) // worker 0's ring is full now
	for i := 3; i < 50; i++ {
		segs := []string{sysPrompt, fmt.Sprint("cross ", i)}
		if s.Tokenize(&r, segs, c.done(i)) {
			t.Fatalf("request %d: %+v with worker 1 free", i, r)
		}
		l0.runOne(t) // worker 1 keeps up, one at a time
		checkIDs(t, tok, c.got[i], segs, PathCross)
	}
	if st := s.Stats(); st.CrossJobs != 47 || st.OwnJobs != 3 || st.RingFull != 47 || st.WorkerJobs != 0 {
		t.Fatalf("stats %+v", st)
	}
	close(g.release)
	for range 3 {
		l0.runOne(t)
	}
	for i := range 3 {
		if c.calls[i] != 1 {
			t.Fatalf("stalled-behind job %d completed %d times", i, c.calls[i])
		}
	}
	checkIDs(t, tok, c.got[0], []string{"STALL"}, PathOwn)
	checkIDs(t, tok, c.got[2], []string{"own 2"}, PathOwn)
}

// TestShutdownInFlight: Close with a worker stuck in Encode and jobs
// queued behind it times out naming the worker; once the worker returns,
// its job completes with ids, the queued ones with ReasonShutdown, each
// exactly once, and a second Close joins every goroutine.
func TestShutdownInFlight(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	synctest.Test(t, func(t *testing.T) {
		g := newGated(tok)
		l0, l1 := newLoop(), newLoop()
		cfg := DefaultConfig()
		cfg.RingSize = 4
		p, err := New(cfg, g, []func(func()){l0.post, l1.post}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Shard(0)
		c := newCollector()
		var r Result
		s.Tokenize(&r, []string{"STALL in flight"}, c.done(0))
		<-g.entered
		for i := 1; i <= 4; i++ { // queued at worker 0
			s.Tokenize(&r, []string{fmt.Sprint("queued ", i)}, c.done(i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = p.Close(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "tokenpool.worker/0") {
			t.Fatalf("Close with a stalled worker = %v", err)
		}
		// After Close: synchronous shutdown verdicts, for hits too.
		if !s.Tokenize(&r, []string{"after"}, c.done(50)) || r.Reason != ReasonShutdown {
			t.Fatalf("Tokenize after Close: %+v", r)
		}
		close(g.release)
		if err := p.Close(context.Background()); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		for range 5 {
			l0.runOne(t)
		}
		if len(l0.q) != 0 || len(l1.q) != 0 {
			t.Fatal("completions posted beyond one per job")
		}
		checkIDs(t, tok, c.got[0], []string{"STALL in flight"}, PathOwn)
		for i := 1; i <= 4; i++ {
			if c.calls[i] != 1 || c.got[i].Reason != ReasonShutdown || len(c.got[i].IDs) != 0 {
				t.Fatalf("queued job %d: %d calls, %+v", i, c.calls[i], c.got[i])
			}
		}
		st := s.Stats()
		if st.ShutdownDrops != 4 || st.Bailouts[ReasonShutdown] != 5 || st.WorkerJobs != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestShutdownIdle: Close with nothing in flight returns at once and joins
// the workers (goleak checks at exit).
func TestShutdownIdle(t *testing.T) {
	t.Parallel()
	p, err := New(DefaultConfig(), llama3(t), []func(func()){newLoop().post, newLoop().post}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConcurrentLoops: several loops submit at once while workers run,
// under -race; each request gets exactly one outcome, with exact ids.
func TestConcurrentLoops(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	const shards, perLoop = 3, 300
	cfg := DefaultConfig()
	cfg.RingSize = 2 // small, so rings fill and every path runs
	loops := []*fakeLoop{newLoop(), newLoop(), newLoop()}
	p := newTestPool(t, cfg, tok, loops...)
	var wg sync.WaitGroup
	errs := make(chan error, shards)
	for sh := range shards {
		wg.Add(1)
		go func() { // a test goroutine standing for loop sh; joined below
			defer wg.Done()
			s, l := p.Shard(sh), loops[sh]
			c := newCollector()
			pending := 0
			var r Result
			check := func(i int, r Result) error {
				if r.Reason != ReasonNone {
					return nil // a bail-out is a valid outcome under load
				}
				ids, ends := want(tok, segsFor(sh, i))
				if !slices.Equal(r.IDs, ids) || !slices.Equal(r.Ends, ends) {
					return fmt.Errorf("shard %d request %d (%v): wrong ids", sh, i, r.Path)
				}
				return nil
			}
			for i := range perLoop {
				if s.Tokenize(&r, segsFor(sh, i), c.done(i)) {
					if err := check(i, r); err != nil {
						errs <- err
						return
					}
					c.calls[i]++
				} else {
					pending++
				}
				for len(l.q) > 0 { // run what has completed, as a loop would
					(<-l.q)()
					pending--
				}
			}
			for ; pending > 0; pending-- {
				if err := l.wait(); err != nil {
					errs <- err
					return
				}
			}
			for i := range perLoop {
				if c.calls[i] != 1 {
					errs <- fmt.Errorf("shard %d request %d: %d outcomes", sh, i, c.calls[i])
					return
				}
				if r, ok := c.got[i]; ok {
					if err := check(i, r); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := p.Stats()
	jobs := st.OwnJobs + st.CrossJobs
	if st.Requests != shards*perLoop || st.WorkerJobs != jobs ||
		st.Latency.Count() != jobs+st.Local {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("own %d cross %d local %d busy %d ring-full %d hits %d", st.OwnJobs, st.CrossJobs, st.Local,
		st.Bailouts[ReasonBusy], st.RingFull, st.CacheHits)
}

// segsFor: a shared system prompt, a turn that repeats every 7 requests
// (cache hits), and a unique one.
func segsFor(shard, i int) []string {
	return []string{sysPrompt, fmt.Sprintf("turn %d of a conversation", i%7), fmt.Sprintf("s%d question %d?", shard, i)}
}

// TestByteBlockMode: without a tokenizer the pool starts no goroutine and
// every request gets the byte-block verdict at once.
func TestByteBlockMode(t *testing.T) {
	t.Parallel()
	var nilTok *tokenizer.Tokenizer
	for _, enc := range []Encoder{nil, nilTok} {
		p, err := New(DefaultConfig(), enc, []func(func()){func(func()) { panic("posted in byte-block mode") }}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var r Result
		if !p.Shard(0).Tokenize(&r, []string{sysPrompt}, nil) || r.Reason != ReasonNoTokenizer || r.Path != PathNone {
			t.Fatalf("byte-block mode: %+v", r)
		}
		if st := p.Stats(); st.Bailouts[ReasonNoTokenizer] != 1 || st.Requests != 1 {
			t.Fatalf("stats %+v", st)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	set := metrics.NewSet()
	l := newLoop()
	p, err := New(DefaultConfig(), tok, []func(func()){l.post}, set)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	var r Result
	c := newCollector()
	p.Shard(0).Tokenize(&r, []string{sysPrompt}, c.done(0))
	l.runOne(t)
	p.Shard(0).Tokenize(&r, []string{sysPrompt}, c.done(1))
	var b bytes.Buffer
	set.WritePrometheus(&b)
	out := b.String()
	for _, line := range []string{
		"saltus_tokenizer_requests_total 2",
		"saltus_tokenizer_cache_hits_total 1",
		"saltus_tokenizer_cache_misses_total 1",
		"saltus_tokenizer_cache_entries 1",
		`saltus_tokenizer_jobs_total{path="own"} 1`,
		`saltus_tokenizer_jobs_total{path="cross"} 0`,
		`saltus_tokenizer_bailouts_total{reason="busy"} 0`,
		`saltus_tokenizer_latency_seconds_bucket{le="+Inf"} 1`,
		"saltus_tokenizer_latency_seconds_count 1",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, out)
		}
	}
	if !strings.Contains(out, `saltus_tokenizer_latency_seconds_bucket{le="0.0001"} `) ||
		!strings.Contains(out, `saltus_tokenizer_latency_seconds_bucket{le="0.1"} `) {
		t.Errorf("latency buckets missing:\n%s", out)
	}
}

// TestLatencyObserved: a job that waits 7 ms (fake time) at a stalled
// worker is observed as exactly 7 ms, in the (5 ms, 10 ms] bucket.
func TestLatencyObserved(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	synctest.Test(t, func(t *testing.T) {
		g := newGated(tok)
		l := newLoop()
		p, err := New(DefaultConfig(), g, []func(func()){l.post}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := newCollector()
		var r Result
		p.Shard(0).Tokenize(&r, []string{"STALL for 7 ms"}, c.done(0))
		<-g.entered
		time.Sleep(7 * time.Millisecond)
		close(g.release)
		l.runOne(t)
		lat := p.Stats().Latency
		if want := [8]uint64{0, 0, 0, 0, 1, 0, 0, 0}; lat.Counts != want || lat.Sum != 7*time.Millisecond {
			t.Fatalf("latency %+v, want one observation of 7ms", lat)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	var h histogram
	for _, d := range []time.Duration{0, 100 * time.Microsecond, 101 * time.Microsecond, time.Millisecond,
		7 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		h.observe(d)
	}
	s := h.snapshot()
	if want := [8]uint64{2, 1, 1, 0, 1, 0, 1, 1}; s.Counts != want {
		t.Fatalf("counts %v, want %v", s.Counts, want)
	}
	if s.Count() != 7 || s.Sum != 1108*time.Millisecond+201*time.Microsecond {
		t.Fatalf("count %d sum %v", s.Count(), s.Sum)
	}
}
