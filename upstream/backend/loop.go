package backend

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/reactor"
)

// The loop path, the only upstream transport: ForwardOnLoop does the
// upstream I/O of a request on the event loop that owns the client's
// connection, as nginx and Envoy do, with no goroutine in the request
// path. When it came in, it cut saltus's CPU per request from 39 µs (the
// goroutine path it replaced: loop → proxy goroutine with fasthttp → Go
// netpoller → back to the loop) to 26 µs; docs/BENCHMARKS.md's "Proxy
// performance against nginx" has the current numbers (`make bench-serve`).
//
// Per (loop, backend) a pool of keep-alive upstream connections
// (reactor.Upstream), used LIFO, bounded by MaxConnsPerBackend divided
// among the loops, closed after IdleConnTimeout idle or within one sweep
// of the backend's removal. The request is serialized once per backend
// tried; the response is parsed incrementally (respParser): an SSE
// answer relayed as it comes (loopstream.go), any other buffered whole,
// up to Config.MaxResponseBody, then answered with one RespondLoop (over
// it, relayed as it comes: spill.go).
//
// Everything here is owned by one loop: a loopState, its pools, its
// upConns and its loopReqs are only touched from that loop's callbacks
// (the reactor's upstream events, its sweep hook, the client connection's
// gone hook, functions posted to the loop). Counters are atomics;
// histograms (whose Update takes a mutex) are batched per loop and
// written by one goroutine ("backend-loop-metrics").

// maxLoopHead bounds an upstream response head on the loop path.
const maxLoopHead = 64 << 10

// Loops is what the loop path needs of the reactor; *reactor.Server
// satisfies it. Each loop's state is kept in the reactor.Loop (loopPart).
type Loops interface {
	Loops() []*reactor.Loop
	Running() bool
}

// loopPart is the Set's state of each loop, kept in the reactor.Loop: one
// Set per reactor.Server.
var loopPart = reactor.NewPart[*loopState]()

// LoopSink is where an answer goes: a client's exchange, answered on its
// own loop; *reactor.Exchange satisfies it.
type LoopSink interface {
	// Gone is closed when the client's connection is.
	Gone() <-chan struct{}
	// Abort closes the client's connection without finishing the answer.
	Abort()
	RespondLoop(status int, hdr []reactor.Header, body []byte)
	SetGoneHook(fn func())
	// A streamed answer on the loop (loopstream.go): each write returns
	// the bytes the client's connection owes.
	WriteHeaderLoop(status int, hdr []reactor.Header) (int64, error)
	WriteLoop(p []byte) (int64, error)
	EndLoop() error
}

var _ LoopSink = (*reactor.Exchange)(nil)

var errNoFreeConns = errors.New("every connection of this loop to the backend is busy")

// errClosedBeforeHead is a connection that ended before a whole response
// head: refused, reset or closed.
var errClosedBeforeHead = errors.New("the upstream closed the connection before its response head")

// UseLoops attaches the reactor's loops: from then on ForwardOnLoop works
// (if Config.LoopIO is set, LoopIO reports true). Call it once, after
// NewSet and before the loops start; each loop must then call Tick
// every ~50 ms (the Router's tick does). Any goroutine.
func (s *Set) UseLoops(l Loops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lp != nil {
		panic("BUG: backend.Set.UseLoops called twice")
	}
	n := len(l.Loops())
	s.perLoopConns = max(1, (s.cfg.MaxConnsPerBackend+n-1)/n)
	for _, rl := range l.Loops() {
		if loopPart.Get(rl) != nil {
			panic("BUG: backend.Set.UseLoops: the loops serve another Set already")
		}
		loopPart.Set(rl, &loopState{s: s, loop: rl, idx: rl.Index(), pools: map[*Backend]*connPool{}, active: map[*loopReq]struct{}{}})
	}
	s.lp = l
	s.samples = make(chan []sample, 4*n)
	if s.spawn(s.watchWorkers, s.flushSamples) {
		return
	}
	panic("BUG: backend.Set.UseLoops after Close")
}

// loopState is one loop's part of the loop path, kept in the loop's
// reactor.Loop (loopPart). Owned by that loop.
type loopState struct {
	s       *Set
	loop    *reactor.Loop
	idx     int // loop.Index(): its X-Request-IDs' prefix
	pools   map[*Backend]*connPool
	active  map[*loopReq]struct{} // requests in flight on this loop
	samples []sample              // metrics not yet handed to the flusher
	closed  bool                  // Set.Close ran here
	wbuf    []byte                // scratch for serializing a request
	idSeq   uint64                // this loop's generated X-Request-IDs (no shared atomic)
}

// connPool is one backend's connections on one loop.
type connPool struct {
	idle  []*upConn // LIFO: the most recently used is the likeliest alive
	conns int       // open or dialing
}

