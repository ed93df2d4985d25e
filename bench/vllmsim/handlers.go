package vllmsim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// failHeader is the per-request failure injection header (doc.go).
const failHeader = "X-Sim-Fail"

// The answer headers that echo a request's W3C trace context (doc.go).
const (
	traceparentEcho = "X-Sim-Traceparent"
	tracestateEcho  = "X-Sim-Tracestate"
)

// resetAfter is how many content chunks a streamed X-Sim-Fail: reset
// request gets before its connection is reset (fewer if max_tokens is
// smaller: then after the last one, before usage and [DONE]).
const resetAfter = 2

// resetGrace is how long a mid-stream reset waits after its last chunk
// left for fasthttp's connection writer, so the client receives those
// chunks before the reset (the stream writer cannot see the socket).
const resetGrace = 20 * time.Millisecond

// handle routes a request. It runs on a fasthttp worker goroutine, one
// per connection in flight.
func (s *Sim) handle(ctx *fasthttp.RequestCtx) {
	// The trace context it got, echoed (doc.go: Trace context).
	if v := ctx.Request.Header.Peek("traceparent"); len(v) > 0 {
		ctx.Response.Header.SetBytesV(traceparentEcho, v)
	}
	if v := ctx.Request.Header.Peek("tracestate"); len(v) > 0 {
		ctx.Response.Header.SetBytesV(tracestateEcho, v)
	}
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		if s.method(ctx, fasthttp.MethodPost) {
			s.complete(ctx, kindChat)
		}
	case "/v1/completions":
		if s.method(ctx, fasthttp.MethodPost) {
			s.complete(ctx, kindCompletion)
		}
	case "/v1/responses":
		if s.method(ctx, fasthttp.MethodPost) {
			s.responses(ctx)
		}
	case "/v1/messages":
		if s.method(ctx, fasthttp.MethodPost) {
			s.complete(ctx, kindMessages)
		}
	case "/tokenize":
		if s.method(ctx, fasthttp.MethodPost) {
			s.tokenize(ctx)
		}
	case "/v1/audio/transcriptions", "/v1/audio/translations":
		if s.method(ctx, fasthttp.MethodPost) {
			s.audio(ctx)
		}
	case "/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank":
		if s.method(ctx, fasthttp.MethodPost) {
			s.pooling(ctx, poolKindOf(string(ctx.Path())))
		}
	case "/v1/models":
		if s.method(ctx, fasthttp.MethodGet) {
			s.models(ctx)
		}
	case "/reset_prefix_cache":
		if s.method(ctx, fasthttp.MethodPost) {
			s.resetPrefixCache(ctx)
		}
	case "/health":
		if s.method(ctx, fasthttp.MethodGet) {
			ctx.SetStatusCode(fasthttp.StatusOK)
		}
	case "/metrics":
		if s.method(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("text/plain; version=0.0.4")
			s.set.WritePrometheus(ctx)
			if s.loraInfo {
				_, _ = ctx.Write(s.served.appendLoRAInfo(nil)) // a RequestCtx write never fails
			}
		}
	case "/v1/load_lora_adapter", "/v1/unload_lora_adapter":
		if !s.cfg.RuntimeLoRA {
			s.unknownEndpoint(ctx) // vLLM registers neither without VLLM_ALLOW_RUNTIME_LORA_UPDATING
			return
		}
		if s.method(ctx, fasthttp.MethodPost) {
			s.loraAdapter(ctx, string(ctx.Path()) == "/v1/load_lora_adapter")
		}
	default:
		path := string(ctx.Path())
		if id, ok := strings.CutPrefix(path, "/v1/responses/"); ok && id != "" {
			s.responseByID(ctx, id)
			return
		}
		if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
			if s.method(ctx, fasthttp.MethodGet) {
				s.modelByID(ctx, id)
			}
			return
		}
		s.unknownEndpoint(ctx)
	}
}

func (s *Sim) unknownEndpoint(ctx *fasthttp.RequestCtx) {
	s.answerError(ctx, &apiError{status: fasthttp.StatusNotFound, msg: fmt.Sprintf("no such endpoint: %.200s", ctx.Path()), code: "not_found"})
}

