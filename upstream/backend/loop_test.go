package backend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/reactor"
)

// loopEnv is the loop path end to end: a real reactor server whose
// handler calls ForwardOnLoop with the candidates the test chose, a Set
// attached to its loops, and test upstreams.
type loopEnv struct {
	s     *Set
	ms    *metrics.Set
	srv   *reactor.Server
	rms   *metrics.Set // the reactor's
	cands atomic.Pointer[[]*Backend]
	outs  chan Outcome
	hooks atomic.Pointer[func(*Hooks)] // edits each request's hooks (read on the loops)
}

func newLoopEnv(t *testing.T, edit func(*Config)) *loopEnv {
	t.Helper()
	s, ms := testSet(t, edit)
	e := &loopEnv{s: s, ms: ms, rms: metrics.NewSet(), outs: make(chan Outcome, 64)}
	rc := reactor.DefaultConfig()
	rc.Listen, rc.Loops = "127.0.0.1:0", 2
	srv, err := reactor.NewServer(rc, e, slog.New(slog.DiscardHandler), e.rms)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	s.UseLoops(srv)
	srv.OnSweep(s.Tick)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // a test may leave an exchange open on purpose
	})
	return e
}

func (e *loopEnv) use(bs ...*Backend) { e.cands.Store(&bs) }

func (e *loopEnv) Serve(x *reactor.Exchange) {
	r := x.Request()
	h := Hooks{Events: outcomeTo(e.outs), Usage: true}
	if edit := e.hooks.Load(); edit != nil {
		(*edit)(&h)
	}
	e.s.ForwardOnLoop(x.Loop(), r, r.Body, *e.cands.Load(), x, []reactor.Header{{Name: "X-Extra", Value: "1"}}, h)
}

// outcomeTo is Events that sends the outcome to a channel.
type outcomeTo chan Outcome

func (outcomeTo) FirstByte(*Backend, int) {}
func (outcomeTo) FirstData()              {}
func (c outcomeTo) Done(o Outcome)        { c <- o }

// do sends body on c and returns the answer and the request's outcome.
func (e *loopEnv) do(t *testing.T, c *client, body string) (*http.Response, string, Outcome) {
	t.Helper()
	c.send(t, body)
	resp, got := c.read(t)
	return resp, got, e.outcome(t)
}

func (e *loopEnv) outcome(t *testing.T) Outcome {
	t.Helper()
	select {
	case o := <-e.outs:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome within 10 s")
		return Outcome{}
	}
}

// client is one keep-alive client connection to the env's server.
type client struct {
	nc net.Conn
	br *bufio.Reader
}

func (e *loopEnv) dial(t *testing.T) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", e.srv.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{nc, bufio.NewReader(nc)}
}

func (c *client) send(t *testing.T, body string, hdr ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "POST /v1/chat/completions HTTP/1.1\r\nHost: lb\r\nContent-Type: application/json\r\nConnection: keep-alive, X-Hop\r\nX-Hop: drop-me\r\n")
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c.nc, b.String()); err != nil {
		t.Fatal(err)
	}
}

func (c *client) read(t *testing.T) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: "POST"})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

// rawUpstream is a scripted upstream: serve runs for each accepted
// connection (n counts them from 1), on a goroutine of its own.
type rawUpstream struct {
	ln       net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newRawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader, n int)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	u.wg.Add(1)
	// A test's stand-in upstream: its goroutines end with the listener
	// and the connections, closed (and joined) by the cleanup.
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(u.accepted.Add(1))
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				serve(c, bufio.NewReader(c), n)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// readReq reads one request (head and Content-Length body); false at EOF.
func readReq(br *bufio.Reader) (*http.Request, string, bool) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, "", false
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, "", false
	}
	return r, string(b), true
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nX-Up: %d\r\nKeep-Alive: timeout=5\r\n\r\n%s"

func answerOK(c net.Conn, n int, body string) {
	fmt.Fprintf(c, okAnswer, len(body), n, body)
}