// upConn is one upstream connection; the reactor.UpstreamHandler of its
// Upstream. Owned by its loop.
type upConn struct {
	ls        *loopState
	b         *Backend
	u         *reactor.Upstream
	p         respParser
	req       *loopReq // the request on it; nil when idle
	open      bool
	dead      bool // closed or closing: out of the pool's count
	served    int  // responses read whole on it
	idleSince time.Time
}

// loopReq is one ForwardOnLoop. Owned by its loop.
type loopReq struct {
	s     *Set
	ls    *loopState
	req   *reactor.Request
	body  []byte
	cands []*Backend
	sink  LoopSink
	extra []reactor.Header
	hooks Hooks

	reqID    string
	attempts int
	i        int      // the candidate being tried
	b        *Backend // cands[i] while its in-flight count is held; nil otherwise
	c        *upConn
	stale    bool // the one retry on a fresh connection was used
	headSeen bool
	finished bool
	start    time.Time
	t0       time.Time // this attempt's start (TTFB is measured from it)
	deadline time.Time // the current attempt's: FirstByteTimeout's or reqEnd, whichever is first
	reqEnd   time.Time // RequestTimeout's; zero: none
	lastErr  error
	tried    []string // "backend X: reason" per failed attempt, the 502's message
	// served: an attempt failed otherwise than by a refused connection
	// (something listened); every attempt refused: 503, not 502.
	served bool
	// refusal: the status of the engines' refusals (429 or 503 before any
	// answer byte: full, not broken); refusedFor the longest Retry-After
	// they asked (engine.go).
	refusal    int
	refusedFor time.Duration
	keepBody   bool // requeued (Hooks.Requeue): the caller forwards it again
	o          Outcome
	st         *loopStream // a streamed answer being relayed (loopstream.go); nil otherwise
}

// ForwardOnLoop is Forward with the upstream I/O on loop l, the loop of
// the client's connection (sink's): the same answers, retries,
// timeouts, breaker results, in-flight counts, metrics and hooks, with the
// hooks run on the loop. An SSE answer is relayed event by event as it
// comes (loopstream.go); any other body is buffered whole (up to
// MaxResponseBody, spill.go) and answered with one RespondLoop. The client
// leaving closes the upstream connection at once, head or not. UseLoops
// must have run, and sink must be l's. When it ends it
// releases req's body (reactor.Request.ReleaseBody): the caller keeps no
// use of req.Body (or of body, when body is req.Body). Loop only (l's).
func (s *Set) ForwardOnLoop(l *reactor.Loop, req *reactor.Request, body []byte, candidates []*Backend, sink LoopSink, extraHdr []reactor.Header, h Hooks) bool {
	ls := loopPart.Get(l)
	if ls == nil || ls.s != s {
		panic(fmt.Sprintf("BUG: backend.ForwardOnLoop on loop %d, not one of the Set's (UseLoops ran: %v)", l.Index(), s.lp != nil))
	}
	if x, ok := sink.(interface{ Loop() *reactor.Loop }); ok && x.Loop() != l {
		panic(fmt.Sprintf("BUG: backend.ForwardOnLoop on loop %d for a sink of loop %d", l.Index(), x.Loop().Index()))
	}
	var refuse error
	switch {
	case len(candidates) == 0:
		refuse = ErrNoCandidate
	case ls.closed || s.closed.Load():
		refuse = ErrClosed
	case s.inFlight.Add(1) > int64(s.cfg.MaxInFlight):
		s.inFlight.Add(-1)
		s.overload.Inc()
		refuse = ErrOverloaded
	}
	if refuse != nil {
		hdr, body := refusedHdr(req), h.errorBody(fasthttp.StatusServiceUnavailable, refuse.Error(), "server_error", "service_unavailable")
		sink.RespondLoop(fasthttp.StatusServiceUnavailable, hdr, body)
		if h.Events != nil {
			h.Events.Done(Outcome{Status: fasthttp.StatusServiceUnavailable, Err: refuse, RequestID: hdr[1].Value, BytesOut: int64(len(body))})
		}
		return false
	}
	now := time.Now()
	lr := &loopReq{s: s, ls: ls, req: req, body: body, cands: candidates, sink: sink, extra: extraHdr, hooks: h,
		attempts: min(len(candidates), 1+s.cfg.MaxRetries), start: now}
	lr.reqID = req.HeaderValue("X-Request-ID")
	if lr.reqID == "" {
		lr.reqID = ls.newRequestID()
	}
	lr.o.RequestID = lr.reqID
	ls.active[lr] = struct{}{}
	if s.tune().RequestTimeout > 0 {
		lr.reqEnd = now.Add(s.tune().RequestTimeout)
	}
	sink.SetGoneHook(lr.clientGone)
	lr.attempt(now)
	return true
}

