package reactor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/tlsconf"
	"github.com/saltus-lb/saltus/internal/tlsconf/tlstest"
)

// startTLSServer starts a test server speaking TLS with a certificate
// for 127.0.0.1 signed by the returned CA.
func startTLSServer(t testing.TB, change func(*Config)) (*Server, *testHandler, *metrics.Set, *tlstest.CA, *tlsconf.Holder) {
	t.Helper()
	ca := tlstest.NewCA(t, "reactor")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1")
	holder, err := tlsconf.Load(leaf.CertFile, leaf.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	s, h, set := startServer(t, func(c *Config) {
		c.TLS = holder.ServerConfig()
		if change != nil {
			change(c)
		}
	})
	return s, h, set, ca, holder
}

func tlsClientConfig(ca *tlstest.CA) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}}
}

func dialTLS(t *testing.T, s *Server, ca *tlstest.CA) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.Addr(), tlsClientConfig(ca))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc, bufio.NewReader(nc)
}

func TestTLSServe(t *testing.T) {
	t.Parallel()
	s, _, set, ca, _ := startTLSServer(t, nil)
	tc, br := dialTLS(t, s, ca)
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Fatalf("ALPN %q, want http/1.1 (h2 is not served)", p)
	}
	// Keep-alive: whole, streamed, and the client's address as the loop sees it.
	send(t, tc, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?|hello" {
		t.Fatalf("echo: %d %q", r.status, r.body)
	}
	send(t, tc, "GET /stream?n=3&ms=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 || r.body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Fatalf("stream: %d %q", r.status, r.body)
	}
	send(t, tc, "GET /remote HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 || r.body != tc.LocalAddr().String() {
		t.Fatalf("RemoteAddr %q, want the client's %q", r.body, tc.LocalAddr())
	}
	if v := counter(set, "saltus_tls_connections"); v != "1" {
		t.Fatalf("saltus_tls_connections = %s, want 1", v)
	}
	// A large body both ways crosses many records and the socketpair's buffers.
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	send(t, tc, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n"+big)
	if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?|"+big {
		t.Fatalf("1 MiB echo: %d, %d bytes", r.status, len(r.body))
	}
	// net/http's client over TLS too (it offers h2 and must get http/1.1).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsClientConfig(ca), ForceAttemptHTTP2: true}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + s.Addr() + "/blob?n=100000")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read whole
	if err != nil || resp.StatusCode != 200 || len(b) != 100000 || resp.ProtoMajor != 1 {
		t.Fatalf("net/http: %v %d %d bytes, HTTP/%d", err, resp.StatusCode, len(b), resp.ProtoMajor)
	}
	if v := counter(set, `saltus_tls_handshakes_total{result="ok"}`); v != "2" {
		t.Fatalf("handshakes ok = %s, want 2", v)
	}
	// The client leaves: the loop's connection closes, the gauge drops.
	_ = tc.Close() // the test's side
	deadline := time.Now().Add(10 * time.Second)
	for counter(set, "saltus_tls_connections") != "1" || counter(set, "saltus_reactor_connections_open") != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("tls connections %s, reactor %s after the client left, want 1 (net/http's idle one)",
				counter(set, "saltus_tls_connections"), counter(set, "saltus_reactor_connections_open"))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTLSServerCloses: a connection the loop closes (Connection: close)
