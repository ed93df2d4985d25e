// Package dataplane builds saltus's serving path from one Config: the
// tokenizer and chat template, the backend set, the reactor and the
// router, wired together, plus the views the admin listener needs. Both
// `saltus serve` and the benchmark (which runs saltus in-process, a
// router per policy) build it here.
//
// Concurrency: a Path holds no state of its own once built but the
// discovery's latest lists (discoveredLists: a mutex serializes the
// watches' deliveries); what it wires keeps its owners (the reactor's
// loops own their connections and the router's shards and the backend
// set's upstream connections, the backend set its probes; see each
// package). Build, Start and Close run on the caller's goroutine, never
// on a loop.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/accesslog"
	"github.com/saltus-lb/saltus/admin"
	"github.com/saltus-lb/saltus/discovery/kube"
	"github.com/saltus-lb/saltus/gossip"
	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/keys"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/shard"
	"github.com/saltus-lb/saltus/shard/state"
	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/tracing"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/fleet"
	"github.com/saltus-lb/saltus/upstream/queue"
)

// Config is the serving path's configuration: each component's own
// Config, whose DefaultConfig comments every default and whose Validate
// names every bad field, and the few settings only the wiring has.
// `saltus serve` maps its flags and YAML keys straight onto these fields
// (cmd/saltus/serve_config.go), the benchmark sets them in code; there is
// no third copy of them. Zero values are not defaults: start from
// DefaultConfig.
type Config struct {
	Reactor reactor.Config // the listener and the event loops (Loops is --shards)
	Backend backend.Config // the upstream transport, health checks, engine scrape
	// Router is the routing policy, route table and tokenizer pool.
	// Build sets its MaxCandidates to Backend.MaxRetries + 1 (the set
	// tries no more candidates than it is given); its ChatTemplate names
	// the template Build loads with the tokenizer.
	Router   shard.Config
	Backends []string // "url" or "name=url", added by Build
	// BackendModels pins configured backends to models: "backend=model"
	// entries, backend a name or URL of Backends, one model each (repeat
	// for several). A pinned backend serves exactly its pinned models
	// (upstream/fleet). Validate with CheckBackendModels.
	BackendModels []string
	// PriorityBackends names the configured backends (name or URL) whose
	// engines run vLLM's --scheduling-policy priority: only they are
	// passed a request's "priority" field (vLLM refuses a non-zero one
	// otherwise); the others get the body without it.
	PriorityBackends []string
	// BackendMaxConcurrency caps configured backends: "backend=N"
	// entries (name or URL), N requests at once at most; what a pool
	// cannot send waits in its gateway queue. Validate with
	// CheckBackendMaxConcurrency.
	BackendMaxConcurrency []string
	// KVEvents subscribes to configured backends' KV-cache events:
	// "backend=tcp://host:port" entries (name or URL), the engine's
	// publisher (vLLM's --kv-events-config endpoint). Validate with
	// CheckKVEvents. See kvevents.go.
	KVEvents []string
	// KVEventsPort, when not 0, subscribes every backend KVEvents does
	// not name, discovered ones included, at tcp://<its host>:port.
	// Default 0: off.
	KVEventsPort int
	// KVEventsReplay names the replay endpoints of evented backends'
	// publishers: "backend=tcp://host:port" entries (name or URL), vLLM's
	// --kv-events-config replay_endpoint. A sequence gap is then asked
	// of it instead of marking the view stale. Validate with
	// CheckKVEventsReplay. See kvevents.go.
	KVEventsReplay []string
	// KVEventsReplayPort, when not 0, is the replay port of every evented
	// backend KVEventsReplay does not name: its publisher's host, that
	// port. Default 0: no replay.
	KVEventsReplayPort int
	// KVEventsRanks is the data-parallel ranks of every subscribed
	// engine (vLLM's --data-parallel-size, its ranks on the host of its
	// publisher): rank R publishes at the publisher's port + R and
	// replays at the replay port + R, as vLLM offsets them, and each is
	// subscribed, feeding the backend's one view. The bind wiring needs
	// none (the ranks share the engine's topic). 0 or 1 (the default):
	// one; at most MaxKVEventsRanks.
	KVEventsRanks int
	// KVEventsListen, when not "", binds this tcp://HOST:PORT endpoint
	// for engines' KV-event publishers to dial (llm-d's wiring), each
	// message's topic kv@<ip>:<port>@<model> naming its backend. Default
	// "": off. Not reloadable. Validate with CheckKVEventsListen. See
	// kvbind.go.
	KVEventsListen string
	// Fleet discovers each backend's models (GET /v1/models) and groups
	// them into pools (upstream/fleet).
	Fleet fleet.Config
	// AdminToken is the bearer token the adapter endpoints require (the
	// admin listener's, --admin-token); "" none.
	AdminToken string
	Tokenizer  string // a HuggingFace tokenizer.json (or its directory, or .json.gz); "" = byte-block mode
	// Cluster makes this router a member of a cluster of routers
	// sharing routes and load (gossip); its Bind "" (the default) runs
	// alone.
	Cluster gossip.Config
	// State keeps the route table across restarts (--state-dir); its
	// Dir "" (the default) does not.
	State state.Config
	// Discovery adds backends from a service discovery besides Backends:
	// "" (none, the default) or "k8s" (K8s: a Service's ready
	// EndpointSlice endpoints, and those of each model selector, pinned
	// to its model).
	Discovery string
	K8s       kube.Config
	// Keys are the API keys clients must present (keys.Config: a file
	// and/or SALTUS_API_KEYS); off by default.
	Keys keys.Config
	// Tracing exports a span per request to an OpenTelemetry collector
	// (tracing.Config); off unless it or the environment names one.
	// Not reloadable.
	Tracing tracing.Config
	// AccessLog writes a line per finished request (accesslog.Config);
	// its Path "" (the default) is off. Every Retune reopens its file.
	AccessLog accesslog.Config
}

