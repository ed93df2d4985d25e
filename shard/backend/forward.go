package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/reactor"
)

// Sink is where an answer goes; *reactor.Exchange satisfies it.
type Sink interface {
	Respond(status int, hdr []reactor.Header, body []byte)
	WriteHeader(status int, hdr []reactor.Header) error
	Write(p []byte) error
	Flush() error
	End() error
	Abort()
	Gone() <-chan struct{}
}

// Hooks are the caller's callbacks for one Forward.
type Hooks struct {
	// FirstByte runs once, on the proxy goroutine (on the loop for
	// ForwardOnLoop; it must not block then), when the chosen
	// backend's response head arrived (status known), before anything is
	// written to the sink. It does not run when no backend answered.
	FirstByte func(b *Backend, status int)
	// FirstData runs once, on the proxy goroutine, when the first bytes of
	// a streamed body (SSE or not) arrived: an engine sends a stream's
	// head at once and its first event after the prefill (vLLM, the
	// simulator), so this, not FirstByte, ends the prefill. Not for
	// answers read whole.
	FirstData func()
	// Done runs exactly once per Forward at the very end with the outcome:
	// on the proxy goroutine (the loop for ForwardOnLoop), or inside
	// Forward before it returns false.
	Done func(o Outcome)
	// Usage asks for Outcome.Usage. It costs a JSON parse of every
	// non-streamed answer (a copy of each SSE event that has a usage), so
	// it is off unless a hook reads it.
	Usage bool
	// Answer, when set, is shown the answer before it is relayed: the
	// whole body of a non-SSE answer read whole (Forward: one with a
	// Content-Length up to 256 KiB; the loop path: every answer), or each
	// SSE event in order for as long as it returns true. It runs on the
	// proxy goroutine (on the loop for ForwardOnLoop; it must not block
	// then). A non-SSE body relayed as it arrives (chunked, or longer) is
	// not shown.
	Answer AnswerHook
	// DropUsage: saltus asked for this streamed answer's usage
	// (InjectIncludeUsage), its client did not. The usage chunk is
	// removed from the SSE answer (it still reaches Outcome.Usage) and,
	// with DropUsageNull (chat), a top-level "usage":null of the other
	// chunks (usageopt.go says which vLLM versions add what). An event
	// over the relay buffer (32 KiB) is passed through as is.
	DropUsage, DropUsageNull bool
}

// Outcome is how one Forward ended.
type Outcome struct {
	Backend *Backend // the one that answered, or the last one tried; nil if none
	Status  int      // what the client got (503/502/504 when we answered ourselves)
	Retries int      // candidates tried after the first
	Err     error    // nil when the answer was relayed in full
	// ClientGone: the client left first. UpstreamDied: the upstream's
	// connection failed after the head. TimedOut: no head within
	// FirstByteTimeout, or RequestTimeout passed.
	ClientGone, UpstreamDied, TimedOut bool
	TTFB, Total                        time.Duration // TTFB: request sent → head (last attempt)
	// FirstData: request sent → the first bytes of a streamed body (last
	// attempt): the time to first token. 0 for answers read whole, and
	// when no body byte came.
	FirstData time.Duration
	// Usage (only with Hooks.Usage) is the raw "usage" object of the JSON body, or of the last
	// SSE data event that had a non-null one; nil if none was seen.
	Usage []byte
}

// Errors in Outcome.Err.
var (
	ErrOverloaded  = errors.New("backend: too many requests in flight")
	ErrClosed      = errors.New("backend: set closed")
	ErrNoCandidate = errors.New("backend: no candidate backend")
	errClientGone  = errors.New("backend: client gone")
)

// relayBufSize is the per-request relay buffer: a slow client (Sink.Write
// blocking) stops the upstream read, so this, plus fasthttp's 16 KiB read
// buffer, bounds a request's memory. An SSE event longer than it is
// passed through in pieces (same bytes, earlier flush).
const relayBufSize = 32 << 10

// maxBuffered: a non-SSE body with a Content-Length up to this is read
// whole and answered with one Respond.
const maxBuffered = 256 << 10

