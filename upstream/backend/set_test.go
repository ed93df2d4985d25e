package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/rules"
)

func TestAddValidates(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, nil)
	for _, tc := range []struct{ url, want string }{
		{"ftp://127.0.0.1:8000", "scheme must be http or https"},
		{"127.0.0.1:8000", "invalid URL"},
		{"http://127.0.0.1", "want http://host:port"},
		{"http://127.0.0.1:0", "bad port"},
		{"http://127.0.0.1:70000", "bad port"},
		{"http://127.0.0.1:8000/v1", "no base path prefix"},
		{"http://127.0.0.1:8000/?a=b", "no query"},
		{"http://u:p@127.0.0.1:8000", "user info"},
		{"http://:8000", "want http://host:port"},
		{"http://[::1", "invalid URL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			if _, err := s.Add(tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Add(%q) = %v, want an error with %q", tc.url, err, tc.want)
			}
		})
	}
	if len(s.Snapshot()) != 0 {
		t.Errorf("rejected URLs were added: %d", len(s.Snapshot()))
	}
}

func TestAddRemoveDrain(t *testing.T) {
	t.Parallel()
	s, ms := testSet(t, nil)
	a := mustAdd(t, s, "http://127.0.0.1:9001/")
	if a.URL != "http://127.0.0.1:9001" || a.ID != 0 || !a.Routable() || !a.Healthy() {
		t.Fatalf("added %+v routable=%v", a, a.Routable())
	}
	if _, err := s.Add("http://127.0.0.1:9001"); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate Add = %v", err)
	}
	b := mustAdd(t, s, "http://127.0.0.1:9002")
	before := s.Snapshot()
	if len(before) != 2 || before[0] != a || before[1] != b || b.ID != 1 {
		t.Fatalf("snapshot %v", before)
	}
	if err := s.Drain(a.ID); err != nil || a.Routable() || !a.Healthy() || !a.Draining() {
		t.Errorf("Drain: %v routable=%v", err, a.Routable())
	}
	if err := s.Drain(a.ID); err != nil {
		t.Errorf("second Drain: %v", err)
	}
	if err := s.Drain(42); !errors.Is(err, ErrNotFound) {
		t.Errorf("Drain(42) = %v", err)
	}
	if err := s.Remove(a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v", err)
	}
	if len(before) != 2 || before[0] != a {
		t.Error("Remove modified an earlier snapshot")
	}
	if after := s.Snapshot(); len(after) != 1 || after[0] != b || a.Routable() {
		t.Errorf("after Remove: %v", after)
	}
	// No series of the removed backend stays (a discovery's backends come
	// and go), an answer counted after Remove included.
	s.countCode(a, 200)
	var gone strings.Builder
	ms.WritePrometheus(&gone)
	if strings.Contains(gone.String(), `backend="http://127.0.0.1:9001"`) {
		t.Errorf("series of the removed backend remain:\n%s", gone.String())
	}
	if !strings.Contains(gone.String(), `saltus_upstream_errors_total{backend="http://127.0.0.1:9002",kind="connect"}`) {
		t.Errorf("the other backend's series are gone too:\n%s", gone.String())
	}
	// The URL may come back, with a new ID: IDs are never reused.
	c := mustAdd(t, s, "http://127.0.0.1:9001")
	if c.ID != 2 || s.Lookup(2) != c || s.Lookup(0) != nil {
		t.Errorf("re-added with ID %d", c.ID)
	}
	var out strings.Builder
	ms.WritePrometheus(&out)
	for _, g := range []string{"in_flight", "pending_prefill_tokens", "footprint_tokens", "kv_pinned_tokens"} {
		if n := strings.Count(out.String(), `saltus_backend_`+g+`{backend="http://127.0.0.1:9001"}`); n != 1 {
			t.Errorf("%s gauge for the re-added URL appears %d times:\n%s", g, n, out.String())
		}
	}
	c.AddPinned(4096)
	out.Reset()
	ms.WritePrometheus(&out)
	if !strings.Contains(out.String(), `saltus_backend_kv_pinned_tokens{backend="http://127.0.0.1:9001"} 4096`) {
		t.Errorf("pinned gauge does not read the backend's count:\n%s", out.String())
	}
}

func TestProbeHysteresis(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, func(c *Config) { c.HealthFailsDown, c.HealthOKUp = 3, 2 })
	b := mustAdd(t, s, "http://127.0.0.1:9001")
	steps := []struct {
		ok   bool
		want bool
	}{
		{false, true}, {false, true}, {true, true}, // a success resets the failure count
		{false, true}, {false, true}, {false, false}, // third failure in a row: down
		{true, false}, {false, false}, {true, false}, {true, true}, // two successes in a row: up
	}
	for i, st := range steps {
		s.probeResult(b, st.ok)
		if b.Healthy() != st.want {
			t.Fatalf("step %d (ok=%v): healthy=%v, want %v", i, st.ok, b.Healthy(), st.want)
		}
	}
}