// TestLoopKeepAliveReuse: sequential requests share one upstream
// connection; the answer carries the upstream's headers minus hop-by-hop
// ones, X-Request-ID, X-Saltus-Backend and the extra headers; the request
// went out with its own headers minus hop-by-hop ones, Host and
// X-Request-ID set; usage is read from the body.
func TestLoopKeepAliveReuse(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	reqs := make(chan string, 64)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		for {
			r, body, ok := readReq(br)
			if !ok {
				return
			}
			reqs <- fmt.Sprintf("%s %s host=%s hop=%q id=%s ct=%s body=%s", r.Method, r.URL, r.Host, r.Header.Get("X-Hop"),
				r.Header.Get("X-Request-ID"), r.Header.Get("Content-Type"), body)
			answerOK(c, n, `{"id":"x","usage":{"prompt_tokens":3}}`)
		}
	})
	b := mustAdd(t, e.s, up.url())
	e.use(b)
	c := e.dial(t)
	for i := range 20 {
		c.send(t, fmt.Sprintf(`{"i":%d}`, i), "X-Request-ID", fmt.Sprintf("rid-%d", i))
		resp, body := c.read(t)
		o := e.outcome(t)
		got := <-reqs
		want := fmt.Sprintf(`POST /v1/chat/completions host=%s hop="" id=rid-%d ct=application/json body={"i":%d}`, b.host, i, i)
		if got != want {
			t.Fatalf("upstream got %s\nwant %s", got, want)
		}
		if resp.StatusCode != 200 || body != `{"id":"x","usage":{"prompt_tokens":3}}` || resp.Header.Get("X-Up") != "1" ||
			resp.Header.Get("X-Saltus-Backend") != b.URL || resp.Header.Get("X-Request-ID") != fmt.Sprintf("rid-%d", i) ||
			resp.Header.Get("X-Extra") != "1" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("answer %d %v %s", resp.StatusCode, resp.Header, body)
		}
		if o.Status != 200 || o.Err != nil || o.Backend != b || string(o.Usage) != `{"prompt_tokens":3}` || o.TTFB <= 0 || o.Total < o.TTFB {
			t.Fatalf("outcome %+v", o)
		}
	}
	if n := up.accepted.Load(); n != 1 {
		t.Errorf("upstream connections = %d, want 1", n)
	}
	if b.InFlight() != 0 || e.s.inFlight.Load() != 0 {
		t.Errorf("in flight: backend %d, set %d", b.InFlight(), e.s.inFlight.Load())
	}
	// The first one is counted by the flusher, a sweep later: wait for
	// the count, not for a duration.
	name := fmt.Sprintf(`saltus_backend_requests_total{backend=%q,code="200"}`, b.URL)
	waitFor(t, func() bool { return counter(e.ms, name) >= 20 })
	if n := counter(e.ms, name); n != 20 {
		t.Errorf("requests_total{200} = %d, want 20", n)
	}
}

// TestLoopGeneratedRequestID: without one from the client, the request
// gets a generated X-Request-ID, and so does the answer.
func TestLoopGeneratedRequestID(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	ids := make(chan string, 1)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		r, _, ok := readReq(br)
		if ok {
			ids <- r.Header.Get("X-Request-ID")
			answerOK(c, n, "{}")
		}
	})
	e.use(mustAdd(t, e.s, up.url()))
	c := e.dial(t)
	c.send(t, "{}")
	resp, _ := c.read(t)
	e.outcome(t)
	id := <-ids
	if !strings.HasPrefix(id, e.s.idPrefix) || resp.Header.Get("X-Request-ID") != id {
		t.Errorf("upstream saw %q, client got %q", id, resp.Header.Get("X-Request-ID"))
	}
}

