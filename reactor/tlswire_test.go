package reactor

import (
	"bufio"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// holdConn holds every write after the first (the ClientHello) until
// release, then sends them with one write: the client's last handshake
// flight and its first request reach the server in one segment.
type holdConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	held   []byte
	hold   bool
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	if c.hold && c.writes > 1 {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *holdConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.held)
	c.held = nil
	return err
}

// TestTLSRecordsOnLoop: the loop reads and writes a TLS client's records
// however they arrive: a request that came with the handshake's last
// flight (crypto/tls read it during the handshake, and no more bytes
// come), one record per byte, and two requests in one record.
func TestTLSRecordsOnLoop(t *testing.T) {
	t.Parallel()
	s, _, _, ca, _ := startTLSServer(t, nil)
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		raw, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = raw.Close() })
		_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
		hc := &holdConn{Conn: raw, hold: v == tls.VersionTLS13}
		cfg := tlsClientConfig(ca)
		cfg.MinVersion, cfg.MaxVersion = v, v
		tc := tls.Client(hc, cfg)
		if v == tls.VersionTLS12 {
			// TLS 1.2 waits for the server's Finished: nothing to hold.
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := tc.Handshake(); err != nil { // the client's Finished is held
				t.Fatal(err)
			}
			if _, err := tc.Write([]byte("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst")); err != nil {
				t.Fatal(err)
			}
			if err := hc.release(); err != nil {
				t.Fatal(err)
			}
		}
		br := bufio.NewReader(tc)
		if v == tls.VersionTLS13 {
			if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?|first" {
				t.Fatalf("TLS 1.3, the request with the last flight: %d %q", r.status, r.body)
			}
		}
		// One record per byte.
		for _, b := range []byte("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc") {
			if _, err := tc.Write([]byte{b}); err != nil {
				t.Fatal(err)
			}
		}
		if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?|abc" {
			t.Fatalf("version %x, a record per byte: %d %q", v, r.status, r.body)
		}
		// Two requests in one record, answered in order.
		send(t, tc, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n1POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n2")
		for _, want := range []string{"1", "2"} {
			if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?|"+want {
				t.Fatalf("version %x, pipelined %s: %d %q", v, want, r.status, r.body)
			}
		}
		// A long answer crosses many records and gnet writes.
		send(t, tc, "GET /blob?n=300000 HTTP/1.1\r\nHost: x\r\n\r\n")
		if r := read(t, br, "GET"); r.status != 200 || r.body != strings.Repeat("b", 300000) {
			t.Fatalf("version %x, blob: %d, %d bytes", v, r.status, len(r.body))
		}
	}
}

// TestTLSBadRecordOnLoop: after the handshake, bytes that are not a valid
// record (a forged application record, a record over the size limit)
// close the connection on the loop, which sends its alert and forgets
// the connection; the server keeps serving others.
func TestTLSBadRecordOnLoop(t *testing.T) {
	t.Parallel()
	s, _, set, ca, _ := startTLSServer(t, nil)
	for _, bad := range [][]byte{
		append([]byte{23, 3, 3, 0, 32}, make([]byte, 32)...), // application data that fails its AEAD
		{23, 3, 3, 0xff, 0xff},                               // longer than any record may be
		{99, 3, 3, 0, 1, 0},                                  // no such record type
	} {
		raw, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, tlsClientConfig(ca))
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		send(t, tc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n") // the connection is on a loop, and works
		if r := read(t, bufio.NewReader(tc), "GET"); r.status != 200 {
			t.Fatalf("before the bad record: %d", r.status)
		}
		if _, err := raw.Write(bad); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, raw)
		_ = raw.Close() // the test's side
	}
	waitGauge(t, set, "saltus_tls_connections", "0")
	tc, br := dialTLS(t, s, ca)
	send(t, tc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 {
		t.Fatalf("after the bad records: %d", r.status)
	}
}