// attempt tries candidate lr.i: an idle pooled connection, else a new one.
func (lr *loopReq) attempt(now time.Time) {
	s := lr.s
	b := lr.cands[lr.i]
	if lr.i > 0 {
		s.retries.Inc()
		lr.o.Retries = lr.i
	}
	lr.o.Backend = b
	lr.b = b
	b.inFlight.Add(1)
	lr.t0, lr.o.Sent = now, now
	lr.setDeadline(now, lr.s.tune().FirstByteTimeout)
	lr.stale = false
	c, err := lr.ls.conn(b, false)
	if err != nil {
		lr.failed(err, kindConnect, !errors.Is(err, errNoFreeConns))
		return
	}
	lr.use(c)
}

// setDeadline sets the current deadline d after now (FirstByteTimeout,
// or StreamIdleTimeout once a stream flows), unless the request's own
// (RequestTimeout) comes first.
func (lr *loopReq) setDeadline(now time.Time, d time.Duration) {
	lr.deadline = now.Add(d)
	if !lr.reqEnd.IsZero() && lr.reqEnd.Before(lr.deadline) {
		lr.deadline = lr.reqEnd
	}
}

// use puts lr on c and sends it once c is open.
func (lr *loopReq) use(c *upConn) {
	c.req, lr.c = lr, c
	c.p.reset(lr.req.Method == "HEAD", 2+len(lr.extra))
	if c.open {
		lr.send()
	}
}

// send writes the request on lr.c. A failed write closes the connection;
// its OnUpstreamClose then decides.
func (lr *loopReq) send() {
	ls := lr.ls
	// The loop's scratch buffer: gnet copies what the socket does not
	// take at once, so it is free again when Write returns (one 4 KiB+
	// allocation less per request).
	w := lr.appendWire(ls.wbuf[:0], lr.b)
	_ = lr.c.u.Write(w) // an error: OnUpstreamClose follows, and retries or fails
	if cap(w) <= maxScratch {
		ls.wbuf = w[:0]
	}
}

// newRequestID returns the loop's next generated X-Request-ID:
// prefix-l<loop>-<seq>, apart from Set.newRequestID's prefix-<seq>.
// Loop only.
func (ls *loopState) newRequestID() string {
	ls.idSeq++
	var buf [64]byte
	b := append(buf[:0], ls.s.idPrefix...)
	b = append(b, 'l')
	b = strconv.AppendInt(b, int64(ls.idx), 10)
	b = append(b, '-')
	return string(strconv.AppendUint(b, ls.idSeq, 10))
}

// maxScratch bounds the per-loop request buffer kept between requests.
const maxScratch = 256 << 10

// appendWire serializes the request for b, as fasthttp's client did
// does: method, path and query as sent, Host, the client's headers minus
// hop-by-hop ones (and Host, Content-Length, Expect, X-Request-ID, which
// are ours, and those Hooks.ReqHeader replaces), Hooks.ReqHeader's,
// X-Request-ID, Content-Length, the body.
func (lr *loopReq) appendWire(dst []byte, b *Backend) []byte {
	r := lr.req
	dst = append(dst, r.Method...)
	dst = append(dst, ' ')
	dst = append(dst, r.Path...)
	if r.Query != "" {
		dst = append(dst, '?')
		dst = append(dst, r.Query...)
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, b.host...)
	dst = append(dst, "\r\n"...)
	conn := r.HeaderValue("Connection")
	for _, h := range r.Header {
		if hopByHop(h.Name, conn) || equalFold(h.Name, "Host") || equalFold(h.Name, "Content-Length") ||
			equalFold(h.Name, "Expect") || equalFold(h.Name, "X-Request-ID") || lr.replaced(h.Name) {
			continue
		}
		dst = append(dst, h.Name...)
		dst = append(dst, ": "...)
		dst = append(dst, h.Value...)
		dst = append(dst, "\r\n"...)
	}
	for _, h := range lr.hooks.ReqHeader {
		if h.Value != "" {
			dst = append(dst, h.Name...)
			dst = append(dst, ": "...)
			dst = append(dst, h.Value...)
			dst = append(dst, "\r\n"...)
		}
	}
	dst = append(dst, "X-Request-ID: "...)
	dst = append(dst, lr.reqID...)
	body, e := lr.body, lr.hooks.Edit
	from := min(max(e.From, 0), len(body))
	to := min(max(e.To, from), len(body))
	if n := len(body) - (to - from) + len(e.Text); n > 0 || (r.Method != "GET" && r.Method != "HEAD") {
		dst = append(dst, "\r\nContent-Length: "...)
		dst = strconv.AppendInt(dst, int64(n), 10)
	}
	dst = append(dst, "\r\n\r\n"...)
	if e == (Splice{}) {
		return append(dst, body...)
	}
	dst = append(dst, body[:from]...)
	dst = append(dst, e.Text...)
	return append(dst, body[to:]...)
}

