package reactor

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func TestEchoKeepAlive(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, nil)
	nc, br := dial(t, s)
	for i := range 3 {
		body := strings.Repeat("b", i*10)
		send(t, nc, "POST /echo?i=1 HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		r := read(t, br, "POST")
		if r.status != 200 || r.body != "POST /echo?i=1|"+body || r.close {
			t.Fatalf("request %d: got %+v", i, r)
		}
	}
	if got := counter(set, "saltus_reactor_requests_total"); got != "3" {
		t.Fatalf("requests_total = %s, want 3", got)
	}
}

func TestPipelinedInOrderWithOutOfOrderCompletion(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	// The first answer comes last; the order on the wire must not change.
	send(t, nc, "GET /delay?ms=150 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /delay?ms=50 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /stream?n=3&ms=5 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	want := []string{"/delay?ms=150", "/delay?ms=50", "data: 0\n\ndata: 1\n\ndata: 2\n\n", "GET /echo?|"}
	for i, w := range want {
		if r := read(t, br, "GET"); r.status != 200 || r.body != w {
			t.Fatalf("answer %d: got %d %q, want %q", i, r.status, r.body, w)
		}
	}
}

func TestStreamChunked(t *testing.T) {
	t.Parallel()
	s, h, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "GET /stream?n=3&gate=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	// Each event is one chunk that arrives before the next is written: the
	// handler writes event i+1 only after the test has read event i (a
	// buffered answer would never arrive: the read deadline fails it).
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("status line %q, %v", line, err)
	}
	for {
		l, _ := br.ReadString('\n')
		if l == "\r\n" {
			break
		}
		if strings.HasPrefix(l, "Content-Length") {
			t.Fatalf("streamed answer has %q", l)
		}
	}
	for i := range 3 {
		h.next <- struct{}{}
		size, _ := br.ReadString('\n')
		data := make([]byte, 11)
		if _, err := io.ReadFull(br, data); err != nil || size != "9\r\n" || string(data) != fmt.Sprintf("data: %d\n\n\r\n", i) {
			t.Fatalf("chunk %d: size %q data %q err %v", i, size, data, err)
		}
	}
	if end, _ := br.ReadString('\n'); end != "0\r\n" {
		t.Fatalf("terminal chunk %q", end)
	}
}

func TestChunkedRequestBody(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	time.Sleep(20 * time.Millisecond)
	send(t, nc, "7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n")
	if r := read(t, br, "POST"); r.body != "POST /echo?|hello, world" {
		t.Fatalf("got %+v", r)
	}
}

func TestExpectContinue(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	if r := read(t, br, "POST"); r.status != 100 {
		t.Fatalf("want 100 Continue first, got %+v", r)
	}
	send(t, nc, "ping")
	if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?|ping" {
		t.Fatalf("got %+v", r)
	}
}

