package backend

import (
	"net"

	"github.com/valyala/fasthttp"
)

// trackedConn wraps every connection the control clients (probes,
// /v1/models, the engine scrape) dial: the Set keeps every open one
// (Set.conns), so that Close can close the connections of calls still
// waiting for an answer; and a call can reach the connection its
// response arrived on (connOf): fasthttp keeps it private, but stores
// conn.LocalAddr() in the Response, and ours points back to the
// connection (the scrape bounds its body's reads with it).
type trackedConn struct {
	net.Conn
	laddr connAddr
	set   *Set
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

// dialError marks an error of a dial: the request never reached the
// backend, so it is safe to retry anywhere.
type dialError struct{ err error }

func (e *dialError) Error() string { return "cannot dial backend: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.set.connMu.Lock()
	delete(c.set.conns, c)
	c.set.connMu.Unlock()
	return c.Conn.Close()
}

// staleRetry is the loop path's stale-connection rule: one more send, on
// a fresh connection to the same backend, when a pooled keep-alive
// connection that had answered before broke before any byte of this
// answer came (the server closed it while it sat idle), unless that one
// retry was used. A fresh connection that breaks is the backend's doing:
// only the candidate retries (MaxRetries) may send the request again
// (fasthttp's client, which saltus used to forward with, retried on
// fresh connections too and sent every POST twice to a backend that
// resets).
func staleRetry(answeredBefore, gotAnswerBytes, used bool) bool {
	return answeredBefore && !gotAnswerBytes && !used
}