// DiscoveryK8s is Config.Discovery's value for Kubernetes EndpointSlices.
const DiscoveryK8s = "k8s"

// DefaultConfig returns `saltus serve`'s defaults (its --help lists
// them): the components' own, no backends, byte-block mode, and one
// difference: the engines' /metrics are scraped every second (the prefix
// policy's waiting, running and KV inputs; backend.DefaultConfig leaves
// the scrape off for code that routes without them).
func DefaultConfig() Config {
	c := Config{Reactor: reactor.DefaultConfig(), Backend: backend.DefaultConfig(), Router: shard.DefaultConfig(), Cluster: gossip.DefaultConfig(), State: state.DefaultConfig(),
		K8s: kube.DefaultConfig(), Fleet: fleet.DefaultConfig(), Keys: keys.DefaultConfig(), AccessLog: accesslog.DefaultConfig(), Tracing: tracing.DefaultConfig(),
		BackendModels:         []string{}, // as a config file's `backend-models: []` decodes
		PriorityBackends:      []string{},
		BackendMaxConcurrency: []string{},
		KVEvents:              []string{},
		KVEventsReplay:        []string{},
		KVEventsRanks:         1,
	}
	c.Backend.ScrapeInterval = time.Second
	return c
}

// Validate reports every invalid field of c: each component's own
// Validate (the router's with MaxCandidates as Build sets it) and the
// wiring's checks of its lists against Backends. It is the one place
// these settings are checked: `saltus serve` runs it on its flags and
// YAML at start and on every reload (naming the keys), Build runs it, so
// the benchmark's routers do too. It reads no file (the tokenizer and
// key files are cmd/saltus's to check).
func (c Config) Validate() error {
	rc := c.Router
	rc.MaxCandidates = c.Backend.MaxRetries + 1 // as Build sets it
	errs := []error{c.Reactor.Validate(), c.Backend.Validate(), rc.Validate(),
		CheckBackendMaxConcurrency(c.Backends, c.BackendMaxConcurrency),
		CheckKVEvents(c.Backends, c.KVEvents, c.KVEventsPort),
		CheckKVEventsReplay(c.Backends, c.KVEventsReplay, c.KVEventsReplayPort),
		CheckKVEventsListen(c.KVEventsListen),
		CheckKVEventsRanks(c.KVEventsRanks),
		CheckPriorityBackends(c.Backends, c.PriorityBackends),
		CheckBackendModels(c.Backends, c.BackendModels),
		c.Fleet.Validate()}
	switch c.Discovery {
	case "":
	case DiscoveryK8s:
		errs = append(errs, c.K8s.Validate())
	default:
		errs = append(errs, fmt.Errorf(`discovery: must be %q or empty (none), got %q`, DiscoveryK8s, c.Discovery))
	}
	errs = append(errs, c.State.Validate(), c.Cluster.Validate(), c.Keys.Validate(), c.AccessLog.Validate(), c.Tracing.Validate())
	return errors.Join(errs...)
}