// ends with the answer, then EOF at the client.
func TestTLSServerCloses(t *testing.T) {
	t.Parallel()
	s, _, _, ca, _ := startTLSServer(t, nil)
	tc, br := dialTLS(t, s, ca)
	send(t, tc, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 || !r.close {
		t.Fatalf("close: %d close=%v", r.status, r.close)
	}
	if b, err := io.ReadAll(br); len(b) != 0 || err != nil {
		t.Fatalf("after Connection: close: %q, %v; want EOF", b, err)
	}
}

// TestTLSReload: a connection made before a certificate reload keeps
// working on its certificate; a new one gets the new certificate.
func TestTLSReload(t *testing.T) {
	t.Parallel()
	s, _, _, ca, holder := startTLSServer(t, nil)
	old, br := dialTLS(t, s, ca)
	oldCert := old.ConnectionState().PeerCertificates[0]

	certFile, keyFile := holder.Files()
	renewed := ca.Issue(t, tlstest.RSA, 48*time.Hour, "127.0.0.1")
	renewed.WriteTo(t, certFile, keyFile)
	if err := holder.Reload(); err != nil {
		t.Fatal(err)
	}
	send(t, old, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 {
		t.Fatalf("the old connection after a reload: %d", r.status)
	}
	if !old.ConnectionState().PeerCertificates[0].Equal(oldCert) {
		t.Fatal("the old connection's certificate changed")
	}
	fresh, br2 := dialTLS(t, s, ca)
	if got := fresh.ConnectionState().PeerCertificates[0]; !got.NotAfter.Equal(renewed.NotAfter) || got.Equal(oldCert) {
		t.Fatalf("a new connection got the certificate expiring %v, want the renewed one (%v)", got.NotAfter, renewed.NotAfter)
	}
	send(t, fresh, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br2, "GET"); r.status != 200 {
		t.Fatalf("a new connection after a reload: %d", r.status)
	}
}

// waitClosed reads nc until the server closes it (EOF or reset) and
// returns what it read; the deadline bounds a server that never does.
func waitClosed(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(nc)
	if err != nil && !isReset(err) {
		t.Fatalf("want the connection closed, got %v after %q", err, b)
	}
	return b
}

// TestTLSMalformed: bad first flights close the connection and are
// counted by reason; a stalled handshake is cut at TLSHandshakeTimeout.
func TestTLSMalformed(t *testing.T) {
	t.Parallel()
	s, _, set, ca, _ := startTLSServer(t, func(c *Config) { c.TLSHandshakeTimeout = 300 * time.Millisecond })
	// A real ClientHello, to truncate.
	var hello bytes.Buffer
	func() {
		cc, sc := net.Pipe()
		defer sc.Close() //nolint:errcheck // the test's pipe
		go func() {      // the client writes its hello into the pipe and fails when it is closed
			_ = tls.Client(cc, tlsClientConfig(ca)).Handshake() // fails: nobody answers
			_ = cc.Close()                                      // the test's pipe
		}()
		buf := make([]byte, 4096)
		n, _ := sc.Read(buf) // the ClientHello, one write
		hello.Write(buf[:n])
	}()
	if hello.Len() < 100 {
		t.Fatalf("ClientHello of %d bytes", hello.Len())
	}
	for _, tc := range []struct {
		name, send, counter string
		stall               bool
		wantPrefix          string
	}{
		{name: "garbage", send: "\x00\x01\x02\x03garbage that is not a TLS record at all", counter: `saltus_tls_handshakes_total{result="error",reason="not_tls"}`},
		{name: "plain HTTP", send: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", counter: `saltus_tls_handshakes_total{result="error",reason="not_tls"}`, wantPrefix: "HTTP/1.1 400 Bad Request"},
		{name: "truncated hello", send: hello.String()[:hello.Len()/2], counter: `saltus_tls_handshakes_total{result="error",reason="closed"}`},
		{name: "stalled hello", send: hello.String()[:hello.Len()/2], stall: true, counter: `saltus_tls_handshakes_total{result="error",reason="timeout"}`},
		{name: "bad record", send: "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00", counter: `saltus_tls_handshakes_total{result="error",reason="error"}`},
	} {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(nc, tc.send); err != nil {
			t.Fatal(err)
		}
		if !tc.stall {
			_ = nc.(*net.TCPConn).CloseWrite() // the client is done
		}
		start := time.Now()
		got := waitClosed(t, nc)
		_ = nc.Close() // the test's side
		if !strings.HasPrefix(string(got), tc.wantPrefix) {
			t.Errorf("%s: the server sent %q, want it to start with %q", tc.name, got, tc.wantPrefix)
		}
		if tc.stall && time.Since(start) > 5*time.Second {
			t.Errorf("%s: closed after %v, want about the 300ms handshake timeout", tc.name, time.Since(start))
		}
		waitCounter(t, set, tc.counter)
	}
	// Still serving.
	good, br := dialTLS(t, s, ca)
	send(t, good, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 {
		t.Fatalf("after the bad clients: %d", r.status)
	}
	if v := counter(set, "saltus_tls_handshakes_in_progress"); v != "0" {
		t.Fatalf("handshakes in progress %s, want 0", v)
	}
}

// TestTLSBounds: handshakes in progress over MaxTLSHandshakes, and
// connections over MaxConns, are closed and counted.
func TestTLSBounds(t *testing.T) {
	t.Parallel()
	s, _, set, ca, _ := startTLSServer(t, func(c *Config) { c.MaxTLSHandshakes = 1; c.MaxConns = 2 })
	stalled, err := net.Dial("tcp", s.Addr()) // holds the only handshake slot
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close() //nolint:errcheck // the test's side
	waitGauge(t, set, "saltus_tls_handshakes_in_progress", "1")
	second, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, second)
	_ = second.Close() // the test's side
	waitCounter(t, set, `saltus_tls_rejected_total{reason="handshakes"}`)

	_ = stalled.Close() // frees the slot
	waitGauge(t, set, "saltus_tls_handshakes_in_progress", "0")
	dialTLS(t, s, ca)
	// The client's handshake ends before the server's (TLS 1.3): wait for
	// the slot.
	waitGauge(t, set, "saltus_tls_handshakes_in_progress", "0")
	dialTLS(t, s, ca)
	third, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, third)
	_ = third.Close() // the test's side
	waitCounter(t, set, `saltus_tls_rejected_total{reason="max_conns"}`)
}

func waitGauge(t *testing.T, set *metrics.Set, name, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for v := counter(set, name); v != want; v = counter(set, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed %s, want %s", name, v, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTLSShutdown: Shutdown closes open TLS connections (the leak check
// sees every bridge goroutine end) and refuses new ones.
func TestTLSShutdown(t *testing.T) {
	t.Parallel()
	s, _, _, ca, _ := startTLSServer(t, nil)
	tc, br := dialTLS(t, s, ca)
	send(t, tc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	read(t, br, "GET")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(br); len(b) != 0 || (err != nil && !isReset(err) && !errors.Is(err, io.ErrUnexpectedEOF)) {
		t.Fatalf("after Shutdown: %q, %v", b, err)
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("the TLS listener still accepts after Shutdown")
	}
}

// FuzzTLSFirstFlight feeds arbitrary bytes as a client's first flight:
// the acceptor never crashes, and closes the connection.
func FuzzTLSFirstFlight(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte("\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"))
	f.Add([]byte("\x16\x03\x01\xff\xff"))
	f.Add([]byte{})
	// A partial record waits for the handshake timeout: short, so the
	// fuzzer keeps its pace.
	s, _, _, _, _ := startTLSServer(f, func(c *Config) { c.TLSHandshakeTimeout = 200 * time.Millisecond })
	f.Fuzz(func(t *testing.T, b []byte) {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()                   //nolint:errcheck // the test's side
		_, _ = nc.Write(b)                 // the server may have closed already
		_ = nc.(*net.TCPConn).CloseWrite() // the flight is complete
		waitClosed(t, nc)
	})
}

// TestUpstreamTLS: DialUpstreamTLS verifies the upstream's certificate
// (a failure is OnUpstreamClose with an error naming the address,
// counted), and with the right CA bridges plaintext both ways.
func TestUpstreamTLS(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, nil)
	ca := tlstest.NewCA(t, "upstream")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "engine.test")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.Cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() //nolint:errcheck // the test's listener
	peer := make(chan net.Conn, 2)
	go func() { // a test's stand-in upstream; it ends with the listener
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_ = c.(*tls.Conn).Handshake() // fails for the client that does not trust it
			peer <- c
		}
	}()

	// Wrong roots: the handshake fails, with a clear error.
	bad := newRecUpstream()
	onLoop(t, s, 0, func() {
		if _, err := s.Loops()[0].DialUpstreamTLS(ln.Addr().String(), 2*time.Second, &tls.Config{ServerName: "engine.test"}, bad); err != nil {
			t.Errorf("DialUpstreamTLS: %v", err)
		}
	})
	select {
	case err := <-bad.closed:
		if err == nil || !strings.Contains(err.Error(), "TLS handshake with "+ln.Addr().String()) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("unverified upstream: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no close for an unverified upstream")
	}
	if c := <-peer; c != nil {
		_ = c.Close() // the refused one
	}
	if v := counter(set, `saltus_upstream_tls_handshakes_total{result="error"}`); v != "1" {
		t.Errorf("upstream TLS errors %s, want 1", v)
	}

	good := newRecUpstream()
	good.onOpen = func(u *Upstream) {
		if err := u.Write([]byte("ping")); err != nil {
			t.Errorf("Write: %v", err)
		}
	}
	onLoop(t, s, 1, func() {
		if _, err := s.Loops()[1].DialUpstreamTLS(ln.Addr().String(), 2*time.Second, &tls.Config{ServerName: "engine.test", RootCAs: ca.Pool()}, good); err != nil {
			t.Errorf("DialUpstreamTLS: %v", err)
		}
	})
	c := <-peer
	defer c.Close() //nolint:errcheck // the test's side
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("upstream read %q, %v", buf, err)
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, d := good.snapshot(); d != "pong"; _, d = good.snapshot() {
		if time.Now().After(deadline) {
			t.Fatal("no data from the TLS upstream")
		}
		time.Sleep(time.Millisecond)
	}
	_ = c.Close() // the upstream leaves: the loop hears of it
	select {
	case err := <-good.closed:
		if err != nil && !errors.Is(err, io.EOF) { // gnet reports the socketpair's EOF
			t.Errorf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no close")
	}
	if ev, _ := good.snapshot(); ev != "open,close" {
		t.Errorf("events %s", ev)
	}
	if v := counter(set, `saltus_upstream_tls_handshakes_total{result="ok"}`); v != "1" {
		t.Errorf("upstream TLS ok %s, want 1", v)
	}
}

// TestTLSClientStopsReading: a TLS client that asks for a large answer
// and never reads is cut (the loop's write-stall timeout, and the bridge's
// write deadline), and its goroutines end.
func TestTLSClientStopsReading(t *testing.T) {
	t.Parallel()
	s, _, set, ca, _ := startTLSServer(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	tc, _ := dialTLS(t, s, ca)
	send(t, tc, "GET /big?n=67108864 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitGauge(t, set, "saltus_tls_connections", "1")
	// Not reading: the server gives up on it and the bridge ends.
	waitGauge(t, set, "saltus_tls_connections", "0")
	waitGauge(t, set, "saltus_reactor_connections_open", "0")
}
