package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// End-to-end tests of the upstream side's issue 15 changes (see
// serve_e2e_test.go for the harness): the first-byte and request
// timeouts, the 502 that says what each backend did, Retry-After, backend
// names in place of URLs, and /v1/models with no backend.

var upstreamModes = []string{"loop"}

// TestServeSlowNonStreamed: a non-streamed answer, whose head vLLM sends
// only when the generation ends, succeeds under the default timeouts
// after a first-byte timeout of the old kind has fired on the same
// request. Two saltus over one held upstream: "old" with a short
// first-byte timeout (what response-timeout did to every long
// generation), "new" with the defaults. Once old has answered 504 (the
// event that proves the time passed), the upstream answers, and new
// relays the answer.
func TestServeSlowNonStreamed(t *testing.T) {
	t.Parallel()
	for _, mode := range upstreamModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHolder(false)
			ups := []*upstream{newUpstreamFunc(t, "a", h.post)}
			old := startServeWith(t, ups, func(c *serveConfig) {
				c.Tokenizer, c.UpstreamIO = "", mode
				c.Backend.FirstByteTimeout = 200 * time.Millisecond
			})
			nu := startServeWith(t, ups, func(c *serveConfig) { c.Tokenizer, c.UpstreamIO = "", mode })
			if d := defaultServeConfig(); nu.cfg.Backend.FirstByteTimeout != d.Backend.FirstByteTimeout || nu.cfg.Backend.RequestTimeout != 0 {
				t.Fatalf("new: first-byte %v, request %v; want the defaults", nu.cfg.Backend.FirstByteTimeout, nu.cfg.Backend.RequestTimeout)
			}
			body := chatJSON(false, "system", sysA, "user", "Write a long essay.")
			got := make(chan answer, 1)
			go func() { got <- nu.chat(t, body) }()
			waitUntil(t, 10*time.Second, "the new saltus's request at the upstream", func() bool { return ups[0].calls.Load() == 1 })
			a := old.chat(t, body)
			if e := errorOf(t, a.body); a.status != 504 || !strings.Contains(e.Error.Message, "first-byte timeout (200ms)") {
				t.Fatalf("old: %d %s, want 504 naming the first-byte timeout", a.status, a.body)
			}
			select {
			case a := <-got:
				t.Fatalf("new answered %d %s before the upstream did", a.status, a.body)
			default:
			}
			close(h.release)
			if a := <-got; a.status != 200 || !strings.Contains(a.body, `"served_by":"a"`) {
				t.Errorf("new: %d %s, want the upstream's 200", a.status, a.body)
			}
		})
	}
}

// TestServeRequestTimeout: request-timeout bounds the whole request: 504
// with a message naming it before the head; after the head of a streamed
// answer, an SSE error event, and the upstream connection is closed.
func TestServeRequestTimeout(t *testing.T) {
	t.Parallel()
	const limit = 300 * time.Millisecond
	for _, mode := range upstreamModes {
		t.Run("non-streamed/"+mode, func(t *testing.T) {
			t.Parallel()
			h := newHolder(false)
			ups := []*upstream{newUpstreamFunc(t, "a", h.post), newUpstreamFunc(t, "b", h.post)}
			s := startServeWith(t, ups, func(c *serveConfig) {
				c.Tokenizer, c.UpstreamIO = "", mode
				c.Backend.RequestTimeout = limit
			})
			start := time.Now()
			a := s.chat(t, chatJSON(false, "system", sysA, "user", "Slow?"))
			el := time.Since(start)
			e := errorOf(t, a.body)
			if a.status != 504 || e.Error.Type != "timeout_error" || e.Error.Code != "gateway_timeout" ||
				!strings.Contains(e.Error.Message, "the request took longer than the request timeout (300ms)") {
				t.Errorf("%d %s, want 504 naming the request timeout", a.status, a.body)
			}
			if a.header.Get("Retry-After") != "" {
				t.Errorf("504 with Retry-After %q: the backend may still be working on it", a.header.Get("Retry-After"))
			}
			if el < limit {
				t.Errorf("504 after %v, before the request timeout %v", el, limit)
			}
			if n := ups[0].calls.Load() + ups[1].calls.Load(); n != 1 {
				t.Errorf("upstreams got %d requests, want 1 (a timeout is not retried)", n)
			}
			waitClosed(t, h.ended, 10*time.Second, "timed-out upstream request ended")
		})
	}
	t.Run("streamed", func(t *testing.T) {
		t.Parallel()
		h := newHolder(true)
		ups := []*upstream{newUpstreamFunc(t, "a", h.post)}
		s := startServeWith(t, ups, func(c *serveConfig) {
			c.Tokenizer = ""
			c.Backend.RequestTimeout = limit
		})
		a := s.chat(t, chatJSON(true, "system", sysA, "user", "Stream slowly."))
		want := "data: {\"tok\":0,\"by\":\"a\"}\n\nevent: error\ndata: "
		if a.status != 200 || !strings.HasPrefix(a.body, want) || !strings.Contains(a.body, "the request took longer than the request timeout (300ms)") ||
			strings.Contains(a.body, "[DONE]") {
			t.Errorf("%d %q, want the first event, then an SSE error event naming the request timeout", a.status, a.body)
		}
		waitClosed(t, h.ended, 10*time.Second, "timed-out upstream request ended")
	})
}