// Path is a built serving path. Nothing listens until Start.
type Path struct {
	Data     *reactor.Server
	Router   *shard.Router
	Set      *backend.Set
	Backends admin.Backends  // the admin API's view of Set
	Routes   admin.Routes    // the admin API's view of Router (and Cluster)
	Cluster  *gossip.Node    // nil without Config.Cluster.Bind
	Fleet    *fleet.Fleet    // the model pools
	Keys     *keys.Ring      // the API keys (off unless Config.Keys says)
	State    *state.Saver    // nil without Config.State.Dir
	Tracer   *tracing.Tracer // nil: tracing off (Config.Tracing)
	// Static owns the configured backends (Config.Backends): Reload's
	// SyncBackends keeps them equal to the file's list.
	Static *backend.Managed
	// Discovered owns the backends of Config.Discovery, which watches
	// feed once Start ran (merged by disc); nil without a discovery.
	Discovered *backend.Managed
	watches    []*kube.Watcher // the Service's first, if any, then one per model selector
	disc       discoveredLists
	probes     *rules.Group
	// sources runs what adds and removes backends (the discovery, the
	// reaper): stopped and joined before probes, so that nothing adds a
	// backend (whose probe starts in probes) once probes stopped.
	sources *rules.Group
	cfg     Config // as built
	// live are the per-backend settings the last Retune set (settings).
	live atomic.Pointer[backendSettings]
	// static is the configured backends' list the last SyncBackends set
	// (nil: cfg.Backends).
	static atomic.Pointer[[]string]
	views  *shard.Views   // the evented backends' exact views (kvevents.go)
	access *accesslog.Log // nil without Config.AccessLog.Path
	logger *slog.Logger
	base   *slog.Logger // Build's, for components that name themselves
	set    *metrics.Set
}

// Start starts the data plane (Data.Start), then joins the cluster: a
// join's push-pull hands the peers' routes to the loops, which must run.
// Any goroutine but a loop.
func (p *Path) Start() error {
	if err := p.Data.Start(); err != nil {
		return err
	}
	if p.State != nil {
		p.State.Restore() // before the peers' routes: ours are local
		p.probes.Go("state.save", p.State.Run)
	}
	for i, w := range p.watches {
		name := "discovery.k8s"
		if w.Model() != "" {
			name = "discovery.k8s.model"
		}
		p.sources.Go(name, func(ctx context.Context) { w.Run(ctx, func(list []kube.Target) { p.discovered(i, list) }) })
	}
	if p.Cluster != nil {
		p.Cluster.JoinSeeds()
	}
	p.sources.Go("kvevents.sync", p.kvSync)
	if p.cfg.KVEventsListen != "" {
		p.sources.Go("kvevents.bind.views", p.kvBind)
	}
	return nil
}

// discoveredLists holds each watch's latest list, merged into one on
// every delivery.
type discoveredLists struct {
	// mu serializes the deliveries of the watches (each on its own
	// goroutine), merge and Sync included: a Sync never applies a merge
	// older than the last one applied.
	mu    sync.Mutex
	lists [][]kube.Target // by watch (Path.watches' index): its latest list; nil before its first
}

// discovered applies watch i's list of ready endpoints: the lists of
// every watch, merged (mergeDiscovered), become Discovered's backends.
// On watch i's goroutine.
func (p *Path) discovered(i int, list []kube.Target) {
	p.disc.mu.Lock()
	defer p.disc.mu.Unlock()
	p.disc.lists[i] = list
	ts := mergeDiscovered(p.disc.lists)
	res := p.Discovered.Sync(ts)
	if res.Changed() {
		p.Fleet.Kick() // the new backends' models (and changed pins) now, not at the next watch
		p.logger.Info("discovered backends changed", "source", p.cfg.Discovery, "added", res.Added, "drained", res.Drained, "restored", res.Restored, "endpoints", len(ts))
	}
	for _, err := range res.Errors {
		p.logger.Warn("discovered endpoint not added", "source", p.cfg.Discovery, "err", err)
	}
}

// mergeDiscovered merges the watches' lists into the discovered
// backends, sorted by name: one per URL, pinned to the union of the
// models its watches pin it to (sorted); an endpoint only the Service's
// watch finds (no model) is not pinned, and one the Service's watch and
// a model selector's both find is pinned to the selector's model. As
// within one watch (kube.Target), a URL under two names keeps the
// smaller name, and a name at two URLs (a pod behind two Services on
// different ports) the smaller URL, with that URL's models: a backend
// name is one backend.
func mergeDiscovered(lists [][]kube.Target) []backend.Target {
	byURL := map[string]*backend.Target{}
	for _, l := range lists {
		for _, t := range l {
			bt := byURL[t.URL]
			if bt == nil {
				bt = &backend.Target{Name: t.Name, URL: t.URL}
				byURL[t.URL] = bt
			} else if t.Name < bt.Name {
				bt.Name = t.Name
			}
			bt.Models = append(bt.Models, t.Models...)
		}
	}
	out := make([]backend.Target, 0, len(byURL))
	for _, bt := range byURL {
		if bt.Models != nil {
			slices.Sort(bt.Models)
			bt.Models = slices.Compact(bt.Models)
		}
		out = append(out, *bt)
	}
	slices.SortFunc(out, func(a, b backend.Target) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.URL, b.URL)
	})
	return slices.CompactFunc(out, func(a, b backend.Target) bool { return a.Name == b.Name })
}