// replaced reports whether Hooks.ReqHeader replaces the client's header
// name.
func (lr *loopReq) replaced(name string) bool {
	for _, h := range lr.hooks.ReqHeader {
		if equalFold(h.Name, name) {
			return true
		}
	}
	return false
}

// conn returns an idle pooled connection to b (unless fresh), or dials a
// new one within the loop's share of MaxConnsPerBackend.
func (ls *loopState) conn(b *Backend, fresh bool) (*upConn, error) {
	s := ls.s
	p := ls.pools[b]
	if p == nil {
		p = &connPool{}
		ls.pools[b] = p
	}
	if !fresh {
		for n := len(p.idle); n > 0; n = len(p.idle) {
			c := p.idle[n-1]
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
			if !c.dead {
				return c, nil
			}
		}
	}
	if p.conns >= s.perLoopConns {
		return nil, errNoFreeConns
	}
	c := &upConn{ls: ls, b: b, p: newRespParser(maxLoopHead, s.cfg.MaxResponseBody)}
	var (
		u   *reactor.Upstream
		err error
	)
	if b.tls != nil {
		u, err = ls.loop.DialUpstreamTLS(b.host, s.tune().ConnectTimeout, b.tls, c)
	} else {
		u, err = ls.loop.DialUpstream(b.host, s.tune().ConnectTimeout, c)
	}
	if err != nil {
		return nil, &dialError{err: err}
	}
	c.u = u
	p.conns++
	return c, nil
}

// release returns c to its pool after a whole response, or closes it.
func (c *upConn) release(reuse bool, now time.Time) {
	c.req = nil
	if !reuse || c.ls.closed || c.b.removed.Load() {
		c.kill()
		return
	}
	c.served++
	c.idleSince = now
	p := c.ls.pools[c.b]
	p.idle = append(p.idle, c)
}

// kill closes c and takes it out of its pool's count. Idempotent.
func (c *upConn) kill() {
	if c.dead {
		return
	}
	c.dead = true
	c.req = nil
	if p := c.ls.pools[c.b]; p != nil {
		p.conns--
	}
	c.u.Close()
}

// OnUpstreamOpen implements reactor.UpstreamHandler.
func (c *upConn) OnUpstreamOpen(*reactor.Upstream) {
	c.open = true
	switch {
	case c.dead:
	case c.req != nil:
		c.req.send()
	default:
		c.release(true, time.Now()) // its request went away while it dialed: keep it for the next
		c.served = 0
	}
}

// OnUpstreamData implements reactor.UpstreamHandler.
func (c *upConn) OnUpstreamData(_ *reactor.Upstream, data []byte) int {
	lr := c.req
	if lr == nil {
		c.kill() // bytes nobody asked for: the connection's framing is lost
		return len(data)
	}
	n, err := c.p.feed(data)
	now := time.Now()
	if errors.Is(err, errBodyTooLarge) && lr.st == nil {
		// Over the buffer: the rest is relayed as it comes, an SSE answer
		// (one whose Content-Length outgrew the buffer) as a stream, any
		// other spilled.
		if !lr.headSeen && !lr.head(c, now) {
			return len(data)
		}
		start := lr.startSpill
		if wantsStream(c) {
			start = lr.startStream
		}
		if !start(c, now) {
			return len(data)
		}
		m, ferr := c.p.feed(data[n:])
		n, err = n+m, ferr
	}
	if err == nil && !lr.headSeen && c.p.headDone() {
		if !lr.head(c, now) || (wantsStream(c) && !lr.startStream(c, now)) {
			return len(data)
		}
	}
	if lr.st != nil {
		lr.streamData(c, n, len(data), err, now)
		return len(data)
	}
	switch {
	case err != nil:
		lr.broken(c, err, now)
	case c.p.done():
		lr.complete(c, c.p.keepAlive() && n == len(data), now)
	case lr.headSeen:
		// The body is on its way: FirstByteTimeout now bounds the
		// silence between two reads (RequestTimeout the whole).
		lr.setDeadline(now, lr.s.tune().FirstByteTimeout)
	}
	return len(data)
}

// OnUpstreamClose implements reactor.UpstreamHandler.
func (c *upConn) OnUpstreamClose(_ *reactor.Upstream, err error) {
	wasOpen := c.open
	if !c.dead {
		c.dead = true
		if p := c.ls.pools[c.b]; p != nil {
			p.conns--
		}
	}
	lr := c.req
	c.req = nil
	if lr == nil || lr.c != c {
		return // idle (the pool skips dead ones), or already given up on
	}
	now := time.Now()
	switch {
	case !wasOpen:
		if err == nil {
			err = errClosedBeforeHead
		}
		lr.failed(&dialError{err: err}, kindConnect, true)
	case c.p.eof() == nil:
		if !lr.headSeen && !lr.head(c, now) {
			return
		}
		if lr.st != nil {
			lr.streamData(c, 0, 0, nil, now) // a stream delimited by the close: done
			return
		}
		lr.complete(c, false, now) // a body delimited by the close
	default:
		if err == nil {
			err = errClosedBeforeHead
		}
		lr.broken(c, err, now)
	}
}

