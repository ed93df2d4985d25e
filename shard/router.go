package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/keys"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/tokenpool"
	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/tracing"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// exchange is what the Router calls of a *reactor.Exchange (as a
// liveExchange); tests use a fake.
type exchange interface {
	backend.LoopSink
	// loopID is the id of the Shard of the connection's loop.
	loopID() int
	Request() *reactor.Request
	// Respond answers from any goroutine (the Router's own answers).
	Respond(status int, hdr []reactor.Header, body []byte)
}

// upstream is what the Router calls of a *backend.Set; tests use a fake.
type upstream interface {
	Snapshot() []*backend.Backend
	Models(ctx context.Context) ([]byte, error)
	// Control POSTs a control request (an adapter load) to b; Label
	// names b as clients see it.
	Control(b *backend.Backend, path string, body []byte, deadline time.Time) (int, []byte, error)
	Label(b *backend.Backend) string
	// Loop is Shard i's part of the set (of its loop): the Shard keeps it.
	Loop(i int) upstreamLoop
}

// upstreamLoop is one loop's part of the backend set (backend.Loop): the
// loop path (ForwardOnLoop) on that loop, and its share of the loop's tick
// (deadlines, idle connections).
type upstreamLoop interface {
	ForwardOnLoop(req *reactor.Request, body []byte, candidates []*backend.Backend, sink backend.LoopSink, extraHdr []reactor.Header, h backend.Hooks) bool
	Tick(now time.Time)
}

// setUpstream is a *backend.Set as the Router's upstream, over the
// reactor's loops (Shard i is loops[i]'s).
type setUpstream struct {
	*backend.Set
	loops []*reactor.Loop
}

func (s setUpstream) Loop(i int) upstreamLoop { return s.Set.Loop(s.loops[i]) }

// shardPart is each loop's Shard, kept in its reactor.Loop: one Router
// per reactor.Server.
var shardPart = reactor.NewPart[*Shard]()

// liveExchange is a *reactor.Exchange as the Router's exchange. A struct
// of one pointer: made into an interface without an allocation.
type liveExchange struct{ *reactor.Exchange }

func (x liveExchange) loopID() int { return shardPart.Get(x.Loop()).id }

// backendState reads a backend's in-flight count and routability; a field
// of the Router so that tests can give fake backends a load.
type backendState func(b *backend.Backend) (inFlight int64, routable bool)

// liveState is the fleet's load: this router's requests in flight (those
// decided and on their way to the loop that sends them included) plus
// those its cluster peers last reported (zero without a cluster).
func liveState(b *backend.Backend) (int64, bool) {
	ok := b.Routable()
	if ok && b.Limited() {
		ok = b.Free(time.Now()) // not full lately, under its learned capacity (issue 30)
	}
	return b.InFlight() + b.Decided() + b.PeerLoad().InFlight, ok
}

// Header names the Router adds to every routed answer.
const (
	HeaderBackend = "X-Saltus-Backend"
	HeaderRoute   = "X-Saltus-Route"
)

// Bounds of the GET /v1/models queue: the fetches go to the network, so
// they run on modelsWorkers goroutines, never on a loop.
const (
	modelsQueue   = 64
	modelsWorkers = 2
	modelsTimeout = 10 * time.Second
)

// ErrNoBackend: no backend is routable.
var ErrNoBackend = errors.New("shard: no routable backend")