// DiscoveryStatus is the discovery's state for GET /admin/discovery: the
// Service's watch's kube.Status when it is the only watch, else the list
// of every watch's (the Service's first, then each model selector's); nil
// without a discovery.
func (p *Path) DiscoveryStatus() any {
	switch {
	case len(p.watches) == 0:
		return nil
	case len(p.watches) == 1 && p.watches[0].Model() == "":
		return p.watches[0].Status()
	}
	out := make([]any, len(p.watches))
	for i, w := range p.watches {
		out[i] = w.Status()
	}
	return out
}

// StopAccepting is the drain's first step: the listener closes
// (Data.StopAccepting), the requests waiting in the gateway queues are
// answered 503 shutting_down with Retry-After (Router.StopQueues: a
// client is better sent to another replica at once than held until the
// drain times out), then the route table is saved one last time while the
// loops still run (Config.State). Any goroutine but a loop.
func (p *Path) StopAccepting() {
	p.Data.StopAccepting()
	p.Router.StopQueues()
	if p.State != nil {
		_ = p.State.Save(context.Background()) // logged and counted by Save
	}
}

// Close releases what outlives the data plane's drain (router, backend set
// and its health probes, tokenizer pool). Call it after Data.Shutdown.
func (p *Path) Close(ctx context.Context) error {
	var cerr error
	if p.Cluster != nil {
		cerr = errors.Join(cerr, p.Cluster.Close(ctx)) // peers drop this router's load at once
	}
	err := errors.Join(cerr, p.Router.Close(ctx))
	if p.access != nil {
		// After the router's goroutines, the last to log (its own
		// answers off the loops): flushed and closed.
		err = errors.Join(err, p.access.Close(ctx))
	}
	err = errors.Join(err, p.Tracer.Close(ctx)) // after the loops: no span comes any more
	p.sources.Stop()
	if werr := p.sources.Wait(ctx); werr != nil {
		// A source still running could add a backend: its probe's Go
		// after probes.Stop would panic; leave probes to the process's
		// exit.
		return errors.Join(err, werr)
	}
	p.probes.Stop()
	p.Set.Close()
	return errors.Join(err, p.probes.Wait(ctx))
}

// Build builds the serving path from cfg. logger and set must not be nil.
func Build(cfg Config, logger *slog.Logger, set *metrics.Set) (*Path, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var al *accesslog.Log
	if cfg.AccessLog.Path != "" {
		var err error
		if al, err = accesslog.Open(cfg.AccessLog, logger, set); err != nil {
			return nil, fmt.Errorf("access-log: %w", err)
		}
	}
	p, err := build(cfg, logger, set, al)
	if err != nil && al != nil {
		_ = al.Close(context.Background()) // nothing was logged; the build's error is the one to report
	}
	return p, err
}

