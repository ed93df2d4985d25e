package keys

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules"
)

// writeKeys writes a key file and returns its path.
func writeKeys(t testing.TB, path, text string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "keys.yaml")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors and config managers replace files
		t.Fatal(err)
	}
	return path
}

func keyYAML(name, secret, extra string) string {
	return "- name: " + name + "\n  hash: " + hashOf(secret) + "\n" + extra
}

// newTestRing builds a Ring on a fake clock.
func newTestRing(t testing.TB, cfg Config) (*Ring, *metrics.Set, *atomic.Int64) {
	t.Helper()
	set := metrics.NewSet()
	r, err := New(cfg, nil, set)
	if err != nil {
		t.Fatal(err)
	}
	clock := new(atomic.Int64)
	clock.Store(int64(time.Hour))
	r.clock = clock.Load
	return r, set, clock
}

func scrape(set *metrics.Set) string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	return b.String()
}

func TestRingLookupAndLimits(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.File = writeKeys(t, "", keyYAML("a", "sk-aaaaaaaaaaaa", "  rpm: 2\n  tpm: 100\n  models: [m1]\n  weight: 3\n")+keyYAML("b", "sk-bbbbbbbbbbbb", ""))
	r, set, clock := newTestRing(t, cfg)
	if r.Len() != 2 || !r.Enabled() {
		t.Fatalf("Len %d, Enabled %v", r.Len(), r.Enabled())
	}
	if r.Lookup("") != nil || r.Lookup("sk-nope") != nil || r.Lookup(strings.Repeat("x", maxSecretLen+1)) != nil {
		t.Fatal("a missing or unknown secret found a key")
	}
	a := r.Lookup("sk-aaaaaaaaaaaa")
	if a == nil || a.Name != "a" || a.Weight != 3 || !a.Allows("m1") || a.Allows("m2") || !a.Restricted() {
		t.Fatalf("key a: %+v", a)
	}
	if b := r.Lookup("sk-bbbbbbbbbbbb"); b == nil || !b.Allows("anything") || b.Restricted() || b.Models() != nil {
		t.Fatalf("key b: %+v", b)
	}
	now := clock.Load()
	if ad := a.Admit(now, 60); ad.Refused != NotRefused {
		t.Fatalf("first request refused: %+v", ad)
	}
	l := a.Limits(now)
	if l.Requests != 2 || l.RemainingRequests != 1 || l.ResetRequests != 30*time.Second || l.Tokens != 100 || l.RemainingTokens != 40 || l.ResetTokens != 36*time.Second {
		t.Fatalf("Limits after one request of 60 tokens: %+v", l)
	}
	// Over the tokens: refused, and its request given back.
	if ad := a.Admit(now, 50); ad.Refused != OverTokens || ad.Limit != 100 || ad.Used != 60 || ad.Requested != 50 || ad.Wait != 6*time.Second {
		t.Fatalf("50 more tokens: %+v", ad)
	}
	if ad := a.Admit(now, 101); ad.Refused != TooLarge || ad.Requested != 101 {
		t.Fatalf("101 tokens of 100: %+v", ad)
	}
	if got := a.Limits(now).RemainingRequests; got != 1 {
		t.Fatalf("refused requests took a request: remaining %d", got)
	}
	a.AdjustTokens(now, -40) // the usage: 20 used, not 60
	if ad := a.Admit(now, 50); ad.Refused != NotRefused {
		t.Fatalf("after the refund: %+v", ad)
	}
	if ad := a.Admit(now, 1); ad.Refused != OverRequests || ad.Limit != 2 || ad.Used != 2 || ad.Requested != 1 || ad.Wait != 30*time.Second {
		t.Fatalf("third request: %+v", ad)
	}
	a.RefusedModel()
	a.Done(OutcomeOK, 20, 7)
	text := scrape(set)
	for _, want := range []string{
		`saltus_keys_loaded 2`,
		`saltus_keys_unauthorized_total{reason="missing"} 1`,
		`saltus_keys_unauthorized_total{reason="unknown"} 2`,
		`saltus_key_requests_total{key="a",outcome="ok"} 1`,
		`saltus_key_tokens_total{key="a",kind="prompt"} 20`,
		`saltus_key_tokens_total{key="a",kind="completion"} 7`,
		`saltus_key_refused_total{key="a",reason="rate_requests"} 1`,
		`saltus_key_refused_total{key="a",reason="rate_tokens"} 2`,
		`saltus_key_refused_total{key="a",reason="model_not_allowed"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, `key="b"`) {
		t.Error("a key without requests has series")
	}
}

func TestRingReload(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.File = writeKeys(t, "", keyYAML("a", "sk-aaaaaaaaaaaa", "  rpm: 2\n")+keyYAML("b", "sk-bbbbbbbbbbbb", ""))
	r, set, clock := newTestRing(t, cfg)
	now := clock.Load()
	if ad := r.Lookup("sk-aaaaaaaaaaaa").Admit(now, 0); ad.Refused != NotRefused {
		t.Fatal(ad)
	}
	// Unchanged content: nothing loaded.
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("Reload of the same file: %v, %v", changed, err)
	}
	// a kept (a new limit, a new secret), b removed, c added.
	writeKeys(t, cfg.File, keyYAML("a", "sk-a2a2a2a2a2a2", "  rpm: 3\n")+keyYAML("c", "sk-cccccccccccc", ""))
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	if r.Lookup("sk-bbbbbbbbbbbb") != nil || r.Lookup("sk-aaaaaaaaaaaa") != nil {
		t.Fatal("a removed key or an old secret is still accepted")
	}
	a := r.Lookup("sk-a2a2a2a2a2a2")
	if a == nil || r.Lookup("sk-cccccccccccc") == nil {
		t.Fatal("the new keys are not accepted")
	}
	// Its limiter kept the request taken before the reload (30 s of a
	// minute at 2 per minute): 1 of 3 left, whole again in 30 s.
	if l := a.Limits(now); l.Requests != 3 || l.RemainingRequests != 1 || l.ResetRequests != 30*time.Second {
		t.Fatalf("a's limits after the reload: %+v (its state was lost)", l)
	}
	// An invalid file: the keys in force stay, the failure is counted.
	writeKeys(t, cfg.File, "- name: a\n  hash: plain\n")
	if changed, err := r.Reload(); changed || err == nil || !strings.Contains(err.Error(), "keys[0].hash") {
		t.Fatalf("Reload of an invalid file: %v, %v", changed, err)
	}
	if r.Lookup("sk-a2a2a2a2a2a2") == nil || r.Len() != 2 {
		t.Fatal("an invalid file changed the keys")
	}
	// A missing file too.
	if err := os.Remove(cfg.File); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(); err == nil {
		t.Fatal("a missing file loaded")
	}
	text := scrape(set)
	for _, want := range []string{`saltus_keys_reloads_total{result="ok"} 1`, `saltus_keys_reloads_total{result="error"} 2`, `saltus_keys_loaded 2`} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestRingEnv(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Env = []byte(`[{"name":"ci","hash":"` + hashOf("sk-cicicicicici") + `"}]`)
	r, _, _ := newTestRing(t, cfg)
	if r.Lookup("sk-cicicicicici") == nil || !r.Enabled() {
		t.Fatal("the environment's key is not accepted")
	}
	// A file whose key repeats the environment's name is refused.
	cfg.File = writeKeys(t, "", keyYAML("ci", "sk-other-other", ""))
	if _, err := New(cfg, nil, metrics.NewSet()); err == nil || !strings.Contains(err.Error(), `"ci" is a key of SALTUS_API_KEYS already`) {
		t.Fatalf("a file repeating the environment's key: %v", err)
	}
	cfg.Env = []byte("- name: [")
	if _, err := New(cfg, nil, metrics.NewSet()); err == nil || !strings.Contains(err.Error(), "SALTUS_API_KEYS") {
		t.Fatalf("a bad environment: %v", err)
	}
	// Keys off: nothing loaded, the metrics described all the same.
	off, err := New(DefaultConfig(), nil, metrics.NewSet())
	if err != nil || off.Enabled() || off.Len() != 0 {
		t.Fatalf("keys off: %v", err)
	}
}

func TestRingStartErrors(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.File = filepath.Join(t.TempDir(), "absent.yaml")
	if _, err := New(cfg, nil, metrics.NewSet()); err == nil || !strings.Contains(err.Error(), "api-keys-file") {
		t.Fatalf("a missing file: %v", err)
	}
	cfg.File = writeKeys(t, "", "- name: a\n")
	if _, err := New(cfg, nil, metrics.NewSet()); err == nil || !strings.Contains(err.Error(), "line 1: keys[0].hash: missing") {
		t.Fatalf("an invalid file: %v", err)
	}
}

// TestRingWatch: a rewritten file is loaded by the periodic check.
func TestRingWatch(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Interval = 10 * time.Millisecond
	cfg.File = writeKeys(t, "", keyYAML("a", "sk-aaaaaaaaaaaa", ""))
	r, _, _ := newTestRing(t, cfg)
	g := rules.NewGroup(context.Background())
	g.Go("keys.watch", r.Watch)
	defer func() {
		g.Stop()
		if err := g.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	writeKeys(t, cfg.File, keyYAML("b", "sk-bbbbbbbbbbbb", "  rpm: 5\n"))
	deadline := time.Now().Add(10 * time.Second)
	for r.Lookup("sk-bbbbbbbbbbbb") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten file was not loaded within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r.Lookup("sk-aaaaaaaaaaaa") != nil {
		t.Fatal("the removed key is still accepted")
	}
}

func TestSecret(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ auth, xkey, want string }{
		{"Bearer sk-1", "", "sk-1"},
		{"bearer  sk-1 ", "", "sk-1"},
		{"Basic dXNlcg==", "sk-2", "sk-2"},
		{"Bearer ", "sk-2", "sk-2"},
		{"", " sk-3 ", "sk-3"},
		{"Bearer sk-1", "sk-2", "sk-1"},
		{"", "", ""},
		{"sk-1", "", ""},
	} {
		if got := Secret(c.auth, c.xkey); got != c.want {
			t.Errorf("Secret(%q, %q) = %q, want %q", c.auth, c.xkey, got, c.want)
		}
	}
}