// Router routes the serving API's requests: it implements
// reactor.Handler. See the package doc.
type Router struct {
	cfg Config
	pol policy.Config // its kind never changes; decisions use tuned's knobs
	// tuned is pol with the knobs Retune last set (load factor, slack,
	// tokens, KV tokens). Any goroutine reads it; Retune writes it.
	tuned atomic.Pointer[policy.Config]
	learn atomic.Bool // Config.LearnFromUsage, as Retune last set it
	// prioModels is Config.PriorityModels as Retune last set it (gate.go).
	prioModels atomic.Pointer[[]string]
	up         upstream
	state      backendState
	tmpl       *chat.Renderer // never nil: the none rendering when none is given
	pool       *tokenpool.Pool
	shards     []*Shard // one per loop
	logger     *slog.Logger
	m          *routerMetrics
	fb         *feedbackMetrics // pending routes and engine feedback (feedback.go)
	rs         *respState       // response ids (respids.go)
	group      *rules.Group
	epoch      time.Time // the tree's clock: monotonic nanoseconds since then

	models chan exchange // bounded queue of GET /v1/models
	rr     atomic.Uint32 // Explain's round-robin loop cursor
	closed atomic.Bool

	peers      Peers                      // cluster peers (cluster.go); nil: none. Set before the loops start
	fleet      Fleet                      // model pools (pools.go); nil: every backend serves every model. Set before the loops start
	keys       *keys.Ring                 // API keys (keys.go); nil: off. Set before the loops start
	adapters   chan exchange              // bounded queue of adapter loads and unloads (adapters.go)
	adminToken atomic.Pointer[string]     // SetAdminToken's (adapters.go)
	queued     atomic.Int64               // requests in every pool's gateway queue (gate.go)
	draining   atomic.Bool                // StopQueues was called: nothing waits any more (gate.go)
	pm         *poolMetrics               // per-pool queue and refusal counts (queuemetrics.go)
	decodes    chan *job                  // bounded queue of large bodies (offload.go)
	budget     valueBudget                // values being parsed off the loop (offload.go)
	decodeHook atomic.Pointer[func(*job)] // SetDecodeHook's; nil: none
	// sink gets every finished request's record (reqlog.go); nil: off.
	// sinkTokens: it wants token counts. Set before the loops start.
	sink       reqlog.Sink
	sinkTokens bool
}

// Shard is one event loop's part of the Router, one value per loop: that
// loop's part of the route table (tree), its tokenizer shard (tok), its
// decode and render scratch (dec, res), its footprints, response ids and
// sessions, and its handles: up, the loop's part of the backend set (the
// upstream connections its loop path uses), post and poster, to send it
// work (bounded, and unrefused for completions), and tick, driven by the
// reactor's sweep. What it holds is owned by its loop, unless marked.
type Shard struct {
	id     int
	up     upstreamLoop
	post   func(fn func()) bool // the loop's bounded mailbox (reactor.Loop.Post)
	poster func(fn func())      // the loop's unrefused post (reactor.Loop.Poster)

	// Owned by the loop.
	tree  *tree.Tree
	tok   *tokenpool.Shard
	res   tokenpool.Result // Tokenize's dst for requests that complete at once
	hits  []tree.Hit
	views []policy.View
	sc    policy.Scratch
	known map[int]bool // backend IDs inserted since their last removal
	dec   decodeScratch
	resp  *respTable  // this shard's part of the response ids (respids.go)
	foot  *footprints // the prefixes each backend is busy with (footprint.go); prefix policy only
	sess  *respTable  // sessions decided here → backend (decide.go); nil: no SessionHeader
	// gates are the gateway queues of the pools this loop owns
	// (gate.go), by model; expired is tickGates' scratch.
	gates   map[string]*gate
	expired []*job
	// gateSeq is past every arrival number its gates gave (queue.Ticket):
	// a gate made again after its empty one was dropped starts there.
	gateSeq uint64
	// queues are the gates' oldest waits as the loop last published
	// them (publishGates); any goroutine reads them.
	queues atomic.Pointer[[]gateSnap]
	rec    reqlog.Record // the forwards' ends' record (reqlog.go), reused
	trace  tracing.Loop  // the loop's trace IDs and sampling (UseTracer); off by default

	// Any goroutine.
	maintained time.Time    // the last maintenance step; owned by the loop
	nodes      atomic.Int64 // tree gauges, published by the loop
	blocks     atomic.Int64
	evictions  atomic.Int64
}

// decodeScratch is a loop's reused memory for stages 2 to 5 (decode,
// render, tokenize, keys): what it holds is a view valid only while the
// loop serves one request (see openai.Decode).
type decodeScratch struct {
	sc     openai.Scratch // Decode's and Render's (sc.Chat)
	texts  []string
	msgEnd []bool
}

