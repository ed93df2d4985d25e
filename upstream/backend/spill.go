package backend

import "time"

// Spilled answers. A non-streamed answer is buffered whole, up to
// Config.MaxResponseBody, so that the hooks see it (usage, response ids)
// and the client gets it in one write. One that outgrows the buffer is
// not refused: its head goes to the client (with the upstream's
// Content-Length when it sent one, else chunked), then what was buffered,
// then the rest as it arrives, read by read, on the loop that owns both
// connections: the loop path is the only upstream transport, so
// embeddings of a large batch or a file's content must pass it whole.
// Its hooks see the head, not the body (no usage, no Answer).
//
// Backpressure is a spilled answer's only bound: gnet cannot stop
// reading one connection (loopstream.go), so once the client's
// connection owes more than spillOwed, the client is not reading (a
// client reads a body at network speed, not at a token's), and the
// answer is cut: the upstream connection closed (the engine stops),
// the client's connection closed short of the length or the last
// chunk, which every HTTP client reads as a failed answer, and counted
// (saltus_stream_overflow_total). An upstream that fails or goes silent
// (FirstByteTimeout between reads, as for a buffered body) cuts it the
// same way, counted as a mid-stream failure.

// startSpill switches lr's answer, whose head c's parser holds and whose
// body outgrew MaxResponseBody, to a spilled relay and sends the head;
// false if the client left (lr is done). Counted
// (saltus_upstream_body_spilled_total).
func (lr *loopReq) startSpill(c *upConn, now time.Time) bool {
	lr.s.bodySpilled.Inc()
	c.p.spill = true
	lr.st = &loopStream{raw: true}
	keep := c.p.mode == bodyLength
	if _, err := lr.sink.WriteHeaderLoop(c.p.Status, lr.answerHeaders(c.p.Header, c.p.Conn, keep)); err != nil {
		lr.clientGone()
		return false
	}
	lr.setDeadline(now, lr.s.tune().FirstByteTimeout)
	return true
}

// spillOwed is the most a spilled answer may leave owed to its client:
// what a buffered answer may hold (MaxResponseBody), at least a stream's.
func (lr *loopReq) spillOwed() int64 {
	return max(int64(lr.s.cfg.MaxResponseBody), maxStreamOwed)
}

// emitSpill writes the next bytes of a spilled body to the client.
func (lr *loopReq) emitSpill(p []byte) error {
	owed, err := lr.sink.WriteLoop(p)
	lr.o.BytesOut += int64(len(p))
	switch {
	case err != nil:
		return errClientGone
	case owed > lr.spillOwed():
		return errStreamOverflow
	}
	return nil
}
