package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// guardedTCP is zmq4's TCP transport with two bounds zmq4 lacks: a frame
// whose declared size is over MaxFrame ends its connection before zmq4
// allocates it, and a listener holds at most maxConns connections and
// gives a peer handshakeTimeout to finish its ZMTP handshake. Endpoints
// say tcp://; Dial and Listen here rewrite them to this transport's name.
type guardedTCP struct{ base transport.Transport }

const (
	guardedScheme    = "saltus-tcp"
	maxConns         = 1024            // per listening socket: engines of one fleet
	handshakeTimeout = 5 * time.Second // greeting and READY of a peer that connected
)

func init() {
	if err := zmq4.RegisterTransport(guardedScheme, guardedTCP{base: transport.New("tcp")}); err != nil {
		panic("BUG: kvevents: " + err.Error())
	}
}

// guarded rewrites a tcp:// endpoint to the guarded transport; others
// are refused (ipc and inproc have no use across hosts, udp none in ZMQ).
func guarded(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok || rest == "" {
		return "", fmt.Errorf("endpoint %q is not tcp://HOST:PORT", endpoint)
	}
	return guardedScheme + "://" + rest, nil
}

// guardStats are a socket's transport counters, reached through the
// socket's context (zmq4 passes it to Dial and Listen).
type guardStats struct {
	oversize *metrics.Counter // connections ended by a frame over MaxFrame
	refused  *metrics.Counter // connections refused over maxConns
}

type guardKey struct{}

func withGuardStats(ctx context.Context, st *guardStats) context.Context {
	return context.WithValue(ctx, guardKey{}, st)
}

func statsOf(ctx context.Context) *guardStats {
	if st, ok := ctx.Value(guardKey{}).(*guardStats); ok {
		return st
	}
	// A socket made without them (the simulator's publisher): counted
	// nowhere.
	return &guardStats{oversize: new(metrics.Counter), refused: new(metrics.Counter)}
}

func (g guardedTCP) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	h := dialHookOf(ctx)
	dctx := ctx
	if h != nil {
		// A replay's socket context outlives the replay's (replay.go):
		// its dial ends with the replay's.
		dctx = h.ctx
	}
	c, err := g.base.Dial(dctx, d, addr)
	if err != nil {
		return nil, err
	}
	fg := &frameGuard{Conn: c, st: statsOf(ctx), greet: greetingLen}
	if h != nil {
		// A replay's connection (replay.go): bounded by its deadline,
		// closed on its first error (zmq4 leaves one whose handshake
		// failed open).
		fg.closeOnErr = true
		if !h.dialed(fg) {
			_ = c.Close() // a connection that cannot take a deadline is already broken
			return nil, errors.New("kvevents: cannot set the replay connection's deadline")
		}
	}
	return fg, nil
}

func (g guardedTCP) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := g.base.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &guardedListener{Listener: l, st: statsOf(ctx)}, nil
}

func (g guardedTCP) Addr(ep string) (string, error) { return g.base.Addr(ep) }

type guardedListener struct {
	net.Listener
	st   *guardStats
	open atomic.Int64
}

// Accept returns the next connection under the bound; one over it is
// closed and counted, and Accept waits for the next.
func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > maxConns {
			l.open.Add(-1)
			l.st.refused.Inc()
			_ = c.Close() // refused: nothing was read or written
			continue
		}
		if err := c.SetReadDeadline(time.Now().Add(handshakeTimeout)); err != nil {
			l.open.Add(-1)
			_ = c.Close() // a connection that cannot take a deadline is already broken
			continue
		}
		return &frameGuard{Conn: c, st: l.st, greet: greetingLen, listener: l, deadline: true}, nil
	}
}

// greetingLen is ZMTP 3's greeting: signature (10), version (2),
// mechanism (20), as-server (1), filler (31).
const greetingLen = 64

// ZMTP 3 frame flags (rfc.zeromq.org/spec/23).
const (
	flagLong    = 0x02
	flagCommand = 0x04
)

var errFrameTooLarge = errors.New("kvevents: ZMQ frame over MaxFrame")

// frameGuard follows the ZMTP framing of what it reads: the greeting,
// then each frame's flags, size (1 or 8 bytes) and body. It fails the
// read that completes a size over MaxFrame, returning none of its
// bytes, so zmq4 never sees the size it would allocate.
type frameGuard struct {
	net.Conn
	st       *guardStats
	listener *guardedListener // accepted connections: released on Close
	closed   atomic.Bool

	// Owned by the one goroutine that reads the connection (zmq4's).
	greet    int    // greeting bytes left
	state    uint8  // 0 flags, 1 short size, 2..9 long size bytes, 10 body
	command  bool   // the frame being read is a command
	size     uint64 // long size so far
	body     uint64 // body bytes left
	deadline bool   // the handshake deadline is set
	// closeOnErr closes the connection on its first read error (a
	// replay's). Set before the connection is used.
	closeOnErr bool
}

func (g *frameGuard) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if ferr := g.follow(p[:n]); ferr != nil {
		g.st.oversize.Inc()
		// zmq4 does not close a connection whose handshake failed
		// (socket.accept): close it here, as on any error before the
		// handshake ended (the handshake deadline's included).
		_ = g.Close() // the connection is given up; its close error says nothing more
		return 0, ferr
	}
	if err != nil && (g.deadline || g.closeOnErr) {
		_ = g.Close() // as above
	}
	return n, err
}

func (g *frameGuard) follow(b []byte) error {
	for len(b) > 0 {
		if g.greet > 0 {
			k := min(g.greet, len(b))
			g.greet -= k
			b = b[k:]
			continue
		}
		switch {
		case g.state == 0:
			fl := b[0]
			g.command = fl&flagCommand != 0
			g.size = 0
			if fl&flagLong != 0 {
				g.state = 2
			} else {
				g.state = 1
			}
			b = b[1:]
		case g.state == 1:
			g.body = uint64(b[0])
			b = b[1:]
			g.startBody()
		case g.state < 10:
			g.size = g.size<<8 | uint64(b[0])
			b = b[1:]
			if g.state++; g.state == 10 {
				if g.size > MaxFrame {
					return errFrameTooLarge
				}
				g.body = g.size
				g.startBody()
			}
		default:
			k := uint64(len(b))
			k = min(k, g.body)
			g.body -= k
			b = b[k:]
			if g.body == 0 {
				g.endBody()
			}
		}
	}
	return nil
}

func (g *frameGuard) startBody() {
	g.state = 10
	if g.body == 0 {
		g.endBody()
	}
}

// endBody ends a frame; the first command frame a listener's peer
// completes (its READY: the handshake is done) clears the handshake
// deadline.
func (g *frameGuard) endBody() {
	g.state = 0
	if g.command && g.deadline {
		g.deadline = false
		_ = g.Conn.SetReadDeadline(time.Time{}) // an error here surfaces as the next read's
	}
}

func (g *frameGuard) Close() error {
	if g.listener != nil && g.closed.CompareAndSwap(false, true) {
		g.listener.open.Add(-1)
	}
	return g.Conn.Close()
}