// NewRouter builds a Router over the reactor's event loops, one Shard
// each, kept in its reactor.Loop (shardPart): the loops' bounded Post
// carries the messages between shards; their Poster the completions of
// off-loop work (the tokenizer's, the decode workers'), which are bounded
// where they start (tokenpool's MaxInFlight per shard, the decode budget)
// and must each run exactly once; tok nil selects byte-block mode; tmpl
// nil renders chats with the none template. set receives the Router's
// metrics and the tokenizer pool's (a Set of its own: metrics cannot be
// unregistered). Call it before the loops start (Server.Start), once
// per Server. Any goroutine.
func NewRouter(cfg Config, tok *tokenizer.Tokenizer, tmpl *chat.Renderer,
	backends *backend.Set, loops []*reactor.Loop,
	logger *slog.Logger, set *metrics.Set) (*Router, error) {
	if backends == nil {
		return nil, errors.New("shard: backends is nil")
	}
	for _, l := range loops {
		if shardPart.Get(l) != nil {
			return nil, errors.New("shard: the loops serve another Router already")
		}
	}
	var enc tokenpool.Encoder
	if tok != nil {
		enc = tok // a nil *Tokenizer must stay a nil interface
	}
	// Inside, a Shard's loop is its index in loops (the route table's
	// partitions name their owner by number).
	post := func(i int, fn func()) bool { return loops[i].Post(fn) }
	poster := func(i int) func(func()) { return loops[i].Poster() }
	r, err := newRouter(cfg, enc, tmpl, setUpstream{backends, loops}, liveState, post, poster, len(loops), logger, set)
	if err != nil {
		return nil, err
	}
	for i, l := range loops {
		shardPart.Set(l, r.shards[i])
	}
	return r, nil
}

func newRouter(cfg Config, enc tokenpool.Encoder, tmpl *chat.Renderer, up upstream, state backendState,
	post func(loop int, fn func()) bool, poster func(loop int) func(func()), loops int, logger *slog.Logger, set *metrics.Set) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if loops <= 0 {
		return nil, fmt.Errorf("shard: loops must be positive, got %d", loops)
	}
	if post == nil || poster == nil {
		return nil, errors.New("shard: post or poster is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if set == nil {
		set = metrics.NewSet()
	}
	if tmpl == nil {
		var err error
		if tmpl, err = chat.New(chat.None, nil, chat.Config{}); err != nil {
			return nil, fmt.Errorf("BUG: cannot build the none template: %w", err)
		}
	}
	r := &Router{
		cfg:      cfg,
		pol:      cfg.policy(), // Validate checked it
		up:       up,
		state:    state,
		tmpl:     tmpl,
		logger:   logger.With("component", "shard"),
		m:        newRouterMetrics(set),
		fb:       newFeedbackMetrics(set),
		rs:       newRespState(set, loops),
		group:    rules.NewGroup(context.Background()),
		epoch:    time.Now(),
		models:   make(chan exchange, modelsQueue),
		adapters: make(chan exchange, adaptersQueue),
	}
	r.tuned.Store(new(r.pol))
	r.pm = newPoolMetrics(set)
	r.learn.Store(cfg.LearnFromUsage)
	r.prioModels.Store(new(slices.Clone(cfg.PriorityModels)))
	queue := cfg.DecodeQueue
	if tmpl != nil && tmpl.Interpreted() {
		// Every chat is rendered by a decode worker (a Jinja template):
		// the queue holds a burst's worth of them, not only large bodies.
		queue = max(queue, interpretedQueue)
	}
	r.decodes = make(chan *job, queue)
	r.budget.init(cfg.Body.MaxValues)
	posts := make([]func(func()), loops)
	for i := range loops {
		posts[i] = poster(i)
	}
	pool, err := tokenpool.New(cfg.Pool, enc, posts, set)
	if err != nil {
		return nil, fmt.Errorf("shard: cannot start the tokenizer pool: %w", err)
	}
	r.pool = pool
	for i := range loops {
		t, err := tree.New(cfg.Tree)
		if err != nil {
			_ = pool.Close(context.Background()) // nothing was submitted: returns at once
			return nil, fmt.Errorf("shard: %w", err)
		}
		sh := &Shard{id: i, up: up.Loop(i), post: func(fn func()) bool { return post(i, fn) }, poster: posts[i],
			tree: t, tok: pool.Shard(i), known: map[int]bool{}, gates: map[string]*gate{},
			resp: newRespTable((cfg.ResponseIDs+loops-1)/loops, int64(cfg.ResponseIDTTL)),
			foot: newFootprints((cfg.Footprints+loops-1)/loops, int64(cfg.FootprintWindow))}
		// round_robin: loop i starts its cycle at backend i, so that the
		// loops' first requests do not all go to backend 0.
		sh.sc.Turn = i
		sh.sc.Pin = -1
		if cfg.SessionHeader != "" {
			sh.sess = newRespTable((cfg.Sessions+loops-1)/loops, int64(cfg.SessionTTL))
		}
		if r.pol.Kind == policy.LeastRequest {
			// Seeded from the global source once, at construction; the
			// loop then draws from its own, without a lock.
			sh.sc.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		}
		r.shards = append(r.shards, sh)
	}
	set.RegisterMetricsWriter(r.writeMetrics)
	set.RegisterMetricsWriter(r.rs.writeMetrics)
	set.RegisterMetricsWriter(r.pm.writeMetrics)
	for i := range modelsWorkers {
		r.group.Go(fmt.Sprintf("shard.models/%d", i), r.modelsWorker)
	}
	r.group.Go("shard.adapters", r.adapterWorker)
	for i := range cfg.DecodeWorkers {
		r.group.Go(fmt.Sprintf("shard.decode/%d", i), r.decodeWorker)
	}
	return r, nil
}

