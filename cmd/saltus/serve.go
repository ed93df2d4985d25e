package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/shard"
	"github.com/saltus-lb/saltus/shard/admin"
	"github.com/saltus-lb/saltus/shard/backend"
	chatpkg "github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// dataPlane is the serving path as the lifecycle drives it;
// *reactor.Server satisfies it.
type dataPlane interface {
	Start() error                       // listening when it returns
	Addr() string                       // the address listened on
	StopAccepting()                     // drain step 1: close the listener
	Shutdown(ctx context.Context) error // wait for requests in flight (or ctx), then stop
}

// controlPlane is the admin listener as the lifecycle drives it;
// *admin.Server satisfies it.
type controlPlane interface {
	Start() error
	Addr() string
	SetDraining() // /ready → 503
	Shutdown(ctx context.Context) error
}

// Checked at compile time.
var (
	_ dataPlane    = (*reactor.Server)(nil)
	_ controlPlane = (*admin.Server)(nil)
)

// servingPath is what buildDataPlane builds: the data plane, what the
// admin listener shows of it, and how to close the rest.
type servingPath struct {
	data     dataPlane
	backends admin.Backends
	routes   admin.Routes
	// ready reports whether a request can be routed now; nil: some
	// backend in backends.List() is healthy and not draining
	// (admin.Routable).
	ready func() bool
	// close releases what outlives the data plane's drain (router, backend
	// set and its health probes, tokenizer pool), after the data plane and
	// the admin listener have stopped; nil: nothing to close.
	close func(ctx context.Context) error
}

// buildDataPlane builds the serving path from cfg: the tokenizer and chat
// template, the backend set, the reactor and the router, wired together,
// and the adapters the admin listener uses. Nothing listens when it
// returns: the lifecycle starts the admin listener, then data.Start().
func buildDataPlane(cfg serveConfig, logger *slog.Logger, set *metrics.Set) (*servingPath, error) {
	var (
		tok  *tokenizer.Tokenizer
		tmpl *chatpkg.Renderer
	)
	if cfg.Tokenizer != "" {
		var err error
		if tok, err = tokenizer.Load(cfg.Tokenizer); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		r, name, warn, err := loadRenderer(tok, cfg.Tokenizer, cfg.ChatTemplate)
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
		if cfg.ChatTemplate != "" && cfg.ChatTemplate != chatpkg.None {
			logger.Warn("chat-template is ignored without a tokenizer (byte-block mode)", "chat_template", cfg.ChatTemplate)
		}
		logger.Info("no tokenizer: byte-block mode (64-byte blocks of the rendered prompt)")
	}

	bcfg := backend.DefaultConfig()
	bcfg.ConnectTimeout = cfg.ConnectTimeout.D()
	bcfg.ResponseHeaderTimeout = cfg.ResponseTimeout.D()
	bcfg.MaxRetries = cfg.MaxRetries
	bcfg.HealthInterval = cfg.HealthInterval.D()
	bcfg.LoopIO = cfg.UpstreamIO == "loop"
	// reactor, backend and shard add their own component attribute.
	bset, err := backend.NewSet(bcfg, logger, set)
	if err != nil {
		return nil, err
	}
	for _, u := range cfg.Backends {
		if _, err := bset.Add(u); err != nil {
			bset.Close()
			return nil, fmt.Errorf("backends: %w", err)
		}
	}

	rcfg := reactor.DefaultConfig()
	rcfg.Listen = cfg.Listen
	rcfg.Loops = cfg.Shards
	rcfg.LockOSThread = cfg.PinShards
	rcfg.MaxHeaderBytes = int(cfg.MaxHeader)
	rcfg.MaxBodyBytes = int(cfg.MaxBody)
	rcfg.HeaderTimeout = cfg.HeaderTimeout.D()
	rcfg.IdleTimeout = cfg.IdleTimeout.D()
	rcfg.MaxConns = cfg.MaxConns
	// The server needs its handler and the router needs the server's
	// loops: the handler is set before Start, which publishes it.
	h := &lateHandler{}
	srv, err := reactor.NewServer(rcfg, h, logger, set)
	if err != nil {
		bset.Close()
		return nil, err
	}
	bset.UseLoops(srv)

	scfg := shard.DefaultConfig()
	scfg.BlockSize = cfg.BlockSize
	scfg.ChatTemplate = cfg.ChatTemplate
	scfg.Policy = cfg.Policy
	scfg.LoadFactor = cfg.LoadFactor
	scfg.Tree.MaxBlocks = cfg.MaxBlocks
	scfg.Tree.TTL = cfg.RouteTTL.D()
	router, err := shard.NewRouter(scfg, tok, tmpl, bset, srv.Post, srv.Loops(), logger, set)
	if err != nil {
		bset.Close()
		return nil, err
	}
	h.h = router

	probes := rules.NewGroup(context.Background())
	bset.Start(probes)
	return &servingPath{
		data:     srv,
		backends: backendsAPI{bset},
		routes:   routesAPI{router},
		close: func(ctx context.Context) error {
			err := router.Close(ctx)
			probes.Stop()
			bset.Close()
			return errors.Join(err, probes.Wait(ctx))
		},
	}, nil
}