var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// Forward starts a proxy goroutine that sends req (with body) to
// candidates[0], and on a connect error or a refusal before the first
// byte to the next candidate (≤ MaxRetries more), else answers 502 with
// each backend tried and why (and Retry-After). No head within
// FirstByteTimeout, or RequestTimeout passed first → 504; RequestTimeout
// passing after the head ends a streamed answer. The upstream dies after the
// head: an SSE answer gets an `event: error` event and End, any other
// Abort; never a fabricated `data: [DONE]`. Over MaxInFlight, with no
// candidate, or after Close it answers 503 at once and returns false.
//
// Headers pass through both ways minus hop-by-hop ones; X-Request-ID is
// propagated, or generated and returned; extraHdr and X-Saltus-Backend
// are added to the answer. SSE answers are relayed event by event (one
// Write and Flush each) as they arrive. The client leaving closes the
// upstream connection once the head has arrived (fasthttp hides the
// connection before that: a client that leaves earlier is noticed when
// the head arrives or the timeout passes).
//
// req and body must stay unchanged until Done runs. Any goroutine; it
// never blocks, so an event loop may call it.
func (s *Set) Forward(req *reactor.Request, body []byte, candidates []*Backend, sink Sink, extraHdr []reactor.Header, h Hooks) bool {
	var refuse error
	switch {
	case len(candidates) == 0:
		refuse = ErrNoCandidate
	case s.inFlight.Add(1) > int64(s.cfg.MaxInFlight):
		s.inFlight.Add(-1)
		s.overload.Inc()
		refuse = ErrOverloaded
	default:
		p := &proxy{s: s, req: req, body: body, cands: candidates, sink: sink, extra: extraHdr, hooks: h}
		if s.spawn(s.proxyWorkers, p.run) {
			return true
		}
		s.inFlight.Add(-1)
		refuse = ErrClosed
	}
	sink.Respond(fasthttp.StatusServiceUnavailable, refusedHdr(req), errorBody(fasthttp.StatusServiceUnavailable, refuse.Error(), "server_error", "service_unavailable"))
	if h.Done != nil {
		h.Done(Outcome{Status: fasthttp.StatusServiceUnavailable, Err: refuse})
	}
	return false
}

var jsonHdr = []reactor.Header{{Name: "Content-Type", Value: "application/json"}}

// RetryAfter is the Retry-After header of saltus's 502 and 503 answers
// (nothing could serve the request): the OpenAI SDKs honour it, and 1 s
// is the health probes' HealthDownInterval, within which a backend that
// came back is routable again.
var RetryAfter = reactor.Header{Name: "Retry-After", Value: "1"}

// refusedHdr are the headers of a refused forward's 503: nothing can
// serve it now, so Retry-After, and the request's X-Request-ID (or a
// generated one) as on every answer.
func refusedHdr(req *reactor.Request) []reactor.Header {
	return []reactor.Header{jsonHdr[0], {Name: reactor.RequestIDHeader, Value: req.RequestID()}, RetryAfter}
}

// errorBody is an OpenAI-style error (reactor.ErrorBody).
func errorBody(status int, msg, typ, code string) []byte {
	return reactor.ErrorBody(status, typ, code, msg, "")
}

// proxy is one Forward's state, owned by its proxy goroutine.
type proxy struct {
	s     *Set
	req   *reactor.Request
	body  []byte
	cands []*Backend
	sink  Sink
	extra []reactor.Header
	hooks Hooks

	reqID string
	o     Outcome
	// held is the backend whose in-flight count this attempt holds; nil
	// once released (release).
	held *Backend
	t0   time.Time // the last attempt's send
	data bool      // the first body bytes arrived (gotData)
	idle idleDeadline
}

// gotData records the first bytes of a streamed body: Outcome.FirstData
// and Hooks.FirstData, once.
func (p *proxy) gotData() {
	if p.data {
		return
	}
	p.data = true
	p.o.FirstData = time.Since(p.t0)
	if p.hooks.FirstData != nil {
		p.hooks.FirstData()
	}
}