// postTo posts fn to loop i; false (counted as overflow) when post
// refuses: the loop's mailbox is full (its one bound, the reactor's
// MailboxSize, counted there too as saltus_reactor_mailbox_full_total) or
// the loops stopped. Any goroutine.
func (r *Router) postTo(i int, fn func()) bool {
	if !r.shards[i].post(fn) {
		r.m.overflow.Inc()
		return false
	}
	return true
}

// now is the trees' clock. Any goroutine.
func (r *Router) now() int64 { return int64(time.Since(r.epoch)) }

// Serve routes one request. Loop only (the connection's).
func (r *Router) Serve(x *reactor.Exchange) { r.serve(liveExchange{x}) }

func (r *Router) serve(x exchange) {
	req := x.Request()
	rt, allow := classify(req.Method, req.Path)
	switch {
	case rt == routeNone && allow == "":
		// OPTIONS *: what the server supports (RFC 9110 §9.3.7).
		r.m.request(rt, 200) // counted first, as fail does
		hdr := []reactor.Header{{Name: "Allow", Value: "GET, HEAD, POST, OPTIONS"},
			{Name: reactor.RequestIDHeader, Value: req.RequestID()}}
		x.Respond(200, hdr, nil)
		r.logOwn(x, 200, hdr, nil)
		return
	case rt == routeUnknown:
		r.fail(x, rt, &openai.Error{Status: 404, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("unknown path %.200q", req.Path)})
		return
	case allow != "":
		r.fail(x, rt, &openai.Error{Status: 405, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: fmt.Sprintf("method %.20q not allowed on %s (allowed: %s)", req.Method, req.Path, allow)},
			reactor.Header{Name: "Allow", Value: allow})
		return
	}
	// API keys (keys.go): before any work on the body. The adapter
	// endpoints keep the admin token.
	var key *keys.Key
	if r.keys != nil && rt != routeAdapters {
		if key = r.authenticate(x, rt); key == nil {
			return
		}
	}
	switch {
	case rt == routeAdapters:
		select {
		case r.adapters <- x:
		default:
			r.fail(x, rt, &openai.Error{Status: 503, Type: "server_error", Code: "overloaded",
				Message: fmt.Sprintf("too many adapter loads and unloads waiting (%d); retry later", adaptersQueue)})
		}
		return
	case rt == routeModels:
		if key != nil {
			x = &keyHolder{exchange: x, key: key} // the list shows only its models
		}
		select {
		case r.models <- x:
		default:
			r.fail(x, rt, &openai.Error{Status: 503, Type: "server_error", Code: "overloaded",
				Message: "too many /v1/models requests waiting"})
		}
		return
	}
	j := &job{r: r, x: x, req: req, route: rt, loop: x.loopID()}
	if key != nil || r.sink != nil {
		// A sink logs the job's own answers through it too (jobOf).
		j.key, j.x = key, &keyedExchange{exchange: x, j: j}
	}
	if r.sink != nil {
		j.start = r.now()
	}
	j.session = r.sessionOf(req)
	if rt == routeResponseID {
		j.d.PreviousResponseID, _, _ = openai.ResponsePathID(req.Path) // classify matched it
		j.routeByID()
		return
	}
	if len(req.Body) > r.cfg.OffloopBytes && (r.fleet != nil || routedByPrefix(rt)) ||
		r.tmpl.Interpreted() && (rt == routeChat || rt == routeResponses || rt == routeMessages) ||
		r.tmpl.ToolsInterpreted() && (rt == routeChat || rt == routeMessages) && chat.MayNeedTools(req.Body) {
		r.offload(j) // decoded (and rendered) off the loop, then tokenize there
		return
	}
	if !routedByPrefix(rt) {
		// Not routed by prefix: no keys, nothing learned; only its model
		// is read, for its pool. prefix and consistent_hash send it to
		// the least loaded backend (reason fallback), round_robin and
		// least_request as any request.
		if r.fleet != nil || key != nil || r.sink != nil {
			j.d.Model = unkeyedModel(rt, req)
		}
		if e := j.admit(); e != nil {
			r.fail(j.x, rt, e)
			return
		}
		if j.waitFull {
			j.enqueue(j.decideHere)
			return
		}
		j.decideHere()
		return
	}
	if e := j.prepare(req.Body, &r.shards[j.loop].dec); e != nil {
		r.fail(j.x, rt, e)
		return
	}
	if e := j.admit(); e != nil {
		r.fail(j.x, rt, e)
		return
	}
	if j.waitFull {
		j.waitSaturated()
		return
	}
	j.tokenize()
}