// TestLoopReqHeader: Hooks.ReqHeader's headers replace the client's of
// the same names (any case); an empty value only removes the client's;
// the others pass as sent.
func TestLoopReqHeader(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	edit := func(h *Hooks) {
		h.ReqHeader = []reactor.Header{{Name: "traceparent", Value: "00-ours-01"}, {Name: "tracestate", Value: ""}}
	}
	e.hooks.Store(&edit)
	got := make(chan http.Header, 1)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		r, _, ok := readReq(br)
		if ok {
			got <- r.Header
			answerOK(c, n, "{}")
		}
	})
	e.use(mustAdd(t, e.s, up.url()))
	c := e.dial(t)
	c.send(t, "{}", "Traceparent", "00-theirs-01", "TraceState", "k=v", "X-Other", "kept")
	c.read(t)
	e.outcome(t)
	h := <-got
	if tp := h.Values("Traceparent"); len(tp) != 1 || tp[0] != "00-ours-01" || h.Get("Tracestate") != "" || h.Get("X-Other") != "kept" {
		t.Errorf("upstream saw %v", h)
	}
}

// TestLoopStaleConnRetried: a pooled connection the upstream closes with
// the next request unanswered is retried once on a fresh connection, on
// the same backend, without counting as a retry.
func TestLoopStaleConnRetried(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		for i := 0; ; i++ {
			if _, _, ok := readReq(br); !ok {
				return
			}
			if n == 1 && i == 1 {
				return // the second request on the first connection: closed unanswered
			}
			answerOK(c, n, `{}`)
		}
	})
	b := mustAdd(t, e.s, up.url())
	e.use(b)
	c := e.dial(t)
	for i := range 3 {
		c.send(t, "{}")
		resp, _ := c.read(t)
		o := e.outcome(t)
		if resp.StatusCode != 200 || o.Status != 200 || o.Retries != 0 {
			t.Fatalf("request %d: %d, outcome %+v", i, resp.StatusCode, o)
		}
		if want := map[int]string{0: "1", 1: "2", 2: "2"}[i]; resp.Header.Get("X-Up") != want {
			t.Errorf("request %d served by connection %s, want %s", i, resp.Header.Get("X-Up"), want)
		}
	}
	if n := counter(e.ms, "saltus_retries_total"); n != 0 {
		t.Errorf("retries_total = %d", n)
	}
	if b.passive.Load() != 0 {
		t.Errorf("breaker count %d", b.passive.Load())
	}
}

