package backend

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/reactor"
)

// What a forward reports and answers: the caller's hooks, the outcome,
// and the answers saltus makes itself (503, 502, 504, SSE error events).

// Events is what a forward tells its caller (Hooks.Events), on the
// client connection's loop; no method may block. The caller's
// per-request value: its methods cost no allocation where closures
// would cost one each.
type Events interface {
	// FirstByte runs once when the chosen backend's response head
	// arrived (status known), before anything is written to the sink. It
	// does not run when no backend answered.
	FirstByte(b *Backend, status int)
	// FirstData runs once when the first bytes of a streamed body (SSE
	// or not) arrived: an engine sends a stream's head at once and its
	// first event after the prefill (vLLM, the simulator), so this, not
	// FirstByte, ends the prefill. Not for answers read whole.
	FirstData()
	// Done runs exactly once per ForwardOnLoop at the very end with the
	// outcome, inside ForwardOnLoop when it refuses (returns false).
	Done(o Outcome)
}

// Hooks are the caller's callbacks and choices for one ForwardOnLoop.
// They run on the client connection's loop and must not block.
type Hooks struct {
	// Events is told the forward's head, first data and end; nil: no one
	// is told.
	Events Events
	// Usage asks for Outcome.Usage. It costs a JSON parse of every
	// non-streamed answer (a copy of each SSE event that has a usage), so
	// it is off unless a hook reads it.
	Usage bool
	// Answer, when set, is shown the answer before it is relayed: the
	// whole body of a non-SSE answer read whole (up to MaxResponseBody;
	// a spilled one is not shown), or each SSE event in order for as
	// long as it returns true.
	Answer AnswerHook
	// DropUsage: saltus asked for this streamed answer's usage
	// (InjectIncludeUsage), its client did not. The usage chunk is
	// removed from the SSE answer (it still reaches Outcome.Usage) and,
	// with DropUsageNull (chat), a top-level "usage":null of the other
	// chunks (usageopt.go says which vLLM versions add what). An event
	// over the relay buffer (32 KiB) is passed through as is.
	DropUsage, DropUsageNull bool
	// ReqHeader are headers the forwarded request carries instead of
	// the client's of the same names (ASCII case-insensitive); one with
	// an empty Value only removes the client's. Package tracing's
	// traceparent, which makes saltus's span the engine's parent.
	ReqHeader []reactor.Header
	// Edit is made to the body as the request is written (Content-Length
	// counts it); the body passed is not modified: IncludeUsageSplice's,
	// without a copy of the body.
	Edit Splice
	// Requeue, when set, is asked when every candidate refused as full
	// (429 or 503 before an answer byte): true means the caller takes the
	// request back to forward it again later (its pool's gateway queue):
	// nothing is answered, the body is kept, and Done runs with
	// Outcome.Requeued. False: saltus's own 429/503 with Retry-After.
	Requeue func() bool
	// ErrorBody, when set, writes the body of saltus's own answers to
	// this request (503, 502, 504, 429) and of the SSE error event that
	// ends a cut stream, from the status, OpenAI's error type and code,
	// and the message, instead of OpenAI's error object: Anthropic's on
	// POST /v1/messages, whose SDKs read that shape.
	ErrorBody func(status int, typ, code, msg string) []byte
}

// Outcome is how one ForwardOnLoop ended.
type Outcome struct {
	Backend *Backend // the one that answered, or the last one tried; nil if none
	Status  int      // what the client got (503/502/504 when we answered ourselves)
	Retries int      // candidates tried after the first
	Err     error    // nil when the answer was relayed in full
	// ClientGone: the client left first. UpstreamDied: the upstream's
	// connection failed after the head. TimedOut: no head within
	// FirstByteTimeout, or RequestTimeout passed.
	ClientGone, UpstreamDied, TimedOut bool
	// Requeued: every candidate was full and Hooks.Requeue took the
	// request back; nothing was answered (Status 0).
	Requeued    bool
	TTFB, Total time.Duration // TTFB: request sent → head (last attempt)
	// FirstData: request sent → the first bytes of a streamed body (last
	// attempt): the time to first token. 0 for answers read whole, and
	// when no body byte came.
	FirstData time.Duration
	// Usage (only with Hooks.Usage) is the raw "usage" object of the JSON body, or of the last
	// SSE data event that had a non-null one, as the engine wrote it (not
	// validated: openai.ReadUsage reads it); nil if none was seen.
	Usage []byte
	// RequestID is the X-Request-ID sent upstream and answered: the
	// client's, or the one made for it ("" when refused before any).
	RequestID string
	// Sent is when the last attempt was sent (TTFB and FirstData count
	// from it); zero when none was.
	Sent time.Time
	// BytesOut is the answer body's bytes given to the client (heads and
	// chunk framing not counted).
	BytesOut int64
}

// Errors in Outcome.Err.
var (
	ErrOverloaded  = errors.New("backend: too many requests in flight")
	ErrClosed      = errors.New("backend: set closed")
	ErrNoCandidate = errors.New("backend: no candidate backend")
	errClientGone  = errors.New("backend: client gone")
)

// relayBufSize bounds what the SSE relay holds of one event not complete
// yet: an event longer than it is passed through in pieces (same bytes,
// earlier flush).
const relayBufSize = 32 << 10

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

// errorBody is the error body of h's request: Hooks.ErrorBody's, else
// OpenAI's.
func (h *Hooks) errorBody(status int, msg, typ, code string) []byte {
	if h.ErrorBody != nil {
		return h.ErrorBody(status, typ, code, msg)
	}
	return errorBody(status, msg, typ, code)
}

// sseFailure is why a stream was cut, as the SSE error event that ends
// it tells the client.
type sseFailure struct {
	status         int
	msg, typ, code string
}

// event is the SSE error event of f for h's request (a rare path: made
// when a stream is cut).
func (f sseFailure) event(h *Hooks) []byte {
	return []byte("event: error\ndata: " + string(h.errorBody(f.status, f.msg, f.typ, f.code)) + "\n\n")
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
		return fmt.Sprintf("the request took longer than the request timeout (%s); backend %s had not sent its response head", s.tune().RequestTimeout, s.label(b))
	}
	return fmt.Sprintf("backend %s sent no response head within the first-byte timeout (%s)", s.label(b), s.tune().FirstByteTimeout)
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

// gone reports whether the sink's client left.
func gone(sink LoopSink) bool {
	select {
	case <-sink.Gone():
		return true
	default:
		return false
	}
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

// sseLost ends an SSE answer whose upstream died.
var sseLost = sseFailure{fasthttp.StatusBadGateway, "upstream connection lost mid-stream", "server_error", "upstream_disconnected"}

// sseTimeout ends an SSE answer cut by the request timeout d.
func sseTimeout(d time.Duration) sseFailure {
	return sseFailure{fasthttp.StatusGatewayTimeout, fmt.Sprintf("the request took longer than the request timeout (%s)", d), "timeout_error", "gateway_timeout"}
}

// sseIdle ends an SSE answer whose backend sent nothing for the stream
// idle timeout d.
func sseIdle(d time.Duration) sseFailure {
	return sseFailure{fasthttp.StatusGatewayTimeout, fmt.Sprintf("no data from the backend for %s (the stream idle timeout)", d), "timeout_error", "gateway_timeout"}
}
