package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/internal/promtext"
)

// KV events in a LocalFleet (issue 31, item 3): with LocalFleet.KVEvents
// each simulated engine publishes its KV-cache events as vLLM does with
// --kv-events-config (vllmsim.KVEventsConfig: a PUB socket it binds on a
// loopback port the OS picks), and every router a run starts subscribes
// to each engine's publisher (dataplane.Config.KVEvents, one
// BACKEND=tcp://HOST:PORT entry per engine URL: saltus serve's
// --kv-events, the connect wiring an operator configures for real vLLM
// engines). Policies prefix and ranvier then route by what the engines
// confirm (policy/truth.go); the others do not read the route table.
//
// A ZMQ publisher drops what it sends before a subscriber has joined,
// and the exact view cannot follow a chain whose first blocks it missed
// (shard/kvview.go: reason parent), so StartRouter returns only once
// every router has heard every engine (WaitKVEvents): an engine not heard
// yet is asked to reset its prefix cache, which on an engine nothing was
// sent to publishes an AllBlocksCleared batch and changes nothing else.

// kvWait bounds WaitKVEvents: a router subscribes to a healthy backend
// within dataplane's sync period (250 ms) and connects on loopback in
// milliseconds; the bound leaves room for a loaded machine.
const kvWait = 15 * time.Second

// kvPoll is how often WaitKVEvents asks the engines not heard yet to
// publish again.
const kvPoll = 50 * time.Millisecond

// kvResetTimeout bounds one POST /reset_prefix_cache.
const kvResetTimeout = 5 * time.Second

// kvEventsConfig is an engine's publisher under LocalFleet.KVEvents:
// bound on loopback, on a port the OS picks (Sim.KVEventsAddr), in the
// hash form and layout the fleet's Sim config names (vLLM's defaults
// when it names none).
func kvEventsConfig(k vllmsim.KVEventsConfig) vllmsim.KVEventsConfig {
	k.Enable, k.Endpoint, k.Bind = true, "tcp://127.0.0.1:0", true
	return k
}

// RouterConfig is the config of a router of a run: Serve over backends
// with policy, listening on a loopback port the OS picks; with KVEvents,
// subscribed to the KV events of every engine the last StartEngines
// started.
func (f *LocalFleet) RouterConfig(policy string, backends []string) (dataplane.Config, error) {
	cfg := f.Serve
	cfg.Reactor.Listen, cfg.Backends, cfg.Router.Policy = "127.0.0.1:0", backends, policy
	if !f.KVEvents {
		return cfg, nil
	}
	cfg.KVEvents = make([]string, 0, len(backends))
	for _, u := range backends {
		ep, ok := f.kvEndpoints[u]
		if !ok {
			return dataplane.Config{}, fmt.Errorf("kv events: %s is not an engine this fleet started", u)
		}
		cfg.KVEvents = append(cfg.KVEvents, u+"="+ep)
	}
	if err := dataplane.CheckKVEvents(cfg.Backends, cfg.KVEvents, cfg.KVEventsPort); err != nil {
		return dataplane.Config{}, err
	}
	return cfg, nil
}

// WaitKVEvents waits until every backend of each of routers takes its
// engine's KV events (backend.Backend.Evented: from the view's first
// batch), asking every kvPoll each engine some router has not heard yet
// to publish (POST /reset_prefix_cache: call it before anything is sent
// to the engines, whose caches it clears). It returns at once without
// KVEvents; an error after kvWait, or when ctx ends.
func (f *LocalFleet) WaitKVEvents(ctx context.Context, routers ...*Saltus) error {
	if !f.KVEvents {
		return nil
	}
	c := &http.Client{Transport: &http.Transport{}, Timeout: kvResetTimeout}
	defer c.CloseIdleConnections()
	deadline := time.NewTimer(kvWait)
	defer deadline.Stop()
	tick := time.NewTicker(kvPoll)
	defer tick.Stop()
	for {
		var deaf []string // engines some router has not heard
		for _, s := range routers {
			for _, b := range s.path.Set.Snapshot() {
				if !b.Evented() && !slices.Contains(deaf, b.URL) {
					deaf = append(deaf, b.URL)
				}
			}
		}
		if len(deaf) == 0 {
			return nil
		}
		for _, u := range deaf {
			if err := resetPrefixCache(ctx, c, u); err != nil {
				return err
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("kv events: the routers have heard nothing from %s after %v", strings.Join(deaf, " "), kvWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// resetPrefixCache asks engine to clear its prefix cache: an
// AllBlocksCleared batch on its publisher.
func resetPrefixCache(ctx context.Context, c *http.Client, engine string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, engine+"/reset_prefix_cache", nil)
	if err != nil {
		return fmt.Errorf("kv events: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("kv events: cannot ask %s to publish: %w", engine, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // for the connection's reuse; the text does not matter
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kv events: %s answered POST /reset_prefix_cache with status %d", engine, resp.StatusCode)
	}
	return nil
}

// routerSet is what LocalFleet.StartRouter returns: it closes the
// routers and counts what their subscriptions received.
type routerSet struct {
	closers
	saltus []*Saltus
}

// KVEventsStored is how many BlockStored events the routers' KV-event
// subscriptions decoded (saltus_kvevents_events_total{type="BlockStored"},
// summed over routers and engines): 0 when the engines' events are not
// wired. Call it before Close. Any goroutine.
func (r routerSet) KVEventsStored() int64 {
	var n int64
	for _, s := range r.saltus {
		n += storedEvents(s)
	}
	return n
}

// storedEvents sums s's saltus_kvevents_events_total{type="BlockStored"}
// over its subscriptions.
func storedEvents(s *Saltus) int64 {
	return int64(sumSeries(s, "saltus_kvevents_events_total", promtext.Label{Name: "type", Value: "BlockStored"}))
}

// sumSeries sums the series of family in s's metrics that have label
// (any series when label is the zero Label).
func sumSeries(s *Saltus, family string, label promtext.Label) float64 {
	var b bytes.Buffer
	s.Metrics.WritePrometheus(&b)
	var n float64
	for l := range strings.SplitSeq(b.String(), "\n") {
		if !strings.HasPrefix(l, family+"{") && !strings.HasPrefix(l, family+" ") {
			continue
		}
		_, labels, v, err := promtext.SplitSample(l)
		if err != nil {
			continue // cannot happen: VictoriaMetrics/metrics writes valid samples
		}
		if label == (promtext.Label{}) || slices.Contains(labels, label) {
			n += v
		}
	}
	return n
}

// kvCounter is a router Closer that counts its KV events (routerSet).
type kvCounter interface {
	KVEventsStored() int64
}

var _ kvCounter = routerSet{}
