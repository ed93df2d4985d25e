package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/gossip"
)

// LocalFleet runs simulated engines and saltus in this process: every run
// gets fresh (cold) engines and a fresh router.
type LocalFleet struct {
	Sim vllmsim.Config // each engine's config
	// Layout, when set, gives each engine its models over Sim's (its
	// Model, ExtraModels and LoRAModules are replaced) and fixes the
	// engine count; nil: every engine serves Sim's.
	Layout *Layout
	Serve  dataplane.Config // the router's; Reactor.Listen, Backends and Router.Policy are set per run
	Logger *slog.Logger     // may be nil
	// Routers > 1 starts that many routers per run in a cluster (gossip
	// on loopback), the load spread over them in turn.
	Routers int
	// KVEvents wires the engines' KV-cache events into the routers
	// (kvevents.go): each engine publishes them as vLLM does, each
	// router subscribes to every engine. Policies prefix and ranvier then
	// route by what the engines confirm; exact only when saltus keys
	// prompts as the engines do (a tokenizer, or token-id prompts).
	KVEvents bool

	// served is each started engine's served names by URL, from its
	// config (what ServedModels answers). Written by StartEngines, read
	// by ServedModels: the benchmark starts and measures one run at a
	// time.
	served map[string][]string
	// kvEndpoints is each started engine's KV-event publisher
	// (tcp://HOST:PORT) by URL, with KVEvents; written by StartEngines,
	// read by RouterConfig, as served.
	kvEndpoints map[string]string
}

type closers []func(context.Context) error

func (c closers) Close(ctx context.Context) error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i](ctx))
	}
	return errors.Join(errs...)
}

// StartEngines starts n simulated engines on loopback ports (with a
// Layout, n must be its engine count).
func (f *LocalFleet) StartEngines(n int) ([]string, Closer, error) {
	if f.Layout != nil && n != len(f.Layout.Engines) {
		return nil, nil, fmt.Errorf("fleet %s has %d engines, asked for %d", f.Layout.Name, len(f.Layout.Engines), n)
	}
	var urls []string
	var cs closers
	f.served = map[string][]string{}
	f.kvEndpoints = map[string]string{}
	for i := range n {
		cfg := f.Sim
		cfg.Seed += int64(i) // engines answer differently; each is deterministic
		if f.Layout != nil {
			f.Layout.Engines[i].apply(&cfg)
		}
		if f.KVEvents {
			cfg.KVEvents = kvEventsConfig(cfg.KVEvents)
		}
		s, err := vllmsim.New(cfg, f.Logger)
		if err == nil {
			err = s.Start("127.0.0.1:0")
		}
		if err != nil {
			_ = cs.Close(context.Background()) // the start's error is the one to report
			return nil, nil, fmt.Errorf("engine %d: %w", i, err)
		}
		cs = append(cs, s.Close)
		urls = append(urls, s.URL())
		f.served[s.URL()] = servedNames(&cfg)
		if f.KVEvents {
			f.kvEndpoints[s.URL()] = "tcp://" + s.KVEventsAddr()
		}
	}
	return urls, cs, nil
}

// ServedModels returns the names each engine of the last StartEngines
// serves, from its config: what a request may find there, independent of
// what saltus learned from the engines' GET /v1/models.
func (f *LocalFleet) ServedModels(context.Context, []string) (map[string][]string, error) {
	return f.served, nil
}

// StartRouter starts saltus with policy over backends on a loopback port,
// or Routers of them in a cluster (each on its own loopback ports, every
// one joining the first), and returns once every router sees them all
// and, with KVEvents, has heard every engine's events (WaitKVEvents).
// The Closer also counts the routers' KV events (KVEventsStored).
func (f *LocalFleet) StartRouter(policy string, backends []string) ([]string, Closer, error) {
	n := max(f.Routers, 1)
	var urls []string
	var cs closers
	var started []*Saltus
	var nodes []*gossip.Node
	var seed string
	for i := range n {
		cfg, err := f.RouterConfig(policy, backends)
		if err != nil {
			_ = cs.Close(context.Background()) // the config's error is the one to report
			return nil, nil, fmt.Errorf("router %d: %w", i, err)
		}
		if n > 1 {
			cfg.Cluster.Bind = "127.0.0.1:0"
			cfg.Cluster.NodeName = fmt.Sprintf("router-%d", i)
			if seed != "" {
				cfg.Cluster.Join = []string{seed}
			}
		}
		s, err := StartSaltus(cfg, f.Logger)
		if err != nil {
			_ = cs.Close(context.Background()) // the start's error is the one to report
			return nil, nil, fmt.Errorf("router %d: %w", i, err)
		}
		cs = append(cs, s.Close)
		started = append(started, s)
		urls = append(urls, "http://"+s.Addr)
		if c := s.path.Cluster; c != nil {
			nodes = append(nodes, c)
			if seed == "" {
				seed = c.Addr()
			}
		}
	}
	err := waitMembers(nodes, n)
	if err == nil {
		err = f.WaitKVEvents(context.Background(), started...)
	}
	if err != nil {
		_ = cs.Close(context.Background()) // the wait's error is the one to report
		return nil, nil, err
	}
	return urls, routerSet{closers: cs, saltus: started}, nil
}

// clusterWait bounds how long a benchmark's routers take to meet.
const clusterWait = 10 * time.Second

// waitMembers waits until every node sees n alive members.
func waitMembers(nodes []*gossip.Node, n int) error {
	deadline := time.Now().Add(clusterWait)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for _, c := range nodes {
		for c.Members() != n {
			if time.Now().After(deadline) {
				return fmt.Errorf("router %s sees %d of %d routers after %v", c.Name(), c.Members(), n, clusterWait)
			}
			<-t.C
		}
	}
	return nil
}

// RemoteFleet uses engines that run elsewhere (real vLLM or `saltus sim`
// processes): they are not restarted between runs, so later policies may
// find them warm. Target, when set, is an existing router to measure
// instead of a saltus per policy.
type RemoteFleet struct {
	Engines []string
	Target  string
	Local   LocalFleet // the router settings when Target is empty
}

// StartEngines returns the configured engines (n is ignored).
func (f *RemoteFleet) StartEngines(int) ([]string, Closer, error) {
	for _, e := range f.Engines {
		if u, err := url.Parse(e); err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, nil, fmt.Errorf("backend %q: want http://host:port", e)
		}
	}
	return f.Engines, closers{}, nil
}

// StartRouter starts saltus over the engines, or returns Target.
func (f *RemoteFleet) StartRouter(policy string, backends []string) ([]string, Closer, error) {
	if f.Target != "" {
		return []string{f.Target}, closers{}, nil
	}
	return f.Local.StartRouter(policy, backends)
}

// ServedModels asks each engine its GET /v1/models (every name it lists:
// base models, aliases, adapters).
func (f *RemoteFleet) ServedModels(ctx context.Context, engines []string) (map[string][]string, error) {
	c := NewClient(1)
	defer c.Close()
	out := make(map[string][]string, len(engines))
	for _, e := range engines {
		names, err := c.Models(ctx, e)
		if err != nil {
			return nil, err
		}
		out[e] = names
	}
	return out, nil
}
