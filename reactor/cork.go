package reactor

// Write coalescing. While the loop runs an upstream connection's traffic
// callback (Server.upTraffic), the bytes it hands a client connection
// are held in the loop's cork buffer and written with one write when the
// callback returns: a streamed answer whose head and events came in one
// upstream read goes out in one syscall, not one per event (the
// profile of a 16-event stream spent half its CPU in per-event writes).
// Nothing waits longer than the callback that produced it, so it adds
// no latency. One client connection is corked at a time (an upstream
// read feeds one request): bytes for another connection first write out
// the corked ones, so each connection's bytes stay in order. A write
// over maxCork goes out directly (after the corked bytes), so the buffer
// never holds more than maxCork and a large whole answer is not copied
// twice. Owned by the loop.

// maxCork bounds the bytes the cork buffer holds (its capacity, kept
// across callbacks, is at most about twice that: append's growth).
const maxCork = 64 << 10

// send hands b, an answer's bytes for c's client, to gnet, or holds it in
// the cork buffer while the loop is corked. Loop only.
func (c *conn) send(b []byte) {
	ls := c.ls
	if !ls.corking || len(b) > maxCork {
		ls.flushCork()
		c.write(b)
		return
	}
	if ls.corked != c || len(ls.cbuf)+len(b) > maxCork {
		ls.flushCork()
		ls.corked = c
	}
	ls.cbuf = append(ls.cbuf, b...)
}

// corkedBytes is the bytes of c held in the cork buffer. Loop only.
func (c *conn) corkedBytes() int {
	if c.ls.corked != c {
		return 0
	}
	return len(c.ls.cbuf)
}

// cork starts holding client writes. Loop only.
func (ls *Loop) cork() { ls.corking = true }

// uncork stops holding and writes what is held. Holding stops first: a
// write that fails closes its connection, and whatever that close's hooks
// answer on other connections goes out at once instead of waiting in the
// buffer for the next upstream read. Loop only.
func (ls *Loop) uncork() {
	ls.corking = false
	ls.flushCork()
}

// flushCork writes the corked connection's bytes with one write, then
// lets the connection act on them being out (a closing connection whose
// answer is out closes). Loop only.
func (ls *Loop) flushCork() {
	c := ls.corked
	if c == nil {
		return
	}
	ls.corked = nil
	b := ls.cbuf
	ls.cbuf = ls.cbuf[:0]
	if c.closed || len(b) == 0 {
		return
	}
	c.write(b)
	c.refresh()
}