// build is Build with the access log opened (nil: none).
func build(cfg Config, logger *slog.Logger, set *metrics.Set, al *accesslog.Log) (*Path, error) {
	var (
		tok  *tokenizer.Tokenizer
		tmpl *chat.Renderer
	)
	if cfg.Tokenizer != "" {
		var err error
		if tok, err = tokenizer.Load(cfg.Tokenizer); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		r, name, warn, err := chat.LoadTemplate(tok, cfg.Tokenizer, cfg.Router.ChatTemplate, cfg.Router.ChatTemplateFile)
		if err != nil {
			return nil, fmt.Errorf("chat-template: %w", err)
		}
		if warn != nil {
			logger.Warn("chat template not recognized; rendering prompts with template none (choose one with chat-template)", "err", warn)
		}
		tmpl = r
		logger.Info("tokenizer loaded", "path", cfg.Tokenizer, "chat_template", name)
	} else {
		// Without a tokenizer there are no special tokens to render: the
		// router keys the `none` rendering in byte-block mode.
		if ct := cfg.Router.ChatTemplate; ct != "" && ct != chat.None {
			logger.Warn("chat-template is ignored without a tokenizer (byte-block mode)", "chat_template", ct)
		}
		if f := cfg.Router.ChatTemplateFile; f != "" {
			logger.Warn("chat-template-file is ignored without a tokenizer (byte-block mode)", "chat_template_file", f)
		}
		logger.Info("no tokenizer: byte-block mode (64-byte blocks of the rendered prompt)")
	}

	// The keys first of the fallible steps that register metrics: an
	// invalid key list is the commonest start error here.
	ring, err := keys.New(cfg.Keys, logger, set)
	if err != nil {
		return nil, err
	}
	tracer, err := tracing.New(cfg.Tracing, logger, set)
	if err != nil {
		return nil, err
	}
	built := false
	defer func() {
		if !built {
			_ = tracer.Close(context.Background()) // nothing was traced: returns at once
		}
	}()

	// reactor, backend and shard add their own component attribute.
	bset, err := backend.NewSet(cfg.Backend, logger, set)
	if err != nil {
		return nil, err
	}
	var static []int
	for _, t := range Targets(cfg.Backends, cfg.BackendModels) {
		b, err := bset.AddTarget(t)
		if err != nil {
			bset.Close()
			return nil, fmt.Errorf("backends: %w", err)
		}
		static = append(static, b.ID)
	}

	// The server needs its handler and the router needs the server's
	// loops: the handler is set before Start, which publishes it.
	h := &lateHandler{}
	srv, err := reactor.NewServer(cfg.Reactor, h, logger, set)
	if err != nil {
		bset.Close()
		return nil, err
	}
	bset.UseLoops(srv)

	scfg := cfg.Router
	scfg.MaxCandidates = cfg.Backend.MaxRetries + 1 // the Set tries no more than it is given
	router, err := shard.NewRouter(scfg, tok, tmpl, bset, srv.Loops(), logger, set)
	if err == nil {
		srv.OnSweep(router.Tick) // each loop's one tick: the loop path's deadlines, the shard's maintenance
	}
	if err != nil {
		bset.Close()
		return nil, err
	}
	h.h = router
	// Each finished request's record goes to the access log and the
	// tracer, those that are on.
	var sinks reqlog.Sinks
	if al != nil {
		sinks = append(sinks, al)
	}
	if tracer != nil {
		router.UseTracer(tracer)
		sinks = append(sinks, tracer)
	}
	switch len(sinks) {
	case 1:
		router.UseSinks(sinks[0])
	case 2:
		router.UseSinks(sinks)
	}

	var node *gossip.Node
	if cfg.Cluster.Enabled() {
		if node, err = gossip.Start(cfg.Cluster, clusterTable{router, bset}, logger, set); err != nil {
			_ = router.Close(context.Background()) // nothing was served: returns at once
			bset.Close()
			return nil, err
		}
		router.SetPeers(node)
	}
	var saver *state.Saver
	if cfg.State.Dir != "" {
		if saver, err = state.NewSaver(cfg.State, router, logger, set); err != nil {
			if node != nil {
				_ = node.Close(context.Background()) // the config's error is the one to report
			}
			_ = router.Close(context.Background()) // nothing was served: returns at once
			bset.Close()
			return nil, err
		}
	}
	var watches []*kube.Watcher
	if cfg.Discovery == DiscoveryK8s {
		if watches, err = kube.New(cfg.K8s, logger, set); err != nil {
			if node != nil {
				_ = node.Close(context.Background()) // the discovery's error is the one to report
			}
			_ = router.Close(context.Background()) // nothing was served: returns at once
			bset.Close()
			return nil, fmt.Errorf("discovery k8s: %w", err)
		}
	}
	applySettings(bset, cfg.Backends, settingsOf(cfg))
	// The fleet last of the fallible steps: its gauges read it, and it
	// is unregistered only when its Run ends.
	fl, err := fleet.New(cfg.Fleet, bset, logger, set)
	if err != nil {
		if node != nil {
			_ = node.Close(context.Background()) // the fleet's error is the one to report
		}
		_ = router.Close(context.Background()) // nothing was served: returns at once
		bset.Close()
		return nil, err
	}
	router.UseFleet(fl)
	router.UseKeys(ring)
	router.SetAdminToken(cfg.AdminToken)
	views, err := shard.NewViews(router, shard.DefaultViewConfig(), set)
	if err != nil {
		panic("BUG: shard.DefaultViewConfig does not validate: " + err.Error())
	}
	probes, sources := rules.NewGroup(context.Background()), rules.NewGroup(context.Background())
	bset.Start(probes)
	p := &Path{Data: srv, Router: router, Set: bset, Fleet: fl, Keys: ring, Backends: backendsAPI{bset, fl, router}, Routes: routesAPI{router, node, nil},
		Cluster: node, State: saver, Tracer: tracer, Static: bset.Managed("config", static...), watches: watches, probes: probes, sources: sources, cfg: cfg,
		views: views, access: al, logger: logger.With("component", "dataplane"), base: logger, set: set}
	if watches != nil {
		p.Discovered = bset.Managed(cfg.Discovery)
		p.disc.lists = make([][]kube.Target, len(watches))
		p.Routes = routesAPI{router, node, p}
	}
	sources.Go("backends.reap", p.reap)
	if ring.Enabled() {
		sources.Go("keys.watch", ring.Watch) // the key file, read again when it changes
	}
	sources.Go("fleet", fl.Run)
	// The first round of GET /v1/models before anything listens: a
	// request that came before it could go to a backend whose models
	// are not known yet. Bounded by the fetch timeout (a dead engine
	// fails at once; a silent one costs at most that).
	select {
	case <-fl.Ready():
	case <-time.After(cfg.Fleet.Timeout + time.Second):
		p.logger.Warn("the backends' models are not all known yet; requests for a model no known backend serves go to those not yet listed", "waited_ms", (cfg.Fleet.Timeout + time.Second).Milliseconds())
	}
	built = true
	return p, nil
}

