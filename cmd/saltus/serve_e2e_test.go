package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/shard"
)

// upstream is a test engine: it answers chat completions with its own name,
// streams SSE when asked, and can die mid-stream or answer slowly.
type upstream struct {
	name  string
	srv   *httptest.Server
	calls atomic.Int64
	// done is closed when the test ends, before the server closes: a
	// handler that holds a request waits for it (or the request's end).
	done chan struct{}
}

func newUpstream(t *testing.T, name string) *upstream {
	t.Helper()
	return newUpstreamFunc(t, name, nil)
}

// newUpstreamFunc is newUpstream whose POSTs are answered by post (nil:
// the default chat answers); calls counts them either way.
func newUpstreamFunc(t *testing.T, name string, post func(u *upstream, w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{name: name, done: make(chan struct{})}
	if post == nil {
		post = (*upstream).chat
	}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health":
			io.WriteString(w, "ok")
		case r.URL.Path == "/v1/models":
			// Its own model, and those the tests send (llama3, m): a
			// fleet of one model in pools (issue 29).
			fmt.Fprintf(w, `{"object":"list","data":[{"id":"model-%s","object":"model"},{"id":"llama3","object":"model"},{"id":"m","object":"model"}]}`, name)
		case r.Method == "POST":
			u.calls.Add(1)
			post(u, w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.srv.Close)
	t.Cleanup(func() { close(u.done) }) // runs first: cleanups are LIFO
	return u
}

// chat is the default POST answer: JSON naming the upstream, or SSE.
func (u *upstream) chat(w http.ResponseWriter, r *http.Request) {
	name := u.name
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(body, &req) // the router already checked it
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", name)
		fmt.Fprintf(w, `{"served_by":%q,"auth":%q,"request_id":%q}`, name, r.Header.Get("Authorization"), r.Header.Get("X-Request-ID"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range 3 {
		fmt.Fprintf(w, "data: {\"tok\":%d,\"by\":%q}\n\n", i, name)
		fl.Flush()
		if i == 1 && r.Header.Get("X-Test") == "die" {
			// Die mid-stream: drop the connection without a [DONE].
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// served is a `saltus serve` run by startServeWith: the real serving path
// (buildDataPlane) under the real lifecycle (serveWith).
type served struct {
	addr, admin string      // the data plane's and the admin listener's addresses
	cfg         serveConfig // as validated
	certs       tlsCerts    // what SIGHUP reloads (reloadTLS)
	logs        func() string
	set         *metrics.Set // the data plane's and the admin listener's
	router      *shard.Router

	signals chan os.Signal
	sigOnce sync.Once
	code    chan int
	exit    int // once exited is set
	exited  bool
}

// term sends SIGTERM, once: the drain begins.
func (s *served) term() { s.sigOnce.Do(func() { s.signals <- syscall.SIGTERM }) }

// wait returns the exit code, waiting at most d for it (-1 and a test
// error if it does not come).
func (s *served) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	if s.exited {
		return s.exit
	}
	select {
	case s.exit = <-s.code:
		s.exited = true
		return s.exit
	case <-time.After(d):
		t.Errorf("serve did not exit within %v", d)
		return -1
	}
}

// startServe builds the real serving path over ups (and the backend URLs
// in extra) with the test defaults, and serves until the test ends
// (SIGTERM, exit code 0 checked). It returns the data plane's address.
func startServe(t *testing.T, ups []*upstream, extra ...string) string {
	t.Helper()
	return startServeWith(t, ups, nil, extra...).addr
}

// startServeWith is startServe with the test defaults changed by mod (nil:
// none) before validation. It serves until the test ends, or until the
// test calls term; the exit code must be 0 either way.
func startServeWith(t *testing.T, ups []*upstream, mod func(*serveConfig), extra ...string) *served {
	t.Helper()
	cfg := defaultServeConfig()
	cfg.Reactor.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Tokenizer = "../../tokenpool/testdata/models/llama3/tokenizer.json.gz"
	cfg.Reactor.Loops = 2
	cfg.DrainTimeout = 5 * time.Second
	cfg.Backend.HealthInterval = time.Hour // probes would race the assertions
	for _, u := range ups {
		cfg.Backends = append(cfg.Backends, u.srv.URL)
	}
	cfg.Backends = append(cfg.Backends, extra...)
	if mod != nil {
		mod(&cfg)
	}
	return startServeCfg(t, cfg, nil)
}

// startServeCfg serves cfg, loaded from args (nil: built in code; a
// reload then reads the defaults), until the test ends or calls term.
func startServeCfg(t *testing.T, cfg serveConfig, args []string) *served {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	// runServe's handler in cfg's format (durations in ms), at info: the
	// "serving" line below must show.
	logger, err := newLogger(lockedWriter{&logs, &logMu}, cfg.LogFormat, "info")
	if err != nil {
		t.Fatal(err)
	}
	// One set for the data plane and the admin listener, as runServe has:
	// /metrics shows the serving path's metrics.
	set := metrics.NewSet()
	heapFloor(0, set)                        // its gauge, as runServe registers it; no block
	certs, err := loadTLS(&cfg, set, logger) // as runServe does
	if err != nil {
		t.Fatal(err)
	}
	sp, err := buildDataPlane(cfg, logger, set)
	if err != nil {
		t.Fatal(err)
	}
	sp.certs = certs
	s := &served{
		certs:  certs,
		cfg:    cfg,
		set:    set,
		router: sp.router,
		logs: func() string {
			logMu.Lock()
			defer logMu.Unlock()
			return logs.String()
		},
		signals: make(chan os.Signal, 2),
		code:    make(chan int, 1),
	}
	// A bare goroutine: it stands for main's, joined through s.code.
	go func() { s.code <- serveWith(cfg, args, sp, set, logger, nil, s.signals) }()
	t.Cleanup(func() {
		s.term()
		defer func() {
			if t.Failed() { // what saltus said, for a failure seen once
				l := s.logs()
				t.Logf("saltus's log (its last 8 KiB):\n%s", l[max(0, len(l)-8<<10):])
			}
		}()
		if c := s.wait(t, 30*time.Second); c != 0 {
			t.Errorf("serve exit code %d", c)
		}
	})
	// The lifecycle logs the addresses once the data plane listens.
	re := regexp.MustCompile(`msg=serving component=serve listen=(\S+) admin=(\S+)`)
	if cfg.LogFormat == "json" {
		re = regexp.MustCompile(`"msg":"serving","component":"serve","listen":"([^"]+)","admin":"([^"]+)"`)
	}
	waitFor(t, func() bool {
		m := re.FindStringSubmatch(s.logs())
		if m != nil {
			s.addr, s.admin = m[1], m[2]
		}
		return m != nil
	})
	return s
}

type answer struct {
	status  int
	header  http.Header
	body    string
	backend string
	route   string
}

func post(t *testing.T, addr, path, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b), resp.Header.Get("X-Saltus-Backend"), resp.Header.Get("X-Saltus-Route")}
}

func chatJSON(stream bool, msgs ...string) string {
	type m struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []m
	for i := 0; i+1 < len(msgs); i += 2 {
		ms = append(ms, m{msgs[i], msgs[i+1]})
	}
	b, _ := json.Marshal(map[string]any{"model": "llama3", "stream": stream, "messages": ms})
	return string(b)
}

var (
	sysA = "You are a meticulous assistant for a shipping company. " + strings.Repeat("Answer with tide tables, port codes and vessel names where relevant. ", 12)
	sysB = "You are a terse poet who only writes haiku about the sea. " + strings.Repeat("Count syllables carefully, five seven five, and never rhyme. ", 12)
)

// TestServeEndToEnd runs the real binary's serving path (reactor, router,
// tokenizer, backend set, admin) against three test engines.
func TestServeEndToEnd(t *testing.T) {
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c")}
	addr := startServe(t, ups)

	// Affinity: the same system prompt goes to one backend, with the route
	// learned after the first request.
	first := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Port of Rotterdam?"), "Authorization", "Bearer sk-1")
	if first.status != 200 || first.backend == "" || routeReason(first.route) != "hash" {
		t.Fatalf("first: %d backend %q route %q body %s", first.status, first.backend, first.route, first.body)
	}
	if !strings.Contains(first.body, `"auth":"Bearer sk-1"`) || strings.Contains(first.body, `"request_id":""`) {
		t.Errorf("Authorization not forwarded or X-Request-ID not generated: %s", first.body)
	}
	for i := range 5 {
		a := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", fmt.Sprintf("Question %d?", i)))
		if a.backend != first.backend || routeReason(a.route) != "tree" {
			t.Fatalf("request %d: backend %q route %q, want %q by tree", i, a.backend, a.route, first.backend)
		}
	}
	// A multi-turn conversation stays on its backend, matching deeper.
	turn := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Port of Rotterdam?",
		"assistant", "NLRTM. "+strings.Repeat("It is the largest port in Europe. ", 8), "user", "And Hamburg?"))
	if turn.backend != first.backend {
		t.Errorf("second turn on %q, want %q", turn.backend, first.backend)
	}
	var m1, t1 int
	fmt.Sscanf(turn.route, "%d/%d", &m1, &t1)
	if m1 == 0 || t1 <= m1-1 {
		t.Errorf("second turn route %q", turn.route)
	}

	// Streaming: SSE events relayed as they come, ending in [DONE].
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(chatJSON(true, "system", sysB, "user", "Write one.")))
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "data: ") {
			events = append(events, l)
		}
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(events) != 4 || events[3] != "data: [DONE]" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("stream: %d %q %v", resp.StatusCode, resp.Header.Get("Content-Type"), events)
	}

	// Upstream dies mid-stream: an SSE error event, never a [DONE].
	resp, err = http.DefaultClient.Do(mustReq(t, "http://"+addr+"/v1/chat/completions",
		chatJSON(true, "system", sysB, "user", "Die."), "X-Test", "die"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "[DONE]") || !strings.Contains(string(b), "event: error") {
		t.Errorf("mid-stream death relayed as %q", b)
	}

	// Bad input: OpenAI-style errors.
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/chat/completions", "{bad", 400},
		{"POST", "/v1/chat/completions", `{"model":"m"}`, 400},
		{"POST", "/v1/nothing/here/at/all", `{}`, 200},
		{"GET", "/v1/chat/completions", "", 405},
		{"GET", "/nope", "", 404},
	} {
		req, _ := http.NewRequest(c.method, "http://"+addr+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if c.path == "/v1/nothing/here/at/all" {
			// Proxied without learning: the test engine answers any POST.
			if resp.StatusCode != 200 || resp.Header.Get("X-Saltus-Backend") == "" || !strings.Contains(string(b), "served_by") {
				t.Errorf("%s %s: %d %q", c.method, c.path, resp.StatusCode, resp.Header.Get("X-Saltus-Backend"))
			}
			continue
		}
		if resp.StatusCode != c.status || !strings.Contains(string(b), `"error":{`) {
			t.Errorf("%s %s: %d %s, want %d with an error body", c.method, c.path, resp.StatusCode, b, c.status)
		}
	}

	// GET /v1/models: the union over backends.
	resp, err = http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, u := range ups {
		if !strings.Contains(string(b), "model-"+u.name) {
			t.Errorf("/v1/models lacks %s: %s", u.name, b)
		}
	}
}

// TestServeRetries: a backend that refuses connections is skipped before
// the first byte; every request is answered by a live one.
func TestServeRetries(t *testing.T) {
	dead := deadPort(t)
	ups := []*upstream{newUpstream(t, "a")}
	addr := startServe(t, ups, dead)
	for i := range 12 {
		a := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", fmt.Sprintf("Prompt family %d. %s", i, sysB), "user", "Go."))
		if a.status != 200 || a.backend != ups[0].srv.URL {
			t.Fatalf("request %d: %d from %q: %s", i, a.status, a.backend, a.body)
		}
	}
}

func mustReq(t *testing.T, url, body string, hdr ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// TestServePolicies: --policy reaches the router; each baseline routes the
// same prompt its own way and names itself in X-Saltus-Route.
func TestServePolicies(t *testing.T) {
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c")}
	body := chatJSON(false, "system", sysA, "user", "Port of Rotterdam?")
	t.Run("round_robin", func(t *testing.T) {
		// One loop: one cursor, so the cycle is exact.
		addr := startServeWith(t, ups, func(c *serveConfig) { c.Router.Policy, c.Reactor.Loops = "round_robin", 1 }).addr
		var got []string
		for range 6 {
			a := post(t, addr, "/v1/chat/completions", body)
			var m, tot int
			var reason string
			if n, _ := fmt.Sscanf(a.route, "%d/%d %s", &m, &tot, &reason); n != 3 || a.status != 200 || m != 0 || tot < 5 || reason != "round_robin" {
				t.Fatalf("%d route %q: %s", a.status, a.route, a.body)
			}
			got = append(got, a.backend)
		}
		want := []string{ups[0].srv.URL, ups[1].srv.URL, ups[2].srv.URL}
		if !slices.Equal(got, append(want, want...)) {
			t.Fatalf("served by %v, want %v twice", got, want)
		}
	})
	t.Run("consistent_hash", func(t *testing.T) {
		addr := startServeWith(t, ups, func(c *serveConfig) { c.Router.Policy = "consistent_hash" }).addr
		first := post(t, addr, "/v1/chat/completions", body)
		for i := range 4 {
			a := post(t, addr, "/v1/chat/completions", body)
			if a.status != 200 || a.backend != first.backend || !strings.HasPrefix(a.route, "0/") || !strings.HasSuffix(a.route, " consistent_hash") {
				t.Fatalf("request %d: %d on %q (first on %q) route %q", i, a.status, a.backend, first.backend, a.route)
			}
		}
	})
	t.Run("least_request", func(t *testing.T) {
		addr := startServeWith(t, ups, func(c *serveConfig) { c.Router.Policy = "least_request" }).addr
		if a := post(t, addr, "/v1/chat/completions", body); a.status != 200 || a.backend == "" || !strings.HasSuffix(a.route, " least_request") {
			t.Fatalf("%d on %q route %q", a.status, a.backend, a.route)
		}
	})
}

// TestServeOneTransport: under every policy, every route saltus
// forwards (chat whole and streamed, a prompt too short for a key,
// completions, embeddings, another /v1/* path) is served over the
// upstream connections of the event loops, kept alive: the dials stay
// within the loops' pools (saltus_upstream_dials_total), and no request
// is refused or left in flight.
func TestServeOneTransport(t *testing.T) {
	t.Parallel()
	for _, pol := range policy.Names() {
		t.Run(pol, func(t *testing.T) {
			t.Parallel()
			ups := []*upstream{newUpstream(t, "a")}
			s := startServeWith(t, ups, func(c *serveConfig) { c.Tokenizer, c.Router.Policy, c.Reactor.Loops = "", pol, 2 })
			for i := range 3 {
				for _, r := range []struct{ path, body, want string }{
					{"/v1/chat/completions", chatJSON(false, "system", sysA, "user", fmt.Sprintf("Q%d", i)), `"served_by":"a"`},
					{"/v1/chat/completions", chatJSON(false, "user", "hi"), `"served_by":"a"`},
					{"/v1/chat/completions", chatJSON(true, "system", sysA, "user", "Stream."), "data: [DONE]\n\n"},
					{"/v1/completions", `{"model":"m","prompt":"Once upon a time"}`, `"served_by":"a"`},
					{"/v1/embeddings", `{"model":"m","input":"a sentence"}`, `"served_by":"a"`},
					{"/v1/score", `{"model":"m","text_1":"a","text_2":"b"}`, `"served_by":"a"`},
				} {
					if a := post(t, s.addr, r.path, r.body); a.status != 200 || !strings.Contains(a.body, r.want) || a.backend != ups[0].srv.URL {
						t.Fatalf("round %d %s: %d %q %.200s", i, r.path, a.status, a.backend, a.body)
					}
				}
			}
			// 18 requests, one connection at a time: a pooled connection
			// per loop at most (the test's client may land on either loop).
			if dials := s.set.GetOrCreateCounter("saltus_upstream_dials_total").Get(); dials < 1 || dials > 2 {
				t.Errorf("%d upstream dials for 18 sequential requests on 2 loops, want 1 or 2", dials)
			}
			if n := s.set.GetOrCreateCounter("saltus_backend_overload_total").Get(); n != 0 {
				t.Errorf("%d refused", n)
			}
		})
	}
}

// routeReason is X-Saltus-Route's reason: the word after
// "<matched>/<total>" (the prefix policy's receipt follows it).
func routeReason(route string) string {
	if f := strings.Fields(route); len(f) > 1 {
		return f[1]
	}
	return ""
}
