package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// fakeBackends is an in-memory Backends.
type fakeBackends struct {
	mu   sync.Mutex
	list []BackendInfo
	next int
	err  error // returned by Add when set
}

func (f *fakeBackends) List() []BackendInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.list)
}

func (f *fakeBackends) Add(url string) (BackendInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return BackendInfo{}, f.err
	}
	for _, b := range f.list {
		if b.URL == url {
			return BackendInfo{}, fmt.Errorf("backend %s already exists (id %d)", url, b.ID)
		}
	}
	b := BackendInfo{ID: f.next, URL: url}
	f.next++
	f.list = append(f.list, b)
	return b, nil
}

func (f *fakeBackends) Remove(id int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.list, func(b BackendInfo) bool { return b.ID == id })
	if i < 0 {
		return fmt.Errorf("backend %d: %w", id, ErrNotFound)
	}
	f.list = slices.Delete(f.list, i, i+1)
	return nil
}

func (f *fakeBackends) Drain(id int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.list, func(b BackendInfo) bool { return b.ID == id })
	if i < 0 {
		return fmt.Errorf("backend %d: %w", id, ErrNotFound)
	}
	f.list[i].Draining = true
	return nil
}

// fakeRoutes records Explain's arguments.
type fakeRoutes struct {
	mu       sync.Mutex
	body     string
	path     string
	explainE error
}

func (f *fakeRoutes) RouteStats() any {
	return map[string]any{"blocks": 42, "shards": []int{40, 2}}
}

func (f *fakeRoutes) Explain(body []byte, path string) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.body, f.path = string(body), path
	if f.explainE != nil {
		return nil, f.explainE
	}
	return struct {
		Backend int    `json:"backend"`
		Reason  string `json:"reason"`
		Path    string `json:"path"`
	}{1, "hash", path}, nil
}

func newTest(t *testing.T, mut func(*Config)) (*Server, *fakeBackends, *fakeRoutes, *metrics.Set) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	if mut != nil {
		mut(&cfg)
	}
	b := &fakeBackends{list: []BackendInfo{
		{ID: 0, URL: "http://127.0.0.1:8001", Healthy: true, InFlight: 3},
		{ID: 1, URL: "http://127.0.0.1:8002"},
	}, next: 2}
	r := &fakeRoutes{}
	set := metrics.NewSet()
	s, err := New(cfg, b, r, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, b, r, set
}

type answer struct {
	code int
	body string
	hdr  http.Header
}