func TestHTTP10(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	t.Run("close", func(t *testing.T) {
		nc, br := dial(t, s)
		send(t, nc, "GET /echo HTTP/1.0\r\n\r\n")
		if r := read(t, br, "GET"); r.status != 200 || !r.close {
			t.Fatalf("got %+v", r)
		}
		expectClosed(t, br)
	})
	t.Run("keep-alive", func(t *testing.T) {
		nc, br := dial(t, s)
		for range 2 {
			send(t, nc, "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
			if r := read(t, br, "GET"); r.status != 200 || r.hdr.Get("Connection") != "keep-alive" {
				t.Fatalf("got %+v", r)
			}
		}
	})
	t.Run("stream is close-delimited", func(t *testing.T) {
		nc, br := dial(t, s)
		send(t, nc, "GET /stream?n=2&ms=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		if r := read(t, br, "GET"); r.body != "data: 0\n\ndata: 1\n\n" {
			t.Fatalf("got %+v", r)
		}
		expectClosed(t, br)
	})
}

func TestConnectionClose11(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 || !r.close {
		t.Fatalf("got %+v", r)
	}
	expectClosed(t, br)
}

func TestFramingErrors(t *testing.T) {
	t.Parallel()
	s, h, set := startServer(t, func(c *Config) {
		c.MaxHeaderBytes = 1024
		c.MaxBodyBytes = 100
	})
	cases := []struct {
		name, req string
		status    int
		id        string // the X-Request-ID echoed; "" a generated one
	}{
		{"garbage", "HELLO\r\n\r\n", 400, ""},
		{"bad version", "GET / HTTP/2.0\r\n\r\n", 400, ""},
		{"bad header", "GET / HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", 400, ""},
		{"both framings", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, ""},
		{"bad chunk", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, ""},
		{"gzip te", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, ""},
		{"head too large", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431, ""},
		{"head too large, incomplete", "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 2000), 431, ""},
		{"body too large", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n", 413, ""},
		{"chunked body too large", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n", 413, ""},
		{"no host", "GET / HTTP/1.1\r\nx-request-id:  abc \r\n\r\n", 400, "abc"},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Request-ID: r-2\r\n\r\n", 400, "r-2"},
		{"traversal", "GET /v1/%2e%2e/x HTTP/1.1\r\nHost: a\r\nX-Request-ID: r-3\r\n\r\n", 400, "r-3"},
		{"head too large, id first", "GET / HTTP/1.1\r\nX-Request-ID: r-4\r\nX: " + strings.Repeat("a", 2000), 431, "r-4"},
		{"body too large, id", "POST / HTTP/1.1\r\nHost: x\r\nX-Request-ID: r-5\r\nContent-Length: 101\r\n\r\n", 413, "r-5"},
		{"id too long", "GET / HTTP/1.1\r\nX-Request-ID: " + strings.Repeat("i", 300) + "\r\n\r\n", 400, ""},
		// Incomplete, and no request line can come of it: answered at
		// once, not at the header timeout.
		{"tls on the plain port", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, ""},
		{"binary", "\x00\x01", 400, ""},
	}
	ids := map[string]bool{}
	for _, tc := range cases {
		nc, br := dial(t, s)
		send(t, nc, tc.req)
		r := read(t, br, "GET")
		code := map[int]string{400: "bad_request", 413: "request_too_large", 431: "header_too_large", 501: "not_implemented"}[tc.status]
		wantBody := fmt.Sprintf(`"type":"invalid_request_error","param":null,"code":%q}}`, code)
		if tc.status >= 500 {
			wantBody = fmt.Sprintf(`"type":"server_error","param":null,"code":%q}}`, code)
		}
		if r.status != tc.status || !r.close || !strings.HasPrefix(r.body, `{"error":{"message":`) || !strings.HasSuffix(r.body, wantBody) {
			t.Fatalf("%s: got %+v", tc.name, r)
		}
		id := r.hdr.Get("X-Request-ID")
		if (tc.id != "" && id != tc.id) || (tc.id == "" && (id == "" || ids[id])) {
			t.Errorf("%s: X-Request-ID %q, want %q (or a new generated one)", tc.name, id, tc.id)
		}
		ids[id] = true
		expectClosed(t, br)
	}
	for code, want := range map[int]int{400: 11, 413: 3, 431: 3, 501: 1} {
		if got := counter(set, fmt.Sprintf(`saltus_reactor_framing_errors_total{code="%d"}`, code)); got != strconv.Itoa(want) {
			t.Errorf("framing errors %d = %s, want %d", code, got, want)
		}
		if got := h.ownCount(code); got != want {
			t.Errorf("OwnAnswer(%d) called %d times, want %d", code, got, want)
		}
	}
}

func TestErrorAfterPipelinedAnswer(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "GET /delay?ms=50 HTTP/1.1\r\nHost: x\r\n\r\nBROKEN\r\n\r\n")
	if r := read(t, br, "GET"); r.status != 200 || r.body != "/delay?ms=50" {
		t.Fatalf("first answer %+v", r)
	}
	if r := read(t, br, "GET"); r.status != 400 {
		t.Fatalf("second answer %+v", r)
	}
	expectClosed(t, br)
}

func TestMaxConns(t *testing.T) {
	t.Parallel()
	s, h, set := startServer(t, func(c *Config) { c.MaxConns = 1 })
	nc, br := dial(t, s)
	send(t, nc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	read(t, br, "GET")
	_, br2 := dial(t, s)
	if r := read(t, br2, "GET"); r.status != 503 || !r.close || !strings.Contains(r.body, `"code":"too_many_connections"`) ||
		r.hdr.Get("Retry-After") != "1" || r.hdr.Get("X-Request-ID") == "" {
		t.Fatalf("got %+v", r)
	}
	expectClosed(t, br2)
	if got := counter(set, `saltus_reactor_connections_rejected_total{reason="max_conns"}`); got != "1" {
		t.Fatalf("rejected = %s", got)
	}
	if got := h.ownCount(503); got != 1 {
		t.Fatalf("OwnAnswer(503) called %d times, want 1", got)
	}
}

func TestSlowHeadClosed(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, func(c *Config) { c.HeaderTimeout = 200 * time.Millisecond })
	// Never before the timeout (counted from before the dial, so from
	// before the server's clock starts); how long after it depends on
	// the machine's load, so the only upper bound is the read deadline
	// (10 s), and the counter says which timeout closed it.
	start := time.Now()
	nc, br := dial(t, s)
	send(t, nc, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	expectClosed(t, br)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("closed after %v, before the 200ms header timeout", d)
	}
	if got := counter(set, `saltus_reactor_timeouts_total{kind="header"}`); got != "1" {
		t.Fatalf("header timeouts = %s", got)
	}
}

func TestIdleClosed(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	nc, br := dial(t, s)
	// The idle clock starts after the answer, so after start; the upper
	// bound is the read deadline (TestSlowHeadClosed says why).
	start := time.Now()
	send(t, nc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	read(t, br, "GET")
	expectClosed(t, br)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("closed after %v, before the 200ms idle timeout", d)
	}
	if got := counter(set, `saltus_reactor_timeouts_total{kind="idle"}`); got != "1" {
		t.Fatalf("idle timeouts = %s", got)
	}
}

func TestClientGoneClosesGone(t *testing.T) {
	t.Parallel()
	s, h, _ := startServer(t, nil)
	nc, _ := dial(t, s)
	send(t, nc, "GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
	h.waitServed(t, "/gone")
	_ = nc.Close()
	select {
	case <-h.goneSeen:
	case <-time.After(3 * time.Second):
		t.Fatal("Gone did not close after the client left")
	}
}

func TestPostRunsOnEachLoop(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, func(c *Config) { c.Loops = 3 })
	nc, br := dial(t, s)
	for i := range 3 {
		send(t, nc, "GET /post?loop="+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if r := read(t, br, "GET"); r.status != 200 || r.body != strconv.Itoa(i) {
			t.Fatalf("post to %d: %+v", i, r)
		}
	}
	if got := counter(set, "saltus_reactor_mailbox_full_total"); got != "0" {
		t.Fatalf("mailbox_full = %s, want 0", got)
	}
	// A loop that does not run yet refuses, and counts it.
	cfg := DefaultConfig()
	cfg.Listen, cfg.Loops = "127.0.0.1:0", 1
	idleSet := metrics.NewSet()
	idle, err := NewServer(cfg, newTestHandler(), nil, idleSet)
	if err != nil {
		t.Fatal(err)
	}
	if idle.Loops()[0].Post(func() {}) {
		t.Fatal("Post to a loop not started succeeded")
	}
	if got := counter(idleSet, "saltus_reactor_mailbox_full_total"); got != "1" {
		t.Fatalf("mailbox_full = %s, want 1", got)
	}
}

func TestPostBounded(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, func(c *Config) { c.Loops = 1; c.MailboxSize = 4 })
	// Block loop 0 until we have filled its mailbox.
	release := make(chan struct{})
	started := make(chan struct{})
	if !s.Loops()[0].Post(func() { close(started); <-release }) {
		t.Fatal("first Post refused")
	}
	<-started
	ran := make(chan int, 10)
	ok := 0
	for i := range 10 {
		if s.Loops()[0].Post(func() { ran <- i }) {
			ok++
		}
	}
	close(release)
	if ok != 4 {
		t.Fatalf("%d Posts accepted with MailboxSize 4, want 4", ok)
	}
	for want := range 4 { // the first four, in order
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("ran post %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of the 4 accepted posts ran", want)
		}
	}
	if got := counter(set, "saltus_reactor_mailbox_full_total"); got != "6" {
		t.Fatalf("mailbox_full = %s, want 6", got)
	}
}

func TestShutdownWaitsForExchanges(t *testing.T) {
	t.Parallel()
	s, h, _ := startServer(t, nil)
	nc, br := dial(t, s)
	// The answer waits for the test, which releases it once Shutdown has
	// begun draining: no race between the two on a loaded machine.
	send(t, nc, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	h.waitServed(t, "/hold")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	// Shutdown returns only once the held exchange ends; joined via shut.
	go func() { shut <- s.Shutdown(ctx) }()
	for !s.draining.Load() {
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v with an exchange open", err)
		default:
			runtime.Gosched()
		}
	}
	close(h.release)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	// The answer went out, with Connection: close (draining).
	if r := read(t, br, "GET"); r.status != 200 || r.body != "/hold" || !r.close {
		t.Fatalf("got %+v", r)
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

func TestAbortClosesMidAnswer(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "GET /abort HTTP/1.1\r\nHost: x\r\n\r\n")
	b, err := io.ReadAll(br)
	if err != nil && !isReset(err) {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(string(b), "\r\n\r\npartial") {
		t.Fatalf("got %q", b)
	}
}

func TestHead(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	send(t, nc, "HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "HEAD"); r.status != 200 || r.body != "" || r.hdr.Get("Content-Length") != "12" {
		t.Fatalf("HEAD: %+v", r)
	}
	if r := read(t, br, "GET"); r.body != "GET /echo?|" {
		t.Fatalf("GET after HEAD: %+v", r)
	}
}

func TestStopAccepting(t *testing.T) {
	t.Parallel()
	s, h, set := startServer(t, nil)
	idle, idleBr := dial(t, s)
	send(t, idle, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	read(t, idleBr, "GET")
	busy, busyBr := dial(t, s)
	send(t, busy, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	h.waitServed(t, "/hold")
	s.StopAccepting()
	// The idle keep-alive connection is closed at the next sweep; a new one at once.
	expectClosed(t, idleBr)
	_, newBr := dial(t, s)
	expectClosed(t, newBr)
	// The busy one gets its answer, with Connection: close, then the close.
	close(h.release)
	if r := read(t, busyBr, "GET"); r.status != 200 || !r.close {
		t.Fatalf("got %+v", r)
	}
	expectClosed(t, busyBr)
	if got := counter(set, `saltus_reactor_connections_rejected_total{reason="draining"}`); got != "1" {
		t.Fatalf("rejected while draining = %s", got)
	}
}

func TestShutdownTimeoutClosesGone(t *testing.T) {
	t.Parallel()
	s, h, _ := startServer(t, nil)
	nc, _ := dial(t, s)
	send(t, nc, "GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
	h.waitServed(t, "/gone")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "1 exchanges still open") {
		t.Fatalf("Shutdown = %v, want the open exchange reported", err)
	}
	select {
	case <-h.goneSeen:
	case <-time.After(3 * time.Second):
		t.Fatal("Gone not closed by Shutdown")
	}
	if s.Loops()[0].Post(func() {}) {
		t.Fatal("Post succeeded after Shutdown")
	}
}

func TestPipelineBound(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	// Twice maxPipeline requests at once: all answered, in order.
	var b strings.Builder
	for i := range 2 * maxPipeline {
		fmt.Fprintf(&b, "GET /delay?ms=%d HTTP/1.1\r\nHost: x\r\n\r\n", (2*maxPipeline-i)%7)
	}
	send(t, nc, b.String())
	for i := range 2 * maxPipeline {
		want := fmt.Sprintf("/delay?ms=%d", (2*maxPipeline-i)%7)
		if r := read(t, br, "GET"); r.body != want {
			t.Fatalf("answer %d: %q, want %q", i, r.body, want)
		}
	}
}

// A client that pipelines requests and never reads their answers stops
// being read once the answers it owes pass MaxOutboundBytes: it cannot
// make saltus hold its answers without bound (issue 16: 17 → 551 MB of
// RSS before). Reading them all resumes it, in order.
func TestUnreadAnswersStopReading(t *testing.T) {
	t.Parallel()
	s, h, set := startServer(t, func(c *Config) { c.MaxOutboundBytes = 256 << 10 })
	nc, br := dial(t, s)
	_ = nc.(*net.TCPConn).SetReadBuffer(16 << 10)
	const n, size = 400, 64 << 10 // 25 MiB if every one were answered
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "GET /blob?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", size+i)
	}
	send(t, nc, b.String())
	waitCounter(t, set, "saltus_reactor_read_paused_total")
	// What is served while paused: the kernel's socket buffers (a few
	// MiB on loopback), MaxOutboundBytes, maxPipeline parked answers.
	if got := h.blobs.Load(); got >= 200 {
		t.Fatalf("%d of %d answers made while the client reads nothing", got, n)
	}
	for i := range n {
		if r := read(t, br, "GET"); r.status != 200 || len(r.body) != size+i {
			t.Fatalf("answer %d: %d, %d bytes", i, r.status, len(r.body))
		}
	}
	if got := h.blobs.Load(); got != n {
		t.Fatalf("served %d, want %d", got, n)
	}
}

func TestWriteStallClosed(t *testing.T) {
	t.Parallel()
	s, h, set := startServer(t, func(c *Config) {
		c.IdleTimeout = 300 * time.Millisecond
		c.MaxOutboundBytes = 64 << 10
	})
	nc, _ := dial(t, s)
	_ = nc.(*net.TCPConn).SetReadBuffer(16 << 10)
	send(t, nc, "GET /big?n=67108864 HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-h.bigErr:
		if err != ErrClientGone {
			t.Fatalf("writer got %v, want ErrClientGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client that reads nothing was not closed")
	}
	if got := counter(set, `saltus_reactor_timeouts_total{kind="write_stall"}`); got != "1" {
		t.Fatalf("write_stall timeouts = %s", got)
	}
}

func TestPosterIgnoresMailboxBound(t *testing.T) {
	t.Parallel()
	s, _, set := startServer(t, func(c *Config) { c.Loops = 2; c.MailboxSize = 1 })
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	if !s.Loops()[1].Post(func() { close(started); <-release }) {
		t.Fatal("Post refused")
	}
	<-started
	if !s.Loops()[1].Post(func() {}) {
		t.Fatal("Post refused")
	}
	if s.Loops()[1].Post(func() {}) {
		t.Fatal("Post beyond MailboxSize accepted")
	}
	post := s.Loops()[1].Poster()
	done := make(chan int, 10)
	for i := range 10 {
		post(func() { done <- i })
	}
	release <- struct{}{}
	for want := range 10 {
		if got := <-done; got != want {
			t.Fatalf("Poster ran %d, want %d (in order)", got, want)
		}
	}
	if got := counter(set, "saltus_reactor_poster_dropped_total"); got != "0" {
		t.Fatalf("poster dropped = %s", got)
	}
}

func TestTrickledRequests(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, nil)
	nc, br := dial(t, s)
	_ = nc.(*net.TCPConn).SetNoDelay(true)
	// A head one byte per write, then a chunked body of 2000 chunks in 40 writes.
	head := "POST /echo?t=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	for i := range len(head) {
		send(t, nc, head[i:i+1])
	}
	var body, want strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&body, "a\r\n%010d\r\n", i)
		fmt.Fprintf(&want, "%010d", i)
	}
	body.WriteString("0\r\n\r\n")
	b := body.String()
	step := len(b)/40 + 1
	for i := 0; i < len(b); i += step {
		send(t, nc, b[i:min(i+step, len(b))])
	}
	if r := read(t, br, "POST"); r.status != 200 || r.body != "POST /echo?t=1|"+want.String() {
		t.Fatalf("got %d, %d bytes", r.status, len(r.body))
	}
	// The connection goes on.
	send(t, nc, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := read(t, br, "GET"); r.body != "GET /echo?|" {
		t.Fatalf("next request: %+v", r)
	}
}

// TestTooLargeWhileSending: a client still sending a body over the limit
// gets the 413 intact (no reset that drops it).
func TestTooLargeWhileSending(t *testing.T) {
	t.Parallel()
	s, _, _ := startServer(t, func(c *Config) { c.MaxBodyBytes = 1000 })
	nc, br := dial(t, s)
	send(t, nc, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n")
	sent := make(chan struct{})
	// The client's stand-in body sender; joined through sent.
	go func() {
		defer close(sent)
		chunk := make([]byte, 64<<10)
		for range 60 {
			if _, err := nc.Write(chunk); err != nil {
				return // the server shut or closed the connection
			}
		}
	}()
	if r := read(t, br, "POST"); r.status != 413 || !strings.Contains(r.body, `"code":"request_too_large"`) {
		t.Fatalf("got %+v", r)
	}
	<-sent
}