// lateHandler lets the reactor be built before the router that handles
// its requests (the router needs the reactor's loops to post to).
type lateHandler struct{ h reactor.Handler } // set before Server.Start

func (l *lateHandler) Serve(x *reactor.Exchange) { l.h.Serve(x) }

// backendsAPI is the admin API's view of the backend set.
type backendsAPI struct{ s *backend.Set }

func backendInfo(b *backend.Backend) admin.BackendInfo {
	return admin.BackendInfo{ID: b.ID, URL: b.URL, Healthy: b.Healthy(), Draining: b.Draining(), InFlight: b.InFlight()}
}

func (a backendsAPI) List() []admin.BackendInfo {
	snap := a.s.Snapshot()
	out := make([]admin.BackendInfo, 0, len(snap))
	for _, b := range snap {
		out = append(out, backendInfo(b))
	}
	return out
}

func (a backendsAPI) Add(url string) (admin.BackendInfo, error) {
	b, err := a.s.Add(url)
	if err != nil {
		return admin.BackendInfo{}, err
	}
	return backendInfo(b), nil
}

func (a backendsAPI) Remove(id int) error { return notFound(a.s.Remove(id)) }
func (a backendsAPI) Drain(id int) error  { return notFound(a.s.Drain(id)) }

func notFound(err error) error {
	if errors.Is(err, backend.ErrNotFound) {
		return fmt.Errorf("%w: %v", admin.ErrNotFound, err)
	}
	return err
}

// routesAPI is the admin API's view of the router.
type routesAPI struct{ r *shard.Router }

func (a routesAPI) RouteStats() any { return a.r.RouteStats() }