// reapInterval is how often backends drained because their source
// dropped them are checked for requests in flight, and removed when idle.
const reapInterval = time.Second

// reap removes idle drained backends of every Managed source until ctx
// ends. On its own goroutine.
func (p *Path) reap(ctx context.Context) {
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Static.Reap()
			if p.Discovered != nil {
				p.Discovered.Reap()
			}
		}
	}
}

// Targets parses configured backends ("url" or "name=url") into the
// backend set's targets, each with the models pinned to it (models:
// "backend=model" entries, backend its name or URL; see
// Config.BackendModels).
func Targets(list, models []string) []backend.Target {
	out := make([]backend.Target, 0, len(list))
	for _, nu := range list {
		name, u := SplitBackend(nu)
		t := backend.Target{Name: name, URL: u}
		for _, m := range models {
			who, model := splitPin(m)
			if names(nu, who) {
				if !slices.Contains(t.Models, model) {
					t.Models = append(t.Models, model)
				}
			}
		}
		out = append(out, t)
	}
	return out
}

// names reports whether who (a name or a URL, as configuration entries
// give it) names the configured backend nu ("name=url" or "url"); a URL
// matches as written or normalized.
func names(nu, who string) bool {
	if who == "" {
		return false
	}
	name, u := SplitBackend(nu)
	if who == name || who == u {
		return true
	}
	norm, _, _ := backend.ParseURL(u) // "" for a bad URL: AddTarget reports it
	return norm != "" && who == norm
}

// configured reports whether who names one of the configured backends.
func configured(backends []string, who string) bool {
	return slices.ContainsFunc(backends, func(nu string) bool { return names(nu, who) })
}

// splitPin splits a "backend=model" pin at its last '=' before the model
// (a URL holds none; a model name may not hold '=' either).
func splitPin(s string) (who, model string) {
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		return "", s
	}
	return s[:i], s[i+1:]
}

// CheckBackendModels validates "backend=model" pins against the
// configured backends: each names one of them (by name or URL) and a
// non-empty model. The errors name the entry.
func CheckBackendModels(backends, models []string) error {
	var errs []error
	for i, m := range models {
		who, model := splitPin(m)
		if who == "" || model == "" {
			errs = append(errs, fmt.Errorf("backend-models[%d]: %q: want BACKEND=MODEL (BACKEND a configured backend's name or URL)", i, m))
			continue
		}
		if !configured(backends, who) {
			errs = append(errs, fmt.Errorf("backend-models[%d]: %q: no configured backend is named %q (give its name=URL in backends, or its URL)", i, m, who))
		}
	}
	return errors.Join(errs...)
}

// SyncBackends makes the configured backends (Static's: "url" or
// "name=url", with their pinned models) the list's: see
// backend.Managed.Sync. Any goroutine.
func (p *Path) SyncBackends(list, models []string) backend.SyncResult {
	res := p.Static.Sync(Targets(list, models))
	l := slices.Clone(list)
	p.static.Store(&l)
	applySettings(p.Set, list, p.settings())
	p.Fleet.Kick() // a new backend's models (and changed pins) now, not at the next watch
	return res
}

// Retune applies the settings of cfg that may change while the path
// serves (each component's Retune says which: request limits and
// timeouts, backend timeouts and probe intervals, the prefix policy's
// knobs); cfg's other fields are not read. The backends are
// SyncBackends's. Any goroutine but a loop.
func (p *Path) Retune(cfg Config) error {
	rc := cfg.Reactor
	bc := cfg.Backend
	sc := cfg.Router
	sc.MaxCandidates = p.cfg.Backend.MaxRetries + 1 // as Build set it: MaxRetries is fixed
	if err := errors.Join(rc.Validate(), bc.Validate(), sc.Validate()); err != nil {
		return err // nothing applied
	}
	p.Router.SetAdminToken(cfg.AdminToken)
	// The key file is read again on every reload, whatever its stat says
	// (its own watch reads it when it changes): an invalid one keeps the
	// keys in force, logged and counted by the Ring, and fails nothing
	// else of the reload. Its path is fixed until a restart.
	_, _ = p.Keys.Reload()
	if p.access != nil {
		p.access.Reopen() // logrotate moved the file (or not: the same file again)
	}
	st := settingsOf(cfg)
	p.live.Store(&st)
	return errors.Join(p.Data.Retune(rc), p.Set.Retune(bc), p.Router.Retune(sc))
}

// clusterTable is the gossip node's view of the router and backend set.
type clusterTable struct {
	*shard.Router
	set *backend.Set
}

func (c clusterTable) Load(dst []wire.Load) []wire.Load     { return shard.Load(c.set, dst) }
func (c clusterTable) SetPeerLoad(sum map[uint64]wire.Load) { shard.SetPeerLoad(c.set, sum) }