// head handles the response head: TTFB, the status's counters, the
// breaker, FirstByte; false if the client left meanwhile (lr is done).
func (lr *loopReq) head(c *upConn, now time.Time) bool {
	s, b := lr.s, lr.b
	if st := c.p.Status; st == fasthttp.StatusTooManyRequests || st == fasthttp.StatusServiceUnavailable {
		// Full (vLLM's frontends answer 429 or 503 when their waiting
		// queue is): a signal, not the client's answer (issue 30).
		lr.engineRefused(c, st, now)
		return false
	}
	if retryStatus(c.p.Status) && s.cfg.RetryServerErrors && lr.i+1 < lr.attempts && !lr.ls.closed {
		lr.engineFailed(c, c.p.Status, now)
		return false
	}
	lr.headSeen = true
	lr.o.TTFB = now.Sub(lr.t0)
	status := c.p.Status
	lr.o.Status = status
	s.countCodeLoop(lr.ls, b, status)
	// A trip logs once (a rare write to the log on the loop).
	b.passiveResult(status < 500, s.cfg.BreakerFails, s.logger)
	if lr.hooks.Events != nil {
		lr.hooks.Events.FirstByte(b, status)
	}
	if gone(lr.sink) {
		lr.clientGone()
		return false
	}
	return true
}

// engineRefused ends an attempt the engine refused as full before any
// answer byte: the backend is marked full for its Retry-After (or
// fullFor), counted, and the next candidate tried. The connection is
// closed (its body is not read). Loop only.
func (lr *loopReq) engineRefused(c *upConn, status int, now time.Time) {
	s, b := lr.s, lr.b
	d, own := retryAfter(c.p.Header, fullFor)
	b.markFull(now, d, !own)
	b.learnCap(b.inFlight.Load()-1, now) // what it held besides this one
	s.countCodeLoop(lr.ls, b, status)
	s.refusals.Inc()
	if lr.refusal != fasthttp.StatusTooManyRequests {
		lr.refusal = status // 429 once any engine said so: too many requests, not unavailable
	}
	lr.refusedFor = max(lr.refusedFor, d)
	lr.served = true // something listened
	lr.tried = append(lr.tried, "backend "+s.label(b)+": full ("+strconv.Itoa(status)+")")
	lr.leave(c)
	if lr.i < lr.attempts && !lr.ls.closed {
		s.refusalOutcomes[refusalRetried].Inc()
		lr.attempt(now)
		return
	}
	if lr.hooks.Requeue != nil && !gone(lr.sink) && lr.hooks.Requeue() {
		// The caller queues it until a slot frees (Hooks.Requeue).
		s.refusalOutcomes[refusalRequeued].Inc()
		lr.o.Status, lr.o.Err, lr.o.Requeued = 0, ErrEnginesFull, true
		lr.keepBody = true
		lr.finish(now)
		return
	}
	// Every candidate is full: saltus's own refusal, with the longest
	// wait they asked for, never a client's wait on a loop.
	s.refusalOutcomes[refusalRefused].Inc()
	lr.o.Status, lr.o.Err = lr.refusal, ErrEnginesFull
	secs := int((lr.refusedFor + time.Second - 1) / time.Second)
	body := lr.hooks.errorBody(lr.refusal, "every backend tried is full: "+strings.Join(lr.tried, "; "), "server_error", "overloaded")
	lr.o.BytesOut = int64(len(body))
	lr.sink.RespondLoop(lr.refusal, []reactor.Header{jsonHdr[0], {Name: "X-Request-ID", Value: lr.reqID},
		{Name: "Retry-After", Value: strconv.Itoa(max(secs, 1))}}, body)
	lr.finish(now)
}

// retryStatus: an engine's answer status that another engine may not
// give (RetryServerErrors): 500 (vLLM's internal errors, a dead engine
// core, llm-d-inference-sim's KV cache without room for the prompt), 502
// and 504 (a proxy or sidecar in front of the engine). Not 501 (the
// request asks what no engine of the kind does) nor 503 (full:
// engineRefused).
func retryStatus(st int) bool {
	return st == fasthttp.StatusInternalServerError || st == fasthttp.StatusBadGateway || st == fasthttp.StatusGatewayTimeout
}

