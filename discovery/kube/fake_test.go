package kube

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules"
)

// waitFor bounds every wait of these tests: a failure, not a hang.
const waitFor = 10 * time.Second

// fakeAPI is a scripted Kubernetes API server: each request is handed to
// the test (next), which answers it.
type fakeAPI struct {
	srv  *httptest.Server
	reqs chan *apiReq
}

// apiReq is one request the fake received, waiting for its answer.
type apiReq struct {
	r      *http.Request
	query  url.Values
	watch  bool
	answer chan func(http.ResponseWriter, *http.Request)
}

// newFakeAPI starts a fake over TLS (tls) or plain HTTP; the test's
// cleanup closes it after the watcher's (registered later, run first).
func newFakeAPI(t *testing.T, useTLS bool) *fakeAPI {
	t.Helper()
	return newFakeAPIWith(t, useTLS, nil)
}

// newFakeAPIWith is newFakeAPI with the TLS server's config adjusted by
// tune before it starts (a client certificate required).
func newFakeAPIWith(t *testing.T, useTLS bool, tune func(*tls.Config)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{reqs: make(chan *apiReq)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		req := &apiReq{r: r, query: q, watch: q.Get("watch") == "1", answer: make(chan func(http.ResponseWriter, *http.Request), 1)}
		select {
		case f.reqs <- req:
		case <-r.Context().Done():
			return
		}
		select {
		case fn := <-req.answer:
			fn(w, r)
		case <-r.Context().Done():
		}
	})
	if useTLS {
		f.srv = httptest.NewUnstartedServer(h)
		f.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes TestUntrustedServer fails on purpose
		f.srv.TLS = &tls.Config{}
		if tune != nil {
			tune(f.srv.TLS)
		}
		f.srv.StartTLS()
	} else {
		f.srv = httptest.NewServer(h)
	}
	t.Cleanup(f.srv.Close)
	return f
}

// next returns the next request the fake received.
func (f *fakeAPI) next(t *testing.T) *apiReq {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(waitFor):
		t.Fatal("no request reached the fake API server")
		return nil
	}
}

// nextList returns the next request, which must be a list.
func (f *fakeAPI) nextList(t *testing.T) *apiReq {
	t.Helper()
	r := f.next(t)
	if r.watch {
		t.Fatalf("got a watch (resourceVersion=%q), want a list", r.query.Get("resourceVersion"))
	}
	return r
}

// nextWatch returns the next request, which must be a watch from rv.
func (f *fakeAPI) nextWatch(t *testing.T, rv string) *apiReq {
	t.Helper()
	r := f.next(t)
	if !r.watch {
		t.Fatalf("got a list, want a watch from %q", rv)
	}
	if got := r.query.Get("resourceVersion"); got != rv {
		t.Fatalf("watch from resourceVersion %q, want %q", got, rv)
	}
	return r
}

func (r *apiReq) respond(fn func(http.ResponseWriter, *http.Request)) { r.answer <- fn }

// json answers with status and body.
func (r *apiReq) json(status int, body string) {
	r.respond(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body) // the client may be gone; the test sees it
	})
}

// list answers a list with the slices at resourceVersion rv.
func (r *apiReq) list(rv string, items ...map[string]any) {
	if items == nil {
		items = []map[string]any{}
	}
	r.json(200, mustJSON(map[string]any{
		"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
		"metadata": map[string]any{"resourceVersion": rv}, "items": items,
	}))
}

// stream answers a watch with a stream the test writes lines to.
type stream struct {
	lines chan string
	end   chan struct{} // closed: end the answer cleanly
	abort chan struct{} // closed: cut the connection
}

func (r *apiReq) stream() *stream {
	s := &stream{lines: make(chan string), end: make(chan struct{}), abort: make(chan struct{})}
	r.respond(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		rc.Flush() // the client may be gone; the test sees it
		for {
			select {
			case l := <-s.lines:
				io.WriteString(w, l) // as above
				rc.Flush()           // as above
			case <-s.end:
				return
			case <-s.abort:
				panic(http.ErrAbortHandler) // net/http closes the connection mid-answer
			case <-req.Context().Done():
				return
			}
		}
	})
	return s
}

// send writes raw (a line with its newline, or a part of one).
func (s *stream) send(t *testing.T, raw string) {
	t.Helper()
	select {
	case s.lines <- raw:
	case <-time.After(waitFor):
		t.Fatal("the watch stream's handler is gone")
	}
}

