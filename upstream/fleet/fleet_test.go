package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/rules/leakcheck"
	"github.com/saltus-lb/saltus/upstream/backend"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// fakeSource is a real backend set whose /v1/models answers come from
// answers (by backend name): a body, or an error.
type fakeSource struct {
	*backend.Set
	mu      sync.Mutex
	answers map[string]any // string body, or error
	fetched map[string]int
}

func (s *fakeSource) FetchModels(b *backend.Backend, _ time.Time) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetched[b.Name]++
	switch a := s.answers[b.Name].(type) {
	case string:
		return []byte(a), nil
	case error:
		return nil, a
	}
	return nil, fmt.Errorf("backend %s: /v1/models: %w", b.Name, &backend.StatusError{Code: 404})
}

func (s *fakeSource) answer(name string, a any) {
	s.mu.Lock()
	s.answers[name] = a
	s.mu.Unlock()
}

func list(models ...string) string {
	var parts []string
	for _, m := range models {
		id, parent, _ := strings.Cut(m, "<")
		p := "null"
		if parent != "" {
			p = `"` + parent + `"`
		}
		parts = append(parts, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","root":%q,"parent":%s,"max_model_len":8192}`, id, id, p))
	}
	return `{"object":"list","data":[` + strings.Join(parts, ",") + `]}`
}

// newFleet starts a fleet over backends named names (its rounds only
// when a test asks: Watch is an hour).
func newFleet(t *testing.T, cfg Config, names ...string) (*Fleet, *fakeSource, *metrics.Set) {
	t.Helper()
	set, err := backend.NewSet(backend.DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	src := &fakeSource{Set: set, answers: map[string]any{}, fetched: map[string]int{}}
	for i, n := range names {
		if _, err := set.AddNamed(n, fmt.Sprintf("http://127.0.0.1:%d", 9001+i)); err != nil {
			t.Fatal(err)
		}
	}
	ms := metrics.NewSet()
	cfg.Watch = time.Hour
	f, err := New(cfg, src, nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	g := rules.NewGroup(context.Background())
	g.Go("fleet", f.Run)
	t.Cleanup(func() {
		g.Stop()
		if err := g.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	})
	<-f.Ready()
	return f, src, ms
}

func refresh(t *testing.T, f *Fleet, ids ...int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Refresh(ctx, ids...); err != nil {
		t.Fatal(err)
	}
}

func members(ix *Index, model string) []int {
	if p := ix.Lookup(model); p != nil {
		return p.IDs
	}
	return nil
}

func TestPoolsFromListings(t *testing.T) {
	t.Parallel()
	f, src, ms := newFleet(t, DefaultConfig(), "a1", "a2", "a3", "b1", "b2")
	src.answer("a1", list("org/alpha", "alpha-tuned<org/alpha"))
	src.answer("a2", list("org/alpha", "alpha-tuned<org/alpha"))
	src.answer("a3", list("org/alpha"))
	src.answer("b1", list("org/beta"))
	src.answer("b2", list("org/beta", "org/beta"))
	refresh(t, f)
	ix := f.Index()
	for model, want := range map[string][]int{"org/alpha": {0, 1, 2}, "alpha-tuned": {0, 1}, "org/beta": {3, 4}, "org/gamma": nil} {
		if got := members(ix, model); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", model, got, want)
		}
	}
	if p := ix.Lookup("alpha-tuned"); p.Model.Parent != "org/alpha" || p.Model.MaxModelLen != 8192 || !bytes.Contains(p.Model.Card, []byte(`"parent":"org/alpha"`)) {
		t.Errorf("alpha-tuned: %+v %s", p.Model, p.Model.Card)
	}
	if ix.Wild() != nil {
		t.Errorf("wild %v, want none", ix.Wild().IDs)
	}
	if bm, _ := ix.Backend(0); bm.State != StateListed || !slices.Equal(bm.Models, []string{"alpha-tuned", "org/alpha"}) {
		t.Errorf("backend 0: %+v", bm)
	}
	var buf bytes.Buffer
	ms.WritePrometheus(&buf)
	for _, want := range []string{`saltus_pool_backends{model="org/alpha"} 3`, `saltus_pool_routable_backends{model="alpha-tuned"} 2`,
		`saltus_fleet_pools 3`, `saltus_fleet_model_fetches_total{result="ok"} 5`} {
		if !strings.Contains(buf.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
}

func TestUnknownPinnedAndKept(t *testing.T) {
	t.Parallel()
	f, src, ms := newFleet(t, DefaultConfig(), "a", "nolist", "pinned", "flaky", "empty")
	src.answer("a", list("m1"))
	src.answer("pinned", list("m1", "m2"))
	src.answer("flaky", list("m2"))
	src.answer("empty", list())
	f.src.Snapshot()[2].SetPinnedModels([]string{"m2", "m3"})
	refresh(t, f)
	ix := f.Index()
	if got := members(ix, "m1"); !slices.Equal(got, []int{0}) {
		t.Errorf("m1: %v (a pinned backend serves only its pins)", got)
	}
	if got := members(ix, "m2"); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("m2: %v", got)
	}
	if p := ix.Lookup("m3"); p == nil || !slices.Equal(p.IDs, []int{2}) || !bytes.Contains(p.Model.Card, []byte(`"owned_by":"saltus"`)) {
		t.Errorf("m3 (pinned, never listed): %+v", p)
	}
	// Without the endpoint, and with an empty list: unknown, sent models
	// no known backend serves.
	if w := ix.Wild(); w == nil || !slices.Equal(w.IDs, []int{1, 4}) {
		t.Errorf("wild: %+v, want [1 4]", w)
	}
	// A failed fetch keeps the last list.
	src.answer("flaky", errors.New("connection refused"))
	refresh(t, f, 3)
	if got := members(f.Index(), "m2"); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("m2 after flaky failed: %v", got)
	}
	if bm, _ := f.Index().Backend(3); bm.State != StateListed {
		t.Errorf("flaky: %+v", bm)
	}
	var buf bytes.Buffer
	ms.WritePrometheus(&buf)
	// (The first round, before the answers were set, found no endpoint
	// on any of them.)
	for _, want := range []string{`saltus_fleet_model_fetches_total{result="unsupported"} 6`, `saltus_fleet_model_fetches_total{result="error"} 1`,
		`saltus_fleet_unknown_backends 2`} {
		if !strings.Contains(buf.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
}

func TestAdapterAppearsAndBackendLeaves(t *testing.T) {
	t.Parallel()
	f, src, ms := newFleet(t, DefaultConfig(), "b1", "b2")
	src.answer("b1", list("org/beta"))
	src.answer("b2", list("org/beta"))
	refresh(t, f)
	src.answer("b2", list("org/beta", "beta-chat<org/beta"))
	refresh(t, f, 1)
	if got := members(f.Index(), "beta-chat"); !slices.Equal(got, []int{1}) {
		t.Fatalf("beta-chat after its load: %v", got)
	}
	// Its backend leaves: the pool goes, and so do its series (R15).
	if err := src.Remove(1); err != nil {
		t.Fatal(err)
	}
	refresh(t, f)
	if p := f.Index().Lookup("beta-chat"); p != nil {
		t.Fatalf("beta-chat after its backend left: %v", p.IDs)
	}
	var buf bytes.Buffer
	ms.WritePrometheus(&buf)
	if strings.Contains(buf.String(), `model="beta-chat"`) {
		t.Errorf("series of a gone pool remain:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), `saltus_pool_backends{model="org/beta"} 1`) {
		t.Errorf("org/beta's series:\n%s", buf.String())
	}
}

func TestDownBackendNotFetched(t *testing.T) {
	t.Parallel()
	f, src, _ := newFleet(t, DefaultConfig(), "a", "b")
	src.answer("a", list("m"))
	src.answer("b", list("m"))
	refresh(t, f)
	if err := src.Drain(0); err != nil {
		t.Fatal(err)
	}
	count := func(name string) int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.fetched[name]
	}
	a0, b0 := count("a"), count("b")
	f.Kick()         // every routable backend: not the draining one
	refresh(t, f, 1) // and b by name; the round ends after both
	if a1, b1 := count("a"), count("b"); a1 != a0 || b1 <= b0 {
		t.Fatalf("fetches: draining a %d → %d (want no more), b %d → %d (want more)", a0, a1, b0, b1)
	}
	// It keeps its pool while it drains (the router skips it: not
	// routable).
	if got := members(f.Index(), "m"); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("pool m: %v", got)
	}
}

func TestSuspectRateLimited(t *testing.T) {
	t.Parallel()
	f, src, ms := newFleet(t, DefaultConfig(), "a")
	src.answer("a", list("m"))
	t0 := time.Now()
	for range 5 {
		f.Suspect(0)
	}
	took := time.Since(t0)
	kicked := ms.GetOrCreateCounter(`saltus_fleet_refetch_total{result="kicked"}`).Get()
	suppressed := ms.GetOrCreateCounter(`saltus_fleet_refetch_total{result="suppressed"}`).Get()
	// Within one suspectEvery, one kick; a machine so loaded that the
	// five calls took longer may kick once per period.
	if maxKicks := uint64(1 + took/suspectEvery); kicked < 1 || kicked > maxKicks || kicked+suppressed != 5 {
		t.Fatalf("kicked %d, suppressed %d of 5 in %v", kicked, suppressed, took)
	}
}

func TestInvalidNamesIgnored(t *testing.T) {
	t.Parallel()
	f, src, ms := newFleet(t, DefaultConfig(), "a")
	src.answer("a", `{"data":[{"id":"ok"},{"id":"bad\u0001name"},{"id":"x\ty"}]}`)
	refresh(t, f)
	if bm, _ := f.Index().Backend(0); !slices.Equal(bm.Models, []string{"ok"}) {
		t.Fatalf("models %v, want [ok]", bm.Models)
	}
	if n := ms.GetOrCreateCounter(`saltus_fleet_models_ignored_total{reason="invalid_name"}`).Get(); n != 2 {
		t.Fatalf("invalid names counted %d, want 2", n)
	}
}

func TestParseBounds(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxModels = 2
	f, src, ms := newFleet(t, cfg, "a", "bad")
	src.answer("a", list("m1", "m2", "m3"))
	src.answer("bad", `{"object":"list","data":{}}`)
	refresh(t, f)
	if bm, _ := f.Index().Backend(0); !slices.Equal(bm.Models, []string{"m1", "m2"}) {
		t.Errorf("a: %v, want the first 2", bm.Models)
	}
	if bm, _ := f.Index().Backend(1); bm.State != StateUnknown || !strings.Contains(bm.Error, `no "data" array`) {
		t.Errorf("bad: %+v", bm)
	}
	if n := ms.GetOrCreateCounter(`saltus_fleet_models_ignored_total{reason="over_limit"}`).Get(); n != 1 {
		t.Errorf("truncated %d, want 1", n)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Interval = -1 }, "models-interval must not be negative"},
		{func(c *Config) { c.Interval = time.Millisecond }, "at least 100ms"},
		{func(c *Config) { c.Timeout = 0 }, "timeout"},
		{func(c *Config) { c.MaxModels = 0 }, "max models"},
		{func(c *Config) {}, ""},
		{func(c *Config) { c.Interval = 0 }, ""},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", c, err, tc.want)
		}
	}
}