func do(s *Server, method, target, body string, hdr ...string) answer {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return answer{w.Code, w.Body.String(), w.Header()}
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		code         int
		want         string // the whole body
		allow        string // the Allow header, for 405
	}{
		{"health", "GET", "/health", "", 200, "ok\n", ""},
		{"health HEAD", "HEAD", "/health", "", 200, "ok\n", ""}, // the recorder keeps what net/http drops for HEAD
		{"ready", "GET", "/ready", "", 200, "ok\n", ""},
		{"list", "GET", "/admin/backends", "", 200,
			`[{"id":0,"url":"http://127.0.0.1:8001","healthy":true,"draining":false,"in_flight":3},{"id":1,"url":"http://127.0.0.1:8002","healthy":false,"draining":false,"in_flight":0}]` + "\n", ""},
		{"add", "POST", "/admin/backends", `{"url":"http://10.0.0.7:8000"}`, 201,
			`{"id":2,"url":"http://10.0.0.7:8000","healthy":false,"draining":false,"in_flight":0}` + "\n", ""},
		{"add duplicate", "POST", "/admin/backends", `{"url":"http://127.0.0.1:8001"}`, 400,
			`{"error":{"message":"cannot add backend http://127.0.0.1:8001: backend http://127.0.0.1:8001 already exists (id 0)","type":"invalid_request","code":400}}` + "\n", ""},
		{"add ftp", "POST", "/admin/backends", `{"url":"ftp://h:1"}`, 400,
			`{"error":{"message":"url: want http://host:port or https://host:port, got \"ftp://h:1\": scheme must be http or https","type":"invalid_request","code":400}}` + "\n", ""},
		{"add no port", "POST", "/admin/backends", `{"url":"http://h"}`, 400,
			`{"error":{"message":"url: want http://host:port or https://host:port, got \"http://h\": address h: missing port in address","type":"invalid_request","code":400}}` + "\n", ""},
		{"add no url", "POST", "/admin/backends", `{}`, 400,
			`{"error":{"message":"body has no \"url\"","type":"invalid_request","code":400}}` + "\n", ""},
		{"add unknown field", "POST", "/admin/backends", `{"url":"http://h:1","weight":2}`, 400,
			`{"error":{"message":"body must be a JSON object {\"url\": \"http://host:port\"}: json: unknown field \"weight\"","type":"invalid_request","code":400}}` + "\n", ""},
		{"add not JSON", "POST", "/admin/backends", `url=http://h:1`, 400,
			`{"error":{"message":"body must be a JSON object {\"url\": \"http://host:port\"}: invalid character 'u' looking for beginning of value","type":"invalid_request","code":400}}` + "\n", ""},
		{"add trailing", "POST", "/admin/backends", `{"url":"http://h:1"} {}`, 400,
			`{"error":{"message":"body must hold one JSON object and nothing after it","type":"invalid_request","code":400}}` + "\n", ""},
		{"add url not string", "POST", "/admin/backends", `{"url":5}`, 400,
			`{"error":{"message":"body must be a JSON object {\"url\": \"http://host:port\"}: json: cannot unmarshal number into Go struct field .url of type string","type":"invalid_request","code":400}}` + "\n", ""},
		{"add too large", "POST", "/admin/backends", `{"url":"` + strings.Repeat("a", 70<<10) + `"}`, 413,
			`{"error":{"message":"body is larger than 65536 bytes","type":"request_too_large","code":413}}` + "\n", ""},
		{"drain", "POST", "/admin/backends/1/drain", "", 202,
			`{"id":1,"url":"http://127.0.0.1:8002","healthy":false,"draining":true,"in_flight":0}` + "\n", ""},
		{"drain unknown", "POST", "/admin/backends/9/drain", "", 404,
			`{"error":{"message":"cannot drain backend 9: backend 9: no such backend","type":"not_found","code":404}}` + "\n", ""},
		{"drain bad id", "POST", "/admin/backends/x/drain", "", 400,
			`{"error":{"message":"backend id must be a non-negative integer, got \"x\"","type":"invalid_request","code":400}}` + "\n", ""},
		{"drain GET", "GET", "/admin/backends/1/drain", "", 405,
			`{"error":{"message":"GET /admin/backends/1/drain is not allowed; allowed: POST","type":"method_not_allowed","code":405}}` + "\n", "POST"},
		{"remove", "DELETE", "/admin/backends/0", "", 204, "", ""},
		{"remove unknown", "DELETE", "/admin/backends/7", "", 404,
			`{"error":{"message":"cannot remove backend 7: backend 7: no such backend","type":"not_found","code":404}}` + "\n", ""},
		{"remove negative", "DELETE", "/admin/backends/-1", "", 400,
			`{"error":{"message":"backend id must be a non-negative integer, got \"-1\"","type":"invalid_request","code":400}}` + "\n", ""},
		{"backend GET", "GET", "/admin/backends/0", "", 405,
			`{"error":{"message":"GET /admin/backends/0 is not allowed; allowed: DELETE","type":"method_not_allowed","code":405}}` + "\n", "DELETE"},
		{"backends PUT", "PUT", "/admin/backends", "", 405,
			`{"error":{"message":"PUT /admin/backends is not allowed; allowed: GET, HEAD, POST","type":"method_not_allowed","code":405}}` + "\n", "GET, HEAD, POST"},
		{"routes", "GET", "/admin/routes", "", 200, `{"blocks":42,"shards":[40,2]}` + "\n", ""},
		{"routes POST", "POST", "/admin/routes", "", 405,
			`{"error":{"message":"POST /admin/routes is not allowed; allowed: GET, HEAD","type":"method_not_allowed","code":405}}` + "\n", "GET, HEAD"},
		{"explain", "POST", "/admin/explain", `{"model":"m","messages":[]}`, 200,
			`{"backend":1,"reason":"hash","path":"/v1/chat/completions"}` + "\n", ""},
		{"explain completions", "POST", "/admin/explain?path=/v1/completions", `{"model":"m","prompt":"hi"}`, 200,
			`{"backend":1,"reason":"hash","path":"/v1/completions"}` + "\n", ""},
		{"explain bad path", "POST", "/admin/explain?path=/admin", `{}`, 400,
			`{"error":{"message":"path must be an API path like /v1/completions, got \"/admin\"","type":"invalid_request","code":400}}` + "\n", ""},
		{"explain bad JSON", "POST", "/admin/explain", `{"model":`, 400,
			`{"error":{"message":"body must be a JSON object: the OpenAI request body to explain","type":"invalid_request","code":400}}` + "\n", ""},
		{"explain array", "POST", "/admin/explain", `[1]`, 400,
			`{"error":{"message":"body must be a JSON object: the OpenAI request body to explain","type":"invalid_request","code":400}}` + "\n", ""},
		{"explain empty", "POST", "/admin/explain", ``, 400,
			`{"error":{"message":"body must be a JSON object: the OpenAI request body to explain","type":"invalid_request","code":400}}` + "\n", ""},
		{"explain GET", "GET", "/admin/explain", ``, 405,
			`{"error":{"message":"GET /admin/explain is not allowed; allowed: POST","type":"method_not_allowed","code":405}}` + "\n", "POST"},
		{"unknown", "GET", "/admin/nope", "", 404,
			`{"error":{"message":"no admin endpoint /admin/nope","type":"not_found","code":404}}` + "\n", ""},
		{"trailing slash", "GET", "/admin/backends/", "", 404,
			`{"error":{"message":"no admin endpoint /admin/backends/","type":"not_found","code":404}}` + "\n", ""},
		{"deeper", "POST", "/admin/backends/1/drain/x", "", 404,
			`{"error":{"message":"no admin endpoint /admin/backends/1/drain/x","type":"not_found","code":404}}` + "\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, _, _ := newTest(t, nil)
			a := do(s, tc.method, tc.path, tc.body)
			if a.code != tc.code || a.body != tc.want {
				t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, a.code, a.body, tc.code, tc.want)
			}
			if got := a.hdr.Get("Allow"); got != tc.allow {
				t.Errorf("Allow: %q, want %q", got, tc.allow)
			}
			if strings.HasPrefix(tc.want, "{") || strings.HasPrefix(tc.want, "[") {
				if ct := a.hdr.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
			}
		})
	}
}

