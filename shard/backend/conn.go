package backend

import (
	"net"

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
