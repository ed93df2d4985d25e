package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/admin"
)

// More end-to-end tests of `saltus serve` (see serve_e2e_test.go for the
// harness): conversation branches, drain, client aborts, upstream
// failures, the client-side limits and the admin API, each against the
// real serving path on loopback.

// e2eClient bounds every request of these tests (a hung server fails the
// test instead of hanging it).
var e2eClient = &http.Client{Timeout: 30 * time.Second}

// holder is an upstream's POST answer that holds the request: with head,
// it sends the SSE head and one event first (a generation under way);
// without, nothing (an upstream slow to its head). It ends when release is
// closed (with the rest of the stream), when the request's context ends
// (closing ended: saltus closed the upstream connection), or when the
// test ends.
type holder struct {
	head    bool
	release chan struct{}
	ended   chan struct{}
	once    sync.Once
}

func newHolder(head bool) *holder {
	return &holder{head: head, release: make(chan struct{}), ended: make(chan struct{})}
}

func (h *holder) post(u *upstream, w http.ResponseWriter, r *http.Request) {
	// Reading the body to its end starts net/http's background read, which
	// is what cancels r.Context() when the connection closes.
	_, _ = io.ReadAll(r.Body) // an error shows as the context's end below
	if h.head {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"tok\":0,\"by\":%q}\n\n", u.name)
		w.(http.Flusher).Flush()
	}
	select {
	case <-h.release:
		if !h.head {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"served_by":%q}`, u.name)
			return
		}
		fmt.Fprintf(w, "data: {\"tok\":1,\"by\":%q}\n\ndata: [DONE]\n\n", u.name)
	case <-r.Context().Done():
		h.once.Do(func() { close(h.ended) })
	case <-u.done:
	}
}

// waitClosed waits up to d for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// waitUntil polls cond every 10 ms for at most d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openAIError is the error body saltus answers with. Code is a number
// from the reactor and the admin listener, a string from the router and
// the proxy.
type openAIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

// errorOf decodes an OpenAI error body; it fails the test if body is not
// one (with a message).
func errorOf(t *testing.T, body string) openAIError {
	t.Helper()
	var e openAIError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("not an OpenAI error body (%v): %q", err, body)
	}
	return e
}

// parseRoute splits X-Saltus-Route: "<matched>/<total> <reason>".
func parseRoute(t *testing.T, route string) (matched, total int, reason string) {
	t.Helper()
	if _, err := fmt.Sscanf(route, "%d/%d %s", &matched, &total, &reason); err != nil {
		t.Fatalf("X-Saltus-Route %q: %v", route, err)
	}
	return matched, total, reason
}

// do sends one request to base+path with e2eClient; hdr are name, value
// pairs.
func do(t *testing.T, method, url, body string, hdr ...string) answer {
	t.Helper()
	return doWith(t, e2eClient, method, url, body, hdr...)
}

// doWith is do with client (an https one, say).
func doWith(t *testing.T, client *http.Client, method, url, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return answer{resp.StatusCode, resp.Header, string(b), resp.Header.Get("X-Saltus-Backend"), resp.Header.Get("X-Saltus-Route")}
}

// chat posts a chat completion to the data plane.
func (s *served) chat(t *testing.T, body string, hdr ...string) answer {
	t.Helper()
	return do(t, "POST", "http://"+s.addr+"/v1/chat/completions", body, hdr...)
}

// adm sends a request to the admin listener with the configured token.
func (s *served) adm(t *testing.T, method, path, body string) answer {
	t.Helper()
	var hdr []string
	if s.cfg.Admin.BearerToken != "" {
		hdr = []string{"Authorization", "Bearer " + s.cfg.Admin.BearerToken}
	}
	return do(t, method, "http://"+s.admin+path, body, hdr...)
}

// backends is GET /admin/backends.
func (s *served) backends(t *testing.T) []admin.BackendInfo {
	t.Helper()
	a := s.adm(t, "GET", "/admin/backends", "")
	var list []admin.BackendInfo
	if err := json.Unmarshal([]byte(a.body), &list); a.status != 200 || err != nil {
		t.Fatalf("GET /admin/backends: %d %v: %s", a.status, err, a.body)
	}
	return list
}

// pools is GET /admin/pools.
func (s *served) pools(t *testing.T) admin.PoolsInfo {
	t.Helper()
	a := s.adm(t, "GET", "/admin/pools", "")
	var p admin.PoolsInfo
	if err := json.Unmarshal([]byte(a.body), &p); a.status != 200 || err != nil {
		t.Fatalf("GET /admin/pools: %d %v: %s", a.status, err, a.body)
	}
	return p
}

// metrics reads /metrics: each series (name and labels as written) to its
// value.
func (s *served) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	a := s.adm(t, "GET", "/metrics", "")
	if a.status != 200 {
		t.Fatalf("/metrics: %d %s", a.status, a.body)
	}
	return parseMetrics(t, a.body)
}

// parseMetrics reads Prometheus text: each series (name and labels as
// written) to its value.
func parseMetrics(t *testing.T, text string) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("/metrics: bad line %q", line)
		}
		m[line[:i]] = v
	}
	return m
}

// setMetrics is metrics read from s's metrics set in the process, which
// outlives its listeners.
func (s *served) setMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	var b bytes.Buffer
	s.set.WritePrometheus(&b)
	return parseMetrics(t, b.String())
}

// metric is one series of /metrics; it fails the test if it is absent.
func (s *served) metric(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := s.metrics(t)[series]
	if !ok {
		t.Fatalf("/metrics has no %s", series)
	}
	return v
}

// deadPort returns http://127.0.0.1:<port> of a socket that is bound but
// not listening, until the test ends: a connection to it is refused. (A
// listener closed at once would free the port for another listener of
// the tests running in parallel, saltus's own included.)
func deadPort(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// rawConn is a client connection driven by hand, for what net/http hides:
// framing errors, partial heads, connections closed by the server.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

// dialRaw connects to addr; every read and write of the connection fails
// after 30 s at the latest.
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // fails only on a closed conn
	return &rawConn{c, bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// answer reads one HTTP answer (to a request with method) and its body.
func (c *rawConn) answer(t *testing.T, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer body: %v", err)
	}
	return resp, string(b)
}

// closed waits for the server to close the connection: it reports whether
// the next read ends (EOF or reset) with no byte, within the deadline.
func (c *rawConn) closed() (bool, string) {
	b, err := c.br.ReadByte()
	if err == nil {
		rest, _ := c.br.Peek(c.br.Buffered())
		return false, string(append([]byte{b}, rest...))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, "read timed out"
	}
	return true, ""
}

// TestServeBranch: a conversation that branches (same system prompt and
// earlier turns, another last turn) goes where its trunk went, matching
// the shared turns, deeper than a request that shares only the system
// prompt.
func TestServeBranch(t *testing.T) {
	t.Parallel()
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c")}
	s := startServeWith(t, ups, nil)
	trunk := []string{"system", sysA, "user", "Which port has the code NLRTM?",
		"assistant", "Rotterdam. " + strings.Repeat("It is the largest port in Europe by cargo tonnage. ", 8)}

	first := s.chat(t, chatJSON(false, append(trunk, "user", "What is its tidal range?")...))
	if first.status != 200 || first.backend == "" {
		t.Fatalf("trunk: %d from %q: %s", first.status, first.backend, first.body)
	}
	if _, _, reason := parseRoute(t, first.route); reason != "hash" {
		t.Errorf("trunk: route %q, want a hash decision (nothing learned yet)", first.route)
	}

	branch := s.chat(t, chatJSON(false, append(trunk, "user", "How deep is the channel to Europoort?")...))
	bm, bt, reason := parseRoute(t, branch.route)
	if branch.status != 200 || branch.backend != first.backend || reason != "tree" {
		t.Fatalf("branch: %d from %q route %q, want 200 from %q by tree", branch.status, branch.backend, branch.route, first.backend)
	}
	if bm == 0 || bm >= bt {
		t.Errorf("branch: route %q: want 0 < matched < total (the last turn differs)", branch.route)
	}

	t.Logf("trunk %q, branch %q", first.route, branch.route)
	// Sharing the system prompt only: the same backend, a shallower match.
	sib := s.chat(t, chatJSON(false, "system", sysA, "user", "Is Hamburg a deep-water port?"))
	sm, _, reason := parseRoute(t, sib.route)
	t.Logf("sibling %q", sib.route)
	if sib.backend != first.backend || reason != "tree" || sm == 0 || sm >= bm {
		t.Errorf("system-prompt sibling: from %q route %q; want %q by tree with 0 < matched < %d (the branch's)", sib.backend, sib.route, first.backend, bm)
	}
}

// TestServeDrain: SIGTERM during a stream. /ready turns 503, new
// connections get no answer, the stream completes, exit 0; a drain longer
// than --drain-timeout is cut, exit 0 too.
func TestServeDrain(t *testing.T) {
	t.Parallel()
	// startStream starts a streamed chat and returns its reader once the
	// first event is in (the upstream holds the rest).
	startStream := func(t *testing.T, s *served) (*http.Response, *bufio.Reader) {
		t.Helper()
		resp, err := e2eClient.Do(mustReq(t, "http://"+s.addr+"/v1/chat/completions", chatJSON(true, "system", sysB, "user", "Write one.")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		br := bufio.NewReader(resp.Body)
		if l, err := br.ReadString('\n'); resp.StatusCode != 200 || err != nil || !strings.HasPrefix(l, `data: {"tok":0`) {
			t.Fatalf("stream: %d, first line %q, %v", resp.StatusCode, l, err)
		}
		return resp, br
	}
	// refused reports whether a new connection gets no answer: the dial
	// fails, or the server closes it without a byte.
	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return true
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // fails only on a closed conn
		if _, err := io.WriteString(c, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return true
		}
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}

	t.Run("completes", func(t *testing.T) {
		t.Parallel()
		h := newHolder(true)
		u := newUpstreamFunc(t, "a", h.post)
		s := startServeWith(t, []*upstream{u}, func(c *serveConfig) {
			c.Tokenizer = "" // byte-block mode: routing is not the point
			c.DrainTimeout = 30 * time.Second
		})
		if a := do(t, "GET", "http://"+s.admin+"/ready", ""); a.status != 200 {
			t.Fatalf("/ready before the drain: %d %q", a.status, a.body)
		}
		if refused(s.addr) {
			t.Fatal("a new connection gets no answer before the drain")
		}
		_, br := startStream(t, s)

		s.term()
		waitUntil(t, 10*time.Second, "/ready 503", func() bool {
			a := do(t, "GET", "http://"+s.admin+"/ready", "")
			return a.status == 503 && a.body == "draining\n"
		})
		waitUntil(t, 10*time.Second, "new connections refused", func() bool { return refused(s.addr) })
		if n := s.metric(t, `saltus_reactor_connections_rejected_total{reason="draining"}`); n < 1 {
			t.Errorf("connections rejected while draining: %v, want ≥ 1", n)
		}
		select {
		case c := <-s.code:
			t.Fatalf("exited (code %d) with a stream in flight", c)
		default:
		}

		close(h.release)
		rest, err := io.ReadAll(br)
		if err != nil || string(rest) != "\ndata: {\"tok\":1,\"by\":\"a\"}\n\ndata: [DONE]\n\n" {
			t.Errorf("the stream's rest: %q, %v", rest, err)
		}
		if c := s.wait(t, 30*time.Second); c != 0 {
			t.Errorf("exit code %d, want 0", c)
		}
		if !strings.Contains(s.logs(), "msg=drained component=serve") {
			t.Errorf("logs lack the drain:\n%s", s.logs())
		}
	})

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		h := newHolder(true)
		u := newUpstreamFunc(t, "a", h.post)
		const drain = time.Second
		s := startServeWith(t, []*upstream{u}, func(c *serveConfig) {
			c.Tokenizer = ""
			c.DrainTimeout = drain
		})
		_, br := startStream(t, s)
		start := time.Now()
		s.term()
		rest, _ := io.ReadAll(br) // cut: an error or an early EOF
		if strings.Contains(string(rest), "[DONE]") {
			t.Errorf("a cut stream ended with [DONE]: %q", rest)
		}
		if c := s.wait(t, 30*time.Second); c != 0 {
			t.Errorf("exit code %d, want 0", c)
		}
		if el := time.Since(start); el < drain {
			t.Errorf("exited %v after SIGTERM, before the drain timeout %v", el, drain)
		}
		// Cutting the client's stream closed the upstream request too.
		waitClosed(t, h.ended, 10*time.Second, "upstream request ended")
		if !strings.Contains(s.logs(), `msg="drain timed out; requests still in flight were cut"`) {
			t.Errorf("logs lack the cut drain:\n%s", s.logs())
		}
	})
}

// TestServeClientAbort: a client that leaves mid-stream cancels the
// upstream request, and every in-flight count returns to 0.
func TestServeClientAbort(t *testing.T) {
	t.Parallel()
	h := newHolder(true)
	u := newUpstreamFunc(t, "a", h.post)
	s := startServeWith(t, []*upstream{u}, func(c *serveConfig) { c.Tokenizer = "" })
	gauges := func() []float64 {
		m := s.metrics(t)
		list := s.backends(t)
		if len(list) != 1 {
			t.Fatalf("backends: %+v", list)
		}
		return []float64{float64(list[0].InFlight), m["saltus_proxy_in_flight"],
			m[`saltus_backend_in_flight{backend="`+u.srv.URL+`"}`], m["saltus_reactor_exchanges_open"]}
	}
	if g := gauges(); !slices.Equal(g, []float64{0, 0, 0, 0}) {
		t.Fatalf("in flight before: %v (admin, proxy, backend, exchanges)", g)
	}

	c := dialRaw(t, s.addr)
	body := chatJSON(true, "system", sysB, "user", "Write a long one.")
	c.send(t, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := bufio.NewReader(resp.Body).ReadString('\n'); resp.StatusCode != 200 || err != nil || !strings.HasPrefix(l, `data: {"tok":0`) {
		t.Fatalf("stream: %d, first line %q, %v", resp.StatusCode, l, err)
	}
	if g := gauges(); !slices.Equal(g, []float64{1, 1, 1, 1}) {
		t.Errorf("in flight during the stream: %v (admin, proxy, backend, exchanges), want all 1", g)
	}

	c.Close() // the client leaves mid-stream
	waitClosed(t, h.ended, 10*time.Second, "upstream request cancelled")
	var g []float64
	waitUntil(t, 10*time.Second, "in-flight counts back to 0", func() bool {
		g = gauges()
		return slices.Equal(g, []float64{0, 0, 0, 0})
	})
	if n := u.calls.Load(); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

// TestServeUpstreamErrors: a backend slow to its head → 504 (not retried);
// every backend refusing connections → 502 after the retries; both with
// an OpenAI error body.
func TestServeUpstreamErrors(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		h := newHolder(false)
		ups := []*upstream{newUpstreamFunc(t, "a", h.post), newUpstreamFunc(t, "b", h.post)}
		const timeout = time.Second
		s := startServeWith(t, ups, func(c *serveConfig) {
			c.Tokenizer = ""
			c.Backend.FirstByteTimeout = timeout
		})
		start := time.Now()
		a := s.chat(t, chatJSON(false, "system", sysA, "user", "Slow?"))
		el := time.Since(start)
		e := errorOf(t, a.body)
		if a.status != 504 || e.Error.Type != "timeout_error" || e.Error.Code != "gateway_timeout" {
			t.Errorf("slow upstream: %d %s, want 504 timeout_error gateway_timeout", a.status, a.body)
		}
		if a.header.Get("X-Request-ID") == "" || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("504 headers: %v", a.header)
		}
		if el < timeout {
			t.Errorf("504 after %v, before the response timeout %v", el, timeout)
		}
		// A timed-out request may be running on its backend: not retried,
		if n := ups[0].calls.Load() + ups[1].calls.Load(); n != 1 {
			t.Errorf("upstreams got %d requests, want 1", n)
		}
		// and the upstream connection is closed, so that the engine can
		// stop working on it.
		waitClosed(t, h.ended, 10*time.Second, "timed-out upstream request ended")
		m := s.metrics(t)
		var timeouts, codes float64
		for _, u := range ups {
			timeouts += m[`saltus_upstream_errors_total{backend="`+u.srv.URL+`",kind="timeout"}`]
			codes += m[`saltus_backend_requests_total{backend="`+u.srv.URL+`",code="504"}`]
		}
		if timeouts != 1 || codes != 1 || m[`saltus_requests_total{route="chat",code="504"}`] != 1 {
			t.Errorf("metrics: %v upstream timeouts, %v backend 504s, %v chat 504s; want 1 each", timeouts, codes, m[`saltus_requests_total{route="chat",code="504"}`])
		}
	})

	t.Run("all refuse", func(t *testing.T) {
		t.Parallel()
		s := startServeWith(t, nil, func(c *serveConfig) { c.Tokenizer = "" }, deadPort(t), deadPort(t), deadPort(t))
		a := s.chat(t, chatJSON(false, "system", sysA, "user", "Anyone?"))
		e := errorOf(t, a.body)
		// Nothing listens on any: 503 no_backend (not 502), after 3 tries.
		if a.status != 503 || e.Error.Code != "no_backend" || !strings.Contains(e.Error.Message, "no backend answered (3 tried)") || a.header.Get("Retry-After") != "1" {
			t.Errorf("all backends refusing: %d %s, want 503 no_backend after 3 tries", a.status, a.body)
		}
		m := s.metrics(t)
		var connects float64
		for _, u := range s.cfg.Backends {
			connects += m[`saltus_upstream_errors_total{backend="`+u+`",kind="connect"}`]
		}
		if m["saltus_retries_total"] != 2 || connects != 3 {
			t.Errorf("metrics: %v retries, %v connect errors; want 2 and 3", m["saltus_retries_total"], connects)
		}
	})
}

// TestServeMaxRetries: --max-retries N tries N+1 backends before the
// 503 (each refused the connection), above the default 2 too.
func TestServeMaxRetries(t *testing.T) {
	t.Parallel()
	var dead []string
	for range 6 {
		dead = append(dead, deadPort(t))
	}
	for _, retries := range []int{0, 4} {
		s := startServeWith(t, nil, func(c *serveConfig) {
			c.Tokenizer = ""
			c.Backend.MaxRetries = retries
		}, dead...)
		a := s.chat(t, chatJSON(false, "system", sysA, "user", "Anyone?"))
		want := fmt.Sprintf("no backend answered (%d tried)", retries+1)
		if e := errorOf(t, a.body); a.status != 503 || !strings.Contains(e.Error.Message, want) { // refused: 503
			t.Errorf("max-retries %d: %d %s, want 503 %q", retries, a.status, a.body, want)
		}
		if n := s.metric(t, "saltus_retries_total"); n != float64(retries) {
			t.Errorf("max-retries %d: %v retries", retries, n)
		}
	}
}

// TestServeLimits: the client-side limits of the data plane, on raw
// connections: what is answered, and whether the connection is closed.
func TestServeLimits(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Reactor.MaxBodyBytes = 1 << 10
		c.Reactor.HeaderTimeout = timeout
		c.Reactor.IdleTimeout = timeout
	})
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<10) + `"}]}`

	// Framing errors: answered with an error body, then the connection
	// closes.
	for _, c := range []struct {
		name, req string
		status    int
	}{
		{"body over max-body", head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big)) + big, 413},
		{"chunked body over max-body", head + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big), 413},
		{"head over max-header", head + "X-Big: " + strings.Repeat("h", 65<<10) + "\r\nContent-Length: 2\r\n\r\n{}", 431},
		{"malformed request line", "NOT HTTP AT ALL\r\n\r\n", 400},
		{"malformed header", "GET /v1/models HTTP/1.1\r\nHost x\r\n\r\n", 400},
		{"unsupported transfer-encoding", head + "Transfer-Encoding: gzip\r\n\r\n", 501},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := dialRaw(t, s.addr)
			rc.send(t, c.req)
			resp, body := rc.answer(t, "POST")
			if e := errorOf(t, body); resp.StatusCode != c.status || e.Error.Code != map[int]string{400: "bad_request", 413: "request_too_large", 431: "header_too_large", 501: "not_implemented"}[c.status] {
				t.Errorf("%d %s, want %d", resp.StatusCode, body, c.status)
			}
			if closed, got := rc.closed(); !closed {
				t.Errorf("connection not closed after the %d: %q", c.status, got)
			}
		})
	}

	// Routing errors: answered, and the connection stays open.
	for _, c := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/nope", 404, "not_found", ""},
		{"POST", "/v2/chat/completions", 404, "not_found", ""},
		{"GET", "/v1/chat/completions", 405, "method_not_allowed", "POST"},
		{"PUT", "/v1/completions", 405, "method_not_allowed", "POST"},
		{"DELETE", "/v1/models", 405, "method_not_allowed", "GET, HEAD"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			rc := dialRaw(t, s.addr)
			for range 2 { // the same connection answers twice: not closed
				rc.send(t, c.method+" "+c.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
				resp, body := rc.answer(t, c.method)
				if e := errorOf(t, body); resp.StatusCode != c.status || e.Error.Code != c.code || resp.Header.Get("Allow") != c.allow || resp.Close {
					t.Errorf("%d %s (Allow %q, close %v), want %d %s (Allow %q)", resp.StatusCode, body, resp.Header.Get("Allow"), resp.Close, c.status, c.code, c.allow)
				}
			}
		})
	}

	t.Run("slow head", func(t *testing.T) {
		before := s.metric(t, `saltus_reactor_timeouts_total{kind="header"}`)
		start := time.Now() // before the dial: before any clock of the server's starts
		rc := dialRaw(t, s.addr)
		rc.send(t, head+"Content-Length: 2\r\n") // the head never ends
		if closed, got := rc.closed(); !closed {
			t.Fatalf("a head not completed: connection not closed (%q)", got)
		}
		if el := time.Since(start); el < timeout {
			t.Errorf("closed %v after the head's first byte, before the header timeout %v", el, timeout)
		}
		if n := s.metric(t, `saltus_reactor_timeouts_total{kind="header"}`); n != before+1 {
			t.Errorf("header timeouts: %v, want %v", n, before+1)
		}
	})

	t.Run("idle keep-alive", func(t *testing.T) {
		rc := dialRaw(t, s.addr)
		// The idle time counts from the answer's end, after the request
		// was sent: the timeout is a lower bound from here, however late
		// a loaded machine lets the client read the answer.
		start := time.Now()
		rc.send(t, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, body := rc.answer(t, "GET"); resp.StatusCode != 200 || resp.Close || !strings.Contains(body, "model-a") {
			t.Fatalf("GET /v1/models: %d (close %v) %s", resp.StatusCode, resp.Close, body)
		}
		if closed, got := rc.closed(); !closed {
			t.Fatalf("an idle keep-alive connection: not closed (%q)", got)
		}
		if el := time.Since(start); el < timeout {
			t.Errorf("an idle keep-alive connection closed after %v, want about %v", el, timeout)
		}
		if n := s.metric(t, `saltus_reactor_timeouts_total{kind="idle"}`); n < 1 {
			t.Errorf("idle timeouts: %v, want ≥ 1", n)
		}
	})
}

