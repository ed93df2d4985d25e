package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/shard"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// KV events, the bind wiring (issue 31, llm-d's): saltus binds one SUB
// socket (Config.KVEventsListen) that every engine's publisher dials, and
// each message's topic kv@<ip>:<port>@<model> (kvevents.ParseTopic) names
// its engine: the backend whose URL's host:port is ip:port (compared
// normalized: an IP in its canonical form, a name lower-cased; no DNS, so
// a backend configured by host name is matched only by a topic naming
// that host name). kvBind, one goroutine of Path.sources, owns the bound
// subscriber's channel and the views it feeds: a backend's view is made
// at its first message while it is healthy, and closed (its holders
// forgotten on every loop) when it goes unhealthy, leaves, or gets a
// connect subscription (--kv-events, --kv-events-port: connect wins, its
// bind messages are ignored). Every ignored message is counted,
// saltus_kvevents_bind_ignored_total{reason}.

func init() {
	promtext.Describe(map[string]string{
		"saltus_kvevents_bind_ignored_total": "KV-event batches received on --kv-events-listen and ignored, by reason: topic (not kv@IP:PORT@MODEL), unknown (IP:PORT is no backend's host:port), connect (the backend's events come from its --kv-events or --kv-events-port subscription), unhealthy (the backend is not healthy: its view is dropped).",
	})
}

// kvBindRefresh is the least time between two rebuilds of the address
// index on a topic it does not know: a backend just added or discovered
// is found at once, and a flood of unknown topics costs one rebuild a
// kvBindRefresh.
const kvBindRefresh = 50 * time.Millisecond

// CheckKVEventsListen validates the bind endpoint ("" is off).
func CheckKVEventsListen(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	cfg := kvevents.DefaultConfig()
	cfg.Endpoint, cfg.Bind = endpoint, true
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("kv-events-listen: %q: %w", endpoint, err)
	}
	return nil
}

// kvBinder is kvBind's state. Owned by kvBind's goroutine.
type kvBinder struct {
	p *Path
	// byAddr maps each backend's normalized host:port to it (healthy or
	// not), rebuilt every kvSyncInterval and on a miss (kvBindRefresh).
	byAddr  map[string]*backend.Backend
	built   time.Time
	views   map[int]*bindView // by backend ID
	ignored map[string]*metrics.Counter
}

// bindView is a backend's view fed by the bound subscription.
type bindView struct {
	v   *shard.EngineView
	url string // the backend's URL when made: an ID reused by another URL is not this view's
}

// kvBind runs the bound subscription and feeds the views until ctx
// ends. On its own goroutine (sources).
func (p *Path) kvBind(ctx context.Context) {
	cfg := kvevents.DefaultConfig()
	cfg.Endpoint, cfg.Bind = p.cfg.KVEventsListen, true
	ch := make(chan kvevents.Message, kvQueue)
	sub, err := kvevents.New(cfg, ch, p.base, p.set)
	if err != nil {
		// Cannot happen: CheckKVEventsListen validated the endpoint.
		p.logger.Error("cannot listen for KV events", "endpoint", cfg.Endpoint, "err", err)
		return
	}
	g := rules.NewGroup(ctx)
	subDone := make(chan struct{})
	g.Go("kvevents.bind", func(gctx context.Context) {
		defer close(subDone)
		sub.Run(gctx)
	})
	b := &kvBinder{p: p, views: map[int]*bindView{}, ignored: map[string]*metrics.Counter{}}
	for _, r := range []string{"topic", "unknown", "connect", "unhealthy"} {
		b.ignored[r] = p.set.GetOrCreateCounter(`saltus_kvevents_bind_ignored_total{reason="` + r + `"}`)
	}
	b.index()
	t := time.NewTicker(kvSyncInterval)
	defer t.Stop()
	for {
		select {
		case m := <-ch:
			b.apply(m)
		case <-t.C:
			b.index()
			b.sync()
		case <-ctx.Done():
			g.Stop()
			<-subDone // its context is done: Run returns at once
			sub.Close()
			for id, bv := range b.views {
				bv.v.Close()
				delete(b.views, id)
			}
			return
		}
	}
}

// normAddr is host:port in one form per address: an IP canonical
// (unmapped, zone dropped), a name lower-cased; "" if addr is not
// host:port.
func normAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().WithZone("").String()
	} else {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	return net.JoinHostPort(host, port)
}

// index rebuilds byAddr from the backends.
func (b *kvBinder) index() {
	m := map[string]*backend.Backend{}
	for _, be := range b.p.Set.Snapshot() { // in ID order: the first of two at one address keeps it
		_, hp, err := backend.ParseURL(be.URL)
		if err != nil {
			continue // cannot happen: be.URL was parsed when it was added
		}
		if k := normAddr(hp); k != "" {
			if _, ok := m[k]; !ok {
				m[k] = be
			}
		}
	}
	b.byAddr, b.built = m, time.Now()
}

// connected reports whether be's events come from a connect
// subscription (kvSync's).
func (b *kvBinder) connected(be *backend.Backend) bool {
	return kvEndpoint(be, b.p.staticList(), b.p.settings()) != ""
}

// sync closes the views of backends that left, went unhealthy, or got a
// connect subscription.
func (b *kvBinder) sync() {
	live := map[int]*backend.Backend{}
	for _, be := range b.byAddr {
		live[be.ID] = be
	}
	for id, bv := range b.views {
		be := live[id]
		if be != nil && be.URL == bv.url && be.Healthy() && !b.connected(be) {
			continue
		}
		bv.v.Close()
		delete(b.views, id)
	}
}

// apply feeds message m to the view of the backend its topic names.
func (b *kvBinder) apply(m kvevents.Message) {
	addr, _, ok := kvevents.ParseTopic(m.Topic)
	if !ok {
		b.ignored["topic"].Inc()
		return
	}
	k := normAddr(addr)
	be := b.byAddr[k]
	if be == nil && time.Since(b.built) >= kvBindRefresh {
		b.index()
		be = b.byAddr[k]
	}
	if be == nil {
		b.ignored["unknown"].Inc()
		return
	}
	bv := b.views[be.ID]
	if bv != nil && bv.url != be.URL {
		bv.v.Close()
		delete(b.views, be.ID)
		bv = nil
	}
	if b.connected(be) {
		b.ignored["connect"].Inc()
		if bv != nil {
			bv.v.Close()
			delete(b.views, be.ID)
		}
		return
	}
	if !be.Healthy() {
		b.ignored["unhealthy"].Inc()
		if bv != nil {
			bv.v.Close()
			delete(b.views, be.ID)
		}
		return
	}
	if bv == nil {
		label := be.Name
		if label == "" {
			label = be.URL
		}
		bv = &bindView{v: b.p.views.New(be.ID, label), url: be.URL}
		b.views[be.ID] = bv
	}
	bv.v.Apply(m)
}
