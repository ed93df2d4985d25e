package reactor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// UpstreamHandler gets one upstream connection's events, on the loop that
// dialed it. None may block.
type UpstreamHandler interface {
	// OnUpstreamOpen: the connection is up; Write may be called.
	OnUpstreamOpen(u *Upstream)
	// OnUpstreamData: bytes arrived. data is gnet's buffer, valid only
	// during the call (copy what you keep); the handler returns how many
	// it used, and the rest is offered again with the next bytes.
	OnUpstreamData(u *Upstream, data []byte) (consumed int)
	// OnUpstreamClose: the connection is gone, or was never made (err
	// is the dial's error then). Called exactly once for every Upstream
	// DialUpstream returned, never from inside Write or Close.
	OnUpstreamClose(u *Upstream, err error)
}

// ErrUpstreamClosed is Upstream.Write's error on a connection that is
// closed or not open yet.
var ErrUpstreamClosed = errors.New("reactor: upstream connection closed")

// errNotRegistered: gnet dialed and enrolled the connection but never
// opened it (its registration with the poller failed).
var errNotRegistered = errors.New("reactor: upstream connection not registered by the event loop")

// Upstream is a client connection the server made to some upstream,
// owned by one event loop: its events go to its UpstreamHandler there.
// Upstream connections do not count toward MaxConns nor the client
// connection metrics; saltus_upstream_conns and friends count them.
type Upstream struct {
	s    *Server
	ls   *Loop
	h    UpstreamHandler
	addr string
	tls  *tls.Config // DialUpstreamTLS's; nil: plain TCP
	wire *tlsWire    // over TLS: set by the dial goroutine before the connection reaches the loop, then the loop's

	// owned by the loop
	gc       gnet.Conn // set in OnOpen
	in       []byte    // over TLS: plaintext the handler has not consumed yet
	opened   bool      // OnUpstreamOpen ran (and the gauge counts it)
	closeReq bool      // Close was called
	closed   bool      // OnUpstreamClose ran or is posted
	inWrite  bool      // inside gnet's Write, which may close the conn synchronously
}

// Loop returns the connection's event loop. Any goroutine.
func (u *Upstream) Loop() *Loop { return u.ls }

// Addr returns the address dialed. Any goroutine.
func (u *Upstream) Addr() string { return u.addr }

// Write sends b (gnet copies what the socket does not take at once). An
// error means the connection is closed: OnUpstreamClose has run or will
// run later, never inside Write. Loop only.
func (u *Upstream) Write(b []byte) error {
	if u.closed || u.closeReq || u.gc == nil {
		return ErrUpstreamClosed
	}
	u.inWrite = true
	var err error
	if u.wire != nil {
		err = u.wire.write(b) // fails once close_notify went; gnet's own write failure closes the conn
	} else {
		_, err = u.gc.Write(b)
	}
	u.inWrite = false
	if err != nil || u.closed {
		return ErrUpstreamClosed
	}
	return nil
}

// Close closes the connection, or drops it once dialed; OnUpstreamClose
// follows later (err nil when the connection was open). Calling it again
// does nothing. Loop only.
func (u *Upstream) Close() {
	if u.closeReq || u.closed {
		return
	}
	u.closeReq = true
	if u.gc != nil {
		if u.wire != nil && u.opened {
			u.wire.closeNotify()
		}
		_ = u.gc.Close() // queued on the loop; fails only when closing already: OnClose follows either way
	}
}

// DialUpstream connects to addr (host:port, TCP) within timeout and hands
// the connection to the loop, whose h gets its events. It never blocks:
// the connect runs on a goroutine of the server ("reactor.dial"), then
// gnet's EventLoop.Enroll moves the socket onto the loop (gnet 2.9.7's
// Register would dial itself, without a timeout). A failed connect comes
// back to h as OnUpstreamClose on the loop. Loop only (l's).
func (l *Loop) DialUpstream(addr string, timeout time.Duration, h UpstreamHandler) (*Upstream, error) {
	return l.s.dialUpstream(l, addr, timeout, nil, h)
}