// TestLoopConnectRefused: a refused connect goes to the next candidate;
// all refused is 502 with the goroutine path's error body.
func TestLoopConnectRefused(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		for {
			if _, _, ok := readReq(br); !ok {
				return
			}
			answerOK(c, n, `{}`)
		}
	})
	dead := []*Backend{mustAdd(t, e.s, closedPort(t)), mustAdd(t, e.s, closedPort(t)), mustAdd(t, e.s, closedPort(t))}
	good := mustAdd(t, e.s, up.url())
	c := e.dial(t)

	e.use(dead[0], good)
	c.send(t, "{}")
	resp, _ := c.read(t)
	o := e.outcome(t)
	if resp.StatusCode != 200 || resp.Header.Get("X-Saltus-Backend") != good.URL || o.Retries != 1 || o.Backend != good {
		t.Fatalf("%d from %s, outcome %+v", resp.StatusCode, resp.Header.Get("X-Saltus-Backend"), o)
	}

	e.use(dead...)
	c.send(t, "{}")
	resp, body := c.read(t)
	o = e.outcome(t)
	// Every one refused the connection: nothing listens, 503 (not 502)
	// with Retry-After.
	if resp.StatusCode != 503 || !strings.Contains(body, `"code":"no_backend"`) || !strings.Contains(body, "no backend answered (3 tried)") ||
		!strings.Contains(body, "refused") || resp.Header.Get("X-Request-ID") == "" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if o.Status != 503 || o.Retries != 2 || o.Err == nil || o.Backend != dead[2] {
		t.Errorf("outcome %+v", o)
	}
	for i, b := range dead {
		want := uint64(1 + btoi(i == 0))
		if n := counter(e.ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="connect"}`, b.URL)); n != want {
			t.Errorf("backend %d connect errors = %d, want %d", i, n, want)
		}
		if b.InFlight() != 0 {
			t.Errorf("backend %d in flight %d", i, b.InFlight())
		}
	}
	if n := counter(e.ms, "saltus_retries_total"); n != 3 {
		t.Errorf("retries_total = %d, want 3", n)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLoopSlowHead504: no head within FirstByteTimeout is 504, and
// the upstream connection is closed.
func TestLoopSlowHead504(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, func(c *Config) { c.FirstByteTimeout = 300 * time.Millisecond })
	closed := make(chan struct{})
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		readReq(br)
		io.Copy(io.Discard, br) // until saltus closes it
		close(closed)
	})
	b := mustAdd(t, e.s, up.url())
	e.use(b, mustAdd(t, e.s, closedPort(t)))
	c := e.dial(t)
	start := time.Now()
	c.send(t, "{}")
	resp, body := c.read(t)
	o := e.outcome(t)
	if resp.StatusCode != 504 || !strings.Contains(body, `"code":"gateway_timeout"`) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("%d %s after %v", resp.StatusCode, body, time.Since(start))
	}
	if !o.TimedOut || o.Status != 504 || o.Retries != 0 {
		t.Errorf("outcome %+v", o)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection stayed open")
	}
	if b.InFlight() != 0 || b.passive.Load() != 0 {
		t.Errorf("in flight %d, breaker count %d", b.InFlight(), b.passive.Load())
	}
}

// answerEach is a rawUpstream script: answer to each request read, written
// in pieces of piece bytes; the connection is closed after the first
// answer unless reuse.
func answerEach(answer string, piece int, reuse bool) func(c net.Conn, br *bufio.Reader, n int) {
	return func(c net.Conn, br *bufio.Reader, _ int) {
		for {
			if _, _, ok := readReq(br); !ok {
				return
			}
			for a := answer; len(a) > 0; {
				k := min(len(a), piece)
				if _, err := io.WriteString(c, a[:k]); err != nil {
					return
				}
				a = a[k:]
			}
			if !reuse {
				return
			}
		}
	}
}

// TestLoopFramings: chunked (with a 1xx before it and a trailer) and
// close-delimited answers arrive whole, with Content-Length; only the
// chunked one's connection is reused.
func TestLoopFramings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer string
		reuse        bool
	}{
		{"chunked", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: T\r\n\r\n" +
			"6\r\n{\"a\":1\r\n1\r\n}\r\n0\r\nT: x\r\n\r\n", true},
		{"close-delimited", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}", false},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newLoopEnv(t, nil)
			up := newRawUpstream(t, answerEach(tc.answer, len(tc.answer), tc.reuse))
			e.use(mustAdd(t, e.s, up.url()))
			c := e.dial(t)
			for i := range 2 {
				c.send(t, "{}")
				resp, body := c.read(t)
				o := e.outcome(t)
				if resp.StatusCode != 200 || body != `{"a":1}` || resp.ContentLength != 7 || resp.Header.Get("Trailer") != "" || o.Err != nil {
					t.Fatalf("request %d: %d %v %q, outcome %+v", i, resp.StatusCode, resp.Header, body, o)
				}
			}
			if want := int32(2 - btoi(tc.reuse)); up.accepted.Load() != want {
				t.Errorf("upstream connections = %d, want %d", up.accepted.Load(), want)
			}
		})
	}
}

// TestLoopSpill: an answer over MaxResponseBody is not refused: it is
// relayed as it comes (spill.go), whole and byte for byte, with the
// upstream's Content-Length when it sent one, counted; the connection
// is reused after it. One whose upstream dies inside the spilled body
// reaches the client cut short (an unexpected EOF), not as a success.
func TestLoopSpill(t *testing.T) {
	t.Parallel()
	const bound = 4 << 10
	big := strings.Repeat("0123456789abcdef", 3<<10) // 48 KiB, 12× the bound
	chunked := func(s string) string {
		var b strings.Builder
		for len(s) > 0 {
			n := min(len(s), 5000)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, s[:n])
			s = s[n:]
		}
		return b.String() + "0\r\n\r\n"
	}
	sse := strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n\n", 48)
	for _, tc := range []struct {
		name, answer, body string
		length             int64 // the client's Content-Length; -1: chunked
		reuse              bool
		spilled            uint64 // after two requests
	}{
		{"content-length", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(big), big), big, int64(len(big)), true, 2},
		{"chunked", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(big), big, -1, true, 2},
		{"close-delimited", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + big, big, -1, false, 2},
		// An SSE answer whose Content-Length outgrows the buffer is a stream (event by event, chunked), not spilled.
		{"sse with a content-length", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(sse), sse), sse, -1, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newLoopEnv(t, func(c *Config) { c.MaxResponseBody = bound })
			// In pieces, so that the spill starts mid-body.
			up := newRawUpstream(t, answerEach(tc.answer, 3000, tc.reuse))
			e.use(mustAdd(t, e.s, up.url()))
			c := e.dial(t)
			for i := range 2 {
				c.send(t, "{}")
				resp, body := c.read(t)
				o := e.outcome(t)
				if resp.StatusCode != 200 || body != tc.body || resp.ContentLength != tc.length || o.Err != nil || o.Status != 200 {
					t.Fatalf("request %d: %d, %d bytes, Content-Length %d, outcome %+v", i, resp.StatusCode, len(body), resp.ContentLength, o)
				}
			}
			if n := counter(e.ms, "saltus_upstream_body_spilled_total"); n != tc.spilled {
				t.Errorf("spilled = %d, want %d", n, tc.spilled)
			}
			if want := int32(2 - btoi(tc.reuse)); up.accepted.Load() != want {
				t.Errorf("upstream connections = %d, want %d", up.accepted.Load(), want)
			}
		})
	}
	t.Run("dies mid-body", func(t *testing.T) {
		t.Parallel()
		e := newLoopEnv(t, func(c *Config) { c.MaxResponseBody = bound })
		up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
			readReq(br)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(big), big[:len(big)/2])
		})
		b := mustAdd(t, e.s, up.url())
		e.use(b)
		c := e.dial(t)
		c.send(t, "{}")
		resp, err := http.ReadResponse(c.br, &http.Request{Method: "POST"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != len(big)/2 {
			t.Fatalf("%d, %d bytes, %v; want 200, %d bytes, unexpected EOF", resp.StatusCode, len(got), err, len(big)/2)
		}
		if o := e.outcome(t); !o.UpstreamDied || o.Err == nil {
			t.Errorf("outcome %+v", o)
		}
		if b.InFlight() != 0 {
			t.Errorf("in flight %d", b.InFlight())
		}
	})
}

// TestLoopMidBodyDeath: the upstream dies inside a Content-Length body:
// 502, midstream counted, the connection not reused.
func TestLoopMidBodyDeath(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		readReq(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
	})
	b := mustAdd(t, e.s, up.url())
	e.use(b)
	c := e.dial(t)
	c.send(t, "{}")
	resp, _ := c.read(t)
	o := e.outcome(t)
	if resp.StatusCode != 502 || !o.UpstreamDied || o.Status != 502 {
		t.Fatalf("%d, outcome %+v", resp.StatusCode, o)
	}
	if n := counter(e.ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="midstream"}`, b.URL)); n != 1 {
		t.Errorf("midstream errors = %d", n)
	}
}

