package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Issue 15's HTTP strictness, through the real serving path: request
// targets are normalized before routing (and forwarded so), Host is
// required, saltus's own answers carry X-Request-ID (and Retry-After on
// a 503), and saltus_requests_total counts every answer.

// targetRecorder is an upstream that records the request target of every POST
// that reaches it.
type targetRecorder struct {
	mu      sync.Mutex
	targets []string
}

func (rec *targetRecorder) upstream(t *testing.T) *upstream {
	return newUpstreamFunc(t, "a", func(u *upstream, w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.targets = append(rec.targets, r.RequestURI)
		rec.mu.Unlock()
		u.chat(w, r)
	})
}

func (rec *targetRecorder) got() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.targets...)
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// rawPost is a POST of chatBody to target on a raw connection.
func rawPost(target string, hdr ...string) string {
	return "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + strings.Join(hdr, "") +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
}

// TestServeTraversal: a request target that walks out of /v1/ is refused
// with 400 (or, when it is a plain path once normalized, answered 404 for
// that path), and nothing reaches the backend.
func TestServeTraversal(t *testing.T) {
	t.Parallel()
	var rec targetRecorder
	s := startServeWith(t, []*upstream{rec.upstream(t)}, func(c *serveConfig) { c.Tokenizer = "" })
	for _, c := range []struct {
		target string
		status int
		msg    string
	}{
		{"/v1/%2e%2e/tokenize", 400, "percent-encoded dot segment"},
		{"/v1/%2E%2E/tokenize", 400, "percent-encoded dot segment"},
		{"/v1/.%2e/tokenize", 400, "percent-encoded dot segment"},
		{"/v1/..%2ftokenize", 400, "encoded slash"},
		{"/v1/..%2Ftokenize", 400, "encoded slash"},
		{"/v1/..%5ctokenize", 400, "backslash"},
		{"/v1/..\\tokenize", 400, "backslash"},
		{"/v1/%00/../tokenize", 400, "control character"},
		{"/v1/../../tokenize", 400, "above the root"},
		{"/../v1/chat/completions", 400, "above the root"},
		{"http://x/v1/../../tokenize", 400, "above the root"},
		{"/v1/%zz", 400, "percent-encoding"},
		// A plain path once normalized: /detokenizer, not an API path
		// (vLLM's /tokenize and /detokenize are: issue 29).
		{"/v1/../detokenizer", 404, `"/detokenizer"`},
		{"/v1/chat/../../detokenizer", 404, `"/detokenizer"`},
	} {
		t.Run(c.target, func(t *testing.T) {
			rc := dialRaw(t, s.addr)
			rc.send(t, rawPost(c.target))
			resp, body := rc.answer(t, "POST")
			if e := errorOf(t, body); resp.StatusCode != c.status || !strings.Contains(e.Error.Message, c.msg) {
				t.Errorf("POST %s: %d %s, want %d with %q", c.target, resp.StatusCode, body, c.status, c.msg)
			}
		})
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("requests reached the backend: %q", got)
	}

	// A path with percent-encoded unreserved characters and dot segments
	// is routed, and forwarded, in its normal form; the query as sent.
	for _, c := range []struct{ target, want string }{
		{"/v1/%63hat/%63ompletions", "/v1/chat/completions"},
		{"/v1/./x/../chat/completions?a=%2e%2E&b", "/v1/chat/completions?a=%2e%2E&b"},
		{"/v1/tok%65nize/%7e%3a", "/v1/tokenize/~%3A"},
		{"HTTP://x/v1/embeddings", "/v1/embeddings"},
	} {
		rc := dialRaw(t, s.addr)
		rc.send(t, rawPost(c.target))
		if resp, body := rc.answer(t, "POST"); resp.StatusCode != 200 || !strings.Contains(body, `"served_by":"a"`) {
			t.Errorf("POST %s: %d %s", c.target, resp.StatusCode, body)
		}
		if got := rec.got(); len(got) == 0 || got[len(got)-1] != c.want {
			t.Errorf("POST %s reached the backend as %q, want %q last", c.target, got, c.want)
		}
	}
}

