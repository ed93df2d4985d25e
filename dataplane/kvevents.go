package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// KV events, the connect wiring (issue 31): saltus subscribes to each
// evented backend's publisher (vLLM's --kv-events-config, a PUB socket
// the engine binds) and feeds the backend's exact view (shard.EngineView).
// A backend is evented when Config.KVEvents names it or, failing that,
// when Config.KVEventsPort is set (its host, that port: discovered
// backends included). kvSync, one goroutine of Path.sources, keeps one
// subscription per evented healthy backend: it starts one when a backend
// comes (added, discovered, healthy again) and stops it when the backend
// leaves, goes unhealthy or its endpoint changes (a reload), which
// forgets the engine's holders on every loop (its cached blocks are
// unknown until it stores them again). A backend whose publisher has a
// replay endpoint (Config.KVEventsReplay names it or, failing that,
// Config.KVEventsReplayPort: its publisher's host, that port) replays
// what its subscription missed instead (kvevents.Config.ReplayEndpoint);
// a changed replay endpoint restarts the subscription too. The bind
// wiring (llm-d's: engines dial saltus) is kvbind.go's: no replay.

// kvSyncInterval is how often kvSync compares the subscriptions with
// the backends: a backend that went unhealthy is forgotten within it
// (issue 31: a killed engine's stale blocks go within a second).
const kvSyncInterval = 250 * time.Millisecond

// kvQueue bounds the batches between a subscription and its view: past
// it a batch is dropped (counted, saltus_kvevents_dropped_total
// {reason="queue_full"}) and the view goes stale. vLLM publishes one
// batch a scheduler step; the view applies one in microseconds.
const kvQueue = 256

// kvStopWait bounds how long kvSync waits for a stopped subscription's
// goroutines before going on; one not done by then is waited for again at
// the next round, and its backend is not subscribed again before.
const kvStopWait = 2 * time.Second

// MaxKVEventsRanks bounds Config.KVEventsRanks.
const MaxKVEventsRanks = 64

// kvEngine is one engine's subscriptions (one a data-parallel rank) and
// its view's goroutines. Owned by kvSync.
type kvEngine struct {
	endpoint string
	replay   string // "" without one
	ranks    int
	cancel   context.CancelFunc
	done     chan struct{} // closed once both goroutines returned
	stopping bool
}

// kvEndpoint is the publisher endpoint of backend b under the settings,
// "" when b has no KV events.
func kvEndpoint(b *backend.Backend, list []string, st backendSettings) string {
	if ep := namedKV(b, list, st.kv); ep != "" {
		return ep
	}
	if st.kvPort <= 0 {
		return ""
	}
	_, hp, err := backend.ParseURL(b.URL)
	if err != nil {
		return "" // cannot happen: b.URL was parsed when b was added
	}
	host, _, err := net.SplitHostPort(hp)
	if err != nil {
		return "" // cannot happen: ParseURL's host:port
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(st.kvPort))
}

// namedKV is the endpoint that one of entries (BACKEND=tcp://HOST:PORT,
// --kv-events or --kv-events-replay) gives backend b, whose name or URL
// it names among the configured list; "" when none does.
func namedKV(b *backend.Backend, list, entries []string) string {
	for _, nu := range list {
		_, u := SplitBackend(nu)
		if norm, _, _ := backend.ParseURL(u); norm != b.URL {
			continue
		}
		for _, e := range entries {
			who, ep := splitKVEvents(e)
			if names(nu, who) {
				return ep
			}
		}
	}
	return ""
}

// kvReplayEndpoint is the replay endpoint of backend b, whose publisher
// is at endpoint, under the settings; "" when it has none.
func kvReplayEndpoint(b *backend.Backend, endpoint string, list []string, st backendSettings) string {
	if ep := namedKV(b, list, st.kvReplay); ep != "" {
		return ep
	}
	if st.kvReplayPort <= 0 {
		return ""
	}
	host, _, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		return "" // cannot happen: a validated tcp://HOST:PORT
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(st.kvReplayPort))
}