// resetter answers nothing: it closes the connection as soon as the
// request is in (an engine that crashed on it).
func resetter(u *upstream, w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// TestServeNoBackendAnswered: the 502 says which backends were tried and
// why, and carries Retry-After; with backend-header name the backends
// are named, and no URL reaches the client.
func TestServeNoBackendAnswered(t *testing.T) {
	t.Parallel()
	for _, mode := range upstreamModes {
		for _, header := range []string{"url", "name"} {
			t.Run(mode+"/"+header, func(t *testing.T) {
				t.Parallel()
				reset := newUpstreamFunc(t, "r", resetter)
				dead1, dead2 := deadPort(t), deadPort(t)
				s := startServeWith(t, nil, func(c *serveConfig) {
					c.Tokenizer, c.UpstreamIO, c.Backend.BackendHeader = "", mode, header
					c.Backends = []string{"dead-1=" + dead1, dead2, "crashy=" + reset.srv.URL}
					// Pinned: the dead ones never list their models, and
					// only a backend known to serve it is sent a model.
					c.BackendModels = []string{"dead-1=llama3", dead2 + "=llama3", "crashy=llama3"}
				})
				a := s.chat(t, chatJSON(false, "system", sysA, "user", "Anyone?"))
				e := errorOf(t, a.body)
				if a.status != 502 || e.Error.Code != "bad_gateway" || a.header.Get("Retry-After") != "1" {
					t.Fatalf("%d %s, Retry-After %q; want 502 bad_gateway, Retry-After 1", a.status, a.body, a.header.Get("Retry-After"))
				}
				msg := e.Error.Message
				labels := []string{dead1, dead2, reset.srv.URL}
				if header == "name" {
					labels = []string{"dead-1", "backend-1", "crashy"}
					if strings.Contains(msg, "127.0.0.1") {
						t.Errorf("name: the message shows an address: %q", msg)
					}
				}
				if !strings.HasPrefix(msg, "no backend answered (3 tried): backend ") {
					t.Errorf("message %q", msg)
				}
				for i, reason := range []string{"connection refused", "connection refused", "connection closed before the response head"} {
					if want := "backend " + labels[i] + ": " + reason; !strings.Contains(msg, want) {
						t.Errorf("message %q lacks %q", msg, want)
					}
				}
			})
		}
	}
}

// TestServeBackendHeader: backend-header name puts the backend's name in
// X-Saltus-Backend (its own, or backend-<id>), none leaves it out; the
// answer is the same.
func TestServeBackendHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header, named, want string
	}{
		{"url", "", ""}, // the URL, checked below
		{"name", "alpha=", "alpha"},
		{"name", "", "backend-0"},
		{"none", "alpha=", ""},
	} {
		for _, mode := range upstreamModes {
			t.Run(tc.header+"/"+strings.TrimSuffix(tc.named, "=")+"/"+mode, func(t *testing.T) {
				t.Parallel()
				up := newUpstream(t, "a")
				s := startServeWith(t, nil, func(c *serveConfig) {
					c.Tokenizer, c.UpstreamIO, c.Backend.BackendHeader = "", mode, tc.header
					c.Backends = []string{tc.named + up.srv.URL}
				})
				want := tc.want
				if tc.header == "url" {
					want = up.srv.URL
				}
				// The admin API maps names to URLs.
				if list := s.backends(t); len(list) != 1 || list[0].URL != up.srv.URL || (tc.named == "alpha=") != (list[0].Name == "alpha") {
					t.Errorf("admin backends: %+v", list)
				}
				for _, stream := range []bool{false, true} {
					a := s.chat(t, chatJSON(stream, "system", sysA, "user", "Hi."))
					_, has := a.header["X-Saltus-Backend"]
					if a.status != 200 || a.backend != want || has != (tc.header != "none") {
						t.Errorf("stream %v: %d, X-Saltus-Backend %q (present %v), want %q", stream, a.status, a.backend, has, want)
					}
				}
			})
		}
	}
}

// TestServeModelsNoBackend: GET /v1/models with no routable backend is
// 503 with Retry-After, not an empty list (which tells a client its model
// does not exist); it lists the models again once a backend is back.
func TestServeModelsNoBackend(t *testing.T) {
	t.Parallel()
	ups := []*upstream{newUpstream(t, "a")}
	s := startServeWith(t, ups, func(c *serveConfig) { c.Tokenizer = "" })
	models := func() answer { return do(t, "GET", "http://"+s.addr+"/v1/models", "") }
	if a := models(); a.status != 200 || !strings.Contains(a.body, `"model-a"`) {
		t.Fatalf("one backend: %d %s", a.status, a.body)
	}
	if a := s.adm(t, "POST", "/admin/backends/0/drain", ""); a.status/100 != 2 {
		t.Fatalf("drain: %d %s", a.status, a.body)
	}
	a := models()
	if e := errorOf(t, a.body); a.status != 503 || e.Error.Code != "no_backend" || a.header.Get("Retry-After") != "1" {
		t.Errorf("no routable backend: %d %s, Retry-After %q; want 503 no_backend, Retry-After 1", a.status, a.body, a.header.Get("Retry-After"))
	}
	// Chat requests with nothing to serve them say the same.
	a = s.chat(t, chatJSON(false, "user", "hi"))
	if a.status != 503 || a.header.Get("Retry-After") != "1" {
		t.Errorf("chat with no routable backend: %d %s, Retry-After %q", a.status, a.body, a.header.Get("Retry-After"))
	}
}