// DialUpstreamTLS is DialUpstream over TLS with cfg (its ServerName, root
// CAs and verification are the caller's): the TLS handshake runs on the
// dial goroutine within the same timeout, then the loop reads and writes
// the connection's records as it does the TLS listener's (tlswire.go). A failed handshake (a
// certificate that does not verify, say) is OnUpstreamClose with an
// error naming addr, counted in saltus_upstream_tls_handshakes_total
// {result="error"} and logged (at most once per 10 s). Loop only (l's).
func (l *Loop) DialUpstreamTLS(addr string, timeout time.Duration, cfg *tls.Config, h UpstreamHandler) (*Upstream, error) {
	if cfg == nil {
		return nil, errors.New("reactor: DialUpstreamTLS without a tls.Config")
	}
	return l.s.dialUpstream(l, addr, timeout, cfg, h)
}

func (s *Server) dialUpstream(ls *Loop, addr string, timeout time.Duration, cfg *tls.Config, h UpstreamHandler) (*Upstream, error) {
	if !ls.ready.Load() {
		return nil, fmt.Errorf("reactor: loop %d not started", ls.idx)
	}
	// The posting count keeps stopEngine from stopping the group between
	// the stopped check and Go (Go after Stop panics).
	s.posting.Add(1)
	defer s.posting.Add(-1)
	if s.stopped.Load() {
		return nil, ErrClientGone
	}
	u := &Upstream{s: s, ls: ls, h: h, addr: addr, tls: cfg}
	s.m.upDials.Inc()
	//saltus:allow R2 Group.Go's mutex guards a map update and is never held across a wait; the dial itself runs on the new goroutine
	s.dialers.Go(func(ctx context.Context) { s.dial(ctx, u, timeout) })
	return u, nil
}

// dial connects u (over TLS, with its handshake) and enrolls it on its
// loop; on a dial goroutine.
func (s *Server) dial(ctx context.Context, u *Upstream, timeout time.Duration) {
	d := net.Dialer{Timeout: timeout}
	start := time.Now()
	nc, err := d.DialContext(ctx, "tcp", u.addr)
	if err != nil {
		s.upFailed(u, err)
		return
	}
	if u.tls != nil {
		w := newClientWire(nc, u.tls)
		hctx, cancel := context.WithTimeout(ctx, max(timeout-time.Since(start), time.Millisecond))
		err := w.tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = nc.Close() // the handshake failed: nothing to say
			s.m.upTLSError.Inc()
			err = fmt.Errorf("TLS handshake with %s: %w", u.addr, err)
			if n, ok := s.m.upTLSThrottle.allow(); ok {
				s.log.Warn("cannot connect to an upstream over TLS", "err", err, "suppressed", n)
			}
			s.upFailed(u, err)
			return
		}
		s.m.upTLSOK.Inc()
		u.wire = w // before Enroll: the loop reads it in OnOpen
	}
	// gnet dups the socket, registers the copy (OnOpen runs there) and
	// closes nc.
	ch, err := u.ls.el.Enroll(gnet.NewContext(context.Background(), u), nc)
	if err != nil {
		_ = nc.Close() // gnet did not take it
		s.upFailed(u, err)
		return
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			s.upFailed(u, r.Err)
			return
		}
		// gnet waited for the loop to register the connection, and OnOpen
		// runs during that; if it did not, registration failed.
		s.upFailed(u, errNotRegistered)
	case <-ctx.Done():
		// The engine stops: its loops close every connection, this one
		// included once enrolled.
	}
}