// engineFailed ends an attempt whose engine answered a retryStatus head
// while a further candidate remains: counted by status and by the
// breaker as the answer would have been, the connection closed (its body
// is not read), and the next candidate tried. The engine gets no new
// request until one of those it has ends, for at most fullFor (a soft
// full mark, as a refusal without Retry-After): one that fails at once
// looks idle, and the least loaded choice would send it every request
// while the next candidates serve them (measured: the Mooncake trace at
// ×16 on llm-d-inference-sim engines, which refuse a prompt that does not
// fit their KV cache beside what they run with a 500 at once; the engine
// that refused the long prompts got them all, and its breaker tripped 15
// times, docs/BENCHMARKS.md finding 14). Loop only.
func (lr *loopReq) engineFailed(c *upConn, status int, now time.Time) {
	s, b := lr.s, lr.b
	s.countCodeLoop(lr.ls, b, status)
	b.passiveResult(false, s.cfg.BreakerFails, s.logger)
	b.markFull(now, fullFor, true)
	s.statusRetries.Inc()
	lr.served = true
	lr.lastErr = fmt.Errorf("backend %s: answered %d", b.URL, status)
	lr.tried = append(lr.tried, "backend "+s.label(b)+": answered "+strconv.Itoa(status))
	lr.leave(c)
	lr.attempt(now)
}

// leave ends the attempt on connection c before any answer byte: the
// connection closed (its body is not read), the backend's in-flight count
// given back, and lr on to the next candidate. Loop only.
func (lr *loopReq) leave(c *upConn) {
	c.kill()
	lr.c = nil
	lr.b.inFlight.Add(-1)
	lr.b = nil
	lr.i++
}

// complete answers the whole response.
func (lr *loopReq) complete(c *upConn, reuse bool, now time.Time) {
	p := &c.p
	status, hdr, body, conn, ct := p.Status, p.Header, p.Body, p.Conn, p.CT
	lr.c = nil
	c.release(reuse, now)
	switch {
	case !lr.hooks.Usage:
	case isSSE([]byte(ct)):
		lr.o.Usage = sseBodyUsage(body)
	default:
		lr.o.Usage = usageOf(body)
	}
	showWhole(lr.hooks.Answer, lr.o.Backend, status, isSSE([]byte(ct)), body)
	// The backend is done with it before the client can see the answer:
	// a client's next request (maybe on another loop) must not find this
	// one still in flight (consistent_hash's bound skipped a backend so).
	if lr.b != nil {
		lr.b.slotFreed(now)
		lr.b = nil
	}
	lr.o.BytesOut = int64(len(body))
	lr.sink.RespondLoop(status, lr.answerHeaders(hdr, conn, false), body)
	lr.finish(now)
}

// answerHeaders is the answer's head for a parsed upstream head: the
// upstream's headers minus hop-by-hop ones, X-Saltus-* ones and
// Content-Length (unless keepLength: the reactor frames the answer),
// plus X-Request-ID if it sent none, X-Saltus-Backend and the caller's
// extra headers. It filters ph in place (the parser left room for the
// additions).
func (lr *loopReq) answerHeaders(ph []reactor.Header, conn string, keepLength bool) []reactor.Header {
	hdr := ph[:0]
	haveID := false
	for _, h := range ph {
		if dropAnswerHeader(h.Name, conn, keepLength) {
			continue
		}
		haveID = haveID || equalFold(h.Name, "X-Request-ID")
		hdr = append(hdr, h)
	}
	if !haveID {
		hdr = append(hdr, reactor.Header{Name: "X-Request-ID", Value: lr.reqID})
	}
	if lr.s.tune().BackendHeader != "none" {
		hdr = append(hdr, reactor.Header{Name: "X-Saltus-Backend", Value: lr.s.label(lr.o.Backend)})
	}
	return append(hdr, lr.extra...)
}

// broken handles a response that cannot be read: before any byte on a
// reused connection, one retry on a fresh one (the pooled connection the
// server had just closed, as retryStaleConn); before the head, the next
// candidate; after it, 502 (504 for a timeout).
func (lr *loopReq) broken(c *upConn, err error, now time.Time) {
	if lr.st != nil {
		lr.streamFailed(err, kindMidstream, sseLost.event(&lr.hooks), now)
		return
	}
	started := c.p.started()
	c.kill()
	lr.c = nil
	if !lr.headSeen && c.p.headDone() && !lr.head(c, now) {
		return // the head parsed in the read that failed; the client left meanwhile
	}
	if lr.headSeen {
		lr.b.m.errs[kindMidstream].Inc()
		lr.o.UpstreamDied, lr.o.Err = true, fmt.Errorf("backend %s: body: %w", lr.b.URL, err)
		lr.o.Status = fasthttp.StatusBadGateway
		lr.respondError(lr.o.Status, "upstream failed in its response body", "server_error", "bad_gateway")
		lr.finish(now)
		return
	}
	if staleRetry(c.served > 0, started, lr.stale) {
		lr.stale = true
		fc, ferr := lr.ls.conn(lr.b, true)
		if ferr == nil {
			lr.use(fc)
			return
		}
		err = ferr
	}
	lr.failed(err, kindReset, true)
}

