package reactor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/panjf2000/gnet/v2"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/rules"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_tls_handshakes_total":       "TLS handshakes on the data plane's listener, by result (ok, error) and, for errors, reason (timeout: not done within --tls-handshake-timeout; closed: the client left; not_tls: the first bytes were not a TLS record, plain HTTP answered 400; error: any other, a bad ClientHello, no shared version, cipher or protocol).",
		"saltus_tls_rejected_total":         "TLS connections closed at accept, by reason (max_conns: over --max-conns; handshakes: over reactor.Config.MaxTLSHandshakes, 256, in progress; draining; enroll: the event loop could not take the connection).",
		"saltus_tls_connections":            "TLS client connections open on the data plane (handshake done, their records read and written on an event loop).",
		"saltus_tls_handshakes_in_progress": "TLS handshakes running on the data plane's acceptor goroutines.",
	})
}

// tlsEdge is the TLS acceptor (Config.TLS): handshakes (Go's crypto/tls)
// on goroutines of its own, then each connection's records on an event
// loop (tlsWire). A loop never runs a handshake.
type tlsEdge struct {
	cfg     *tls.Config    // Config.TLS with NextProtos and MinVersion set
	dir     string         // private (0700) directory of the engine's socket
	sock    string         // the engine's own listener: a unix socket only the probes of discoverLoops reach
	ln      net.Listener   // the client listener (TCP, Config.Listen)
	workers *rules.Workers // "reactor.tls": the handshakes

	conns       atomic.Int64  // accepted and not closed: handshaking or on a loop (bounded by MaxConns)
	handshaking atomic.Int64  // bounded by MaxTLSHandshakes
	onLoop      atomic.Int64  // handshake done, on a loop
	next        atomic.Uint32 // round-robin choice of a loop
	acceptErrs  throttle      // Accept's errors (EMFILE...) logged at most once per 10 s

	hsOK, hsTimeout, hsClosed, hsNotTLS, hsError       *metrics.Counter
	rejMaxConns, rejHandshakes, rejDraining, rejEnroll *metrics.Counter
}

// tlsPeer is the gnet context of a TLS client's socket as it is
// enrolled: it marks it as a client connection and carries its wire.
type tlsPeer struct{ wire *tlsWire }

func newTLSEdge(s *Server, set *metrics.Set) *tlsEdge {
	cfg := s.cfg.TLS.Clone()
	cfg.NextProtos = []string{"http/1.1"} // h2 is not served
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	e := &tlsEdge{cfg: cfg, workers: rules.NewWorkers(s.group, "reactor.tls", 10*time.Second)}
	set.GetOrCreateGauge("saltus_tls_connections", func() float64 { return float64(e.onLoop.Load()) })
	set.GetOrCreateGauge("saltus_tls_handshakes_in_progress", func() float64 { return float64(e.handshaking.Load()) })
	hs := func(reason string) *metrics.Counter {
		if reason == "" {
			return set.GetOrCreateCounter(`saltus_tls_handshakes_total{result="ok"}`)
		}
		return set.GetOrCreateCounter(`saltus_tls_handshakes_total{result="error",reason="` + reason + `"}`)
	}
	rej := func(reason string) *metrics.Counter {
		return set.GetOrCreateCounter(`saltus_tls_rejected_total{reason="` + reason + `"}`)
	}
	e.hsOK, e.hsTimeout, e.hsClosed, e.hsNotTLS, e.hsError = hs(""), hs("timeout"), hs("closed"), hs("not_tls"), hs("error")
	e.rejMaxConns, e.rejHandshakes, e.rejDraining, e.rejEnroll = rej("max_conns"), rej("handshakes"), rej("draining"), rej("enroll")
	return e
}

// listen opens the client listener and the private directory of the
// engine's socket. Start's goroutine.
func (e *tlsEdge) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	dir, err := os.MkdirTemp("", "saltus-engine-") // 0700
	if err != nil {
		_ = ln.Close() // nothing was accepted on it
		return fmt.Errorf("cannot make a private directory for the event loops' socket (TLS mode needs a writable $TMPDIR, e.g. an emptyDir at /tmp under a read-only root file system): %w", err)
	}
	e.ln, e.dir, e.sock = ln, dir, filepath.Join(dir, "loops.sock")
	return nil
}

// closeListener closes the client listener: the acceptor returns, and
// new connections are refused by the kernel. Any goroutine; again does
// nothing.
func (e *tlsEdge) closeListener() {
	_ = e.ln.Close() // a second call's "use of closed" error is the only one possible
}

