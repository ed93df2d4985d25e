package backend

import (
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// Streamed answers on the loop path. An answer whose head says
// text/event-stream is relayed event by event as its bytes arrive,
// through the sseRelay (sserelay.go), on the loop that owns both the
// client's and the upstream's connection: the parser de-chunks each read
// into Body, the relay cuts it into events, and each event is one chunk
// handed to the client's connection at once (reactor.Exchange.WriteLoop:
// no message, no allocation); the events of one upstream read leave in
// one write (the reactor corks the loop's writes during the read:
// reactor/cork.go). The keep-alive upstream connection goes back to its
// pool when the stream ends.
//
// Backpressure: a loop cannot wait for a slow client, and gnet 2.9.7
// cannot stop reading one connection (no pause: its reads go on into
// its inbound buffer whatever the handler returns), so the bound is the
// client's: once the answers its connection owes exceed maxStreamOwed
// (the client reads slower than the engine generates, for long), the
// stream ends with an SSE error event, the upstream connection is closed
// (the engine stops generating), and it is counted
// (saltus_stream_overflow_total). A token stream is a few KiB/s; a
// client that lets 4 MiB of one pile up has stopped reading.
//
// A stream silent for StreamIdleTimeout after its head ends with an SSE
// error event naming it; RequestTimeout, when set, bounds it whole; an
// upstream that dies mid-stream ends it with an error event, never a
// fabricated [DONE]; the client leaving closes the upstream at once.

// maxStreamOwed bounds the answer bytes a streamed answer on the loop
// path may leave owed to a client that does not read.
const maxStreamOwed = 4 << 20

// errStreamOverflow: the client let maxStreamOwed of a stream pile up.
var errStreamOverflow = errors.New("the client did not read the stream: over 4 MiB owed")

// loopStream is a streamed answer's state on the loop path: an SSE
// stream, or a spilled whole answer (raw).
type loopStream struct {
	r    sseRelay
	data bool // the first body bytes arrived
	raw  bool // a spilled body (spill.go): relayed as it comes, not cut into events
}

// wantsStream reports whether the answer whose head c's parser holds is
// relayed as it comes: an SSE body.
func wantsStream(c *upConn) bool {
	return !c.p.noBody && isSSE([]byte(c.p.CT))
}

// startStream sends the stream's head to the client; false if the client
// left (lr is done).
func (lr *loopReq) startStream(c *upConn, now time.Time) bool {
	lr.st = &loopStream{r: newSSERelay(&lr.hooks, lr.b, c.p.Status)}
	c.p.spill = true // streamData drains each read
	if _, err := lr.sink.WriteHeaderLoop(c.p.Status, lr.answerHeaders(c.p.Header, c.p.Conn, false)); err != nil {
		lr.clientGone()
		return false
	}
	lr.setDeadline(now, lr.s.tune().StreamIdleTimeout)
	return true
}

// streamData relays what the parser de-chunked from a read of c, then
// ends the stream if the answer is complete or broken (perr). used of
// the read's total bytes were the answer's.
func (lr *loopReq) streamData(c *upConn, used, total int, perr error, now time.Time) {
	st := lr.st
	if len(c.p.Body) > 0 {
		if !st.data {
			st.data = true
			lr.o.FirstData = now.Sub(lr.t0)
			if lr.hooks.Events != nil {
				lr.hooks.Events.FirstData()
			}
		}
		var err error
		if st.raw {
			err = lr.emitSpill(c.p.Body)
		} else {
			err = st.r.feed(c.p.Body, lr.emit)
		}
		c.p.Body = c.p.Body[:0]
		switch {
		case errors.Is(err, errStreamOverflow):
			lr.s.streamOverflow.Inc()
			lr.streamFailed(err, kindMidstream, sseOverflow.event(&lr.hooks), now)
			return
		case err != nil:
			lr.clientGone()
			return
		}
		if st.raw {
			lr.setDeadline(now, lr.s.tune().FirstByteTimeout) // as a buffered body's reads
		} else {
			lr.setDeadline(now, lr.s.tune().StreamIdleTimeout)
		}
	}
	switch {
	case perr != nil:
		lr.streamFailed(perr, kindMidstream, sseLost.event(&lr.hooks), now)
	case c.p.done():
		lr.streamEnd(c, c.p.keepAlive() && used == total, now)
	}
}

// emit writes one event (or piece) to the client.
func (lr *loopReq) emit(ev []byte) error {
	owed, err := lr.sink.WriteLoop(ev)
	lr.o.BytesOut += int64(len(ev))
	switch {
	case err != nil:
		return errClientGone
	case owed > maxStreamOwed:
		return errStreamOverflow
	}
	return nil
}

// streamEnd ends a stream whose answer came whole: the rest relayed, the
// connection back to its pool (reuse) or closed, the client's answer
// ended.
func (lr *loopReq) streamEnd(c *upConn, reuse bool, now time.Time) {
	st := lr.st
	if !st.raw {
		if st.r.flush(lr.emit) != nil {
			lr.clientGone()
			return
		}
		lr.o.Usage = st.r.usage()
	}
	lr.c = nil
	c.release(reuse, now)
	if lr.b != nil {
		lr.b.slotFreed(now)
		lr.b = nil
	}
	if lr.sink.EndLoop() != nil {
		lr.o.ClientGone, lr.o.Err = true, errClientGone
	}
	lr.finish(now)
}

// streamFailed ends a stream whose upstream failed (or whose client
// overflowed): counted as kind, the upstream connection closed, ev (an
// SSE error event) and the end sent to the client.
func (lr *loopReq) streamFailed(err error, kind errKind, ev []byte, now time.Time) {
	if lr.c != nil {
		lr.c.kill()
		lr.c = nil
	}
	if b := lr.o.Backend; b != nil && !errors.Is(err, errStreamOverflow) && !errors.Is(err, ErrClosed) {
		b.m.errs[kind].Inc()
	}
	lr.o.UpstreamDied = !errors.Is(err, errStreamOverflow) && !errors.Is(err, ErrClosed)
	lr.o.Err = fmt.Errorf("backend %s: mid-stream: %w", lr.o.Backend.URL, err)
	switch {
	case lr.st.raw:
		// A body has no error event: the connection closes short of the
		// length (or of the last chunk), which every client reads as
		// a failed answer.
		lr.sink.Abort()
	default:
		lr.o.Usage = lr.st.r.usage()
		ev = lr.st.r.errorEvent(ev)
		lr.o.BytesOut += int64(len(ev))
		if _, werr := lr.sink.WriteLoop(ev); werr != nil || lr.sink.EndLoop() != nil {
			lr.o.ClientGone = gone(lr.sink)
		}
	}
	lr.finish(now)
}

// streamTimeout ends a stream whose deadline passed: the idle timeout,
// or the request's.
func (lr *loopReq) streamTimeout(now time.Time) {
	lr.o.TimedOut = true
	kind, f, err := lr.s.tune().streamTimeout(lr.reqEnd.IsZero() || now.Before(lr.reqEnd))
	lr.streamFailed(err, kind, f.event(&lr.hooks), now)
}

// sseShutdown ends a stream cut by the Set's Close.
var sseShutdown = sseFailure{fasthttp.StatusServiceUnavailable, "the load balancer is shutting down", "server_error", "service_unavailable"}

// sseOverflow ends a stream its client did not read.
var sseOverflow = sseFailure{fasthttp.StatusServiceUnavailable, "the stream was ended: the client did not read it (over 4 MiB owed)", "server_error", "client_too_slow"}