func TestAddThenList(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTest(t, nil)
	a := do(s, "POST", "/admin/backends", `{"url":"http://[::1]:9000/"}`)
	if a.code != 201 || a.hdr.Get("Location") != "/admin/backends/2" {
		t.Fatalf("add: %d, Location %q: %s", a.code, a.hdr.Get("Location"), a.body)
	}
	if a := do(s, "DELETE", "/admin/backends/0", ""); a.code != 204 || a.body != "" {
		t.Fatalf("remove: %d %q", a.code, a.body)
	}
	want := `[{"id":1,"url":"http://127.0.0.1:8002","healthy":false,"draining":false,"in_flight":0},{"id":2,"url":"http://[::1]:9000/","healthy":false,"draining":false,"in_flight":0}]` + "\n"
	if a := do(s, "GET", "/admin/backends", ""); a.body != want {
		t.Errorf("list after add and remove:\n%s\nwant\n%s", a.body, want)
	}
}

func TestEmptyListIsArray(t *testing.T) {
	t.Parallel()
	s, b, _, _ := newTest(t, nil)
	b.list = nil
	if a := do(s, "GET", "/admin/backends", ""); a.code != 200 || a.body != "[]\n" {
		t.Errorf("empty list: %d %q", a.code, a.body)
	}
}

func TestMappedErrors(t *testing.T) {
	t.Parallel()
	s, b, r, _ := newTest(t, nil)
	b.err = fmt.Errorf("set closed: %w", ErrUnavailable)
	if a := do(s, "POST", "/admin/backends", `{"url":"http://h:1"}`); a.code != 503 ||
		a.body != `{"error":{"message":"cannot add backend http://h:1: set closed: unavailable","type":"unavailable","code":503}}`+"\n" {
		t.Errorf("add unavailable: %d %s", a.code, a.body)
	}
	r.explainE = errors.New(`"messages" must be an array`)
	if a := do(s, "POST", "/admin/explain", `{"messages":1}`); a.code != 400 ||
		a.body != `{"error":{"message":"cannot explain: \"messages\" must be an array","type":"invalid_request","code":400}}`+"\n" {
		t.Errorf("explain error: %d %s", a.code, a.body)
	}
	if r.body != `{"messages":1}` || r.path != "/v1/chat/completions" {
		t.Errorf("Explain got body %q path %q", r.body, r.path)
	}
}