// accept is the acceptor goroutine ("reactor.tls-accept"): it takes
// connections off the TCP listener until it is closed, bounds them, and
// hands each to a worker for its handshake.
func (s *Server) acceptTLS(ctx context.Context) {
	e := s.tls
	var backoff time.Duration
	for {
		nc, err := e.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			// EMFILE and friends: wait as net/http does (5 ms doubling to
			// 1 s), the pending connections stay in the kernel's backlog.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if n, ok := e.acceptErrs.allow(); ok {
				s.log.Error("cannot accept a TLS connection", "err", err, "retry_in", backoff, "suppressed", n)
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		if !s.accepting.Load() {
			e.rejDraining.Inc()
			_ = nc.Close() // draining: refused before a byte was read
			continue
		}
		if e.conns.Add(1) > int64(s.lim.Load().maxConns) {
			e.conns.Add(-1)
			e.rejMaxConns.Inc()
			_ = nc.Close() // over MaxConns, before a byte was read: no TLS to answer 503 with yet
			continue
		}
		if e.handshaking.Add(1) > int64(s.cfg.MaxTLSHandshakes) {
			e.handshaking.Add(-1)
			e.conns.Add(-1)
			e.rejHandshakes.Inc()
			_ = nc.Close() // too many handshakes in progress
			continue
		}
		if !s.goTLS(func(ctx context.Context) { s.serveTLS(ctx, nc) }) {
			e.handshaking.Add(-1)
			e.conns.Add(-1)
			_ = nc.Close() // the server stopped
			return
		}
	}
}

// goTLS runs fn on a TLS worker unless the server stopped. Any
// goroutine.
func (s *Server) goTLS(fn func(context.Context)) bool { return s.goOn(s.tls.workers, fn) }

// goOn runs fn on one of workers unless the server stopped (rules.Workers
// panics once its group has). Any goroutine.
func (s *Server) goOn(w *rules.Workers, fn func(context.Context)) bool {
	s.posting.Add(1) // holds off stopEngine's group Stop, as in DialUpstream
	defer s.posting.Add(-1)
	if s.stopped.Load() {
		return false
	}
	w.Go(fn)
	return true
}

// serveTLS is one TLS connection's handshake, on a TLS worker, within
// TLSHandshakeTimeout; then gnet enrolls the socket on a loop (round
// robin), which reads and writes its records from then on (tlsWire).
func (s *Server) serveTLS(ctx context.Context, nc net.Conn) {
	e := s.tls
	w := newServerWire(nc, e.cfg)
	hctx, cancel := context.WithTimeout(ctx, s.cfg.TLSHandshakeTimeout)
	err := w.tc.HandshakeContext(hctx)
	timedOut := hctx.Err() == context.DeadlineExceeded
	cancel()
	e.handshaking.Add(-1)
	if err != nil {
		e.handshakeFailed(nc, err, timedOut)
		_ = nc.Close() // a failed handshake: nothing more to say
		e.conns.Add(-1)
		return
	}
	e.hsOK.Inc()
	ls := s.loops[int(e.next.Add(1)-1)%len(s.loops)] // every loop is bound: the acceptor starts after discoverLoops
	// gnet dups the socket, registers the copy on the loop (OnOpen runs
	// there: attach) and closes nc. From here on only the loop uses w.
	ch, err := ls.el.Enroll(gnet.NewContext(context.Background(), &tlsPeer{wire: w}), nc)
	if err != nil {
		e.enrollFailed(s, nc, err)
		return
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			e.enrollFailed(s, nil, r.Err) // gnet closed nc
		}
	case <-ctx.Done(): // the engine stops, and closes its connections
	}
}

// release ends the count of one TLS connection that reached a loop. Loop
// only (OnOpen, OnClose).
func (e *tlsEdge) release() { e.conns.Add(-1) }

// handshakeFailed counts a failed handshake by reason, and answers plain
// HTTP sent to the TLS port with a 400 in plain HTTP (as net/http does).
func (e *tlsEdge) handshakeFailed(nc net.Conn, err error, timedOut bool) {
	var re tls.RecordHeaderError
	var ne net.Error
	switch {
	case timedOut || (errors.As(err, &ne) && ne.Timeout()):
		e.hsTimeout.Inc()
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		e.hsClosed.Inc()
	case errors.As(err, &re):
		e.hsNotTLS.Inc()
		if re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second)) // fails only on a closed conn, which Write reports
			_, _ = nc.Write(plainToTLS)                          // best effort: the connection closes either way
		}
	default:
		e.hsError.Inc()
	}
}

// enrollFailed closes a connection gnet could not take (nc, unless gnet
// closed it already) and counts it.
func (e *tlsEdge) enrollFailed(s *Server, nc net.Conn, err error) {
	e.rejEnroll.Inc()
	e.conns.Add(-1)
	if n, ok := e.acceptErrs.allow(); ok {
		s.log.Error("cannot hand a TLS connection to an event loop", "err", err, "suppressed", n)
	}
	if nc != nil {
		_ = nc.Close() // the client sees the connection close
	}
}

// looksLikeHTTP reports whether a TLS record header is the start of an
// HTTP/1 request line (as net/http's tlsRecordHeaderLooksLikeHTTP).
func looksLikeHTTP(h [5]byte) bool {
	switch string(h[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH", "CONNE", "TRACE":
		return true
	}
	return false
}

// plainToTLS is the answer to plain HTTP on the TLS port.
var plainToTLS = func() []byte {
	body := errorBody(http.StatusBadRequest, "plain HTTP sent to a TLS port: use https://")
	return fmt.Appendf(nil, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}()