// TestLoopClientGone: the client leaving while the upstream works closes
// the upstream connection at once; every count returns to zero.
func TestLoopClientGone(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	got, closed := make(chan struct{}), make(chan struct{})
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		readReq(br)
		close(got)
		io.Copy(io.Discard, br)
		close(closed)
	})
	b := mustAdd(t, e.s, up.url())
	e.use(b)
	c := e.dial(t)
	c.send(t, "{}")
	<-got
	if b.InFlight() != 1 {
		t.Errorf("in flight while waiting = %d, want 1", b.InFlight())
	}
	c.nc.Close()
	o := e.outcome(t)
	if !o.ClientGone || o.Err == nil {
		t.Errorf("outcome %+v", o)
	}
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream connection stayed open")
	}
	waitFor(t, func() bool { return counterValue(e.rms, "saltus_upstream_conns") == "0" })
	if b.InFlight() != 0 || e.s.inFlight.Load() != 0 {
		t.Errorf("in flight: backend %d, set %d", b.InFlight(), e.s.inFlight.Load())
	}
}

// TestLoopSetClose: Close answers the requests waiting on the loops 503
// and closes their upstream connections; later ones are refused 503.
func TestLoopSetClose(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	got, closed := make(chan struct{}, 2), make(chan struct{}, 2)
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		readReq(br)
		got <- struct{}{}
		io.Copy(io.Discard, br)
		closed <- struct{}{}
	})
	b := mustAdd(t, e.s, up.url())
	e.use(b)
	c1, c2 := e.dial(t), e.dial(t)
	c1.send(t, "{}")
	c2.send(t, "{}")
	<-got
	<-got
	e.s.Close()
	for _, c := range []*client{c1, c2} {
		resp, body := c.read(t)
		o := e.outcome(t)
		if resp.StatusCode != 503 || !strings.Contains(body, "shutting down") || o.Err != ErrClosed {
			t.Fatalf("%d %s, outcome %+v", resp.StatusCode, body, o)
		}
	}
	for range 2 {
		select {
		case <-closed:
		case <-time.After(2 * time.Second):
			t.Fatal("an upstream connection stayed open")
		}
	}
	c1.send(t, "{}")
	if resp, _ := c1.read(t); resp.StatusCode != 503 {
		t.Errorf("after Close: %d", resp.StatusCode)
	}
	e.outcome(t)
	if b.InFlight() != 0 || e.s.inFlight.Load() != 0 {
		t.Errorf("in flight: backend %d, set %d", b.InFlight(), e.s.inFlight.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func counterValue(set *metrics.Set, name string) string {
	var b strings.Builder
	set.WritePrometheus(&b)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			return v
		}
	}
	return "absent"
}