// event sends one watch event.
func (s *stream) event(t *testing.T, typ string, obj any) {
	t.Helper()
	s.send(t, mustJSON(map[string]any{"type": typ, "object": obj})+"\n")
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// testNS and testService are the watched Service's.
const (
	testNS      = "ns1"
	testService = "vllm"
)

// slice is an EndpointSlice of the test Service.
func slice(name, rv, addressType string, ports []map[string]any, eps ...map[string]any) map[string]any {
	if eps == nil {
		eps = []map[string]any{}
	}
	return map[string]any{
		"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
		"metadata": map[string]any{
			"name": name, "namespace": testNS, "resourceVersion": rv,
			"labels":        map[string]any{serviceLabel: testService, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
			"managedFields": []any{map[string]any{"manager": "kube-controller-manager", "operation": "Update"}},
		},
		"addressType": addressType,
		"endpoints":   eps,
		"ports":       ports,
	}
}

// port is an EndpointSlice port.
func port(name string, n int) map[string]any {
	return map[string]any{"name": name, "port": n, "protocol": "TCP"}
}

// ep is an endpoint of pod at addr in state: ready, unknown (no ready
// condition), notready, terminating.
func ep(addr, pod, state string) map[string]any {
	c := map[string]any{}
	switch state {
	case "ready":
		c["ready"], c["serving"], c["terminating"] = true, true, false
	case "unknown":
	case "notready":
		c["ready"], c["serving"], c["terminating"] = false, false, false
	case "terminating":
		c["ready"], c["serving"], c["terminating"] = false, true, true
	default:
		panic("ep state " + state)
	}
	e := map[string]any{"addresses": []string{addr}, "conditions": c, "nodeName": "node-1"}
	if pod != "" {
		e["targetRef"] = map[string]any{"kind": "Pod", "name": pod, "namespace": testNS, "uid": "u-" + pod}
	}
	return e
}

var httpPort = []map[string]any{port("http", 8000)}

// bookmark is a BOOKMARK event's object.
func bookmark(rv string) map[string]any {
	return map[string]any{"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "metadata": map[string]any{"resourceVersion": rv}}
}

// inClusterDir writes a service account directory: token, the fake's CA
// (if it is TLS) and namespace ("" leaves the file out).
func inClusterDir(t *testing.T, f *fakeAPI, token, namespace string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("token", token+"\n")
	if f.srv.TLS != nil {
		write("ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})))
	}
	if namespace != "" {
		write("namespace", namespace)
	}
	return dir
}

// serverEnv returns a getenv that points in-cluster discovery at f.
func serverEnv(f *fakeAPI) func(string) string {
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		panic(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		panic(err)
	}
	return func(k string) string {
		return map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}[k]
	}
}

// testConfig is a config for the fake: in-cluster credentials from a
// temp dir, the namespace from its file, quick backoffs.
func testConfig(t *testing.T, f *fakeAPI) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Service = testService
	cfg.BackoffMin, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	cfg.WatchTimeout = 60 * time.Second
	cfg.inClusterDir = inClusterDir(t, f, "tok1", testNS)
	cfg.getenv = serverEnv(f)
	return cfg
}

// running is a Watcher under test, run on a rules.Group until the test
// ends.
type running struct {
	w       *Watcher
	set     *metrics.Set
	updates chan []Target
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	rs := startAll(t, cfg)
	if len(rs) != 1 {
		t.Fatalf("%d watchers, want 1", len(rs))
	}
	return rs[0]
}

// startAll runs every Watcher New returns for cfg, each with its own
// updates, on one metrics set.
func startAll(t *testing.T, cfg Config) []*running {
	t.Helper()
	set := metrics.NewSet()
	ws, err := New(cfg, slog.New(slog.DiscardHandler), set)
	if err != nil {
		t.Fatal(err)
	}
	g := rules.NewGroup(context.Background())
	var rs []*running
	for _, w := range ws {
		r := &running{w: w, set: set, updates: make(chan []Target, 64)}
		g.Go("discovery.kube", func(ctx context.Context) { w.Run(ctx, func(ts []Target) { r.updates <- ts }) })
		rs = append(rs, r)
	}
	t.Cleanup(func() {
		g.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := g.Wait(ctx); err != nil {
			t.Errorf("Run did not return after its context ended: %v (running: %v)", err, g.Running())
		}
	})
	return rs
}

// update returns the next set handed to update.
func (r *running) update(t *testing.T) []Target {
	t.Helper()
	select {
	case ts := <-r.updates:
		return ts
	case <-time.After(waitFor):
		t.Fatal("no update")
		return nil
	}
}

// noUpdate checks no update is waiting.
func (r *running) noUpdate(t *testing.T) {
	t.Helper()
	select {
	case ts := <-r.updates:
		t.Fatalf("unexpected update %v", ts)
	default:
	}
}

// metric returns a series' value, or -1 when it does not exist.
func (r *running) metric(name string) float64 {
	var sb strings.Builder
	r.set.WritePrometheus(&sb)
	for line := range strings.Lines(sb.String()) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

func (r *running) status() Status { return r.w.Status().(Status) }

// targets formats ts as "name=url,..." for comparisons.
func targets(ts []Target) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.Name+"="+t.URL)
	}
	return strings.Join(parts, ",")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