// SplitBackend splits a configured backend, "name=url" or "url", into
// its name ("" for none) and URL. A URL cannot hold '=' before "://".
func SplitBackend(s string) (name, url string) {
	if i := strings.IndexByte(s, '='); i >= 0 && !strings.Contains(s[:i], "://") {
		return s[:i], s[i+1:]
	}
	return "", s
}

// lateHandler lets the reactor be built before the router that handles
// its requests (the router needs the reactor's loops to post to).
type lateHandler struct{ h reactor.Handler } // set before Server.Start

func (l *lateHandler) Serve(x *reactor.Exchange) { l.h.Serve(x) }

// OwnAnswer passes the reactor's own answers on to the router's count.
func (l *lateHandler) OwnAnswer(status int, client, requestID string) {
	if o, ok := l.h.(reactor.OwnAnswers); ok {
		o.OwnAnswer(status, client, requestID)
	}
}

// backendsAPI is the admin API's view of the backend set and its pools.
type backendsAPI struct {
	s  *backend.Set
	fl *fleet.Fleet
	r  *shard.Router // the pools' gateway queues
}

var _ admin.Pools = backendsAPI{} // GET /admin/pools

func (a backendsAPI) backendInfo(b *backend.Backend) admin.BackendInfo {
	info := admin.BackendInfo{ID: b.ID, URL: b.URL, Name: b.Name, Healthy: b.Healthy(), Draining: b.Draining(), InFlight: b.InFlight()}
	if bm, ok := a.fl.Index().Backend(b.ID); ok {
		info.Models, info.ModelsState, info.ModelsError = bm.Models, string(bm.State), bm.Error
	}
	if l, ok := b.Engine(); ok {
		info.Engine = &admin.EngineInfo{Waiting: l.Waiting, Running: l.Running, KVUsage: l.KVUsage, KVTokens: l.KVTokens,
			AgeMS: time.Since(l.At).Milliseconds()}
	}
	return info
}

func (a backendsAPI) List() []admin.BackendInfo {
	snap := a.s.Snapshot()
	out := make([]admin.BackendInfo, 0, len(snap))
	for _, b := range snap {
		out = append(out, a.backendInfo(b))
	}
	return out
}

// Pools is GET /admin/pools: the fleet's index now, each pool's
// routable backends counted against the backend set now (as the router's
// admission does).
func (a backendsAPI) Pools() admin.PoolsInfo {
	ix := a.fl.Index()
	snap := a.s.Snapshot()
	byID := make(map[int]*backend.Backend, len(snap))
	for _, b := range snap {
		byID[b.ID] = b
	}
	member := func(id int) admin.PoolMember {
		m := admin.PoolMember{ID: id}
		if b := byID[id]; b != nil {
			m.Name, m.URL = b.Name, b.URL
		}
		return m
	}
	var out admin.PoolsInfo
	for _, p := range ix.Pools() {
		pi := admin.PoolInfo{Model: p.Model.ID, Parent: p.Model.Parent, MaxModelLen: p.Model.MaxModelLen, Requests: p.Requests(),
			Backends: make([]admin.PoolMember, 0, len(p.IDs))}
		for _, id := range p.IDs {
			pi.Backends = append(pi.Backends, member(id))
			if b := byID[id]; b != nil && b.Routable() {
				pi.Routable++
			}
		}
		pi.Queue = a.queue(p.Model.ID)
		out.Pools = append(out.Pools, pi)
	}
	if w := ix.Wild(); w != nil {
		for _, id := range w.IDs {
			out.Unknown = append(out.Unknown, member(id))
		}
	}
	if st, ok := a.r.QueueStatus(shard.OtherModel); ok && st != (shard.QueueStatus{}) {
		out.OtherQueue = a.queue(shard.OtherModel)
	}
	for _, bm := range ix.Backends() {
		m := member(bm.ID)
		out.Backends = append(out.Backends, admin.BackendModels{ID: bm.ID, Name: m.Name, URL: m.URL,
			Models: bm.Models, State: string(bm.State), Error: bm.Error})
	}
	return out
}

// queue is model's gateway queue as the admin API shows it (an empty one
// for a pool nothing ever waited in).
func (a backendsAPI) queue(model string) *admin.PoolQueue {
	st, _ := a.r.QueueStatus(model)
	q := &admin.PoolQueue{ByClass: map[string]int64{}, OldestWaitMS: st.OldestWait.Milliseconds(),
		Queued: st.Queued, Dispatched: st.Dispatched, Full: st.Full, Expired: st.Expired, Gone: st.Gone, Shutdown: st.Shutdown}
	for b, n := range st.Depth {
		q.Depth += n
		q.ByClass[queue.Band(b).String()] = n
	}
	return q
}

// addModelsWait bounds how long POST /admin/backends waits for the new
// backend's models, so that its answer lists them and it is routable in
// its pools as soon as the answer comes.
const addModelsWait = 3 * time.Second