func (a routesAPI) Explain(body []byte, path string) (any, error) {
	d, err := a.r.Explain(body, path)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// closeTimeout bounds the steps after the drain: the admin listener's
// shutdown and servingPath.close.
const closeTimeout = 5 * time.Second

// lifecycle starts the admin listener, then the data plane, and on a
// signal drains and stops them in order.
type lifecycle struct {
	// serving is set once the data plane listens; readiness waits for it
	// (the admin listener starts first). May be nil.
	serving      *atomic.Bool
	admin        controlPlane
	data         dataPlane
	closeRest    func(ctx context.Context) error // may be nil
	drainTimeout time.Duration
	logger       *slog.Logger
}

// run serves until the first value on signals, then drains: /ready
// answers 503, the data listener closes, requests in flight get up to
// drainTimeout, then the admin listener and the rest close. It returns
// the exit code: 0 after a drain (one that timed out included: its
// requests were cut and it is logged), 1 when a start failed or a second
// signal came during the drain (it returns at once then, leaving the
// drain to the process's exit).
func (l lifecycle) run(signals <-chan os.Signal) int {
	closeRest := func() {
		if l.closeRest == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := l.closeRest(ctx); err != nil {
			l.logger.Error("closing the serving path", "err", err)
		}
	}
	if err := l.admin.Start(); err != nil {
		l.logger.Error("cannot start the admin listener", "err", err)
		closeRest()
		return 1
	}
	if err := l.data.Start(); err != nil {
		l.logger.Error("cannot start the data plane", "err", err)
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := l.admin.Shutdown(ctx); err != nil {
			l.logger.Error("admin listener shutdown", "err", err)
		}
		closeRest()
		return 1
	}
	if l.serving != nil {
		l.serving.Store(true)
	}
	l.logger.Info("serving", "listen", l.data.Addr(), "admin", l.admin.Addr())

	sig := <-signals
	l.logger.Info("draining", "signal", sig.String(), "drain_timeout", l.drainTimeout)
	l.admin.SetDraining()
	l.data.StopAccepting()

	drainCtx, cancel := context.WithTimeout(context.Background(), l.drainTimeout)
	defer cancel()
	g := rules.NewGroup(context.Background())
	done := make(chan struct{})
	g.Go("serve-shutdown", func(context.Context) {
		defer close(done)
		start := time.Now()
		if err := l.data.Shutdown(drainCtx); err != nil {
			l.logger.Warn("drain timed out; requests still in flight were cut", "after", time.Since(start).Round(time.Millisecond), "err", err)
		} else {
			l.logger.Info("drained", "after", time.Since(start).Round(time.Millisecond))
		}
		ctx, cancelClose := context.WithTimeout(context.Background(), closeTimeout)
		defer cancelClose()
		if err := l.admin.Shutdown(ctx); err != nil {
			l.logger.Error("admin listener shutdown", "err", err)
		}
		closeRest()
	})
	select {
	case <-done:
		g.Stop()
		_ = g.Wait(context.Background()) // done is closed: the goroutine has returned
		l.logger.Info("stopped")
		return 0
	case sig := <-signals:
		// The operator insists: cut the drain short (the shutdown
		// goroutine sees its context end) and exit without waiting.
		l.logger.Error("second signal: exiting at once", "signal", sig.String())
		cancel()
		g.Stop()
		return 1
	}
}

// Reasons /ready gives for 503 (besides the admin listener's "draining").
var (
	errStarting  = errors.New("starting")
	errNoBackend = errors.New("no routable backend")
)

// readiness is the admin listener's Config.Ready: not before the data
// plane listens, then sp.ready (default: a routable backend in the list).
func readiness(serving *atomic.Bool, sp *servingPath) func() error {
	return func() error {
		switch {
		case !serving.Load():
			return errStarting
		case sp.ready != nil && !sp.ready():
			return errNoBackend
		case sp.ready == nil && !admin.Routable(sp.backends.List()):
			return errNoBackend
		}
		return nil
	}
}

// runServe is `saltus serve`.
func runServe(args []string, stdout, stderr io.Writer) int {
	cfg, dryRun, err := loadServeConfig(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		for line := range strings.SplitSeq(err.Error(), "\n") { // one per invalid key
			fmt.Fprintf(stderr, "saltus serve: %s\n", line)
		}
		return 2
	}
	if dryRun {
		if err := writeEffective(stdout, cfg); err != nil {
			fmt.Fprintf(stderr, "saltus serve: %v\n", err)
			return 1
		}
		return 0
	}
	logger, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil { // Validate checked both keys
		panic("BUG: " + err.Error())
	}
	set := metrics.NewSet()
	sp, err := buildDataPlane(cfg, logger, set)
	if err != nil {
		fmt.Fprintf(stderr, "saltus serve: %v\n", err)
		return 1
	}
	// Buffered: a signal that arrives while starting is kept, and the
	// second one too.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	return serveWith(cfg, sp, set, logger, signals)
}

// serveWith serves a built serving path with its admin listener until
// signals say stop; it returns the exit code (see lifecycle.run). It owns
// sp: it closes it on every path.
func serveWith(cfg serveConfig, sp *servingPath, set *metrics.Set, logger *slog.Logger, signals <-chan os.Signal) int {
	l := componentLogger(logger, "serve")
	if len(cfg.Backends) == 0 {
		l.Warn("no backends configured: /ready answers 503 until one is added with POST /admin/backends")
	}
	var serving atomic.Bool
	adm, err := admin.New(cfg.adminConfig(readiness(&serving, sp)), sp.backends, sp.routes, set, componentLogger(logger, "admin"))
	if err != nil {
		l.Error("cannot build the admin listener", "err", err)
		if sp.close != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			if err := sp.close(ctx); err != nil {
				l.Error("closing the serving path", "err", err)
			}
		}
		return 1
	}
	return lifecycle{
		serving:      &serving,
		admin:        adm,
		data:         sp.data,
		closeRest:    sp.close,
		drainTimeout: cfg.DrainTimeout.D(),
		logger:       l,
	}.run(signals)
}