// TestLoopRequestTimeout: RequestTimeout ends a request whose body
// trickles in (each read well within FirstByteTimeout) with a 504 naming
// it; an answer over the configured MaxResponseBody still arrives whole.
func TestLoopRequestTimeout(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, func(c *Config) {
		c.FirstByteTimeout, c.RequestTimeout, c.MaxResponseBody = time.Hour, 300*time.Millisecond, 4<<10
	})
	closed := make(chan struct{})
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		readReq(br)
		if n == 1 { // the first connection
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":")
			io.Copy(io.Discard, br) // until saltus closes it
			close(closed)
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", 4<<10+1, strings.Repeat("x", 4<<10+1))
		io.Copy(io.Discard, br)
	})
	e.use(mustAdd(t, e.s, up.url()))
	c := e.dial(t)
	start := time.Now()
	c.send(t, "{}")
	resp, body := c.read(t)
	o := e.outcome(t)
	if resp.StatusCode != 504 || !strings.Contains(body, "the request took longer than the request timeout (300ms)") ||
		time.Since(start) < 300*time.Millisecond || !o.TimedOut {
		t.Fatalf("%d %s after %v, outcome %+v", resp.StatusCode, body, time.Since(start), o)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection stayed open")
	}
	c.send(t, "{}")
	resp, body = c.read(t)
	if o := e.outcome(t); resp.StatusCode != 200 || len(body) != 4<<10+1 || o.Err != nil {
		t.Errorf("over MaxResponseBody: %d, %d bytes, outcome %+v", resp.StatusCode, len(body), o)
	}
}