func TestPassiveBreaker(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, func(c *Config) { c.BreakerFails = 3 })
	b := mustAdd(t, s, "http://127.0.0.1:9001")
	for range 2 {
		b.passiveResult(false, 3, s.logger)
	}
	b.passiveResult(true, 3, s.logger) // resets
	for i := range 3 {
		if !b.Healthy() {
			t.Fatalf("tripped after %d failures", i)
		}
		b.passiveResult(false, 3, s.logger)
	}
	if b.Healthy() || b.Routable() {
		t.Fatal("not tripped after 3 failures in a row")
	}
	b.passiveResult(true, 3, s.logger) // a good answer does not untrip: only a probe
	if b.Healthy() {
		t.Fatal("untripped by a passive success")
	}
	s.probeResult(b, true)
	if !b.Healthy() {
		t.Fatal("a successful probe did not reset the breaker")
	}
}

// The breaker trips on real connect errors through the loop path.
func TestBreakerTripsOnConnectErrors(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, func(c *Config) { c.BreakerFails = 2; c.MaxRetries = 0 })
	b := mustAdd(t, e.s, closedPort(t))
	e.use(b)
	c := e.dial(t)
	for range 2 {
		c.send(t, "{}")
		if resp, body := c.read(t); resp.StatusCode != 503 { // refused: nothing listens
			t.Fatalf("%d %s, want 503", resp.StatusCode, body)
		}
		e.outcome(t)
	}
	if b.Healthy() {
		t.Error("two connect errors in a row did not trip the breaker")
	}
}

// A refused connection trips the breaker at once: nothing listens there.
func TestBreakerTripsOnRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := newLoopEnv(t, func(c *Config) { c.BreakerFails = 5; c.MaxRetries = 0 })
	b := mustAdd(t, e.s, closedPort(t))
	e.use(b)
	c := e.dial(t)
	c.send(t, "{}")
	if resp, body := c.read(t); resp.StatusCode != 503 {
		t.Fatalf("%d %s, want 503", resp.StatusCode, body)
	}
	e.outcome(t)
	if b.Healthy() {
		t.Error("a refused connection did not trip the breaker")
	}
}

func TestHealthProbesLive(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	var probes atomic.Int64
	healthy.Store(true)
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		probes.Add(1)
		if !healthy.Load() {
			w.WriteHeader(503)
		}
	})
	s, _ := testSet(t, func(c *Config) {
		// A probe is bounded by HealthInterval: 100 ms, not less, since a
		// loopback dial took up to 10 ms on an idle, shared VM.
		c.HealthPath, c.HealthInterval, c.HealthFailsDown, c.HealthOKUp = "/healthz", 100*time.Millisecond, 2, 2
	})
	b := mustAdd(t, s, srv.URL)
	g := rules.NewGroup(context.Background())
	s.Start(g)
	defer func() { g.Stop(); _ = g.Wait(context.Background()) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFor("probes", func() bool { return probes.Load() >= 3 })
	if !b.Healthy() {
		t.Fatal("down while its probes succeed")
	}
	healthy.Store(false)
	waitFor("down", func() bool { return !b.Healthy() })
	healthy.Store(true)
	waitFor("up", func() bool { return b.Healthy() })
	// A backend added after Start is probed too; Remove stops its probe.
	c := mustAdd(t, s, closedPort(t))
	waitFor("the new backend down", func() bool { return !c.Healthy() })
	if err := s.Remove(c.ID); err != nil {
		t.Fatal(err)
	}
}

func TestModelsUnion(t *testing.T) {
	t.Parallel()
	list := func(ids ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/models" {
				http.NotFound(w, r)
				return
			}
			var parts []string
			for _, id := range ids {
				parts = append(parts, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm"}`, id))
			}
			io.WriteString(w, `{"object":"list","data":[`+strings.Join(parts, ",")+`]}`)
		}
	}
	s, _ := testSet(t, nil)
	mustAdd(t, s, upstream(t, list("a", "b")).URL)
	mustAdd(t, s, upstream(t, list("b", "c")).URL)
	mustAdd(t, s, closedPort(t)) // one failing backend does not fail the list
	drained := mustAdd(t, s, upstream(t, list("hidden")).URL)
	if err := s.Drain(drained.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"object":"list","data":[{"id":"a","object":"model","owned_by":"vllm"},{"id":"b","object":"model","owned_by":"vllm"},{"id":"c","object":"model","owned_by":"vllm"}]}`
	if string(got) != want {
		t.Errorf("Models =\n%s\nwant\n%s", got, want)
	}

	empty, _ := testSet(t, nil)
	// No routable backend is an error, not an empty list (issue 15):
	// the router answers it 503.
	if got, err := empty.Models(context.Background()); !errors.Is(err, ErrNoCandidate) || got != nil {
		t.Errorf("no backends: %s %v, want ErrNoCandidate", got, err)
	}
	dead, _ := testSet(t, nil)
	mustAdd(t, dead, closedPort(t))
	if _, err := dead.Models(context.Background()); err == nil {
		t.Error("no backend answered, yet no error")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.MaxInFlight, c.HealthPath, c.ConnectTimeout = 0, "health", 0
	c.FirstByteTimeout, c.RequestTimeout, c.MaxResponseBody, c.HealthDownInterval, c.BackendHeader = 0, -1, 10, 0, "ip"
	err := c.Validate()
	for _, name := range []string{"MaxInFlight", "HealthPath", "ConnectTimeout", "FirstByteTimeout", "RequestTimeout",
		"MaxResponseBody", "HealthDownInterval", "BackendHeader"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate = %v, want it to name %s", err, name)
		}
	}
}