// TestServeMaxConns: a connection over --max-conns gets 503 and is closed;
// once one closes, a new one is served.
func TestServeMaxConns(t *testing.T) {
	t.Parallel()
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Reactor.MaxConns = 2
	})
	get := "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
	var conns []*rawConn
	for range 2 {
		rc := dialRaw(t, s.addr)
		rc.send(t, get) // answered: the connection is counted
		if resp, _ := rc.answer(t, "GET"); resp.StatusCode != 404 {
			t.Fatalf("within max-conns: %d", resp.StatusCode)
		}
		conns = append(conns, rc)
	}
	over := dialRaw(t, s.addr)
	resp, body := over.answer(t, "GET") // answered at accept, before any request
	if e := errorOf(t, body); resp.StatusCode != 503 || e.Error.Code != "too_many_connections" || !resp.Close {
		t.Errorf("over max-conns: %d %s (close %v), want 503 and close", resp.StatusCode, body, resp.Close)
	}
	if closed, got := over.closed(); !closed {
		t.Errorf("over max-conns: connection not closed (%q)", got)
	}
	if n := s.metric(t, `saltus_reactor_connections_rejected_total{reason="max_conns"}`); n != 1 {
		t.Errorf("rejected for max-conns: %v, want 1", n)
	}
	conns[0].Close()
	waitUntil(t, 10*time.Second, "a connection served after one closed", func() bool {
		rc := dialRaw(t, s.addr)
		defer rc.Close()
		rc.send(t, get)
		resp, _ := rc.answer(t, "GET")
		return resp.StatusCode == 404
	})
}