// release takes the current attempt off its backend's in-flight count,
// once. A whole answer releases before the client can see it, so that a
// client's next request never finds this one still in flight (the
// bounded-load policies would skip the backend for it).
func (p *proxy) release() {
	if p.held != nil {
		p.held.inFlight.Add(-1)
		p.held = nil
	}
}

func (p *proxy) run(ctx context.Context) {
	s := p.s
	start := time.Now()
	defer func() {
		s.inFlight.Add(-1)
		p.o.Total = time.Since(start)
		if b := p.o.Backend; b != nil {
			b.m.total.Update(p.o.Total.Seconds())
		}
		if p.hooks.Done != nil {
			p.hooks.Done(p.o)
		}
	}()
	p.reqID = p.req.HeaderValue("X-Request-ID")
	if p.reqID == "" {
		p.reqID = s.newRequestID()
	}
	freq := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(freq)
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.SetNoDefaultContentType(true)
	p.buildRequest(freq)
	freq.SetUserValue(respKey{}, resp)

	var reqDeadline time.Time // zero: no RequestTimeout
	if s.cfg.RequestTimeout > 0 {
		reqDeadline = start.Add(s.cfg.RequestTimeout)
	}
	attempts := min(len(p.cands), 1+s.cfg.MaxRetries)
	var lastErr error
	var tried []string // "backend X: reason", the 502's message
	for i := range attempts {
		b := p.cands[i]
		if i > 0 {
			s.retries.Inc()
			p.o.Retries = i
		}
		p.o.Backend = b
		if ctx.Err() != nil {
			p.shutdown()
			return
		}
		if gone(p.sink) {
			p.o.ClientGone, p.o.Err = true, errClientGone
			p.sink.Abort()
			return
		}
		freq.Header.SetHost(b.host)
		b.inFlight.Add(1)
		p.held = b
		t0 := time.Now()
		p.t0 = t0
		deadline, whole := t0.Add(s.cfg.FirstByteTimeout), false
		if !reqDeadline.IsZero() && reqDeadline.Before(deadline) {
			deadline, whole = reqDeadline, true
		}
		err := b.hc.DoDeadline(freq, resp, deadline)
		if err == nil {
			p.o.TTFB = time.Since(t0)
			b.m.ttfb.Update(p.o.TTFB.Seconds())
			p.relay(ctx, b, resp, reqDeadline)
			p.release()
			return
		}
		p.release()
		if ctx.Err() != nil { // Close closed the connection
			p.shutdown()
			return
		}
		kind, retry := classify(err)
		b.m.errs[kind].Inc()
		// A slow backend, or one with every connection busy, is not a
		// broken one: neither counts for the breaker.
		if kind != kindTimeout && !errors.Is(err, fasthttp.ErrNoFreeConns) {
			b.passiveResult(false, s.cfg.BreakerFails, s.logger)
		}
		lastErr = fmt.Errorf("backend %s: %w", b.URL, err)
		tried = append(tried, "backend "+s.label(b)+": "+failReason(err))
		if !retry {
			p.o.TimedOut, p.o.Err, p.o.Status = true, lastErr, fasthttp.StatusGatewayTimeout
			s.countCode(b, p.o.Status)
			p.respondError(fasthttp.StatusGatewayTimeout, s.headTimeoutMsg(b, whole), "timeout_error", "gateway_timeout")
			return
		}
	}
	p.o.Err, p.o.Status = lastErr, fasthttp.StatusBadGateway
	p.respondError(fasthttp.StatusBadGateway, noAnswerMsg(tried), "server_error", "bad_gateway")
}

// noAnswerMsg is the 502 message when no backend answered: each backend
// tried and why, in order.
func noAnswerMsg(tried []string) string {
	return fmt.Sprintf("no backend answered (%d tried): %s", len(tried), strings.Join(tried, "; "))
}