func TestExplainBodyLimit(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTest(t, func(c *Config) { c.MaxBodyBytes = 100 })
	body := `{"prompt":"` + strings.Repeat("x", 100) + `"}`
	if a := do(s, "POST", "/admin/explain", body); a.code != 413 ||
		a.body != `{"error":{"message":"body is larger than 100 bytes","type":"request_too_large","code":413}}`+"\n" {
		t.Errorf("explain over limit: %d %s", a.code, a.body)
	}
}

func TestReady(t *testing.T) {
	t.Parallel()
	s, b, _, _ := newTest(t, nil)
	check := func(code int, body string) {
		t.Helper()
		if a := do(s, "GET", "/ready", ""); a.code != code || a.body != body {
			t.Errorf("/ready: %d %q, want %d %q", a.code, a.body, code, body)
		}
	}
	check(200, "ok\n")
	if err := b.Drain(0); err != nil { // the only healthy one
		t.Fatal(err)
	}
	check(503, "no routable backend\n")
	b.list[1].Healthy = true
	check(200, "ok\n")
	s.SetDraining()
	check(503, "draining\n")
	// /health does not care.
	if a := do(s, "GET", "/health", ""); a.code != 200 {
		t.Errorf("/health while draining: %d", a.code)
	}
}

func TestReadyFunc(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	notReady := errors.New("starting")
	s, _, _, _ := newTest(t, func(c *Config) {
		c.Ready = func() error { mu.Lock(); defer mu.Unlock(); return notReady }
	})
	if a := do(s, "GET", "/ready", ""); a.code != 503 || a.body != "starting\n" {
		t.Errorf("/ready with Ready's error: %d %q", a.code, a.body)
	}
	mu.Lock()
	notReady = nil
	mu.Unlock()
	if a := do(s, "GET", "/ready", ""); a.code != 200 || a.body != "ok\n" {
		t.Errorf("/ready with Ready nil: %d %q", a.code, a.body)
	}
	s.SetDraining()
	if a := do(s, "GET", "/ready", ""); a.code != 503 || a.body != "draining\n" {
		t.Errorf("/ready draining with Ready nil: %d %q", a.code, a.body)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cret-Token_1"
	s, _, _, _ := newTest(t, func(c *Config) { c.BearerToken = token })
	for _, tc := range []struct {
		method, path, auth string
		code               int
		challenge          string
	}{
		{"GET", "/health", "", 200, ""},
		{"GET", "/ready", "", 401, `Bearer realm="saltus-admin"`},
		{"GET", "/metrics", "", 401, `Bearer realm="saltus-admin"`},
		{"GET", "/admin/backends", "Bearer wrong", 401, `Bearer realm="saltus-admin", error="invalid_token"`},
		{"GET", "/admin/backends", "Basic " + token, 401, `Bearer realm="saltus-admin", error="invalid_token"`},
		{"GET", "/admin/backends", "Bearer " + token + "x", 401, `Bearer realm="saltus-admin", error="invalid_token"`},
		{"GET", "/admin/backends", "Bearer " + token[:5], 401, `Bearer realm="saltus-admin", error="invalid_token"`},
		{"GET", "/admin/nope", "", 401, `Bearer realm="saltus-admin"`},
		{"GET", "/admin/backends", "Bearer " + token, 200, ""},
		{"GET", "/admin/backends", "bearer " + token, 200, ""},
		{"GET", "/ready", "Bearer " + token, 200, ""},
		{"GET", "/metrics", "Bearer " + token, 200, ""},
		{"GET", "/admin/nope", "Bearer " + token, 404, ""},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		a := do(s, tc.method, tc.path, "", hdr...)
		if a.code != tc.code || a.hdr.Get("WWW-Authenticate") != tc.challenge {
			t.Errorf("%s %s (Authorization %q): %d, WWW-Authenticate %q; want %d, %q",
				tc.method, tc.path, tc.auth, a.code, a.hdr.Get("WWW-Authenticate"), tc.code, tc.challenge)
		}
		if tc.code == 401 && !strings.Contains(a.body, `"type":"unauthorized","code":401`) {
			t.Errorf("401 body: %s", a.body)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	s, _, _, set := newTest(t, nil)
	set.NewCounter("saltus_test_total").Add(3)
	do(s, "GET", "/health", "")
	do(s, "GET", "/nope", "")
	a := do(s, "GET", "/metrics", "")
	if a.code != 200 || a.hdr.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("/metrics: %d %q", a.code, a.hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		"saltus_test_total 3\n",
		`saltus_admin_requests_total{endpoint="health",code="200"} 1` + "\n",
		`saltus_admin_requests_total{endpoint="unknown",code="404"} 1` + "\n",
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Strict Prometheus text; an undescribed saltus_* family has no HELP
	// text, which is the only problem the check finds here.
	err := promtext.Check([]byte(a.body))
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "HELP for saltus_test_total has no text") {
		t.Errorf("promtext.Check = %v, want only saltus_test_total's missing HELP text", err)
	}
	for _, want := range []string{
		"# HELP saltus_admin_requests_total Requests to the admin listener, by endpoint and HTTP status code.\n# TYPE saltus_admin_requests_total counter\n",
		"# TYPE go_goroutines gauge\n",
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := func(mut func(*Config), want string) {
		t.Helper()
		c := DefaultConfig()
		mut(&c)
		err := c.Validate()
		if err == nil || err.Error() != want {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
		if _, err := New(c, &fakeBackends{}, &fakeRoutes{}, nil, nil); err == nil {
			t.Errorf("New accepted an invalid config (%s)", want)
		}
	}
	bad(func(c *Config) { c.Listen = "9180" }, `admin: Listen must be host:port, got "9180": address 9180: missing port in address`)
	bad(func(c *Config) { c.Listen = "localhost:http" }, `admin: Listen must have a numeric port in [0, 65535], got "localhost:http"`)
	bad(func(c *Config) { c.BearerToken = "a b" }, `admin: BearerToken must be printable ASCII without spaces (byte 1 is 0x20)`)
	bad(func(c *Config) { c.MaxBodyBytes = 0 }, `admin: MaxBodyBytes must be positive, got 0`)
	bad(func(c *Config) { c.ReadHeaderTimeout = 0 }, `admin: ReadHeaderTimeout must be positive, got 0s`)
	bad(func(c *Config) { c.ReadTimeout = -1 }, `admin: ReadTimeout must be positive, got -1ns`)
	bad(func(c *Config) { c.WriteTimeout = 0 }, `admin: WriteTimeout must be positive, got 0s`)
	bad(func(c *Config) { c.IdleTimeout = 0 }, `admin: IdleTimeout must be positive, got 0s`)
	bad(func(c *Config) { c.IdleTimeout, c.MaxBodyBytes = 0, 0 },
		"admin: MaxBodyBytes must be positive, got 0\nadmin: IdleTimeout must be positive, got 0s")
	if _, err := New(DefaultConfig(), nil, &fakeRoutes{}, nil, nil); err == nil {
		t.Error("New accepted nil Backends")
	}
}

func TestCheckBackendURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"http://127.0.0.1:8001", "http://vllm-0.vllm:8000", "http://[::1]:80/", "http://h:65535", "https://vllm-0.vllm:8443"} {
		if err := CheckBackendURL(ok); err != nil {
			t.Errorf("CheckBackendURL(%q) = %v", ok, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", `want http://host:port or https://host:port, got "": scheme must be http or https`},
		{"127.0.0.1:8001", `want http://host:port or https://host:port, got "127.0.0.1:8001": first path segment in URL cannot contain colon`},
		{"localhost:8001", `want http://host:port or https://host:port, got "localhost:8001": scheme must be http or https`},
		{"ftp://h:1", `want http://host:port or https://host:port, got "ftp://h:1": scheme must be http or https`},
		{"http:h:1", `want http://host:port or https://host:port, got "http:h:1": no host`},
		{"http://:80", `want http://host:port or https://host:port, got "http://:80": no host`},
		{"http://u:p@h:1", `want http://host:port or https://host:port, got "http://u:p@h:1": user info is not supported`},
		{"http://h:1/v1", `want http://host:port or https://host:port, got "http://h:1/v1": nothing may follow the port`},
		{"http://h:1?x", `want http://host:port or https://host:port, got "http://h:1?x": nothing may follow the port`},
		{"http://h:1#f", `want http://host:port or https://host:port, got "http://h:1#f": nothing may follow the port`},
		{"http://h:0", `want http://host:port or https://host:port, got "http://h:0": port must be a number in [1, 65535]`},
		{"http://h:99999", `want http://host:port or https://host:port, got "http://h:99999": port must be a number in [1, 65535]`},
		{"http://h:", `want http://host:port or https://host:port, got "http://h:": port must be a number in [1, 65535]`},
	} {
		if err := CheckBackendURL(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckBackendURL(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestListen runs the server on a real loopback socket.
func TestListen(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTest(t, func(c *Config) { c.BearerToken = "tok" })
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Error("second Start succeeded")
	}
	addr := s.Addr()
	if addr == "127.0.0.1:0" || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q", addr)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/ready"); code != 200 || body != "ok\n" {
		t.Errorf("/ready: %d %q", code, body)
	}
	s.SetDraining()
	if code, body := get("/ready"); code != 503 || body != "draining\n" {
		t.Errorf("/ready after SetDraining: %d %q", code, body)
	}
	client.CloseIdleConnections()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if _, err := client.Get("http://" + addr + "/health"); err == nil {
		t.Error("still serving after Shutdown")
	}
}

// blockingRoutes blocks RouteStats until release is closed.
type blockingRoutes struct {
	fakeRoutes
	entered chan struct{}
	release chan struct{}
}

func (b *blockingRoutes) RouteStats() any {
	close(b.entered)
	<-b.release
	return 1
}

// TestShutdownCutsSlowRequests: a request still running when Shutdown's
// context ends has its connection closed, and Shutdown reports the
// context's error after joining the serving goroutine.
func TestShutdownCutsSlowRequests(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	r := &blockingRoutes{entered: make(chan struct{}), release: make(chan struct{})}
	s, err := New(cfg, &fakeBackends{}, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	client := &http.Client{Timeout: 5 * time.Second}
	// A bare goroutine: the test's client, joined through got.
	go func() {
		resp, err := client.Get("http://" + s.Addr() + "/admin/routes")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	<-r.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a request running = %v, want deadline exceeded", err)
	}
	if err := <-got; err == nil {
		t.Error("the cut request got an answer")
	}
	close(r.release) // lets the handler goroutine (net/http's) end
}

func TestRoute(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]struct {
		ep endpoint
		id string
	}{
		"/metrics":                 {epMetrics, ""},
		"/admin/backends/12":       {epBackend, "12"},
		"/admin/backends/12/drain": {epDrain, "12"},
		"/admin/backends//drain":   {epUnknown, ""},
		"/admin/backends/drain":    {epBackend, "drain"},
		"/admin/backends/a/b":      {epUnknown, ""},
		"/metrics/":                {epUnknown, ""},
		"/dashboard":               {epDashboard, ""},
		"/dashboard/":              {epDashboard, "/"},
		"/dashboard/app.js":        {epDashboard, "/app.js"},
		"/dashboard/style.css":     {epDashboard, "/style.css"},
		"/dashboard/xyz":           {epUnknown, ""},
		"/dashboard.json":          {epUnknown, ""},
		"/admin/dashboard.json":    {epDashboardData, ""},
		"/admin/pools":             {epPools, ""},
		"/admin/pools/":            {epUnknown, ""},
	} {
		if ep, id := route(path); ep != want.ep || id != want.id {
			t.Errorf("route(%q) = %d %q, want %d %q", path, ep, id, want.ep, want.id)
		}
	}
}

// FuzzRoute: route never panics, and a per-backend route's id rebuilds
// the path.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{"/admin/backends/1/drain", "/admin/backends/1", "/admin/backends//drain/drain", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		ep, id := route(path)
		switch ep {
		case epBackend:
			if "/admin/backends/"+id != path || id == "" || strings.Contains(id, "/") {
				t.Errorf("route(%q) = backend %q", path, id)
			}
		case epDrain:
			if "/admin/backends/"+id+"/drain" != path || id == "" || strings.Contains(id, "/") {
				t.Errorf("route(%q) = drain %q", path, id)
			}
		case epDashboard:
			if "/dashboard"+id != path || !slices.Contains([]string{"", "/", "/app.js", "/style.css"}, id) {
				t.Errorf("route(%q) = dashboard %q", path, id)
			}
		case epPprof:
		default:
			if id != "" {
				t.Errorf("route(%q) = %d with id %q", path, ep, id)
			}
		}
	})
}

// FuzzCheckBackendURL: never panics; what it accepts has scheme http or
// https and a port.
func FuzzCheckBackendURL(f *testing.F) {
	for _, s := range []string{"http://h:1", "http://[::1]:80/", "https://h:1", "http://h:1/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if l := strings.ToLower(s); CheckBackendURL(s) == nil && !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
			t.Errorf("accepted %q", s)
		}
	})
}

func TestPprof(t *testing.T) {
	t.Parallel()
	const token = "tok"
	off, _, _, _ := newTest(t, func(c *Config) { c.BearerToken = token })
	if a := do(off, "GET", "/debug/pprof/", "", "Authorization", "Bearer "+token); a.code != 404 {
		t.Errorf("pprof off: %d, want 404", a.code)
	}
	s, _, _, _ := newTest(t, func(c *Config) { c.BearerToken = token; c.Pprof = true })
	for _, tc := range []struct {
		path, auth string
		code       int
		want       string
	}{
		{"/debug/pprof/", "", 401, ""},
		{"/debug/pprof/goroutine?debug=1", "", 401, ""},
		{"/debug/pprof/", "Bearer " + token, 200, "goroutine"},
		{"/debug/pprof/goroutine?debug=1", "Bearer " + token, 200, "goroutine profile: total"},
		{"/debug/pprof/heap?debug=1", "Bearer " + token, 200, "heap profile"},
		{"/debug/pprof/cmdline", "Bearer " + token, 200, ""},
		{"/debug/pprof/nope", "Bearer " + token, 404, "Unknown profile"},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		a := do(s, "GET", tc.path, "", hdr...)
		if a.code != tc.code || !strings.Contains(a.body, tc.want) {
			t.Errorf("GET %s (auth %q): %d %.80q; want %d containing %q", tc.path, tc.auth, a.code, a.body, tc.code, tc.want)
		}
	}
	if a := do(s, "DELETE", "/debug/pprof/", "", "Authorization", "Bearer "+token); a.code != 405 {
		t.Errorf("DELETE pprof: %d, want 405", a.code)
	}
}

func TestReloadEndpointAndToken(t *testing.T) {
	t.Parallel()
	// Without Config.Reload the endpoint does not exist.
	s, _, _, _ := newTest(t, nil)
	if a := do(s, "POST", "/admin/reload", ""); a.code != 404 {
		t.Errorf("no Reload: %d %s", a.code, a.body)
	}
	fail := true
	s, _, _, _ = newTest(t, func(c *Config) {
		c.BearerToken = "one"
		c.Reload = func() (any, error) {
			if fail {
				return nil, errors.New("config x.yaml: line 3: max-body: want a size")
			}
			return map[string][]string{"applied": {"backends"}}, nil
		}
	})
	auth := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	if a := do(s, "POST", "/admin/reload", "", auth("one")...); a.code != 400 || !strings.Contains(a.body, `"message":"config x.yaml: line 3: max-body: want a size","type":"invalid_config"`) {
		t.Errorf("failed reload: %d %s", a.code, a.body)
	}
	fail = false
	if a := do(s, "GET", "/admin/reload", "", auth("one")...); a.code != 405 || a.hdr.Get("Allow") != "POST" {
		t.Errorf("GET /admin/reload: %d %v", a.code, a.hdr)
	}
	if a := do(s, "POST", "/admin/reload", ""); a.code != 401 {
		t.Errorf("reload without the token: %d", a.code)
	}
	if a := do(s, "POST", "/admin/reload", "", auth("one")...); a.code != 200 || a.body != `{"applied":["backends"]}`+"\n" {
		t.Errorf("reload: %d %q", a.code, a.body)
	}
	// The token changes for the requests that follow; a bad one is refused
	// and the old one stays.
	if err := s.SetBearerToken("bad token"); err == nil {
		t.Error("SetBearerToken accepted a space")
	}
	if err := s.SetBearerToken("two"); err != nil {
		t.Fatal(err)
	}
	if a := do(s, "GET", "/admin/backends", "", auth("one")...); a.code != 401 {
		t.Errorf("old token: %d", a.code)
	}
	if a := do(s, "GET", "/admin/backends", "", auth("two")...); a.code != 200 {
		t.Errorf("new token: %d", a.code)
	}
	if err := s.SetBearerToken(""); err != nil {
		t.Fatal(err)
	}
	if a := do(s, "GET", "/admin/backends", ""); a.code != 200 {
		t.Errorf("no token: %d", a.code)
	}
}