// failed ends the current attempt before any head: counted, the breaker
// told (unless breaker is false), then the next candidate or 502.
func (lr *loopReq) failed(err error, kind errKind, breaker bool) {
	s, b := lr.s, lr.b
	if lr.c != nil {
		lr.c.kill()
		lr.c = nil
	}
	b.m.errs[kind].Inc()
	if breaker {
		limit := s.cfg.BreakerFails
		if errors.Is(err, syscall.ECONNREFUSED) {
			// Nothing listens: the engine is gone (stopped, crashed,
			// restarting), not busy. Trip now: its pool answers 503 at
			// once instead of a 502 per request until BreakerFails, and
			// the fast probe brings it back within HealthDownInterval.
			limit = 1
		}
		b.passiveResult(false, limit, s.logger)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		lr.served = true
	}
	lr.lastErr = fmt.Errorf("backend %s: %w", b.URL, err)
	lr.tried = append(lr.tried, "backend "+s.label(b)+": "+failReason(err))
	b.inFlight.Add(-1)
	lr.b = nil
	lr.i++
	if lr.i < lr.attempts && !lr.ls.closed {
		lr.attempt(time.Now())
		return
	}
	if !lr.served {
		// Nothing listens on any of them (stopped, crashed): the
		// service is unavailable, not answering badly. Their breakers
		// tripped (passiveResult), so the next requests get the
		// router's own 503 at once.
		lr.o.Err, lr.o.Status = lr.lastErr, fasthttp.StatusServiceUnavailable
		lr.respondError(fasthttp.StatusServiceUnavailable, "no backend is available: "+noAnswerMsg(lr.tried), "server_error", "no_backend")
		lr.finish(time.Now())
		return
	}
	lr.o.Err, lr.o.Status = lr.lastErr, fasthttp.StatusBadGateway
	lr.respondError(fasthttp.StatusBadGateway, noAnswerMsg(lr.tried), "server_error", "bad_gateway")
	lr.finish(time.Now())
}

// timeout: the deadline passed (no head, or a body gone silent): 504.
func (lr *loopReq) timeout(now time.Time) {
	if lr.st != nil {
		lr.streamTimeout(now)
		return
	}
	b := lr.b
	if lr.c != nil {
		lr.c.kill()
		lr.c = nil
	}
	b.m.errs[kindTimeout].Inc()
	lr.o.TimedOut, lr.o.Status = true, fasthttp.StatusGatewayTimeout
	whole := !lr.reqEnd.IsZero() && !now.Before(lr.reqEnd)
	if lr.headSeen {
		b.m.errs[kindMidstream].Inc()
		lr.o.UpstreamDied = true
		lr.o.Err = fmt.Errorf("backend %s: body: %w", b.URL, fasthttp.ErrTimeout)
		msg := "upstream timed out in its response body"
		if whole {
			msg = fmt.Sprintf("the request took longer than the request timeout (%s); backend %s was still sending its answer", lr.s.tune().RequestTimeout, lr.s.label(b))
		}
		lr.respondError(lr.o.Status, msg, "timeout_error", "gateway_timeout")
	} else {
		lr.o.Err = fmt.Errorf("backend %s: %w", b.URL, fasthttp.ErrTimeout)
		lr.s.countCodeLoop(lr.ls, b, lr.o.Status)
		lr.respondError(lr.o.Status, lr.s.headTimeoutMsg(b, whole), "timeout_error", "gateway_timeout")
	}
	lr.finish(now)
}

// clientGone: the client left (its connection's gone hook, or the sweep):
// the upstream connection is closed, the only way to stop the engine's
// work on it.
func (lr *loopReq) clientGone() {
	if lr.finished {
		return
	}
	if lr.c != nil {
		lr.c.kill()
		lr.c = nil
	}
	lr.o.ClientGone, lr.o.Err = true, errClientGone
	if lr.st != nil && !lr.st.raw {
		// A client that closes on [DONE] can beat the upstream's last
		// chunk: the usage event before it was read all the same.
		lr.o.Usage = lr.st.r.usage()
	}
	lr.sink.Abort() // the connection is closed: nothing is sent
	lr.finish(time.Now())
}

// shutdown answers 503: the Set is closing.
func (lr *loopReq) shutdown() {
	if lr.st != nil {
		lr.o.Err = ErrClosed
		lr.streamFailed(ErrClosed, kindMidstream, sseShutdown.event(&lr.hooks), time.Now())
		return
	}
	if lr.c != nil {
		lr.c.kill()
		lr.c = nil
	}
	lr.o.Err, lr.o.Status = ErrClosed, fasthttp.StatusServiceUnavailable
	lr.respondError(lr.o.Status, "the load balancer is shutting down", "server_error", "service_unavailable")
	lr.finish(time.Now())
}

