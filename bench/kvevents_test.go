package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/internal/promtext"
)

// kvTestFleet is two routers' fleet of byte-block engines at speedup 20
// (token-id prompts are exact whatever the tokenizer).
func kvTestFleet(kv bool) *LocalFleet {
	sim := vllmsim.DefaultConfig()
	sim.Speedup, sim.MaxTokens = 20, 2
	serve := dataplane.DefaultConfig()
	serve.Reactor.Loops = 2
	return &LocalFleet{Sim: sim, Serve: serve, KVEvents: kv, Routers: 2}
}

// postIDs sends a completion whose prompt is token ids through router
// and returns the engine that answered (X-Saltus-Backend).
func postIDs(t *testing.T, router, model string, ids []int) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": model, "prompt": ids, "max_tokens": 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, router+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s/v1/completions: %d %s %v", router, resp.StatusCode, b, err)
	}
	return resp.Header.Get("X-Saltus-Backend")
}

// TestLocalFleetKVEvents (issue 31, item 3): with KVEvents every engine
// publishes and every router of a run (two, in a cluster) subscribes to
// each: StartRouter returns once each router has heard each engine, and
// the blocks a request stores reach both routers as BlockStored events
// (Summary.KVEventsStored's source). Without it nothing publishes and
// nothing is subscribed.
func TestLocalFleetKVEvents(t *testing.T) {
	t.Parallel()
	f := kvTestFleet(true)
	urls, engines, err := f.StartEngines(2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(engines)
	routers, closer, err := f.StartRouter("prefix", urls)
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(closer)
	rs := closer.(routerSet)
	if len(rs.saltus) != 2 {
		t.Fatalf("%d routers, want 2", len(rs.saltus))
	}
	for i, s := range rs.saltus {
		if got := len(s.path.Set.Snapshot()); got != 2 {
			t.Fatalf("router %d has %d backends, want 2", i, got)
		}
		for _, b := range s.path.Set.Snapshot() {
			if !b.Evented() {
				t.Errorf("router %d: backend %s has no KV events after StartRouter", i, b.URL)
			}
		}
	}
	cfg, err := f.RouterConfig("prefix", urls)
	if err != nil || len(cfg.KVEvents) != 2 || !strings.HasPrefix(cfg.KVEvents[0], urls[0]+"=tcp://127.0.0.1:") {
		t.Fatalf("RouterConfig: kv events %q, %v", cfg.KVEvents, err)
	}
	if _, err := f.RouterConfig("prefix", []string{"http://127.0.0.1:1"}); err == nil {
		t.Error("RouterConfig of an engine the fleet did not start: no error")
	}

	if be := postIDs(t, routers[0], f.Sim.Model, kvTestIDs()); be == "" {
		t.Error("no X-Saltus-Backend")
	}
	deadline := time.Now().Add(20 * time.Second)
	for i, s := range rs.saltus {
		for storedEvents(s) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("router %d received no BlockStored event", i)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
		}
	}
	if n := rs.KVEventsStored(); n < 2 {
		t.Errorf("KVEventsStored %d, want at least one per router", n)
	}
	// Each router's exact view maps the engine's 4 blocks to route keys
	// (seeded by the engine's one model): nothing unusable.
	for i, s := range rs.saltus {
		for sumSeries(s, "saltus_kvview_blocks", promtext.Label{}) < 4 {
			if time.Now().After(deadline) {
				t.Fatalf("router %d: view maps %v blocks, want 4", i, sumSeries(s, "saltus_kvview_blocks", promtext.Label{}))
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
		}
		if n := sumSeries(s, "saltus_kvview_unusable_total", promtext.Label{}); n != 0 {
			t.Errorf("router %d: %v events unusable", i, n)
		}
	}
}

// kvTestIDs is a prompt of 4 blocks of 16 token ids.
func kvTestIDs() []int {
	ids := make([]int, 64)
	for i := range ids {
		ids[i] = 1000 + i
	}
	return ids
}

// TestLocalFleetKVEventsOff: without KVEvents no engine publishes, no
// router subscribes, and a run counts no KV event.
func TestLocalFleetKVEventsOff(t *testing.T) {
	t.Parallel()
	f := kvTestFleet(false)
	urls, engines, err := f.StartEngines(1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(engines)
	if len(f.kvEndpoints) != 0 {
		t.Errorf("engines publish: %v", f.kvEndpoints)
	}
	routers, closer, err := f.StartRouter("prefix", urls)
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(closer)
	if cfg, err := f.RouterConfig("prefix", urls); err != nil || len(cfg.KVEvents) != 0 {
		t.Errorf("RouterConfig without KVEvents: kv events %q, %v", cfg.KVEvents, err)
	}
	postIDs(t, routers[0], f.Sim.Model, kvTestIDs())
	rs := closer.(routerSet)
	for i, s := range rs.saltus {
		var b bytes.Buffer
		s.Metrics.WritePrometheus(&b)
		if strings.Contains(b.String(), "saltus_kvevents_batches_total{") {
			t.Errorf("router %d subscribed:\n%s", i, b.String())
		}
		for _, be := range s.path.Set.Snapshot() {
			if be.Evented() {
				t.Errorf("router %d: backend %s evented", i, be.URL)
			}
		}
	}
	if n := rs.KVEventsStored(); n != 0 {
		t.Errorf("KVEventsStored %d, want 0", n)
	}
}

// TestStoredEvents: the BlockStored series of every subscription are
// summed, the other types not.
func TestStoredEvents(t *testing.T) {
	t.Parallel()
	s := &Saltus{Metrics: metrics.NewSet()}
	for i, v := range []uint64{3, 4} {
		ep := fmt.Sprintf("tcp://127.0.0.1:%d", 5557+i)
		s.Metrics.NewCounter(`saltus_kvevents_events_total{endpoint="` + ep + `",type="BlockStored"}`).Add(int(v))
		s.Metrics.NewCounter(`saltus_kvevents_events_total{endpoint="` + ep + `",type="BlockRemoved"}`).Add(100)
	}
	if got := storedEvents(s); got != 7 {
		t.Errorf("storedEvents = %d, want 7", got)
	}
}