func (a backendsAPI) Add(url string) (admin.BackendInfo, error) {
	b, err := a.s.Add(url)
	if err != nil {
		return admin.BackendInfo{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), addModelsWait)
	defer cancel()
	_ = a.fl.Refresh(ctx, b.ID) // cut short: its models come with the next round
	return a.backendInfo(b), nil
}

func (a backendsAPI) Remove(id int) error { return notFound(a.s.Remove(id)) }
func (a backendsAPI) Drain(id int) error  { return notFound(a.s.Drain(id)) }

func notFound(err error) error {
	if errors.Is(err, backend.ErrNotFound) {
		return fmt.Errorf("%w: %v", admin.ErrNotFound, err)
	}
	return err
}

// routesAPI is the admin API's view of the router and its cluster.
type routesAPI struct {
	r    *shard.Router
	node *gossip.Node // nil: no cluster
	disc *Path        // nil: no discovery
}

func (a routesAPI) DiscoveryStatus() any {
	if a.disc == nil {
		return nil
	}
	return a.disc.DiscoveryStatus()
}

func (a routesAPI) ClusterStatus() any {
	if a.node == nil {
		return nil
	}
	return a.node.Status()
}

func (a routesAPI) RouteStats() any { return a.r.RouteStats() }

func (a routesAPI) Explain(body []byte, path string) (any, error) {
	d, err := a.r.Explain(body, path)
	if errors.Is(err, shard.ErrNoBackend) {
		// The backends' state, not the request's fault: 503, not 400
		// (admin.Routes: only ErrUnavailable is the server's).
		return nil, fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// applySettings applies the configured per-backend settings to the
// backends of set that the configured list holds: priority scheduling for
// those named in prio, the cap of caps ("backend=N", validated); the
// others get neither.
func applySettings(set *backend.Set, list []string, st backendSettings) {
	for _, b := range set.Snapshot() {
		on, n := false, int64(0)
		for _, nu := range list {
			_, u := SplitBackend(nu)
			if norm, _, _ := backend.ParseURL(u); norm != b.URL {
				continue
			}
			on = on || slices.ContainsFunc(st.prio, func(who string) bool { return names(nu, who) })
			for _, e := range st.caps {
				who, v := splitPin(e)
				if c, err := strconv.ParseInt(v, 10, 64); err == nil && names(nu, who) { // validated (CheckBackendMaxConcurrency)
					n = c
				}
			}
		}
		b.SetPriorityScheduling(on)
		b.SetMaxConcurrency(n)
	}
}

// backendSettings are the per-backend settings a reload may change
// (PriorityBackends, BackendMaxConcurrency, KVEvents, KVEventsPort,
// KVEventsReplay, KVEventsReplayPort, KVEventsRanks).
type backendSettings struct {
	prio, caps, kv []string
	kvPort         int
	kvReplay       []string
	kvReplayPort   int
	kvRanks        int
}

func settingsOf(cfg Config) backendSettings {
	return backendSettings{slices.Clone(cfg.PriorityBackends), slices.Clone(cfg.BackendMaxConcurrency), slices.Clone(cfg.KVEvents), cfg.KVEventsPort,
		slices.Clone(cfg.KVEventsReplay), cfg.KVEventsReplayPort, max(cfg.KVEventsRanks, 1)}
}

// settings are the per-backend settings the last Retune set (the built
// ones before any).
func (p *Path) settings() backendSettings {
	if v := p.live.Load(); v != nil {
		return *v
	}
	return settingsOf(p.cfg)
}

// CheckPriorityBackends validates PriorityBackends against the configured
// backends: each names one of them (by name or URL).
func CheckPriorityBackends(backends, prio []string) error {
	var errs []error
	for i, who := range prio {
		if !configured(backends, who) {
			errs = append(errs, fmt.Errorf("backend-priority[%d]: no configured backend is named %q (give its name=URL in backends, or its URL)", i, who))
		}
	}
	return errors.Join(errs...)
}

// maxBackendConcurrency bounds --backend-max-concurrency's N.
const maxBackendConcurrency = 1 << 20

// CheckBackendMaxConcurrency validates "backend=N" caps: each names a
// configured backend (name or URL) and N is 1 to 1,048,576.
func CheckBackendMaxConcurrency(backends, entries []string) error {
	var errs []error
	for i, e := range entries {
		who, v := splitPin(e)
		n, err := strconv.ParseInt(v, 10, 64)
		if who == "" || err != nil || n < 1 || n > maxBackendConcurrency {
			errs = append(errs, fmt.Errorf("backend-max-concurrency[%d]: %q: want BACKEND=N, N from 1 to %d", i, e, maxBackendConcurrency))
			continue
		}
		if !configured(backends, who) {
			errs = append(errs, fmt.Errorf("backend-max-concurrency[%d]: %q: no configured backend is named %q", i, e, who))
		}
	}
	return errors.Join(errs...)
}