func (lr *loopReq) respondError(status int, msg, typ, code string) {
	hdr := []reactor.Header{jsonHdr[0], {Name: "X-Request-ID", Value: lr.reqID}}
	// Nothing could serve it (no backend answered, or 503): try again
	// soon. A 502 after a head is the answer's failure, not the backends'.
	if status == fasthttp.StatusServiceUnavailable || status == fasthttp.StatusBadGateway && !lr.headSeen {
		hdr = append(hdr, RetryAfter)
	}
	body := lr.hooks.errorBody(status, msg, typ, code)
	lr.o.BytesOut += int64(len(body))
	lr.sink.RespondLoop(status, hdr, body)
}

// finish ends lr: counts, hooks. Exactly once.
func (lr *loopReq) finish(now time.Time) {
	if lr.finished {
		return
	}
	lr.finished = true
	s, ls := lr.s, lr.ls
	delete(ls.active, lr)
	lr.sink.SetGoneHook(nil)
	if lr.b != nil {
		lr.b.slotFreed(now)
		lr.b = nil
	}
	s.inFlight.Add(-1)
	lr.o.Total = now.Sub(lr.start)
	if b := lr.o.Backend; b != nil {
		ttfb := -1.0
		if lr.headSeen {
			ttfb = lr.o.TTFB.Seconds()
		}
		ls.addSample(sample{b: b, ttfb: ttfb, total: lr.o.Total.Seconds()})
	}
	if lr.hooks.Events != nil {
		lr.hooks.Events.Done(lr.o)
	}
	// Nothing resends or reads the body any more: its pooled buffer can
	// serve another request.
	lr.body = nil
	if !lr.keepBody {
		lr.req.ReleaseBody()
	}
}

// Tick is the loop path's share of its loop's tick (the Router's,
// driven by reactor.Server.OnSweep every 50 ms): deadlines, clients gone,
// idle connections, the metrics batch. Whoever calls UseLoops must call
// it on each loop. Loop only (l's).
func (s *Set) Tick(l *reactor.Loop, now time.Time) {
	ls := loopPart.Get(l)
	if ls == nil || ls.s != s {
		return // UseLoops has not run
	}
	for lr := range ls.active {
		switch {
		case gone(lr.sink):
			lr.clientGone()
		case now.After(lr.deadline):
			lr.timeout(now)
		}
	}
	for b, p := range ls.pools {
		keep := p.idle[:0]
		for _, c := range p.idle {
			if c.dead {
				continue
			}
			if b.removed.Load() || ls.closed || now.Sub(c.idleSince) > s.cfg.IdleConnTimeout {
				c.kill()
				continue
			}
			keep = append(keep, c)
		}
		clear(p.idle[len(keep):])
		p.idle = keep
		if b.removed.Load() && p.conns == 0 {
			delete(ls.pools, b)
		}
	}
	ls.handOff()
}

// closeLoops is Close's part for the loop path: on every loop, requests
// in flight get 503 and every connection closes. Any goroutine but a loop.
func (s *Set) closeLoops() {
	if s.lp == nil || !s.lp.Running() {
		return // stopped loops closed every connection, and their clients'
	}
	var waits []chan struct{}
	for _, l := range s.lp.Loops() {
		ls := loopPart.Get(l)
		done := make(chan struct{})
		fn := func() {
			defer close(done)
			ls.closed = true
			for lr := range ls.active {
				lr.shutdown()
			}
			for _, p := range ls.pools {
				for _, c := range p.idle {
					c.kill()
				}
				p.idle = nil
			}
		}
		// Post refuses when the loop's mailbox is full (retry) or the
		// reactor stopped (then its loops closed every connection).
		posted := false
		for deadline := time.Now().Add(time.Second); !posted && s.lp.Running() && time.Now().Before(deadline); {
			if posted = l.Post(fn); !posted {
				//saltus:allow R2 Close's caller, not a loop: a full mailbox raises no event; retried for at most 1 s
				time.Sleep(time.Millisecond)
			}
		}
		if posted {
			waits = append(waits, done)
		}
	}
	for _, done := range waits {
		// A loop that stops meanwhile never runs it: poll for that.
		for deadline := time.Now().Add(5 * time.Second); ; {
			select {
			case <-done:
			case <-time.After(10 * time.Millisecond):
				if s.lp.Running() && time.Now().Before(deadline) {
					continue
				}
				if s.lp.Running() {
					s.logger.Error("an event loop did not close its upstream connections within 5 s")
				}
			}
			break
		}
	}
}
