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
	"strconv"
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
		"saltus_tls_rejected_total":         "TLS connections closed at accept, by reason (max_conns: over --max-conns; handshakes: over reactor.Config.MaxTLSHandshakes, 256, in progress; draining; bridge: the socketpair to the event loop could not be made).",
		"saltus_tls_connections":            "TLS client connections open on the data plane (handshake done, bridged to an event loop).",
		"saltus_tls_handshakes_in_progress": "TLS handshakes running on the data plane's acceptor goroutines.",
	})
}

// bridgeBuf is each direction's copy buffer of a bridged connection: one
// TLS record's plaintext at most (16 KiB), so a record is moved in one
// read and one write.
const bridgeBuf = 16 << 10

// tlsEdge is the TLS acceptor (Config.TLS): Go's crypto/tls on goroutines
// of its own, feeding the loops plaintext over socketpairs. The loops
// never see a handshake nor a record.
type tlsEdge struct {
	cfg     *tls.Config    // Config.TLS with NextProtos and MinVersion set
	dir     string         // private (0700) directory of the engine's socket
	sock    string         // the engine's own listener: a unix socket only the probes of discoverLoops reach
	ln      net.Listener   // the client listener (TCP, Config.Listen)
	workers *rules.Workers // "reactor.tls": a connection's handshake and inbound copy, and its outbound copy

	conns       atomic.Int64  // accepted and not closed: handshaking or bridged (bounded by MaxConns)
	handshaking atomic.Int64  // bounded by MaxTLSHandshakes
	bridged     atomic.Int64  // handshake done, bridged to a loop
	next        atomic.Uint32 // round-robin choice of a loop
	acceptErrs  throttle      // Accept's errors (EMFILE...) logged at most once per 10 s

	hsOK, hsTimeout, hsClosed, hsNotTLS, hsError       *metrics.Counter
	rejMaxConns, rejHandshakes, rejDraining, rejBridge *metrics.Counter
}

// tlsPeer is the gnet context of a bridged connection as it is enrolled:
// it marks the loop end of a socketpair as a client connection and
// carries the TLS client's address (the socketpair's own is "@").
type tlsPeer struct{ remote string }

