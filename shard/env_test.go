package shard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/rules/leakcheck"
	"github.com/saltus-lb/saltus/tokenpool"
	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/upstream/backend"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// fakeLoops stands in for the reactor's event loops: one goroutine per
// loop runs the functions posted to it, in order; post never blocks and
// refuses (false) when the loop's queue is full.
type fakeLoops struct {
	qs      []chan func()
	group   *rules.Group
	stopped chan struct{}                        // closed by stop: posters drop
	refused atomic.Int64                         // posts refused by a full queue
	waited  atomic.Int64                         // poster calls that found the queue full and waited
	tick    atomic.Pointer[func(int, time.Time)] // run on each loop every 5 ms, as the reactor's OnSweep
}

func newFakeLoops(n, queue int) *fakeLoops {
	l := &fakeLoops{group: rules.NewGroup(context.Background()), stopped: make(chan struct{})}
	for i := range n {
		q := make(chan func(), queue)
		l.qs = append(l.qs, q)
		l.group.Go(fmt.Sprintf("test.loop/%d", i), func(ctx context.Context) {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case fn := <-q:
					fn()
				case now := <-t.C:
					if tick := l.tick.Load(); tick != nil {
						(*tick)(i, now)
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	return l
}

func (l *fakeLoops) post(i int, fn func()) bool {
	select {
	case l.qs[i] <- fn:
		return true
	default:
		l.refused.Add(1)
		return false
	}
}

// poster is loop i's unrefused post, as reactor.Loop.Poster: it waits
// for room in the queue (counted in waited when it has to), and drops fn
// once the loops stopped.
func (l *fakeLoops) poster(i int) func(func()) {
	return func(fn func()) {
		select {
		case l.qs[i] <- fn:
			return
		default:
			l.waited.Add(1)
		}
		select {
		case l.qs[i] <- fn:
		case <-l.stopped:
		}
	}
}

// run runs fn on loop i and waits for it.
func (l *fakeLoops) run(t testing.TB, i int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	for !l.post(i, func() { fn(); close(done) }) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("loop %d did not run a function within 10 s", i)
	}
}

// settle waits until every function posted to any loop before the call
// (and what those post in turn, two hops deep) has run.
func (l *fakeLoops) settle(t testing.TB) {
	t.Helper()
	for range 3 {
		for i := range l.qs {
			l.run(t, i, func() {})
		}
	}
}

func (l *fakeLoops) stop() {
	close(l.stopped)
	l.group.Stop()
	_ = l.group.Wait(context.Background()) // the loops return at once
}

// fakeExchange records the Router's direct answers.
type fakeExchange struct {
	req  *reactor.Request
	loop int
	gone chan struct{}

	mu     sync.Mutex
	status int
	hdr    []reactor.Header
	body   []byte
	done   chan struct{} // closed by Respond
}

func newExchange(loop int, method, path, body string) *fakeExchange {
	return &fakeExchange{
		req:  &reactor.Request{Method: method, Path: path, Body: []byte(body)},
		loop: loop, gone: make(chan struct{}), done: make(chan struct{}),
	}
}

func (x *fakeExchange) Request() *reactor.Request { return x.req }
func (x *fakeExchange) loopID() int               { return x.loop }
func (x *fakeExchange) Respond(status int, hdr []reactor.Header, body []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.status != 0 {
		panic("BUG: Respond twice")
	}
	x.status, x.hdr, x.body = status, hdr, body
	close(x.done)
}
func (x *fakeExchange) RespondLoop(status int, hdr []reactor.Header, body []byte) {
	x.Respond(status, hdr, body)
}
func (x *fakeExchange) SetGoneHook(func())                                   {}
func (x *fakeExchange) WriteHeaderLoop(int, []reactor.Header) (int64, error) { return 0, nil }
func (x *fakeExchange) WriteLoop([]byte) (int64, error)                      { return 0, nil }
func (x *fakeExchange) EndLoop() error                                       { return nil }
func (x *fakeExchange) Abort()                                               {}
func (x *fakeExchange) Gone() <-chan struct{}                                { return x.gone }

func (x *fakeExchange) header(name string) string {
	for _, h := range x.hdr {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// forwardCall is one recorded Forward.
type forwardCall struct {
	x          backend.LoopSink
	candidates []int
	extra      []reactor.Header
	served     int // the backend that answered (FirstByte's)
}

func (c forwardCall) header(name string) string {
	for _, h := range c.extra {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// fakeUpstream is the backend Set: Forward records the call, and answers
// at once through the hooks with status (from candidates[serveIndex]).
type fakeUpstream struct {
	backends  []*backend.Backend // all, by ID
	snap      atomic.Pointer[[]*backend.Backend]
	inFlight  []atomic.Int64
	down      []atomic.Bool
	status    atomic.Int64 // FirstByte's status; 0: no hooks called
	serveIdx  atomic.Int64 // which candidate answers (a retry when > 0)
	refuse    atomic.Bool  // Forward returns false (proxy pool full)
	requeue   atomic.Int64 // Forward's next this many say every candidate was full (Hooks.Requeue)
	hold      atomic.Bool  // with requeue: the refusal waits in held until the test runs it (on a loop)
	heldMu    sync.Mutex
	held      []func()
	quiet     atomic.Bool // Forward does nothing (benchmarks)
	quietDone atomic.Bool // with quiet: Forward ends at once, 200 from the first candidate, through Done (benchmarks)
	usage     []byte      // Outcome.Usage of the answers; set before the requests
	async     atomic.Bool // the hooks run on a goroutine of their own, as a proxy's
	proxies   sync.WaitGroup
	calls     chan forwardCall
	models    []byte
	modelsErr error                       // set before the first Models call
	controlFn atomic.Pointer[controlFunc] // Control's answer; nil: 200
}

type controlFunc func(b *backend.Backend, path string, body []byte) (int, []byte, error)

func newFakeUpstream(n int) *fakeUpstream {
	u := &fakeUpstream{inFlight: make([]atomic.Int64, n), down: make([]atomic.Bool, n),
		calls: make(chan forwardCall, 1024), models: []byte(`{"object":"list","data":[]}`)}
	for i := range n {
		url := fmt.Sprintf("http://127.0.0.1:%d", 8001+i)
		u.backends = append(u.backends, &backend.Backend{ID: i, URL: url, Key: backend.IdentityKey("url:" + url)})
	}
	u.snap.Store(&u.backends)
	u.status.Store(200)
	return u
}

func (u *fakeUpstream) state(b *backend.Backend) (int64, bool) {
	return u.inFlight[b.ID].Load(), !u.down[b.ID].Load()
}

func (u *fakeUpstream) Snapshot() []*backend.Backend { return *u.snap.Load() }

// Control answers an adapter operation with controlFn's answer (nil: 200).
func (u *fakeUpstream) Control(b *backend.Backend, path string, body []byte, _ time.Time) (int, []byte, error) {
	if f := u.controlFn.Load(); f != nil {
		return (*f)(b, path, body)
	}
	return 200, []byte("Success"), nil
}

func (u *fakeUpstream) Label(b *backend.Backend) string { return b.URL }

// Loop is loop i's part of the fake: its ForwardOnLoop is Forward.
func (u *fakeUpstream) Loop(int) upstreamLoop { return fakeLoop{u} }

type fakeLoop struct{ u *fakeUpstream }

func (l fakeLoop) ForwardOnLoop(req *reactor.Request, body []byte, candidates []*backend.Backend, sink backend.LoopSink, extraHdr []reactor.Header, h backend.Hooks) bool {
	return l.u.Forward(req, body, candidates, sink, extraHdr, h)
}

func (fakeLoop) Tick(time.Time) {}

func (u *fakeUpstream) Forward(req *reactor.Request, body []byte, candidates []*backend.Backend, sink backend.LoopSink, extraHdr []reactor.Header, h backend.Hooks) bool {
	if u.quiet.Load() {
		if u.quietDone.Load() {
			now := time.Now()
			endCame(h, backend.Outcome{Status: 200, Backend: candidates[0], Sent: now, TTFB: time.Millisecond, Total: time.Millisecond})
		}
		return true
	}
	if u.refuse.Load() {
		// As the real Forward: answer 503 and report it through Done.
		sink.RespondLoop(503, nil, nil)
		endCame(h, backend.Outcome{Status: 503})
		return false
	}
	if u.requeue.Load() > 0 && h.Requeue != nil && h.Requeue() {
		// As the real Forward when every candidate answered 429.
		u.requeue.Add(-1)
		o := backend.Outcome{Status: 0, Err: backend.ErrEnginesFull, Requeued: true, Sent: time.Now()}
		if u.hold.Load() {
			u.heldMu.Lock()
			u.held = append(u.held, func() { endCame(h, o) })
			u.heldMu.Unlock()
			return true
		}
		endCame(h, o)
		return true
	}
	c := forwardCall{x: sink, extra: extraHdr, served: -1}
	for _, b := range candidates {
		c.candidates = append(c.candidates, b.ID)
	}
	if st := int(u.status.Load()); st != 0 {
		b := candidates[min(int(u.serveIdx.Load()), len(candidates)-1)]
		c.served = b.ID
		// As the real Forward: X-Saltus-Backend names the backend that answered.
		c.extra = append(slices.Clone(extraHdr), reactor.Header{Name: HeaderBackend, Value: b.URL})
		if u.async.Load() {
			// The proxy goroutine of a real Forward; joined by the test.
			u.proxies.Add(1)
			go func() {
				defer u.proxies.Done()
				headCame(h, b, st)
				endCame(h, backend.Outcome{Backend: b, Status: st, Usage: u.usage})
				u.calls <- c
			}()
			return true
		}
		headCame(h, b, st)
		endCame(h, backend.Outcome{Backend: b, Status: st, Usage: u.usage})
	}
	u.calls <- c
	return true
}

// headCame tells h's Events the head as a Forward does.
func headCame(h backend.Hooks, b *backend.Backend, status int) {
	if h.Events != nil {
		h.Events.FirstByte(b, status)
	}
}

// endCame tells h's Events the end with o as a Forward does, once.
func endCame(h backend.Hooks, o backend.Outcome) {
	if h.Events != nil {
		h.Events.Done(o)
	}
}

// dataCame tells h's Events a stream's first event as a Forward does.
func dataCame(h backend.Hooks) {
	if h.Events != nil {
		h.Events.FirstData()
	}
}

func (u *fakeUpstream) Models(ctx context.Context) ([]byte, error) {
	if u.modelsErr != nil {
		return nil, u.modelsErr
	}
	return u.models, nil
}

var (
	llama3Once sync.Once
	llama3Tok  *tokenizer.Tokenizer
	llama3Tmpl *chat.Renderer
	llama3Err  error
)

func loadLlama3(t testing.TB) (*tokenizer.Tokenizer, *chat.Renderer) {
	t.Helper()
	llama3Once.Do(func() {
		const dir = "../tokenpool/testdata/models/llama3/"
		if llama3Tok, llama3Err = tokenizer.Load(dir + "tokenizer.json.gz"); llama3Err != nil {
			return
		}
		cfg, err := chat.LoadConfig(dir + "tokenizer_config.json")
		if err != nil {
			llama3Err = err
			return
		}
		llama3Tmpl, llama3Err = chat.New(chat.Llama3, llama3Tok, cfg)
	})
	if llama3Err != nil {
		t.Fatal(llama3Err)
	}
	return llama3Tok, llama3Tmpl
}

type envOpts struct {
	loops, backends int
	tokenizer       bool          // the llama3 tokenizer and template; else byte-block mode and none
	jinja           bool          // with tokenizer: the llama3 template rendered from its Jinja source
	queue           int           // per fake loop
	maintain        time.Duration // MaintainInterval; default 10 ms
	policy          string        // Config.Policy; default prefix
	tokenBudget     int           // Config.Pool.TokenBudget; default its default
	config          func(*Config) // changes the Config last; nil: none
}

type env struct {
	loops *fakeLoops
	up    *fakeUpstream
	r     *Router
	set   *metrics.Set
	hops  atomic.Int64 // the Router's own posts to a loop (post and poster): its cross-loop messages
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	if o.queue == 0 {
		o.queue = 4096
	}
	cfg := DefaultConfig()
	cfg.Pool.CacheBytes = 8 << 20
	if o.tokenBudget > 0 {
		cfg.Pool.TokenBudget = o.tokenBudget
	}
	cfg.Tree.MaxBlocks = 100_000
	if o.policy != "" {
		cfg.Policy = o.policy
	}
	cfg.MaintainInterval = 10 * time.Millisecond
	if o.maintain > 0 {
		cfg.MaintainInterval = o.maintain
	}
	if o.config != nil {
		o.config(&cfg)
	}
	var enc tokenpool.Encoder
	var tmpl *chat.Renderer
	if o.tokenizer {
		tok, tm := loadLlama3(t)
		enc, tmpl = tok, tm
		if o.jinja {
			cfg, err := chat.LoadConfig("../tokenpool/testdata/models/llama3/tokenizer_config.json")
			if err != nil {
				t.Fatal(err)
			}
			if tmpl, err = chat.NewJinja(cfg.Template, tok, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	e := &env{loops: newFakeLoops(o.loops, o.queue), up: newFakeUpstream(o.backends), set: metrics.NewSet()}
	post := func(i int, fn func()) bool { e.hops.Add(1); return e.loops.post(i, fn) }
	poster := func(i int) func(func()) {
		p := e.loops.poster(i)
		return func(fn func()) { e.hops.Add(1); p(fn) }
	}
	r, err := newRouter(cfg, enc, tmpl, e.up, e.up.state, post, poster, o.loops, slog.New(slog.DiscardHandler), e.set)
	if err != nil {
		e.loops.stop()
		t.Fatal(err)
	}
	e.r = r
	tick := r.tickShard
	e.loops.tick.Store(&tick)
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
		e.loops.stop()
	})
	return e
}

// serve hands x to its loop and returns the Forward call it led to, or
// nil if the Router answered itself.
func (e *env) serve(t testing.TB, x *fakeExchange) *forwardCall {
	t.Helper()
	for !e.loops.post(x.loop, func() { e.r.serve(x) }) {
		time.Sleep(time.Millisecond)
	}
	select {
	case c := <-e.up.calls:
		if kx, ok := c.x.(*keyedExchange); ok {
			c.x = kx.exchange // a sink's wrapper (reqlog.go)
		}
		if c.x != x {
			t.Fatal("a Forward for another exchange")
		}
		e.loops.settle(t) // the learn, posted to the owner, has run
		return &c
	case <-x.done:
		return nil
	case <-time.After(10 * time.Second):
		t.Fatal("no Forward and no answer within 10 s")
		return nil
	}
}