// unkeyedModel is the model a request of a route not routed by prefix
// names, for its pool: an audio upload's form field, or the JSON body's
// "model" ("" for none: any backend, whose answer the client gets).
func unkeyedModel(rt routeID, req *reactor.Request) string {
	if rt == routeAudio {
		return openai.FormModel(req.Body, req.HeaderValue("Content-Type"))
	}
	return openai.BodyModel(req.Body)
}

// routedByPrefix: the route's body is decoded, tokenized and keyed (a
// pooling route's when it can be: pooled).
func routedByPrefix(rt routeID) bool { return generates(rt) || pooled(rt) }

// generates: the routes that generate, whose answers carry the usage
// feedback reads (a Responses answer's has another shape).
func generates(rt routeID) bool {
	return rt == routeChat || rt == routeCompletions || rt == routeResponses || rt == routeMessages
}

// pooled: vLLM's pooling and scoring routes. An engine with prefix
// caching reuses the KV of a long input (a document embedded again, a
// reranker's query and its instructions before every document), so they
// are keyed by the input (openai.DecodePooling) and routed by prefix;
// a body in a shape saltus does not read goes unkeyed to the least
// loaded backend of its model's pool, and the engine answers it.
func pooled(rt routeID) bool { return rt == routeEmbeddings || rt == routePooling || rt == routeScore }

// fail answers x with an OpenAI-style error (Anthropic's on
// /v1/messages, whose SDKs read that shape), with the request's
// X-Request-ID (or a generated one) like a proxied answer, and
// Retry-After on a 503: the Router's 503s all mean that nothing can serve
// the request now. Any goroutine.
func (r *Router) fail(x exchange, rt routeID, e *openai.Error, extra ...reactor.Header) {
	hdr := append(make([]reactor.Header, 0, 3+len(extra)),
		reactor.Header{Name: "Content-Type", Value: "application/json"},
		reactor.Header{Name: reactor.RequestIDHeader, Value: x.Request().RequestID()})
	switch {
	case e.RetryAfter > 0:
		hdr = append(hdr, reactor.Header{Name: "Retry-After", Value: strconv.Itoa(e.RetryAfter)})
	case e.Status == 503:
		hdr = append(hdr, reactor.Header{Name: "Retry-After", Value: retryAfter})
	}
	hdr = append(hdr, extra...)
	r.m.request(rt, e.Status) // counted before the client can see it (tests read /metrics right after)
	body := e.Body()
	if anthropicShape(rt, x.Request().Path) {
		body = e.AnthropicBody()
	}
	x.Respond(e.Status, hdr, body)
	r.logOwn(x, e.Status, hdr, body)
}

// anthropicShape reports whether saltus's own errors on a request of
// route rt to path are Anthropic's: POST /v1/messages, and vLLM's
// /v1/messages/count_tokens beside it (route other: the model's pool).
func anthropicShape(rt routeID, path string) bool {
	return rt == routeMessages || rt == routeOther && path == "/v1/messages/count_tokens"
}