// TestServeHost: RFC 9112 §3.2: an HTTP/1.1 request without Host, with
// two, or with an invalid one is a 400 (and the connection closes);
// HTTP/1.0 needs none.
func TestServeHost(t *testing.T) {
	t.Parallel()
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, func(c *serveConfig) { c.Tokenizer = "" })
	for _, c := range []struct{ name, req, msg string }{
		{"no Host", "GET /v1/models HTTP/1.1\r\n\r\n", "missing Host"},
		{"two Hosts", "GET /v1/models HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n", "more than one Host"},
		{"two Hosts, other case", "GET /v1/models HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n", "more than one Host"},
		{"invalid Host", "GET /v1/models HTTP/1.1\r\nHost: a/b\r\n\r\n", "invalid Host"},
		{"Host with a space", "GET /v1/models HTTP/1.1\r\nHost: a b\r\n\r\n", "invalid Host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := dialRaw(t, s.addr)
			rc.send(t, c.req)
			resp, body := rc.answer(t, "GET")
			if e := errorOf(t, body); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, c.msg) {
				t.Errorf("%d %s, want 400 with %q", resp.StatusCode, body, c.msg)
			}
			if closed, got := rc.closed(); !closed {
				t.Errorf("connection not closed after the 400: %q", got)
			}
		})
	}
	rc := dialRaw(t, s.addr)
	rc.send(t, "GET /v1/models HTTP/1.0\r\n\r\n")
	if resp, body := rc.answer(t, "GET"); resp.StatusCode != 200 || !strings.Contains(body, "model-a") {
		t.Errorf("HTTP/1.0 without Host: %d %s", resp.StatusCode, body)
	}
}