// headTimeoutMsg is the 504 message when b sent no head in time: whole
// says the request's own limit (RequestTimeout) came first.
func (s *Set) headTimeoutMsg(b *Backend, whole bool) string {
	if whole {
		return fmt.Sprintf("the request took longer than the request timeout (%s); backend %s had not sent its response head", s.cfg.RequestTimeout, s.label(b))
	}
	return fmt.Sprintf("backend %s sent no response head within the first-byte timeout (%s)", s.label(b), s.cfg.FirstByteTimeout)
}

// failReason says in a few words why an attempt failed before its head,
// for the 502's message (the error itself may name addresses and
// syscalls; the client gets these words and the backend's label).
func failReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrNoFreeConns), errors.Is(err, errNoFreeConns):
		return "every connection to it busy"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, fasthttp.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		var de *dialError
		if errors.As(err, &de) {
			return "connect timed out"
		}
		return "timed out"
	case errors.Is(err, ErrClosed):
		return "the load balancer is shutting down"
	}
	var de *dialError
	if errors.As(err, &de) {
		if errors.Is(err, errClosedBeforeHead) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return "connection closed while connecting"
		}
		return "cannot connect"
	}
	return "connection closed before the response head"
}

// shutdown answers 503: the Set is closing.
func (p *proxy) shutdown() {
	p.o.Err, p.o.Status = ErrClosed, fasthttp.StatusServiceUnavailable
	p.respondError(p.o.Status, "the load balancer is shutting down", "server_error", "service_unavailable")
}

func (p *proxy) respondError(status int, msg, typ, code string) {
	hdr := []reactor.Header{jsonHdr[0], {Name: "X-Request-ID", Value: p.reqID}}
	// Nothing could serve it (no backend answered, or 503): try again
	// soon. A 502 after a head is the answer's failure, not the backends'.
	if status == fasthttp.StatusServiceUnavailable || status == fasthttp.StatusBadGateway && p.o.TTFB == 0 {
		hdr = append(hdr, RetryAfter)
	}
	p.sink.Respond(status, hdr, errorBody(status, msg, typ, code))
}

func gone(sink Sink) bool {
	select {
	case <-sink.Gone():
		return true
	default:
		return false
	}
}