func newTLSEdge(s *Server, set *metrics.Set) *tlsEdge {
	cfg := s.cfg.TLS.Clone()
	cfg.NextProtos = []string{"http/1.1"} // h2 is not served
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	e := &tlsEdge{cfg: cfg, workers: rules.NewWorkers(s.group, "reactor.tls", 10*time.Second)}
	set.GetOrCreateGauge("saltus_tls_connections", func() float64 { return float64(e.bridged.Load()) })
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
	e.rejMaxConns, e.rejHandshakes, e.rejDraining, e.rejBridge = rej("max_conns"), rej("handshakes"), rej("draining"), rej("bridge")
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

// serveTLS is one TLS connection's life, on a TLS worker: the handshake
// within TLSHandshakeTimeout, then a socketpair whose one end is enrolled
// on a loop as a client connection, and the client-to-loop copy; a second
// worker copies loop-to-client (bridgeOut).
func (s *Server) serveTLS(ctx context.Context, nc net.Conn) {
	e := s.tls
	tc := tls.Server(nc, e.cfg)
	hctx, cancel := context.WithTimeout(ctx, s.cfg.TLSHandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	timedOut := hctx.Err() == context.DeadlineExceeded
	cancel()
	if err != nil {
		e.handshakeFailed(nc, err, timedOut)
		_ = nc.Close() // a failed handshake: nothing more to say
		// conns first: a slot seen free (the gauge) is free in both bounds.
		e.conns.Add(-1)
		e.handshaking.Add(-1)
		return
	}
	e.handshaking.Add(-1)
	defer e.conns.Add(-1)
	e.hsOK.Inc()
	ours, loops, err := socketPair()
	if err != nil {
		e.bridgeFailed(s, tc, err)
		return
	}
	ls := s.loops[int(e.next.Add(1)-1)%len(s.loops)] // every loop is bound: the acceptor starts after discoverLoops
	ch, err := ls.el.Enroll(gnet.NewContext(context.Background(), &tlsPeer{remote: nc.RemoteAddr().String()}), loops)
	if err != nil {
		_ = loops.Close() // gnet did not take it
		_ = ours.Close()  // nothing was written to it
		e.bridgeFailed(s, tc, err)
		return
	}
	// gnet dups the loop end, registers it on the loop (OnOpen runs there)
	// and closes `loops`.
	select {
	case r := <-ch:
		if r.Err != nil {
			_ = ours.Close() // the loop never had it
			e.bridgeFailed(s, tc, r.Err)
			return
		}
	case <-ctx.Done():
		_ = ours.Close() // the engine stops; it closes its end
		_ = tc.Close()   // shutting down
		return
	}
	e.bridged.Add(1)
	defer e.bridged.Add(-1)
	s.bridge(ctx, tc, ours, e.workers)
}

// bridge joins a TLS connection and our end of a socketpair whose other
// end a loop owns: this goroutine copies TLS-to-loop (bridgeIn), a second
// one from workers copies loop-to-TLS (bridgeOut). It returns when both
// ended. The stop of the server's group closes both sides.
func (s *Server) bridge(ctx context.Context, tc *tls.Conn, ours *net.UnixConn, workers *rules.Workers) {
	closeAll := func() {
		_ = tc.Close()   // sends close_notify (bounded by crypto/tls's own 5 s write deadline); an error means closed already
		_ = ours.Close() // the loop sees EOF and closes its end; an error means closed already
	}
	stop := context.AfterFunc(ctx, closeAll) // shutdown: unblock both copies
	defer stop()
	done := make(chan struct{})
	if !s.goOn(workers, func(context.Context) { defer close(done); s.bridgeOut(tc, ours, closeAll) }) {
		closeAll()
		return
	}
	bridgeIn(tc, ours)
	// The loop closes its end on EOF, which ends bridgeOut (or the
	// AfterFunc does at shutdown).
	<-done
}

// bridgeIn copies what the client sends to the loop until the client
// closes or fails, then half-closes the loop's end: the loop reads EOF
// and closes the connection, as it does for a plain TCP client.
func bridgeIn(tc *tls.Conn, ours *net.UnixConn) {
	buf := make([]byte, bridgeBuf)
	for {
		n, err := tc.Read(buf)
		if n > 0 {
			if _, werr := ours.Write(buf[:n]); werr != nil {
				break // the loop closed its end: bridgeOut sees it too
			}
		}
		if err != nil {
			break
		}
	}
	_ = ours.CloseWrite() // an error means closed already
}

// bridgeOut copies what the loop answers to the client until the loop
// closes its end (or a write stalls: the client stopped taking bytes for
// IdleTimeout/2 to IdleTimeout), then closes both sides.
func (s *Server) bridgeOut(tc *tls.Conn, ours *net.UnixConn, closeAll func()) {
	defer closeAll()
	buf := make([]byte, bridgeBuf)
	var deadline time.Time
	for {
		n, err := ours.Read(buf)
		if n > 0 {
			// A client that stops reading stalls this write; the loop's
			// own write-stall timeout cannot reach it here. The deadline
			// moves only once half of it is used: a timer update per
			// write cost ~1.5 % of the CPU under load.
			if now, idle := time.Now(), s.lim.Load().idleTimeout; deadline.Sub(now) < idle/2 {
				deadline = now.Add(idle)
				_ = tc.SetWriteDeadline(deadline) // fails only on a closed conn, which Write reports
			}
			if _, werr := tc.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

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

// bridgeFailed closes a connection whose socketpair or enrollment failed.
func (e *tlsEdge) bridgeFailed(s *Server, tc *tls.Conn, err error) {
	e.rejBridge.Inc()
	if n, ok := e.acceptErrs.allow(); ok {
		s.log.Error("cannot hand a TLS connection to an event loop", "err", err, "suppressed", n)
	}
	_ = tc.Close() // the client gets close_notify and nothing else
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

// socketPair returns both ends of a new AF_UNIX stream socketpair as
// *net.UnixConn (gnet's Enroll takes a net.Conn; it dups the descriptor).
func socketPair() (ours, loops *net.UnixConn, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conv := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "socketpair."+strconv.Itoa(fd))
		defer f.Close() //nolint:errcheck // FileConn dup'ed it; closing the original cannot lose data
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	if ours, err = conv(fds[0]); err != nil {
		_ = syscall.Close(fds[1]) // never used
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	if loops, err = conv(fds[1]); err != nil {
		_ = ours.Close() // never used
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return ours, loops, nil
}
