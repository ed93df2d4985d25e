package reactor

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
)

// ErrClientGone is returned by Exchange writes once the client has left
// (or the connection was closed, or the server stopped).
var ErrClientGone = errors.New("reactor: client gone")

// errAnswered is returned for a second answer to one exchange: a handler
// bug, not a client's doing.
var errAnswered = errors.New("reactor: exchange already answered or not started")

// Handler serves requests.
type Handler interface {
	// Serve runs on the connection's event loop for each complete request, in arrival
	// order. It must not block. It answers through x, now or later, from any goroutine.
	Serve(x *Exchange)
}

// OwnAnswers is an optional interface of a Handler. The reactor calls
// OwnAnswer for each answer it gives by itself, which Serve never sees:
// framing errors (400, 413, 431, 501) and the 503 of a connection over
// MaxConns; so a handler that counts every answer (saltus_requests_total)
// counts these too, and none twice. client is the client's address ("" if
// unknown), requestID the X-Request-ID the answer carried ("" for the
// max-conns 503, which has none). On a loop; it must not block.
type OwnAnswers interface {
	OwnAnswer(status int, client, requestID string)
}

// Exchange states (Exchange.state).
const (
	stateNew       = iota // nothing written
	stateStreaming        // WriteHeaderLoop done
	stateEnded            // Respond, RespondLoop, EndLoop or Abort done
)

// Exchange phases (Exchange.phase).
const (
	phaseServing = iota // Serve has not returned yet
	phaseStaged         // Respond staged its bytes during Serve
	phaseAfter          // Serve returned; answers are messages
)

// Body framings of a streamed answer.
const (
	frameChunked = iota // HTTP/1.1 without Content-Length: each WriteLoop is one chunk
	frameLength         // the handler gave Content-Length: bytes as they are
	frameClose          // HTTP/1.0 without Content-Length: the close ends the body
)

// Exchange is one request and its response. Responses of pipelined
// requests are sent in request order: a later exchange's bytes wait
// (bounded) until earlier ones have ended.
//
// Respond and Abort may be called from any goroutine (whoever answers):
// off the loop they never touch loop-owned state, each turns into a
// message run on the connection's loop (gnet's EventLoop.Execute, a
// lock-free FIFO queue). RespondLoop and the streamed answer
// (streamloop.go) are for the connection's own loop.
type Exchange struct {
	c   *conn
	req *Request

	// owned by the answering side (the loop, for a streamed answer)
	frame          int
	closeDelimited bool // set by WriteHeaderLoop; read by the loop when the answer ends

	phase  atomic.Int32 // phaseServing while Serve runs, then phaseStaged or phaseAfter
	staged []byte       // a Respond's bytes staged during Serve: written before phase becomes phaseStaged, read by the loop after

	state atomic.Int32 // stateNew, stateStreaming, stateEnded; atomic so a misuse is caught, not a race

	// owned by the loop
	out        [][]byte // answer bytes parked until this exchange is the head
	ended      bool     // the last message arrived (parked or sent)
	closeAfter bool     // close the connection once this answer is out
	counted    bool     // still counted in Server.open
	goneHook   func()   // SetGoneHook's; run by the connection's close
}

// Request returns the request. Any goroutine.
func (x *Exchange) Request() *Request { return x.req }

// Loop returns the event loop that owns the connection. Any goroutine.
func (x *Exchange) Loop() *Loop { return x.c.ls }

// Gone returns a channel closed when the client disconnects (or the
// connection is closed). Any goroutine.
func (x *Exchange) Gone() <-chan struct{} { return x.c.gone }

// Respond sends the whole answer and adds Content-Length. It never blocks.
// Any goroutine; exactly one of Respond, RespondLoop or
// WriteHeaderLoop(+WriteLoop*)+EndLoop per exchange (a second answer is
// dropped).
func (x *Exchange) Respond(status int, hdr []Header, body []byte) {
	if !x.state.CompareAndSwap(stateNew, stateEnded) {
		return // a handler bug; nothing sensible to send
	}
	b := x.appendAnswer(status, hdr, body)
	// Answered while Serve still runs (typically by Serve itself, on the
	// loop): stage the bytes for the loop to write when Serve returns, no
	// message needed. The CAS after the store publishes it; if the loop
	// has moved on already, the CAS fails and it goes as a message.
	x.staged = b
	if x.phase.CompareAndSwap(phaseServing, phaseStaged) {
		return
	}
	x.staged = nil
	_ = x.post(b, true, false) // ErrClientGone: nobody left to tell
}

// appendAnswer renders a whole answer with Content-Length.
func (x *Exchange) appendAnswer(status int, hdr []Header, body []byte) []byte {
	return appendAnswer(make([]byte, 0, 128+len(body)+32*len(hdr)), x.req, x.closing(), status, hdr, body)
}