// splitKVEvents splits a "backend=tcp://host:port" entry at the '='
// before the endpoint (a backend's name or URL holds none after it).
func splitKVEvents(s string) (who, endpoint string) {
	i := strings.LastIndex(s, "=tcp://")
	if i < 0 {
		return "", s
	}
	return s[:i], s[i+1:]
}

// CheckKVEvents validates "backend=tcp://host:port" entries against the
// configured backends, and the default port.
func CheckKVEvents(backends, entries []string, port int) error {
	return checkKVEntries("kv-events", backends, entries, port, func(c *kvevents.Config, ep string) { c.Endpoint = ep })
}

// CheckKVEventsReplay validates "backend=tcp://host:port" replay entries
// against the configured backends, and the default replay port.
func CheckKVEventsReplay(backends, entries []string, port int) error {
	return checkKVEntries("kv-events-replay", backends, entries, port, func(c *kvevents.Config, ep string) { c.Endpoint, c.ReplayEndpoint = ep, ep })
}

// checkKVEntries validates the entries of flag name (each endpoint set
// into a subscriber config by set, then validated) and its -port.
func checkKVEntries(name string, backends, entries []string, port int, set func(c *kvevents.Config, ep string)) error {
	var errs []error
	for i, e := range entries {
		who, ep := splitKVEvents(e)
		if who == "" {
			errs = append(errs, fmt.Errorf("%s[%d]: %q: want BACKEND=tcp://HOST:PORT (BACKEND a configured backend's name or URL)", name, i, e))
			continue
		}
		cfg := kvevents.DefaultConfig()
		set(&cfg, ep)
		if err := cfg.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %q: %w", name, i, e, err))
			continue
		}
		if !configured(backends, who) {
			errs = append(errs, fmt.Errorf("%s[%d]: %q: no configured backend is named %q", name, i, e, who))
		}
	}
	if port < 0 || port > 65535 {
		errs = append(errs, fmt.Errorf("%s-port: %d: want 0 (off) to 65535", name, port))
	}
	return errors.Join(errs...)
}

// CheckKVEventsRanks validates Config.KVEventsRanks.
func CheckKVEventsRanks(n int) error {
	if n < 0 || n > MaxKVEventsRanks {
		return fmt.Errorf("kv-events-ranks: %d: want 1 to %d (0: 1)", n, MaxKVEventsRanks)
	}
	return nil
}

// rankEndpoint is endpoint (tcp://HOST:PORT) of data-parallel rank r:
// its port plus r, as vLLM offsets each rank's publisher and replay
// socket; "" stays "".
func rankEndpoint(endpoint string, r int) (string, error) {
	if endpoint == "" || r == 0 {
		return endpoint, nil
	}
	host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n+r > 65535 {
		return "", fmt.Errorf("kv-events-ranks: %s has no port for rank %d", endpoint, r)
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(n+r)), nil
}

// kvSync keeps the subscriptions equal to the evented healthy backends
// until ctx ends, then stops them all. On its own goroutine (sources).
func (p *Path) kvSync(ctx context.Context) {
	// The subscriptions' goroutines are a group of this goroutine's
	// own: only it starts them and stops it, so none starts after Stop.
	g := rules.NewGroup(ctx)
	engines := map[int]*kvEngine{} // by backend ID
	dup := map[int]bool{}          // backends skipped as sharing another's endpoint, warned once
	t := time.NewTicker(kvSyncInterval)
	defer t.Stop()
	for {
		p.kvRound(g, engines, dup)
		select {
		case <-ctx.Done():
			g.Stop()
			for _, e := range engines {
				<-e.done // their contexts are done: they return at once
			}
			return
		case <-t.C:
		}
	}
}