func TestNewIndexAndUnknown(t *testing.T) {
	t.Parallel()
	set, err := backend.NewSet(backend.DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for i := range 3 {
		if _, err := set.Add(fmt.Sprintf("http://127.0.0.1:%d", 9100+i)); err != nil {
			t.Fatal(err)
		}
	}
	snap := set.Snapshot()
	ix := NewIndex(snap[:2], map[int][]Model{0: {{ID: "x"}}})
	if got := ix.Unknown(snap[:2]); got == nil || !slices.Equal(got.IDs, []int{1}) {
		t.Fatalf("unknown of the built snapshot: %+v", got)
	}
	// A backend added after the index was built is unknown too.
	if got := ix.Unknown(snap); got == nil || !slices.Equal(got.IDs, []int{1, 2}) || !got.Has(2) || got.Has(0) {
		t.Fatalf("unknown with a new backend: %+v", got)
	}
	var nilIx *Index
	if nilIx.Lookup("x") != nil || nilIx.Wild() != nil || len(nilIx.Pools()) != 0 {
		t.Fatal("a nil index has pools")
	}
}

func FuzzParseModels(f *testing.F) {
	f.Add([]byte(list("a", "b<a")))
	f.Add([]byte(`{"data":[{"id":1},{"id":"x","max_model_len":"big"},null,{"id":""},{"id":"x"}]}`))
	f.Add([]byte(`{"data":null}`))
	ms := metrics.NewSet()
	fl := &Fleet{cfg: DefaultConfig(), ignored: [2]*metrics.Counter{ms.NewCounter("a"), ms.NewCounter("b")}}
	f.Fuzz(func(t *testing.T, body []byte) {
		ms, err := fl.parse(body)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if m.ID == "" || seen[m.ID] || len(m.Card) == 0 {
				t.Fatalf("bad model %+v in %q", m, body)
			}
			seen[m.ID] = true
		}
	})
}