// appendAnswer appends a whole answer with Content-Length to b; closing:
// the connection closes after it.
func appendAnswer(b []byte, req *Request, closing bool, status int, hdr []Header, body []byte) []byte {
	b = appendStatusLine(b, status)
	b, _ = appendHeaders(b, hdr)
	b = appendConnection(b, req, closing)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	if req.Method != "HEAD" && status >= 200 && status != 204 && status != 304 {
		b = append(b, body...)
	}
	return b
}

// closing reports whether the connection closes after x's answer.
func (x *Exchange) closing() bool { return !x.req.keepAlive || x.c.s.draining.Load() }

// RespondLoop is Respond for a caller on the exchange's own loop
// (x.Loop()): the answer is staged if Serve still runs, else handed to the
// connection at once, with no message and no wake-up of the loop. It
// clears the gone hook. Loop only (x.Loop()'s).
func (x *Exchange) RespondLoop(status int, hdr []Header, body []byte) {
	if !x.state.CompareAndSwap(stateNew, stateEnded) {
		return // a handler bug; nothing sensible to send
	}
	x.goneHook = nil
	c := x.c
	if x.phase.Load() != phaseServing && !c.closed && len(c.queue) > 0 && c.queue[0] == x {
		// The head exchange, answered on its loop: rendered into the
		// loop's scratch buffer and written now (gnet copies what the
		// socket does not take), no allocation.
		ls := c.ls
		b := appendAnswer(ls.scratch[:0], x.req, x.closing(), status, hdr, body)
		c.send(b)
		c.written += int64(len(b))
		if cap(b) <= maxScratch {
			ls.scratch = b[:0]
		}
		c.outbound = int64(c.gc.OutboundBuffered())
		if !c.closed {
			c.endHead()
		}
		return
	}
	b := x.appendAnswer(status, hdr, body)
	if x.phase.Load() == phaseServing { // on the loop: Serve cannot return meanwhile
		x.staged = b
		x.phase.Store(phaseStaged)
		return
	}
	c.deliver(x, b, true, false)
}

// maxScratch bounds the per-loop answer buffer kept between answers.
const maxScratch = 256 << 10

// SetGoneHook makes fn run on the loop when the client's connection
// closes before the exchange has ended (the loop-native way to learn what
// Gone says); nil removes it. fn must not block; it runs inside the
// connection's close. Loop only (x.Loop()'s).
func (x *Exchange) SetGoneHook(fn func()) { x.goneHook = fn }

// appendConnection adds the Connection header the framing needs.
func (x *Exchange) appendConnection(b []byte) []byte {
	return appendConnection(b, x.req, x.closing())
}

func appendConnection(b []byte, req *Request, closing bool) []byte {
	switch {
	case closing:
		return append(b, "Connection: close\r\n"...)
	case req.Proto10:
		return append(b, "Connection: keep-alive\r\n"...)
	}
	return b
}

// appendStreamHead appends a streamed answer's head to b and sets the
// framing (WriteHeaderLoop's): chunked for HTTP/1.1, delimited by the
// connection's close for HTTP/1.0, or as is if hdr has Content-Length
// (then the writes must add up to it).
func (x *Exchange) appendStreamHead(b []byte, status int, hdr []Header) []byte {
	b = appendStatusLine(b, status)
	b, cl := appendHeaders(b, hdr)
	switch {
	case cl >= 0:
		x.frame = frameLength
		b = x.appendConnection(b)
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, cl, 10)
		b = append(b, "\r\n"...)
	case x.req.Proto10:
		x.frame = frameClose
		x.closeDelimited = true
		b = append(b, "Connection: close\r\n"...)
	default:
		x.frame = frameChunked
		b = x.appendConnection(b)
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendFrame appends p to b as one piece of the body: a chunk when the
// answer is chunked.
func (x *Exchange) appendFrame(b, p []byte) []byte {
	if x.frame != frameChunked {
		return append(b, p...)
	}
	b = strconv.AppendUint(b, uint64(len(p)), 16)
	b = append(b, "\r\n"...)
	b = append(b, p...)
	return append(b, "\r\n"...)
}

// Abort closes the connection without finishing the answer (an upstream
// that died in the middle of a non-SSE body). Any goroutine.
func (x *Exchange) Abort() {
	if x.state.Swap(stateEnded) == stateEnded {
		return
	}
	_ = x.post(nil, true, true) // ErrClientGone: already closed
}

// post hands b to the connection's loop. Any goroutine.
func (x *Exchange) post(b []byte, last, abort bool) error {
	select {
	case <-x.c.gone:
		return ErrClientGone
	default:
	}
	if !x.c.s.execute(x.c.ls, func(context.Context) error {
		x.c.deliver(x, b, last, abort)
		return nil
	}) {
		// The engine is shutting down; the connection is going with it.
		return ErrClientGone
	}
	return nil
}