// upFailed delivers a failed dial to u's handler on its loop, unless the
// connection opened after all. Any goroutine.
func (s *Server) upFailed(u *Upstream, err error) {
	if !s.execute(u.ls, func(context.Context) error {
		if u.gc == nil && !u.closed {
			s.m.upDialErrors.Inc()
			u.closed = true
			u.h.OnUpstreamClose(u, err)
		}
		return nil
	}) {
		// The engine stopped: the loop, and the requests waiting on it,
		// are gone.
		s.m.posterDropped.Inc()
	}
}

// upOpen is gnet's OnOpen for an upstream connection. Loop only.
func (s *Server) upOpen(u *Upstream, gc gnet.Conn) gnet.Action {
	u.gc = gc
	if u.wire != nil {
		u.wire.attach(gc, u.ls)
	}
	if u.closeReq || u.closed {
		return gnet.Close // closed while dialing; OnClose follows
	}
	u.opened = true
	s.upConns.Add(1)
	u.h.OnUpstreamOpen(u)
	return gnet.None
}

// upTraffic is gnet's OnTraffic for an upstream connection. Loop only.
func (s *Server) upTraffic(u *Upstream, gc gnet.Conn) {
	if u.closeReq || u.closed {
		_, _ = gc.Discard(-1) // nobody reads a closing connection
		return
	}
	if u.wire != nil {
		s.upTrafficTLS(u)
		return
	}
	buf, _ := gc.Peek(-1) // the whole buffer; err only when n > buffered
	u.ls.cork()           // what this read answers goes out in one write (cork.go)
	n := u.h.OnUpstreamData(u, buf)
	u.ls.uncork()
	if n > 0 {
		_, _ = gc.Discard(n) // at most what Peek saw
	}
}

// upTrafficTLS is upTraffic over TLS: the records' plaintext, after what
// the handler left unconsumed (u.in), is offered in the loop's buffer
// (ls.plain), and what the handler leaves again moves to u.in. Loop only.
func (s *Server) upTrafficTLS(u *Upstream) {
	ls := u.ls
	buf := ls.plain[:0]
	if len(u.in) > 0 {
		buf = append(buf, u.in...)
	}
	buf, err := u.wire.decrypt(buf)
	n := 0
	if len(buf) > len(u.in) && !u.closed && !u.closeReq { // new bytes (and a write of the KeyUpdate answer did not close it)
		ls.cork()
		n = u.h.OnUpstreamData(u, buf)
		ls.uncork()
	}
	if !u.closed && !u.closeReq {
		u.in = append(u.in[:0], buf[n:]...)
		if len(u.in) == 0 {
			u.in = nil // do not pin a long answer's buffer on an idle connection
		}
	}
	ls.plain = buf[:0]
	if cap(ls.plain) > maxStaged {
		ls.plain = nil
	}
	if err != nil && !u.closeReq && !u.closed {
		u.Close() // the server's close_notify, or a record that failed: the connection is done
	}
}

// upClose is gnet's OnClose for an upstream connection. Loop only.
func (s *Server) upClose(u *Upstream, err error) {
	if u.opened {
		u.opened = false
		s.upConns.Add(-1)
	}
	if u.closed {
		return
	}
	u.closed = true
	if !u.inWrite {
		u.h.OnUpstreamClose(u, err)
		return
	}
	// Inside Write (gnet closes a connection whose write failed at once):
	// tell the handler later, not in the middle of its own call.
	if !s.execute(u.ls, func(context.Context) error {
		u.h.OnUpstreamClose(u, err)
		return nil
	}) {
		s.m.posterDropped.Inc() // the engine stopped
	}
}

// OnSweep sets fn to run on every loop each sweep (at most every
// upstreamTick), with the loop and the time: the upstream side's
// deadlines. Call it before Start, once. Any goroutine.
func (s *Server) OnSweep(fn func(l *Loop, now time.Time)) {
	if s.started.Load() {
		panic("BUG: reactor.Server.OnSweep after Start")
	}
	s.sweepHook = fn
}

// upstreamTick is the sweep period when an OnSweep hook is set: fine
// enough for connect and response timeouts of seconds.
const upstreamTick = 50 * time.Millisecond