// classify says what kind of error a failed attempt had and whether the
// next candidate may get the request: yes unless it timed out (the
// backend may be working on it; 504).
func classify(err error) (errKind, bool) {
	var de *dialError
	var ne net.Error
	switch {
	case errors.As(err, &de), errors.Is(err, fasthttp.ErrNoFreeConns):
		return kindConnect, true
	case errors.Is(err, fasthttp.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout, false
	default:
		// The connection failed before the head: refused, reset, closed.
		return kindReset, true
	}
}

// retryStaleConn is the HostClient's RetryIfErr: one more attempt on the
// same backend when a pooled keep-alive connection the server had just
// closed broke before the head (trackedConn.stale: it had answered
// before, nothing of this answer came). A fresh connection that breaks
// is not retried here: the backend reset a POST it may have begun to
// work on, and only Forward's own retries, bounded by MaxRetries, may
// send it again (fasthttp's retry had sent every POST twice to a
// backend that resets). The timeout is not reset.
func retryStaleConn(req *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	if !(errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return false, false
	}
	resp, _ := req.UserValue(respKey{}).(*fasthttp.Response)
	if resp == nil {
		return false, false
	}
	c := connOf(resp)
	return false, c != nil && c.stale(attempts >= 2)
}

// respKey is the user value of a forwarded request that holds its
// response, whose connection retryStaleConn looks at.
type respKey struct{}

// buildRequest fills freq from the client's request: method, path and
// query as sent, headers minus hop-by-hop ones (and Host, Content-Length,
// Expect, which are ours to set), X-Request-ID, the body.
func (p *proxy) buildRequest(freq *fasthttp.Request) {
	r := p.req
	freq.Header.SetMethod(r.Method)
	uri := r.Path
	if r.Query != "" {
		uri = r.Path + "?" + r.Query
	}
	freq.SetRequestURI(uri)
	conn := r.HeaderValue("Connection")
	for _, h := range r.Header {
		if hopByHop(h.Name, conn) || equalFold(h.Name, "Host") || equalFold(h.Name, "Content-Length") ||
			equalFold(h.Name, "Expect") || equalFold(h.Name, "X-Request-ID") {
			continue
		}
		freq.Header.Add(h.Name, h.Value)
	}
	freq.Header.Set("X-Request-ID", p.reqID)
	freq.SetBodyRaw(p.body)
}

// answerHeaders returns the upstream's headers minus hop-by-hop ones (and
// Content-Length unless keepLength), plus X-Request-ID if the upstream did
// not send one, X-Saltus-Backend and the caller's extra headers.
func (p *proxy) answerHeaders(b *Backend, resp *fasthttp.Response, keepLength bool) []reactor.Header {
	conn := string(resp.Header.Peek("Connection"))
	hdr := make([]reactor.Header, 0, resp.Header.Len()+3+len(p.extra))
	// All names and values go into one string (one allocation instead of
	// two per header); spans holds their ends.
	raw := make([]byte, 0, 512) // never modified once viewed as all
	var spanBuf [24][2]int
	spans := spanBuf[:0]
	haveID := false
	for k, v := range resp.Header.All() {
		name := b2s(k)
		if dropAnswerHeader(name, conn, keepLength) {
			continue
		}
		haveID = haveID || equalFold(name, "X-Request-ID")
		raw = append(raw, k...)
		nameEnd := len(raw)
		raw = append(raw, v...)
		spans = append(spans, [2]int{nameEnd, len(raw)})
	}
	all, start := b2s(raw), 0
	for _, sp := range spans {
		hdr = append(hdr, reactor.Header{Name: all[start:sp[0]], Value: all[sp[0]:sp[1]]})
		start = sp[1]
	}
	if !haveID {
		hdr = append(hdr, reactor.Header{Name: "X-Request-ID", Value: p.reqID})
	}
	if p.s.cfg.BackendHeader != "none" {
		hdr = append(hdr, reactor.Header{Name: "X-Saltus-Backend", Value: p.s.label(b)})
	}
	return append(hdr, p.extra...)
}

// dropAnswerHeader reports whether an upstream's header stays out of the
// answer: hop-by-hop ones (conn is the upstream's Connection header),
// Content-Length unless keepLength (the reactor frames the answer), and
// every X-Saltus-* header: saltus sets its own (X-Saltus-Backend,
// X-Saltus-Route); an upstream's, a lying backend's or another saltus's,
// would read as this one's.
func dropAnswerHeader(name, conn string, keepLength bool) bool {
	return hopByHop(name, conn) || (!keepLength && equalFold(name, "Content-Length")) ||
		(len(name) >= len(saltusPrefix) && equalFold(name[:len(saltusPrefix)], saltusPrefix))
}

// saltusPrefix begins the names of saltus's own answer headers.
const saltusPrefix = "X-Saltus-"

// relay sends the answer whose head is in resp to the sink.
// reqDeadline (zero: none) is RequestTimeout's: it bounds the reads of a
// streamed body.
func (p *proxy) relay(ctx context.Context, b *Backend, resp *fasthttp.Response, reqDeadline time.Time) {
	s := p.s
	status := resp.StatusCode()
	p.o.Status = status
	s.countCode(b, status)
	b.passiveResult(status < 500, s.cfg.BreakerFails, s.logger)
	if p.hooks.FirstByte != nil {
		p.hooks.FirstByte(b, status)
	}
	bs := resp.BodyStream()
	if gone(p.sink) {
		p.o.ClientGone, p.o.Err = true, errClientGone
		_ = resp.CloseBodyStream() // closes the upstream connection: the body was not read
		p.sink.Abort()
		return
	}
	sse := isSSE(resp.Header.ContentType())
	length := resp.Header.ContentLength()
	if bs == nil || (!sse && length >= 0 && length <= maxBuffered) {
		p.relayWhole(b, resp, bs, length)
		return
	}
	// A streamed body: the head's deadline gives way to the stream's idle
	// deadline, and the request's (none without RequestTimeout), and the
	// client is watched.
	p.idle = idleDeadline{c: connOf(resp), every: s.cfg.StreamIdleTimeout, until: reqDeadline}
	p.idle.extend(time.Now())
	closer, _ := bs.(fasthttp.ReadCloserWithError)
	done := make(chan struct{})
	defer close(done)
	watching := closer != nil && s.spawn(s.watchWorkers, func(gctx context.Context) {
		select {
		case <-p.sink.Gone():
			_ = closer.CloseWithError(errClientGone) // interrupts the proxy's Read: closes the connection
		case <-gctx.Done():
			_ = closer.CloseWithError(ErrClosed)
		case <-done:
		}
	})
	defer resp.CloseBodyStream() //nolint:errcheck // after EOF it pools the connection, else closes it
	if !watching {
		p.o.Err = ErrClosed
		p.sink.Abort()
		return
	}
	if err := p.sink.WriteHeader(status, p.answerHeaders(b, resp, !sse && length >= 0)); err != nil {
		p.clientGone()
		return
	}
	bufp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bufp)
	if sse {
		p.relaySSE(ctx, b, bs, *bufp)
	} else {
		p.relayStream(ctx, b, bs, *bufp)
	}
}