// kvRound is one comparison of the subscriptions with the backends.
func (p *Path) kvRound(g *rules.Group, engines map[int]*kvEngine, dup map[int]bool) {
	st := p.settings()
	want := map[int]*backend.Backend{}
	eps := map[int]string{}
	replays := map[int]string{}
	owner := map[string]int{} // endpoint → the backend subscribed to it
	for id, e := range engines {
		if !e.stopping {
			owner[e.endpoint] = id
		}
	}
	for _, b := range p.Set.Snapshot() { // in ID order
		if !b.Healthy() {
			continue
		}
		ep := kvEndpoint(b, p.staticList(), st)
		if ep == "" {
			continue
		}
		// One engine publishes at one endpoint: two backends at one
		// (two ports of one host under --kv-events-port) cannot both
		// be its; the first keeps it.
		if o, ok := owner[ep]; ok && o != b.ID {
			if !dup[b.ID] {
				dup[b.ID] = true
				p.logger.Warn("backend's KV-event endpoint is another backend's; not subscribed (name it with kv-events)", "backend", b.URL, "endpoint", ep)
			}
			continue
		}
		owner[ep] = b.ID
		want[b.ID], eps[b.ID] = b, ep
		replays[b.ID] = kvReplayEndpoint(b, ep, p.staticList(), st)
	}
	for id, e := range engines {
		if !e.stopping && eps[id] == e.endpoint && replays[id] == e.replay && st.kvRanks == e.ranks {
			continue
		}
		if !e.stopping {
			e.cancel()
			e.stopping = true
		}
		select {
		case <-e.done:
			delete(engines, id)
		case <-time.After(kvStopWait):
			// Not done yet: waited for again next round; its backend
			// is not subscribed again before.
		}
	}
	for id, b := range want {
		if _, ok := engines[id]; ok {
			continue
		}
		e, err := p.kvStart(g, b, eps[id], replays[id], st.kvRanks)
		if err != nil {
			p.logger.Warn("cannot subscribe to a backend's KV events", "backend", b.URL, "endpoint", eps[id], "err", err)
			continue
		}
		engines[id] = e
	}
}

// kvStart subscribes to backend b's events at endpoint (replaying
// missed ones at replay, if not "") and at the endpoints of its other
// data-parallel ranks, and starts its view: a goroutine of g a
// subscription and one for the view, ended by the returned engine's
// cancel (or g's Stop).
func (p *Path) kvStart(g *rules.Group, b *backend.Backend, endpoint, replay string, ranks int) (*kvEngine, error) {
	ch := make(chan kvevents.Message, kvQueue)
	subs := make([]*kvevents.Subscriber, 0, ranks)
	for r := range max(ranks, 1) {
		cfg := kvevents.DefaultConfig()
		var err error
		if cfg.Endpoint, err = rankEndpoint(endpoint, r); err == nil {
			cfg.ReplayEndpoint, err = rankEndpoint(replay, r)
		}
		var sub *kvevents.Subscriber
		if err == nil {
			sub, err = kvevents.New(cfg, ch, p.base, p.set)
		}
		if err != nil {
			for _, s := range subs {
				s.Close()
			}
			return nil, err
		}
		subs = append(subs, sub)
	}
	label := b.Name
	if label == "" {
		label = b.URL
	}
	v := p.views.New(b.ID, label)
	ectx, cancel := context.WithCancel(context.Background())
	e := &kvEngine{endpoint: endpoint, replay: replay, ranks: ranks, cancel: cancel, done: make(chan struct{})}
	subDone := make(chan struct{}, len(subs)) // one value a subscription that returned
	for _, sub := range subs {
		g.Go("kvevents.sub", func(gctx context.Context) {
			defer func() { subDone <- struct{}{} }()
			stop := context.AfterFunc(gctx, cancel) // g's Stop ends it too
			defer stop()
			sub.Run(ectx)
			sub.Close()
		})
	}
	g.Go("kvevents.view", func(context.Context) {
		defer close(e.done)
		for {
			select {
			case m := <-ch:
				v.Apply(m)
			case <-ectx.Done():
				for range subs {
					<-subDone // their series unregistered before new ones register them
				}
				v.Close()
				return
			}
		}
	})
	return e, nil
}

// staticList is the configured backends the last SyncBackends set.
func (p *Path) staticList() []string {
	if l := p.static.Load(); l != nil {
		return *l
	}
	return p.cfg.Backends
}
