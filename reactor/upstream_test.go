package reactor

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recUpstream records an upstream connection's events (they run on the
// loop; the test reads them under mu).
type recUpstream struct {
	mu     sync.Mutex
	events []string
	data   strings.Builder
	closed chan error
	onOpen func(u *Upstream)
}

func newRecUpstream() *recUpstream { return &recUpstream{closed: make(chan error, 1)} }

func (r *recUpstream) OnUpstreamOpen(u *Upstream) {
	r.mu.Lock()
	r.events = append(r.events, "open")
	r.mu.Unlock()
	if r.onOpen != nil {
		r.onOpen(u)
	}
}

func (r *recUpstream) OnUpstreamData(u *Upstream, data []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data.Write(data)
	return len(data)
}

func (r *recUpstream) OnUpstreamClose(u *Upstream, err error) {
	r.mu.Lock()
	r.events = append(r.events, "close")
	r.mu.Unlock()
	r.closed <- err
}

func (r *recUpstream) snapshot() (string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.events, ","), r.data.String()
}

// onLoop runs fn on loop i and waits for it.
func onLoop(t *testing.T, s *Server, i int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	if !s.Loops()[i].Post(func() { fn(); close(done) }) {
		t.Fatal("Post refused")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not run the function")
	}
}

// TestUpstreamEcho: a dialed upstream connection opens on the loop, writes
// go out, replies come back as data, and the peer's close is reported
// once; the gauge counts it while open and client metrics do not.
func TestUpstreamEcho(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() { // a test's stand-in upstream; it ends with the listener
		c, err := ln.Accept()
		if err == nil {
			peer <- c
		}
	}()
	r := newRecUpstream()
	r.onOpen = func(u *Upstream) {
		if err := u.Write([]byte("ping")); err != nil {
			t.Errorf("Write: %v", err)
		}
	}
	onLoop(t, s, 1, func() {
		if _, err := s.Loops()[1].DialUpstream(ln.Addr().String(), time.Second, r); err != nil {
			t.Errorf("DialUpstream: %v", err)
		}
	})
	c := <-peer
	buf := make([]byte, 4)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("upstream read %q, %v", buf, err)
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, d := r.snapshot(); d == "pong" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no data from the upstream")
		}
		time.Sleep(time.Millisecond)
	}
	if got := counter(set, "saltus_upstream_conns"); got != "1" {
		t.Errorf("saltus_upstream_conns = %s, want 1", got)
	}
	if got := counter(set, "saltus_reactor_connections_open"); got != "0" {
		t.Errorf("saltus_reactor_connections_open = %s, want 0", got)
	}
	c.Close()
	select {
	case <-r.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("no close")
	}
	if ev, _ := r.snapshot(); ev != "open,close" {
		t.Errorf("events %s", ev)
	}
	if got := counter(set, "saltus_upstream_conns"); got != "0" {
		t.Errorf("saltus_upstream_conns = %s after the close, want 0", got)
	}
}

// TestUpstreamDialError: a refused connect comes back as OnUpstreamClose
// with the error, on the loop, and no open.
func TestUpstreamDialError(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := newRecUpstream()
	onLoop(t, s, 0, func() {
		if _, err := s.Loops()[0].DialUpstream(addr, time.Second, r); err != nil {
			t.Errorf("DialUpstream: %v", err)
		}
	})
	select {
	case err := <-r.closed:
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("close error %v, want connection refused", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no close")
	}
	if ev, _ := r.snapshot(); ev != "close" {
		t.Errorf("events %s", ev)
	}
	if got := counter(set, "saltus_upstream_dial_errors_total"); got != "1" {
		t.Errorf("dial errors = %s", got)
	}
}

// TestUpstreamCloseWhileDialing: Close before the connection opened drops
// it once it does: no open, one close.
func TestUpstreamCloseWhileDialing(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := newRecUpstream()
	onLoop(t, s, 0, func() {
		u, err := s.Loops()[0].DialUpstream(ln.Addr().String(), time.Second, r)
		if err != nil {
			t.Errorf("DialUpstream: %v", err)
			return
		}
		u.Close()
		if err := u.Write([]byte("x")); err != ErrUpstreamClosed {
			t.Errorf("Write after Close: %v", err)
		}
	})
	select {
	case <-r.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("no close")
	}
	if ev, _ := r.snapshot(); ev != "close" {
		t.Errorf("events %s", ev)
	}
}

// TestSweepHook: the hook runs on every loop, again and again, with a
// clock that moves forward. It waits for the third sweep of each loop
// (not for a wall-clock duration: a loaded machine delays ticks), with
// a generous bound for a hook that never runs.
func TestSweepHook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[int]int{}
	last := map[int]time.Time{}
	backwards := false
	enough := make(chan struct{})
	cfg := DefaultConfig()
	cfg.Listen, cfg.Loops = "127.0.0.1:0", 2
	s, err := NewServer(cfg, newTestHandler(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.OnSweep(func(l *Loop, now time.Time) {
		loop := l.Index()
		mu.Lock()
		defer mu.Unlock()
		if now.Before(last[loop]) {
			backwards = true
		}
		last[loop] = now
		seen[loop]++
		if seen[loop] == 3 && seen[1-loop] >= 3 {
			close(enough)
		}
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
	}
	_ = s.Shutdown(t.Context()) // nothing is open
	mu.Lock()
	defer mu.Unlock()
	if seen[0] < 3 || seen[1] < 3 || len(seen) != 2 || backwards {
		t.Errorf("sweeps per loop: %v (want ≥ 3 on loops 0 and 1 only), clock went backwards: %v", seen, backwards)
	}
}
