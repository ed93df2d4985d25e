package reactor

import (
	"net/http"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// maxPipeline bounds the exchanges of one connection that are open at
// once; past it the loop stops parsing that connection until one ends.
// Their answers are what a client that pipelines and never reads can make
// saltus hold beyond MaxOutboundBytes (each answer read whole is held
// until its turn): 8 keeps that to 8 answers, and no LLM client
// pipelines (the SDKs and load generators send one request per
// connection at a time).
const maxPipeline = 8

// conn is one client connection: gnet's Conn context.
type conn struct {
	s      *Server
	ls     *Loop
	gc     gnet.Conn
	tls    *tlsWire // a TLS client's records, read and written on the loop; nil: plain
	remote string

	// any goroutine
	gone chan struct{} // closed by the loop in OnClose

	// owned by the loop
	prog        progress
	in          []byte       // an incomplete request's bytes, taken from gnet (see onTraffic)
	queue       []*Exchange  // open exchanges in request order; queue[0] is the head
	queueArr    [2]*Exchange // queue's backing array while it fits (no allocation per request)
	closing     bool         // parse no more; close once the queue is empty and the answer is out
	closed      bool
	closeQueued bool      // gc.Close called; OnClose follows
	linger      bool      // a framing error: see closeSent
	lingerUntil time.Time // set when the sending side was shut
	paused      bool      // parsing stopped: maxPipeline exchanges open, or answers owed over MaxOutboundBytes (canParse)
	sentCont    bool      // 100 Continue sent for the request being read
	headStart   time.Time // first byte of an incomplete head; zero if none
	lastActive  time.Time // last read or answer end
	stallSince  time.Time // outbound bytes stopped draining; zero if they drain
	written     int64     // bytes given to gnet's Write
	lastSent    int64     // written minus gnet's outbound buffer at the last sweep
	outbound    int64     // gnet's outbound buffer as last seen by the loop
	parked      int64     // bytes parked in exchanges behind the head
}

// onTraffic frames and serves what the client sent. Loop only.
//
// A request that arrived whole (the usual case) is parsed in gnet's own
// read buffer (Peek is a view then) and discarded. The bytes of a request
// that is not complete are moved into c.in, and later reads are appended
// there: peeking gnet's buffer again would copy all of it on every read
// (gnet joins its ring and the new read), O(n²) for a head or chunked body
// trickling in; this way each byte is copied once.
func (c *conn) onTraffic(now time.Time) {
	if c.tls == nil {
		c.frame(now)
		return
	}
	// TLS: the plaintext of the records gnet read goes to the loop's
	// buffer (ls.plain), which frame reads as it reads gnet's on a plain
	// connection; what it leaves there moves to c.in, since the buffer is
	// the next connection's. Nothing is decrypted while paused or closing
	// (the ciphertext waits in gnet's buffer, bounded as plaintext is).
	ls := c.ls
	var err error
	if !c.paused && !c.closing {
		ls.plain, err = c.tls.decrypt(ls.plain[:0])
		ls.plainOff = 0
	}
	c.frame(now)
	if rest := ls.plain[ls.plainOff:]; len(rest) > 0 && !c.closing && !c.closed {
		c.in = append(c.in, rest...)
	}
	ls.plain, ls.plainOff = ls.plain[:0], 0
	if cap(ls.plain) > maxStaged {
		ls.plain = nil // a long body's plaintext: let it go
	}
	if err != nil {
		c.close() // the client's close_notify, or a record that failed (its alert was sent)
	}
}

// frame frames and serves the bytes received (see onTraffic). Loop only.
func (c *conn) frame(now time.Time) {
	c.lastActive = now
	s := c.s
	if c.closing {
		// Nothing after a closing request (or a framing error) is read: drop
		// it, so it cannot pile up in gnet's buffer.
		c.discardAll()
		c.in = nil
		return
	}
	for !c.closing && !c.closed {
		if !c.paused && !c.canParse() {
			c.paused = true
			if len(c.queue) < maxPipeline {
				s.m.readPaused.Inc()
				c.ls.held[c] = struct{}{}
			}
		}
		if c.paused {
			// gnet keeps reading into its inbound buffer; bound it.
			if lim := s.lim.Load(); c.gc.InboundBuffered()+c.buffered()+len(c.in) > lim.maxHead+lim.maxBody {
				c.close()
			}
			return
		}
		var buf []byte
		owned := len(c.in) > 0
		if owned {
			c.takeInbound()
			buf = c.in
		} else {
			if c.buffered() == 0 {
				c.headStart = time.Time{}
				return
			}
			buf = c.peek()
		}
		if c.headStart.IsZero() && c.prog.headEnd == 0 {
			c.headStart = now
		}
		var (
			req  *Request
			used int
			err  error
		)
		if len(buf) >= c.prog.need {
			req, used, err = parse(buf, *s.lim.Load(), &c.prog)
		}
		if err != nil {
			c.frameError(err.(*httpError), buf)
			return
		}
		if req == nil {
			if !owned {
				c.takeInbound()
			}
			if c.prog.headEnd > 0 {
				c.headStart = time.Time{}
				if c.prog.expect100 && !c.sentCont && len(c.queue) == 0 {
					c.sentCont = true
					c.send(continue100)
				}
			}
			return
		}
		if owned {
			c.in = c.in[used:]
			if len(c.in) == 0 {
				c.in = nil // do not pin a large body's buffer on an idle connection
			}
		} else {
			c.discard(used)
		}
		c.prog, c.sentCont, c.headStart = progress{}, false, time.Time{}
		req.RemoteAddr = c.remote
		s.m.requests.Inc()
		if s.draining.Load() {
			req.keepAlive = false
		}
		x := c.push(req)
		if !req.keepAlive {
			c.closing = true
		}
		s.h.Serve(x)
		c.afterServe(x)
	}
}

// canParse: the connection may frame another request. Not with
// maxPipeline exchanges open, nor while the answers it owes the client
// (gnet's outbound buffer and the bytes parked behind the head) exceed
// MaxOutboundBytes: a client that sends and never reads then makes
// saltus hold at most that, plus the answers of the requests already
// open, until it drains (resume) or stalls for IdleTimeout (sweep closes
// it, saltus_reactor_timeouts_total{kind="write_stall"}). Loop only.
func (c *conn) canParse() bool {
	return len(c.queue) < maxPipeline && c.owed() <= int64(c.s.cfg.MaxOutboundBytes)
}

// resume parses again a paused connection that canParse. Loop only.
func (c *conn) resume() {
	if c.paused && !c.closed && c.canParse() {
		c.paused = false
		delete(c.ls.held, c)
		_ = c.gc.Wake(nil) // resumes parsing in OnTraffic; fails only when closing
	}
}

// takeInbound moves everything gnet has buffered to the end of c.in.
// Loop only.
func (c *conn) takeInbound() {
	if c.buffered() == 0 {
		return
	}
	c.in = append(c.in, c.peek()...)
	c.discard(-1)
}

// The bytes received and not yet taken: gnet's buffer, or for TLS the
// plaintext decrypted in this callback (the loop's ls.plain). Loop only.

// buffered is how many there are.
func (c *conn) buffered() int {
	if c.tls != nil {
		return len(c.ls.plain) - c.ls.plainOff
	}
	return c.gc.InboundBuffered()
}

// peek is all of them, a view valid until discard or the callback's end.
func (c *conn) peek() []byte {
	if c.tls != nil {
		return c.ls.plain[c.ls.plainOff:]
	}
	b, _ := c.gc.Peek(-1) // the whole buffer; err only when n > buffered
	return b
}

// discard drops the first n of them (-1: all; n at most what peek saw).
func (c *conn) discard(n int) {
	if c.tls != nil {
		if n < 0 {
			n = c.buffered()
		}
		c.ls.plainOff += n
		return
	}
	_, _ = c.gc.Discard(n) // exactly n: peek saw them
}

// discardAll drops them and, for TLS, the ciphertext not decrypted.
func (c *conn) discardAll() {
	c.discard(-1)
	if c.tls != nil {
		_, _ = c.gc.Discard(-1) // all of it: never an error
	}
}

// write hands b, answer bytes, to gnet (for TLS, as records). Loop only.
func (c *conn) write(b []byte) {
	if c.tls != nil {
		if c.tls.write(b) != nil {
			c.close() // it sent close_notify, or a write failed before
		}
		return
	}
	_, _ = c.gc.Write(b) // a failed write closes the conn; OnClose follows
}

// push opens an exchange for req at the end of the queue. Loop only.
func (c *conn) push(req *Request) *Exchange {
	x := &Exchange{c: c, req: req, counted: true}
	x.closeAfter = !req.keepAlive
	c.s.open.Add(1)
	if c.queue == nil {
		c.queue = c.queueArr[:0]
	}
	c.queue = append(c.queue, x)
	return x
}

// frameError answers a framing error in turn (after the answers of earlier
// pipelined requests) and closes the connection; buf holds the refused
// request's bytes, whose X-Request-ID the answer echoes. Loop only.
func (c *conn) frameError(e *httpError, buf []byte) {
	c.s.m.framingError(e.status)
	id := headRequestID(buf[:min(len(buf), c.s.lim.Load().maxHead)])
	if id == "" {
		id = NewRequestID()
	}
	c.s.ownAnswer(e.status, c.remote, id)
	c.closing = true
	c.linger = true
	c.in = nil
	c.headStart = time.Time{}
	x := c.push(&Request{Method: "ERROR"})
	hdr := []Header{{"Content-Type", "application/json"}, {RequestIDHeader, id}}
	x.Respond(e.status, hdr, errorBody(e.status, e.msg))
	c.afterServe(x)
}

// afterServe ends x's Serve phase: from now on answers are messages; a
// Respond staged during Serve is delivered now. Loop only.
func (c *conn) afterServe(x *Exchange) {
	if x.phase.Swap(phaseAfter) == phaseStaged {
		b := x.staged
		x.staged = nil
		c.deliver(x, b, true, false)
	}
}

// deliver takes one answer message from x's driver. Loop only.
func (c *conn) deliver(x *Exchange, b []byte, last, abort bool) {
	n := int64(len(b))
	if c.closed {
		return
	}
	if abort {
		c.close()
		return
	}
	if len(c.queue) > 0 && c.queue[0] == x {
		if len(b) > 0 {
			c.send(b)
			c.written += n
		}
		c.outbound = int64(c.gc.OutboundBuffered())
		if last {
			c.endHead()
		}
		return
	}
	if len(b) > 0 {
		x.out = append(x.out, b)
		c.parked += n
	}
	x.ended = last
}

// endHead retires the head exchange and lets the next ones send what they
// parked. Loop only.
func (c *conn) endHead() {
	for len(c.queue) > 0 {
		x := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.retire(x)
		if x.closeAfter || x.closeDelimited || c.s.draining.Load() {
			c.closing = true
			for _, y := range c.queue { // none is parsed after a closing request but a framing error's
				c.retire(y)
			}
			c.queue = nil
			break
		}
		if len(c.queue) == 0 {
			break
		}
		h := c.queue[0]
		var moved int64
		for _, b := range h.out {
			c.send(b)
			moved += int64(len(b))
			c.written += int64(len(b))
		}
		h.out = nil
		c.outbound = int64(c.gc.OutboundBuffered())
		c.parked -= moved
		if !h.ended {
			break
		}
	}
	if len(c.queue) == 0 {
		c.queue = c.queueArr[:0] // let a grown backing array go
		clear(c.queueArr[:])
	}
	c.lastActive = time.Now()
	if c.closing && len(c.queue) == 0 {
		c.closeWhenSent()
		return
	}
	c.resume()
}

// retire stops counting x as open. Loop only.
func (c *conn) retire(x *Exchange) {
	if x.counted {
		x.counted = false
		c.s.open.Add(-1)
	}
}

// closeWhenSent closes the connection now if its answer is out, else at a
// later refresh (gnet's close writes what it can without waiting and
// drops the rest). Loop only.
func (c *conn) closeWhenSent() {
	if c.gc.OutboundBuffered() == 0 && c.corkedBytes() == 0 {
		c.closeSent()
	}
}

// lingerTime is how long a connection answered with a framing error keeps
// reading (and dropping) what the client still sends.
const lingerTime = 2 * time.Second

// closeSent closes a connection whose last answer is out. After a framing
// error the client may still be sending (a body over the limit): closing
// with unread bytes makes the kernel send a reset, and the client's
// kernel may then drop the error answer it already received. So such a
// connection only shuts its sending side (the client sees the end of the
// answer) and drops what arrives until the client closes or lingerTime
// passes. Loop only.
func (c *conn) closeSent() {
	if !c.linger {
		c.close()
		return
	}
	if c.lingerUntil.IsZero() {
		c.lingerUntil = time.Now().Add(lingerTime)
		if c.tls != nil {
			c.tls.closeNotify() // the answer's end, then the socket's
		}
		if err := syscall.Shutdown(c.gc.Fd(), syscall.SHUT_WR); err != nil {
			c.close()
		}
	}
}

// refresh records gnet's outbound buffer size, closes a closing
// connection whose answer is out, and resumes a paused one that may parse
// again. Loop only.
func (c *conn) refresh() {
	if c.closed {
		return
	}
	out := int64(c.gc.OutboundBuffered())
	c.outbound = out
	if c.closing && len(c.queue) == 0 && out == 0 {
		c.closeSent()
		return
	}
	c.resume()
}

// sweep enforces the timeouts; run on the loop for each of its connections
// every tick. Loop only.
func (c *conn) sweep(now time.Time) {
	c.refresh()
	if c.closed || c.closeQueued {
		return
	}
	if !c.lingerUntil.IsZero() {
		if now.After(c.lingerUntil) {
			c.close()
		}
		return
	}
	lim := c.s.lim.Load()
	out := c.outbound
	// Stalled: bytes wait in gnet's buffer and none reached the socket
	// since the last sweep.
	sent := c.written - out
	switch {
	case out > 0 && sent == c.lastSent:
		if c.stallSince.IsZero() {
			c.stallSince = now
		} else if now.Sub(c.stallSince) > lim.idleTimeout {
			c.s.m.timeoutWrite.Inc()
			c.close()
			return
		}
	default:
		c.stallSince = time.Time{}
	}
	c.lastSent = sent
	if !c.headStart.IsZero() && now.Sub(c.headStart) > lim.headerTimeout {
		c.s.m.timeoutHeader.Inc()
		c.close()
		return
	}
	if len(c.queue) == 0 && out == 0 && c.headStart.IsZero() {
		if now.Sub(c.lastActive) > lim.idleTimeout {
			c.s.m.timeoutIdle.Inc()
			c.close()
		} else if c.s.draining.Load() && c.gc.InboundBuffered() == 0 {
			c.close() // draining: an idle keep-alive connection goes now
		}
	}
}

// close closes the connection; OnClose does the bookkeeping. Loop only.
func (c *conn) close() {
	if c.ls.corked == c {
		c.ls.flushCork() // what it was answered goes first
	}
	if !c.closed && !c.closeQueued {
		c.closeQueued = true
		if c.tls != nil {
			c.tls.closeNotify() // written with what is left, as far as the socket takes it
		}
		_ = c.gc.Close() // queued on the loop; fails only when already closing
	}
}

// onClose runs from gnet's OnClose. Loop only.
func (c *conn) onClose() {
	if c.closed {
		return
	}
	c.closed = true
	delete(c.ls.held, c)
	close(c.gone)
	var hooks []func()
	for _, x := range c.queue {
		c.retire(x)
		if x.goneHook != nil {
			hooks = append(hooks, x.goneHook)
			x.goneHook = nil
		}
	}
	c.queue = nil
	c.parked = 0
	c.outbound = 0
	for _, fn := range hooks { // after the connection's state is final
		fn()
	}
}

var _ = http.StatusOK