// TestLoopStreamOneRead: a streamed answer that arrives in one upstream
// read (head, events and end together) goes out whole, through the
// loop's write coalescing (reactor/cork.go), to a keep-alive client
// twice in a row and then to one that asked to close: the last gets
// every byte before the close.
func TestLoopStreamOneRead(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	events := "data: {\"n\":1}\n\ndata: {\"n\":2}\n\ndata: [DONE]\n\n"
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		for {
			if _, _, ok := readReq(br); !ok {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(events), events)
		}
	})
	e.use(mustAdd(t, e.s, up.url()))
	c := e.dial(t)
	for i := range 3 {
		if i < 2 {
			c.send(t, `{"stream":true}`)
		} else {
			const body = `{"stream":true}`
			fmt.Fprintf(c.nc, "POST /v1/chat/completions HTTP/1.1\r\nHost: lb\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
		resp, body := c.read(t)
		if resp.StatusCode != 200 || body != events || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("answer %d: %d %v %q", i, resp.StatusCode, resp.Header, body)
		}
		if o := e.outcome(t); o.Err != nil || o.Status != 200 {
			t.Fatalf("outcome %d: %+v", i, o)
		}
	}
	if n, err := c.br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the closing answer: %d bytes, %v; want EOF", n, err)
	}
}

// TestLoopEngineFull: an engine's 429 or 503 before any answer byte is a
// signal: the next candidate serves, the full one is marked full for its
// Retry-After, the breaker is not told; when every candidate is full the
// client gets saltus's own refusal with Retry-After, not an engine's.
func TestLoopEngineFull(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, nil)
	full := func(status int, retryAfter string) string {
		return upstream(t, func(w http.ResponseWriter, r *http.Request) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(status)
			io.WriteString(w, `{"error":{"message":"waiting requests queue is full","type":"BadRequestError","code":429}}`)
		}).URL
	}
	busy := mustAdd(t, e.s, full(429, "3"))
	down := mustAdd(t, e.s, full(503, ""))
	good := mustAdd(t, e.s, upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) }).URL)
	c := e.dial(t)

	e.use(busy, down, good)
	t0 := time.Now()
	resp, body, o := e.do(t, c, "{}")
	if resp.StatusCode != 200 || body != `{"ok":true}` || o.Backend != good || o.Retries != 2 {
		t.Fatalf("%d %s, outcome %+v", resp.StatusCode, body, o)
	}
	if !busy.Full(t0) || !busy.Full(t0.Add(2*time.Second)) || busy.Full(time.Now().Add(4*time.Second)) {
		t.Errorf("busy full until %v: want its Retry-After, 3 s", busy.FullUntil().Sub(t0))
	}
	if !down.Full(t0) || down.Full(time.Now().Add(2*fullFor)) {
		t.Errorf("down full until %v: want %v", down.FullUntil().Sub(t0), fullFor)
	}
	if busy.passive.Load() != 0 || down.passive.Load() != 0 || !busy.Healthy() || !down.Healthy() {
		t.Error("a full engine was counted by the breaker")
	}
	if n := counter(e.ms, "saltus_engine_refusals_total"); n != 2 {
		t.Errorf("refusals %d, want 2", n)
	}

	e.use(busy, down)
	c.send(t, "{}")
	resp, body = c.read(t)
	o = e.outcome(t)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" || !strings.Contains(body, `"code":"overloaded"`) ||
		!strings.Contains(body, "every backend tried is full") || o.Status != 429 || o.Err != ErrEnginesFull {
		t.Fatalf("every candidate full: %d Retry-After %q %s, outcome %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body, o)
	}
	// What followed each of the four refusals: the next candidate three
	// times, saltus's own 429 once (no Requeue hook).
	for outcome, want := range map[string]uint64{"retried": 3, "requeued": 0, "refused": 1} {
		if n := counter(e.ms, `saltus_engine_refusal_outcomes_total{outcome="`+outcome+`"}`); n != want {
			t.Errorf("refusal outcome %s: %d, want %d", outcome, n, want)
		}
	}
	for _, b := range []*Backend{busy, down, good} {
		if b.InFlight() != 0 {
			t.Errorf("%s in flight %d", b.URL, b.InFlight())
		}
	}
}