// anthropicErrorBody is backend.Hooks.ErrorBody on /v1/messages:
// Anthropic's error object.
func anthropicErrorBody(status int, typ, code, msg string) []byte {
	return (&openai.Error{Status: status, Type: typ, Code: code, Message: msg}).AnthropicBody()
}

// retryAfter is the Retry-After of the Router's 503s, in seconds: a full
// /v1/models queue drains in well under one, and a backend that comes
// back is routed to at once; a client that retries sooner is only
// refused again.
const retryAfter = "1"

// publish copies the tree's gauges to atomics. Loop only.
func (sh *Shard) publish() {
	s := sh.tree.Stats()
	sh.nodes.Store(int64(s.Nodes))
	sh.blocks.Store(int64(s.Blocks))
	var ev uint64
	for _, n := range s.NodeEvictions {
		ev += n
	}
	sh.evictions.Store(int64(ev))
}

// Tick is l's tick: the reactor runs it on each loop every 50 ms
// (reactor.Server.OnSweep). It drives the loop path's deadlines and idle
// upstream connections, and each MaintainInterval the shard's
// maintenance step: no goroutine of its own, no message. Loop only
// (l's).
func (r *Router) Tick(l *reactor.Loop, now time.Time) {
	if sh := shardPart.Get(l); sh != nil {
		r.tickShard(sh.id, now)
	}
}

// tickShard is Shard loop's Tick. Loop only (loop's).
func (r *Router) tickShard(loop int, now time.Time) {
	if loop < 0 || loop >= len(r.shards) {
		return
	}
	sh := r.shards[loop]
	sh.up.Tick(now)
	if len(sh.gates) > 0 {
		r.tickGates(sh)
	}
	if now.Sub(sh.maintained) >= r.cfg.MaintainInterval {
		sh.maintained = now
		r.maintain(sh)
	}
}

func indexOfBackend(snap []*backend.Backend, id int) int {
	for i, b := range snap {
		if b.ID == id {
			return i
		}
	}
	return -1
}

// maintain is one maintenance step on sh's loop: forget removed backends,
// clean up at most MaintainBudget tree slots, publish the gauges.
func (r *Router) maintain(sh *Shard) {
	snap := r.up.Snapshot()
	for id := range sh.known {
		if indexOfBackend(snap, id) < 0 {
			// Only IDs beyond MaxBackends fail, and those were never
			// inserted.
			_ = sh.tree.RemoveBackend(id)
			delete(sh.known, id)
		}
	}
	sh.tree.Maintain(r.now(), r.cfg.MaintainBudget)
	sh.resp.expire(r.now(), r.cfg.MaintainBudget)
	sh.foot.sweep(r.now(), r.cfg.MaintainBudget)
	r.publishResp(sh.id)
	sh.publish()
}

// modelsWorker answers GET /v1/models off the loops.
func (r *Router) modelsWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case x := <-r.models:
					r.fail(x, routeModels, &openai.Error{Status: 503, Type: "server_error", Code: "shutting_down",
						Message: "the router is shutting down"})
				default:
					return
				}
			}
		case x := <-r.models:
			if id := openai.ModelPathID(x.Request().Path); id != "" {
				if k := r.modelsKey(x); k != nil && !k.Allows(id) {
					r.fail(x, routeModels, &openai.Error{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
						Message: fmt.Sprintf("The model `%.200s` does not exist or you do not have access to it.", id)})
					continue
				}
				if r.fleet == nil || !r.retrievePooled(x, id) {
					r.retrieveModel(ctx, x, id) // GET /v1/models/{id} (models.go)
				}
				continue
			}
			var (
				body []byte
				err  error
			)
			if r.fleet != nil && r.routableAny() {
				body = r.listModels() // the pools (pools.go)
			}
			if body == nil {
				// No pool known: ask the backends.
				c, cancel := context.WithTimeout(ctx, modelsTimeout)
				body, err = r.up.Models(c)
				cancel()
			}
			if k := r.modelsKey(x); k != nil && k.Restricted() && err == nil {
				body = openai.FilterModels(body, k.Allows) // only the models the key may use
			}
			if errors.Is(err, backend.ErrNoCandidate) {
				// Not an empty list: that would say the model does not exist.
				r.fail(x, routeModels, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
					Message: "no backend is available to list the models"}) // fail adds Retry-After to a 503
				continue
			}
			if err != nil {
				r.fail(x, routeModels, &openai.Error{Status: 502, Type: "server_error", Code: "bad_gateway",
					Message: fmt.Sprintf("cannot list the backends' models: %v", err)}, backend.RetryAfter)
				continue
			}
			r.m.request(routeModels, 200) // counted first, as fail does
			hdr := []reactor.Header{{Name: "Content-Type", Value: "application/json"},
				{Name: reactor.RequestIDHeader, Value: x.Request().RequestID()}}
			x.Respond(200, hdr, body)
			r.logOwn(x, 200, hdr, body)
		}
	}
}

