package backend

import (
	"net"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// trackedConn wraps every connection our HostClients dial, so that a
// Forward can reach the connection its response arrived on: fasthttp
// keeps it private, but stores conn.LocalAddr() in the Response
// (Response.LocalAddr), and ours points back to the connection. Forward
// needs it to lift the read deadline that bounded the wait for the head
// (fasthttp leaves it on the connection while the body streams, and an
// SSE answer may stream for minutes).
//
// The Set also keeps every open one (Set.conns), so that Close can close
// the connections of requests still waiting for their head.
type trackedConn struct {
	net.Conn
	laddr connAddr
	set   *Set
	// read is the bytes read so far, sentAt its value when the latest
	// request began to be written: a connection that had answered before
	// (sentAt > 0) and broke with nothing read since is a pooled one the
	// server had closed (stale); a fresh one that breaks is the backend's
	// doing, not the pool's.
	read, sentAt atomic.Int64
	writing      atomic.Bool // a request's bytes are being written: set by Write, cleared by Read
}

// Read counts what it reads (stale).
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.writing.Store(false)
	if n > 0 {
		c.read.Add(int64(n))
	}
	return n, err
}

// Write marks where a request began (stale).
func (c *trackedConn) Write(p []byte) (int, error) {
	if !c.writing.Swap(true) {
		c.sentAt.Store(c.read.Load())
	}
	return c.Conn.Write(p)
}

// stale reports whether the connection broke as a pooled connection the
// server had closed does (it had answered before, and nothing of the
// current answer was read), so that staleRetry allows one more send,
// unless used.
func (c *trackedConn) stale(used bool) bool {
	at := c.sentAt.Load()
	return staleRetry(at > 0, c.read.Load() != at, used)
}

// staleRetry is the stale-connection rule of both transports: one more
// send, on a fresh connection to the same backend, when a pooled
// keep-alive connection that had answered before broke before any byte
// of this answer came (the server closed it while it sat idle), unless
// that one retry was used. A fresh connection that breaks is the
// backend's doing: only the candidate retries (MaxRetries) may send the
// request again.
func staleRetry(answeredBefore, gotAnswerBytes, used bool) bool {
	return answeredBefore && !gotAnswerBytes && !used
}

type connAddr struct {
	net.Addr
	c *trackedConn
}

func newTrackedConn(c net.Conn, s *Set) *trackedConn {
	tc := &trackedConn{Conn: c, set: s}
	tc.laddr = connAddr{Addr: c.LocalAddr(), c: tc}
	return tc
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.set.connMu.Lock()
	delete(c.set.conns, c)
	c.set.connMu.Unlock()
	return c.Conn.Close()
}

// LocalAddr returns the connection's local address, which also leads back
// to the connection (see connOf).
func (c *trackedConn) LocalAddr() net.Addr { return &c.laddr }

// connOf returns the connection resp arrived on, or nil.
func connOf(resp *fasthttp.Response) *trackedConn {
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		return a.c
	}
	return nil
}

// dialError marks an error of our dialer: the request never reached the
// backend, so it is safe to retry anywhere.
type dialError struct{ err error }

func (e *dialError) Error() string { return "cannot dial backend: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