// ownAnswers are one request for each kind of answer saltus gives by
// itself (and /v1/models), each with the status it gets.
var ownAnswers = []struct {
	name   string
	req    func(id string) string // id "": no X-Request-ID
	method string
	status int
}{
	{"400 framing", func(id string) string {
		return "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "Bad Header\r\n\r\n"
	}, "GET", 400},
	{"400 traversal", func(id string) string { return rawPost("/v1/%2e%2e/tokenize", idLine(id)) }, "POST", 400},
	{"400 no Host", func(id string) string { return "GET /v1/models HTTP/1.1\r\n" + idLine(id) + "\r\n" }, "GET", 400},
	{"400 decode", func(id string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "Content-Length: 2\r\n\r\n{}"
	}, "POST", 400},
	{"404", func(id string) string { return "GET /nope HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "\r\n" }, "GET", 404},
	{"405", func(id string) string {
		return "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "\r\n"
	}, "GET", 405},
	{"413", func(id string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "Content-Length: 2000\r\n\r\n"
	}, "POST", 413},
	{"413 chunked", func(id string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "Transfer-Encoding: chunked\r\n\r\n7d0\r\n"
	}, "POST", 413},
	{"431", func(id string) string {
		return "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "X-Big: " + strings.Repeat("h", 2<<10) + "\r\n\r\n"
	}, "GET", 431},
	{"501", func(id string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "Transfer-Encoding: gzip\r\n\r\n"
	}, "POST", 501},
	{"models 200", func(id string) string { return "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + idLine(id) + "\r\n" }, "GET", 200},
}

func idLine(id string) string {
	if id == "" {
		return ""
	}
	return "X-Request-ID: " + id + "\r\n"
}

// TestServeOwnAnswers: every answer saltus gives by itself carries the
// client's X-Request-ID, or a generated one; 413 and 431 name their
// limit; saltus_requests_total counts each answer once.
func TestServeOwnAnswers(t *testing.T) {
	t.Parallel()
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Reactor.MaxBodyBytes = 1 << 10
		c.Reactor.MaxHeaderBytes = 1 << 10
	})
	seen := map[string]bool{}
	for _, c := range ownAnswers {
		t.Run(c.name, func(t *testing.T) {
			for _, id := range []string{"client-id-" + strings.ReplaceAll(c.name, " ", "-"), ""} {
				rc := dialRaw(t, s.addr)
				rc.send(t, c.req(id))
				resp, body := rc.answer(t, c.method)
				if resp.StatusCode != c.status {
					t.Fatalf("%d %s, want %d", resp.StatusCode, body, c.status)
				}
				got := resp.Header.Get("X-Request-ID")
				switch {
				case id != "" && got != id:
					t.Errorf("X-Request-ID %q, want the client's %q", got, id)
				case id == "" && (got == "" || seen[got]):
					t.Errorf("generated X-Request-ID %q: empty or seen before", got)
				}
				seen[got] = true
				if c.status >= 400 {
					errorOf(t, body)
				}
				switch c.status {
				case 413:
					if !strings.Contains(body, "over the limit of 1024 bytes (--max-body)") {
						t.Errorf("413 does not name the limit: %s", body)
					}
				case 431:
					if !strings.Contains(body, "over the limit of 1024 bytes (--max-header)") {
						t.Errorf("431 does not name the limit: %s", body)
					}
				}
			}
		})
	}
	// Each request above was sent twice; one more OPTIONS *.
	rc := dialRaw(t, s.addr)
	rc.send(t, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := rc.answer(t, "OPTIONS"); resp.StatusCode != 200 || resp.Header.Get("Allow") == "" || resp.Header.Get("X-Request-ID") == "" {
		t.Errorf("OPTIONS *: %d %v", resp.StatusCode, resp.Header)
	}
	m := s.metrics(t)
	for series, want := range map[string]float64{
		`saltus_requests_total{route="none",code="400"}`:    6, // framing, traversal, no Host
		`saltus_requests_total{route="chat",code="400"}`:    2, // decode
		`saltus_requests_total{route="unknown",code="404"}`: 2,
		`saltus_requests_total{route="chat",code="405"}`:    2,
		`saltus_requests_total{route="none",code="413"}`:    4,
		`saltus_requests_total{route="none",code="431"}`:    2,
		`saltus_requests_total{route="none",code="501"}`:    2,
		`saltus_requests_total{route="models",code="200"}`:  2,
		`saltus_requests_total{route="none",code="200"}`:    1, // OPTIONS *
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	var total float64
	for series, v := range m {
		if strings.HasPrefix(series, "saltus_requests_total{") {
			total += v
		}
	}
	if total != 23 {
		t.Errorf("saltus_requests_total sums to %v, want 23 (each answer once)", total)
	}
}

// TestServeOwn503: the 503s that mean nothing can serve now carry
// Retry-After and X-Request-ID, and are counted: over max-conns, and no
// routable backend.
func TestServeOwn503(t *testing.T) {
	t.Parallel()
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Reactor.MaxConns = 1
	})
	held := dialRaw(t, s.addr)
	held.send(t, rawPost("/v1/chat/completions", idLine("mine")))
	resp, body := held.answer(t, "POST")
	if e := errorOf(t, body); resp.StatusCode != 503 || e.Error.Code != "no_backend" ||
		resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Request-ID") != "mine" {
		t.Errorf("no backend: %d %v %s, want 503 with Retry-After and X-Request-ID", resp.StatusCode, resp.Header, body)
	}
	over := dialRaw(t, s.addr) // held is open: one too many
	resp, body = over.answer(t, "GET")
	if e := errorOf(t, body); resp.StatusCode != 503 || e.Error.Code != "too_many_connections" ||
		resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Request-ID") == "" {
		t.Errorf("over max-conns: %d %v %s, want 503 with Retry-After and X-Request-ID", resp.StatusCode, resp.Header, body)
	}
	m := s.metrics(t)
	for series, want := range map[string]float64{
		`saltus_requests_total{route="chat",code="503"}`: 1,
		`saltus_requests_total{route="none",code="503"}`: 1,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
}