// TestLoopEngineErrorRetried: an engine's 500, 502 or 504 head sends the
// request to the next candidate (RetryServerErrors), counted and told to
// the breaker; the last candidate's answer, whatever its status, is the
// client's as the engine sent it; 501 is not retried; and with the option
// off, the default, the first engine's 500 is the client's.
func TestLoopEngineErrorRetried(t *testing.T) {
	t.Parallel()
	failing := func(status int) string {
		return upstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"engine says %d","type":"InternalServerError","code":%d}}`, status, status)
		}).URL
	}
	okURL := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) }).URL

	e := newLoopEnv(t, func(c *Config) { c.RetryServerErrors = true })
	e500, e502, e504, e501 := mustAdd(t, e.s, failing(500)), mustAdd(t, e.s, failing(502)), mustAdd(t, e.s, failing(504)), mustAdd(t, e.s, failing(501))
	good := mustAdd(t, e.s, okURL)
	c := e.dial(t)

	e.use(e500, e504, good)
	t0 := time.Now()
	resp, body, o := e.do(t, c, "{}")
	if resp.StatusCode != 200 || body != `{"ok":true}` || o.Backend != good || o.Retries != 2 || o.Status != 200 {
		t.Fatalf("%d %s, outcome %+v", resp.StatusCode, body, o)
	}
	if n := counter(e.ms, "saltus_engine_error_retries_total"); n != 2 {
		t.Errorf("error retries %d, want 2", n)
	}
	if e500.passive.Load() != 1 || e504.passive.Load() != 1 {
		t.Errorf("breaker counts %d, %d: want 1 each", e500.passive.Load(), e504.passive.Load())
	}
	// Each is full until one of its requests ends (none here), at most fullFor.
	for _, b := range []*Backend{e500, e504} {
		if u := b.FullUntil(); u.Before(t0.Add(fullFor)) || u.After(time.Now().Add(fullFor)) {
			t.Errorf("%s full until %v after the send: want %v after its answer", b.URL, u.Sub(t0), fullFor)
		}
	}
	if !good.FullUntil().IsZero() {
		t.Error("the engine that answered was marked full")
	}

	// The last candidate's answer is the client's, as it came.
	e.use(e500, e502)
	resp, body, o = e.do(t, c, "{}")
	if resp.StatusCode != 502 || !strings.Contains(body, "engine says 502") || o.Backend != e502 || o.Retries != 1 || o.Status != 502 {
		t.Fatalf("last candidate's 502: %d %s, outcome %+v", resp.StatusCode, body, o)
	}
	// 501: the request, not the engine.
	e.use(e501, good)
	if resp, body, o = e.do(t, c, "{}"); resp.StatusCode != 501 || !strings.Contains(body, "engine says 501") || o.Retries != 0 {
		t.Fatalf("501: %d %s, outcome %+v", resp.StatusCode, body, o)
	}
	if n := counter(e.ms, "saltus_engine_error_retries_total"); n != 3 {
		t.Errorf("error retries %d, want 3", n)
	}
	for _, b := range []*Backend{e500, e502, e504, e501, good} {
		if b.InFlight() != 0 {
			t.Errorf("%s in flight %d", b.URL, b.InFlight())
		}
	}

	off := newLoopEnv(t, nil) // the default
	o500, ogood := mustAdd(t, off.s, failing(500)), mustAdd(t, off.s, okURL)
	oc := off.dial(t)
	off.use(o500, ogood)
	if resp, body, o = off.do(t, oc, "{}"); resp.StatusCode != 500 || !strings.Contains(body, "engine says 500") || o.Retries != 0 {
		t.Fatalf("option off: %d %s, outcome %+v", resp.StatusCode, body, o)
	}
}
