package reactor

// Streamed answers relayed on the connection's own loop (the backend's
// loop path): WriteHeaderLoop starts the answer, each WriteLoop sends one
// piece of its body (one chunk when chunked, so an SSE event reaches the
// client without a flush), EndLoop ends it; for a caller that runs on
// x.Loop(). They deliver at once, without a message, and never block:
// each returns the bytes the connection then owes its client (gnet's
// outbound buffer, the loop's cork buffer and the bytes parked behind the
// head), and the caller applies its own bound (a loop cannot wait for a
// client to read).
// The head exchange's bytes are framed in the loop's scratch buffer and
// handed to gnet, which copies what the socket does not take: no
// allocation per event. Loop only (x.Loop()'s).

// WriteHeaderLoop starts a streamed answer (appendStreamHead gives its
// framing); it returns the bytes owed.
func (x *Exchange) WriteHeaderLoop(status int, hdr []Header) (int64, error) {
	if !x.state.CompareAndSwap(stateNew, stateStreaming) {
		return 0, errAnswered
	}
	return x.sendLoop(x.appendStreamHead(x.c.ls.scratch[:0], status, hdr), false)
}

// WriteLoop sends p as the next piece of a streamed answer (one chunk
// when chunked); it returns the bytes owed, over MaxOutboundBytes when
// the client reads slower than the answer comes.
func (x *Exchange) WriteLoop(p []byte) (int64, error) {
	if x.state.Load() != stateStreaming {
		return 0, errAnswered
	}
	if len(p) == 0 {
		return x.c.owed(), nil
	}
	return x.sendLoop(x.appendFrame(x.c.ls.scratch[:0], p), false)
}

// EndLoop ends a streamed answer (the terminal chunk when chunked).
func (x *Exchange) EndLoop() error {
	if !x.state.CompareAndSwap(stateStreaming, stateEnded) {
		return errAnswered
	}
	var b []byte
	if x.frame == frameChunked {
		b = append(x.c.ls.scratch[:0], "0\r\n\r\n"...)
	}
	_, err := x.sendLoop(b, true)
	return err
}

// sendLoop delivers b, built in the loop's scratch buffer, now: written
// if x is the head exchange, else parked (a copy). While Serve runs it
// goes as a message (the answer must follow Serve's return).
func (x *Exchange) sendLoop(b []byte, last bool) (int64, error) {
	c := x.c
	if c.closed {
		return 0, ErrClientGone
	}
	head := x.phase.Load() != phaseServing && len(c.queue) > 0 && c.queue[0] == x
	if !head {
		b = append([]byte(nil), b...)
	}
	if x.phase.Load() == phaseServing {
		return c.owed(), x.post(b, last, false)
	}
	c.deliver(x, b, last, false)
	if head && cap(b) <= maxScratch {
		c.ls.scratch = b[:0]
	}
	return c.owed(), nil
}

// owed is the answer bytes the connection holds for its client: gnet's
// outbound buffer and the bytes parked behind the head. Loop only.
func (c *conn) owed() int64 {
	if c.closed {
		return 0
	}
	return int64(c.gc.OutboundBuffered()+c.corkedBytes()) + c.parked
}