// Explain runs stages 2 to 7 for body as if it came to path, and returns
// the decision without forwarding. It runs on a loop (via post) and waits
// up to Config.ExplainTimeout. Any goroutine but a loop.
func (r *Router) Explain(body []byte, path string) (policy.Decision, error) {
	rt, _ := classify("POST", path)
	if !generates(rt) {
		return policy.Decision{Backend: -1, Preferred: -1, RunnerUp: -1}, fmt.Errorf("shard: %q is not a routed path (want /v1/chat/completions, /v1/completions, /v1/responses or /v1/messages)", path)
	}
	j := &job{r: r, route: rt, explain: make(chan policy.Decision, 1), rawBody: body}
	if e := j.prepare(body, nil); e != nil {
		return policy.Decision{Backend: -1, Preferred: -1, RunnerUp: -1}, e
	}
	if e := j.admit(); e != nil {
		d := policy.Decision{Backend: -1, Preferred: -1, RunnerUp: -1, Model: j.d.Model}
		if e.Status == 503 {
			return d, fmt.Errorf("%w: %s", ErrNoBackend, e.Message)
		}
		return d, e
	}
	if j.waitFull {
		return policy.Decision{Backend: -1, Preferred: -1, RunnerUp: -1, Model: j.d.Model}, fmt.Errorf("%w: every backend serving the model is full (a request would wait in its queue)", ErrNoBackend)
	}
	j.loop = int(r.rr.Add(1) % uint32(len(r.shards)))
	if !r.postTo(j.loop, j.tokenize) {
		return policy.Decision{Backend: -1, Preferred: -1, RunnerUp: -1}, fmt.Errorf("shard: loop %d is too busy to explain", j.loop)
	}
	t := time.NewTimer(r.cfg.ExplainTimeout)
	defer t.Stop()
	select {
	case d := <-j.explain:
		if d.Backend < 0 {
			return d, ErrNoBackend
		}
		return d, nil
	case <-t.C:
		return policy.Decision{Backend: -1, Preferred: -1, RunnerUp: -1}, fmt.Errorf("shard: no decision within %v", r.cfg.ExplainTimeout)
	}
}

// Close stops the maintenance and /v1/models goroutines and the tokenizer
// pool. Requests still on the loops finish with what they have. Any
// goroutine but a loop.
func (r *Router) Close(ctx context.Context) error {
	r.closed.Store(true)
	r.group.Stop()
	gerr := r.group.Wait(ctx)
	if gerr != nil {
		gerr = fmt.Errorf("shard: goroutines still running (%v): %w", r.group.Running(), gerr)
	}
	return errors.Join(gerr, r.pool.Close(ctx))
}

// Retune applies the knobs of c that may change while the router runs:
// LoadFactor, LoadSlack, LoadTokens, KVTokens, KVEventsBridge and
// LearnFromUsage. The
// next decisions use them. Every other field of c must equal the running
// configuration's (the caller reports those as needing a restart); only
// the tunable ones are read. c is validated first. Any goroutine.
func (r *Router) Retune(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	p := r.pol
	p.LoadFactor, p.LoadSlack = c.LoadFactor, c.LoadSlack
	p.LoadTokens, p.KVTokens = float64(c.LoadTokens), float64(c.KVTokens)
	p.Bridge = int64(c.KVEventsBridge)
	r.tuned.Store(&p)
	r.learn.Store(c.LearnFromUsage)
	r.prioModels.Store(new(slices.Clone(c.PriorityModels)))
	return nil
}