// method reports whether the request's method is want (HEAD counts as
// GET); otherwise it answers 405.
func (s *Sim) method(ctx *fasthttp.RequestCtx, want string) bool {
	m := string(ctx.Method())
	if m == want || (want == fasthttp.MethodGet && m == fasthttp.MethodHead) {
		return true
	}
	ctx.Response.Header.Set("Allow", want)
	s.answerError(ctx, &apiError{status: fasthttp.StatusMethodNotAllowed, msg: fmt.Sprintf("method %.20s not allowed, use %s", m, want), code: "method_not_allowed"})
	return false
}

func (s *Sim) answerError(ctx *fasthttp.RequestCtx, e *apiError) {
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	if isMessages(ctx) {
		ctx.SetBody(anthropicError(e))
		return
	}
	ctx.SetBody(e.body())
}

// badFraming is fasthttp's ErrorHandler: a request it could not read
// gets an OpenAI-style error too.
func (s *Sim) badFraming(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var nerr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.answerError(ctx, &apiError{status: fasthttp.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", s.cfg.MaxBody), code: "request_too_large"})
	case errors.As(err, &small):
		s.answerError(ctx, &apiError{status: fasthttp.StatusRequestHeaderFieldsTooLarge, msg: fmt.Sprintf("request head larger than %d bytes", readBufferSize), code: "header_too_large"})
	case errors.As(err, &nerr) && nerr.Timeout():
		s.answerError(ctx, &apiError{status: fasthttp.StatusRequestTimeout, msg: "request not received in time", code: "request_timeout"})
	default:
		s.answerError(ctx, &apiError{status: fasthttp.StatusBadRequest, msg: fmt.Sprintf("cannot read the request: %.200v", err), code: "bad_request"})
	}
}

// tokenize is vLLM's POST /tokenize: {"prompt"} or {"messages"} →
// {"count","max_model_len","tokens"}.
func (s *Sim) tokenize(ctx *fasthttp.RequestCtx) {
	req, e := decodeRequest(ctx.PostBody(), kindTokenize)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	m, e := s.served.resolve(req.model)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	t, e := s.p.encode(&req, m, true)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	b := append(make([]byte, 0, 64+8*len(t.ids)), `{"count":`...)
	b = strconv.AppendInt(b, int64(t.n), 10)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.cfg.maxModelLen()), 10)
	b = append(b, `,"tokens":[`...)
	for i, id := range t.ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	b = append(b, `],"token_strs":null}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// failDraw reports whether this request draws a FailRate failure: a
// deterministic sequence for the seed (splitmix64 of a counter).
func (s *Sim) failDraw() bool {
	if s.cfg.FailRate <= 0 {
		return false
	}
	x := uint64(s.cfg.Seed) + s.draws.Add(1)*0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/(1<<53) < s.cfg.FailRate
}

// complete serves POST /v1/chat/completions, /v1/completions and
// /v1/messages (as its chat request).
func (s *Sim) complete(ctx *fasthttp.RequestCtx, k kind) {
	reset, done := s.inject(ctx)
	if done {
		return
	}
	body := ctx.PostBody()
	var msg *msgAnswer
	if k == kindMessages {
		b, meta, e := convertMessages(body)
		if e != nil {
			s.answerError(ctx, e)
			return
		}
		body, msg, k = b, &msgAnswer{meta: meta}, kindChat
	}
	req, e := decodeRequest(body, k)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	m, e := s.served.resolve(req.model)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	t, e := s.p.encode(&req, m, s.cfg.KVEvents.Enable)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	param := "prompt"
	if k == kindChat {
		param = "messages"
	}
	if t.n == 0 {
		s.answerError(ctx, badRequest(param, "%s: the prompt has no tokens", param))
		return
	}
	maxLen := s.cfg.maxModelLen()
	maxTokens := req.maxTokens
	if maxTokens == 0 {
		maxTokens = min(s.cfg.MaxTokens, maxLen-t.n)
	}
	if maxTokens < 1 || t.n+maxTokens > maxLen {
		// vLLM's wording.
		s.answerError(ctx, badRequest(param, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
			maxLen, t.n+max(maxTokens, 1), t.n, param, max(maxTokens, 1), param))
		return
	}
	sq := s.start(ctx, reset && !req.stream, m, t, maxTokens, req.priority)
	if sq == nil {
		return
	}
	a := &answer{kind: k, model: m.quoted, created: time.Now().Unix(), include: req.includeUsage,
		prompt: t.n, maxTokens: maxTokens, out: newOutput(s.cfg.Seed, t.hash), msg: msg}
	a.id = answerID(a.id[:0], k, s.ids.Add(1))
	if !req.stream {
		s.whole(ctx, a, sq)
		return
	}
	if reset {
		s.injected.Inc()
		a.reset = ctx.Conn()
	}
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.ImmediateHeaderFlush = true // like vLLM: the head goes out before the first token
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) { s.stream(w, a, sq) })
}

// whole waits for a non-streamed request's last token and answers it.
func (s *Sim) whole(ctx *fasthttp.RequestCtx, a *answer, sq *seq) {
	if !s.awaitDone(ctx, sq) {
		return
	}
	ctx.SetContentType("application/json")
	if a.msg != nil {
		ctx.SetBody(a.appendMessage(make([]byte, 0, 512+8*a.maxTokens), sq.cached))
		return
	}
	ctx.SetBody(a.appendWhole(make([]byte, 0, 512+8*a.maxTokens), sq.cached))
}

// awaitDone waits for sq's end. False: the engine closed first, and ctx
// is answered (503 shutting_down).
func (s *Sim) awaitDone(ctx *fasthttp.RequestCtx, sq *seq) bool {
	for sq.state.Load() == seqActive {
		<-sq.notify
	}
	if sq.state.Load() != seqDone {
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: errClosed.Error(), code: "shutting_down"})
		return false
	}
	return true
}

// stream writes a streamed answer as the scheduler produces it. It runs
// on fasthttp's stream-writer goroutine; it must not touch the
// RequestCtx.
func (s *Sim) stream(w *bufio.Writer, a *answer, sq *seq) {
	finished := false
	defer func() {
		if !finished {
			sq.cancelled.Store(true) // the scheduler drops it if it still runs
		}
	}()
	sent := 0
	buf := make([]byte, 0, 1024)
	for {
		state := sq.state.Load()
		if p := int(sq.produced.Load()); p > sent {
			buf = buf[:0]
			for ; sent < p; sent++ {
				switch {
				case a.msg != nil:
					if sent == 0 {
						buf = a.appendMsgStart(buf, sq.cached)
					}
					buf = a.appendMsgToken(buf, sent)
				default:
					if sent == 0 && a.kind == kindChat {
						buf = a.appendRoleChunk(buf)
					}
					buf = a.appendTokenChunk(buf, sent)
				}
				if a.reset != nil && sent+1 == min(resetAfter, a.maxTokens) {
					s.resetStream(w, a.reset, buf)
					return
				}
			}
			if _, err := w.Write(buf); err != nil {
				return
			}
			if w.Flush() != nil {
				return // the client left: the deferred cancel tells the scheduler
			}
		}
		if state != seqActive {
			break
		}
		<-sq.notify
	}
	if sq.state.Load() != seqDone {
		// The engine closed. vLLM would add [DONE] after its error
		// chunk; the simulator does not, so a client cannot take a cut
		// stream for a finished one.
		ae := &apiError{status: fasthttp.StatusServiceUnavailable, msg: errClosed.Error(), code: "shutting_down"}
		if a.msg != nil {
			buf = append(appendEvent(buf[:0], "error"), anthropicError(ae)...)
		} else {
			buf = append(append(buf[:0], "data: "...), ae.body()...)
		}
		buf = append(buf, "\n\n"...)
		_, _ = w.Write(buf) // the stream ends either way
		_ = w.Flush()
		return
	}
	finished = true
	buf = buf[:0]
	if a.msg != nil {
		_, _ = w.Write(a.appendMsgEnd(buf, sq.cached)) // a client gone now has its whole answer but the end
		_ = w.Flush()
		return
	}
	if a.include {
		buf = a.appendUsageChunk(buf, sq.cached)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	_, _ = w.Write(buf) // a client gone now has its whole answer but the end
	_ = w.Flush()
}

// start submits a sequence of the tokenized prompt t, generating
// up to maxTokens for the served model m at the given priority, to the
// engine, and returns it; or answers ctx itself and returns nil: vLLM's
// 400 for a non-zero priority under fcfs, a connection reset before any
// answer when resetNow (X-Sim-Fail: reset on a whole answer),
// Config.OverloadStatus when the waiting queue is full. Chat,
// completions and Responses requests start through it, after their own
// checks.
func (s *Sim) start(ctx *fasthttp.RequestCtx, resetNow bool, m *servedModel, t tokenized, maxTokens int, priority int64) *seq {
	if priority != 0 && s.cfg.SchedulingPolicy != PolicyPriority {
		// vLLM's input processor raises this ValueError as it takes the
		// request, after the server's own checks (model, prompt length);
		// the server answers it as a BadRequestError.
		s.answerError(ctx, &apiError{status: fasthttp.StatusBadRequest,
			msg: fmt.Sprintf("Got priority %d but Priority scheduling is not enabled.", priority), vllmType: "BadRequestError"})
		return nil
	}
	if resetNow {
		s.injected.Inc()
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) { setLingerZero(c) }) // fasthttp closes c when this returns
		return nil
	}
	sq := newSeq(t.keys, t.n, maxTokens, m.load)
	sq.priority = priority
	sq.ids = t.ids // nil unless KV events are published
	sq.salt = t.salt
	if m.parent != "" {
		sq.adapter = m.name
	}
	switch err := s.eng.submit(sq); {
	case err == nil:
		return sq
	case errors.Is(err, errQueueFull):
		s.rejected.Inc()
		s.answerError(ctx, overloaded(s.cfg.OverloadStatus))
	default: // errClosed
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: err.Error(), code: "overloaded"})
	}
	return nil
}

// overloaded is the answer to a request over MaxWaiting, in vLLM's
// ErrorResponse: llm-d-inference-sim's words (errQueueFull) and, for
// 429, its type (OpenAI's SDK's name for a 429); for 503 the type of
// vLLM's RequestRejectedError (PR 27064). No Retry-After: neither sends
// one.
func overloaded(status int) *apiError {
	typ := "RateLimitError"
	if status == fasthttp.StatusServiceUnavailable {
		typ = "ServiceUnavailableError"
	}
	return &apiError{status: status, msg: errQueueFull.Error(), vllmType: typ}
}

// resetStream sends the chunks in buf, then resets the connection.
func (s *Sim) resetStream(w *bufio.Writer, c net.Conn, buf []byte) {
	if _, err := w.Write(buf); err == nil && w.Flush() == nil {
		t := time.NewTimer(resetGrace)
		select {
		case <-t.C:
		case <-s.done: // closing: do not hold Close up
		}
		t.Stop()
	}
	setLingerZero(c)
	_ = c.Close() // the server's next write fails and it drops the connection
}

// setLingerZero makes closing c send a TCP reset, not a FIN.
func setLingerZero(c net.Conn) {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok { // fasthttp's hijacked conn
		c = u.UnsafeConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // best effort: a plain close is a failure too
	}
}

// stall is X-Sim-Fail: stall: the request is taken and never answered;
// the connection stays open until the client closes it or Close.
func (s *Sim) stall(ctx *fasthttp.RequestCtx) {
	s.mu.Lock()
	if s.closed || s.stalling >= maxStalls {
		s.mu.Unlock()
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: fmt.Sprintf("too many stalled requests (%d)", maxStalls), code: "overloaded"})
		return
	}
	s.stalling++
	s.mu.Unlock()
	s.injected.Inc()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer s.stallDone()
		raw := c
		if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
			raw = u.UnsafeConn() // the hijacked conn's Close does nothing
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		s.stalls[raw] = struct{}{}
		s.mu.Unlock()
		// Read until the client closes, or Close closes raw; what the
		// client sends meanwhile is dropped.
		_, _ = io.Copy(io.Discard, c)
		s.mu.Lock()
		delete(s.stalls, raw)
		s.mu.Unlock()
	})
}

func (s *Sim) stallDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalling--
	if s.closed && s.stalling == 0 {
		close(s.stallsDone)
	}
}

// resetTimeout bounds POST /reset_prefix_cache's wait for the scheduler
// (it answers between steps).
const resetTimeout = 5 * time.Second

// resetPrefixCache is vLLM's POST /reset_prefix_cache: the scheduler
// drops every cached block (an AllBlocksCleared event) when no request
// runs, else refuses, as vLLM's reset_prefix_cache does (409 here; vLLM
// answers 200 and logs its refusal).
func (s *Sim) resetPrefixCache(ctx *fasthttp.RequestCtx) {
	reply := make(chan bool, 1)
	t := time.NewTimer(resetTimeout)
	defer t.Stop()
	select {
	case s.eng.resets <- reply:
	case <-s.done:
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: errClosed.Error(), code: "overloaded"})
		return
	case <-t.C:
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: "the scheduler did not answer in time"})
		return
	}
	if !<-reply { // the scheduler answers at once
		s.answerError(ctx, &apiError{status: fasthttp.StatusConflict, msg: "requests are running: the prefix cache was not reset"})
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}