// relayWhole reads a small body whole and answers with one Respond; an
// error before anything was sent is a 502 (504 on a timeout).
func (p *proxy) relayWhole(b *Backend, resp *fasthttp.Response, bs io.Reader, length int) {
	var body []byte
	if bs != nil {
		body = make([]byte, max(length, 0)) // handed to the sink: never reused
		_, err := io.ReadFull(bs, body)
		_ = resp.CloseBodyStream() // pools the connection after a full read, else closes it
		if err != nil {
			kind, _ := classify(err)
			if kind == kindConnect {
				kind = kindReset
			}
			b.m.errs[kindMidstream].Inc()
			p.o.UpstreamDied, p.o.Err = true, fmt.Errorf("backend %s: body: %w", b.URL, err)
			if kind == kindTimeout {
				p.o.TimedOut, p.o.Status = true, fasthttp.StatusGatewayTimeout
				p.respondError(p.o.Status, "upstream timed out in its response body", "timeout_error", "gateway_timeout")
				return
			}
			p.o.Status = fasthttp.StatusBadGateway
			p.respondError(p.o.Status, "upstream failed in its response body", "server_error", "bad_gateway")
			return
		}
		if p.hooks.Usage {
			p.o.Usage = usageOf(body)
		}
		showWhole(p.hooks.Answer, b, p.o.Status, false, body)
	}
	hdr := p.answerHeaders(b, resp, false)
	p.release()
	p.sink.Respond(p.o.Status, hdr, body)
}

// relayStream copies a non-SSE body as it arrives.
func (p *proxy) relayStream(ctx context.Context, b *Backend, bs io.Reader, buf []byte) {
	for {
		n, err := bs.Read(buf)
		if n > 0 {
			p.idle.extend(time.Now())
			p.gotData()
			if p.sink.Write(buf[:n]) != nil || p.sink.Flush() != nil {
				p.clientGone()
				return
			}
		}
		if err == io.EOF {
			p.end()
			return
		}
		if err != nil {
			if !p.stopped(ctx) {
				p.died(b, err)
			}
			p.sink.Abort()
			return
		}
	}
}

// idleDeadline is a streamed body's read deadline: every after the last
// bytes (StreamIdleTimeout), or until (RequestTimeout's; zero: none),
// whichever comes first. extend moves it only when an eighth of every
// has passed since it last did, so a fast stream does not reset a timer
// on each read.
type idleDeadline struct {
	c         *trackedConn
	every     time.Duration
	until, at time.Time // at: the deadline set
	set       time.Time // when it was last moved
}

func (d *idleDeadline) extend(now time.Time) {
	if d.c == nil || (!d.set.IsZero() && now.Sub(d.set) < d.every/8) {
		return
	}
	d.set, d.at = now, now.Add(d.every)
	if !d.until.IsZero() && d.until.Before(d.at) {
		d.at = d.until
	}
	_ = d.c.SetReadDeadline(d.at) // fails only on a closed connection, which the next Read reports
}

// idled reports whether a read that timed out met the idle deadline, not
// the request's.
func (d *idleDeadline) idled() bool {
	return d.c != nil && (d.until.IsZero() || d.at.Before(d.until))
}

// relaySSE relays an SSE body event by event through an sseRelay: each
// complete event is one Write and Flush as soon as it is in.
func (p *proxy) relaySSE(ctx context.Context, b *Backend, bs io.Reader, buf []byte) {
	r := newSSERelay(&p.hooks, b, p.o.Status)
	for {
		m, err := bs.Read(buf)
		if m > 0 {
			p.idle.extend(time.Now())
			p.gotData()
			if r.feed(buf[:m], p.write) != nil {
				p.clientGone()
				return
			}
		}
		if err == io.EOF {
			if r.flush(p.write) != nil {
				p.clientGone()
				return
			}
			p.o.Usage = r.usage()
			p.end()
			return
		}
		if err != nil {
			p.o.Usage = r.usage()
			if p.stopped(ctx) {
				p.sink.Abort()
				return
			}
			ev := sseErrorEvent
			if kind, _ := classify(err); kind == kindTimeout {
				p.o.TimedOut = true
				_, ev, _ = p.s.cfg.streamTimeout(p.idle.idled())
			}
			p.died(b, err)
			if p.sink.Write(r.errorEvent(ev)) != nil || p.sink.Flush() != nil || p.sink.End() != nil {
				p.o.ClientGone = gone(p.sink)
			}
			return
		}
	}
}

// sseErrorEvent ends an SSE answer whose upstream died.
var sseErrorEvent = []byte("event: error\ndata: " +
	string(errorBody(fasthttp.StatusBadGateway, "upstream connection lost mid-stream", "server_error", "upstream_disconnected")) + "\n\n")

// sseTimeoutEvent ends an SSE answer cut by the request timeout d.
func sseTimeoutEvent(d time.Duration) []byte {
	msg := fmt.Sprintf("the request took longer than the request timeout (%s)", d)
	return []byte("event: error\ndata: " + string(errorBody(fasthttp.StatusGatewayTimeout, msg, "timeout_error", "gateway_timeout")) + "\n\n")
}

// sseIdleEvent ends an SSE answer whose backend sent nothing for the
// stream idle timeout d.
func sseIdleEvent(d time.Duration) []byte {
	msg := fmt.Sprintf("no data from the backend for %s (the stream idle timeout)", d)
	return []byte("event: error\ndata: " + string(errorBody(fasthttp.StatusGatewayTimeout, msg, "timeout_error", "gateway_timeout")) + "\n\n")
}

func (p *proxy) write(ev []byte) error {
	if err := p.sink.Write(ev); err != nil {
		return err
	}
	return p.sink.Flush()
}

func (p *proxy) end() {
	if p.sink.End() != nil {
		p.clientGone()
	}
}

// clientGone records that the sink refused a write: the client left.
func (p *proxy) clientGone() {
	p.o.ClientGone, p.o.Err = true, errClientGone
	p.sink.Abort()
}

// stopped reports, after a failed upstream read, whether it was our
// watcher that closed the upstream: the client left or the Set closed.
func (p *proxy) stopped(ctx context.Context) bool {
	if gone(p.sink) {
		p.o.ClientGone, p.o.Err = true, errClientGone
		return true
	}
	if ctx.Err() != nil {
		p.o.Err = ErrClosed
		return true
	}
	return false
}

func (p *proxy) died(b *Backend, err error) {
	if kind, _ := classify(err); kind == kindTimeout && p.idle.idled() {
		kind, _, ierr := p.s.cfg.streamTimeout(true)
		b.m.errs[kind].Inc()
		p.o.UpstreamDied, p.o.TimedOut = true, true
		p.o.Err = fmt.Errorf("backend %s: %w", b.URL, ierr)
		return
	}
	b.m.errs[kindMidstream].Inc()
	p.o.UpstreamDied, p.o.Err = true, fmt.Errorf("backend %s: mid-stream: %w", b.URL, err)
}
