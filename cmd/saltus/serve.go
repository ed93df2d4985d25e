package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/admin"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/internal/memlimit"
	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/internal/tlsconf"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/shard"
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
	router   *shard.Router // nil in tests with fakes
	backends admin.Backends
	routes   admin.Routes
	// live is what a configuration reload changes; nil: nothing (fakes).
	live liveSettings
	// certs are the listeners' TLS certificates, which a reload reads
	// again (reloadTLS); zero: plain HTTP.
	certs tlsCerts
	// ready reports whether a request can be routed now; nil: some
	// backend in backends.List() is healthy and not draining
	// (admin.Routable).
	ready func() bool
	// close releases what outlives the data plane's drain (router, backend
	// set and its health probes, tokenizer pool), after the data plane and
	// the admin listener have stopped; nil: nothing to close.
	close func(ctx context.Context) error
}

// buildDataPlane builds the serving path from cfg (dataplane) and the
// adapters the lifecycle and the admin listener use. Nothing listens when
// it returns: the lifecycle starts the admin listener, then data.Start().
func buildDataPlane(cfg serveConfig, logger *slog.Logger, set *metrics.Set) (*servingPath, error) {
	p, err := dataplane.Build(cfg.servingConfig(), logger, set)
	if err != nil {
		return nil, err
	}
	ready := func() bool {
		select {
		case <-p.Fleet.Ready():
		default:
			return false // the first round of GET /v1/models is under way (at most --models-interval's timeout, 3 s)
		}
		return admin.Routable(p.Backends.List())
	}
	return &servingPath{data: pathData{p}, router: p.Router, backends: p.Backends, routes: p.Routes, close: p.Close, live: p, ready: ready}, nil
}

// pathData is a dataplane.Path as the lifecycle's data plane: its Start
// also joins the cluster once the loops run.
type pathData struct{ p *dataplane.Path }

func (d pathData) Start() error                       { return d.p.Start() }
func (d pathData) Addr() string                       { return d.p.Data.Addr() }
func (d pathData) StopAccepting()                     { d.p.StopAccepting() }
func (d pathData) Shutdown(ctx context.Context) error { return d.p.Data.Shutdown(ctx) }

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
	// reloader handles SIGHUP (and gives the drain-timeout in force);
	// nil: SIGHUP is ignored.
	reloader *reloader
	logger   *slog.Logger
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
	for sig == syscall.SIGHUP {
		if l.reloader != nil {
			_, _ = l.reloader.reload() // logged and counted by reload
		}
		sig = <-signals
	}
	drain := l.drainTimeout
	if l.reloader != nil {
		drain = l.reloader.drainTimeout()
	}
	l.logger.Info("draining", "signal", sig.String(), "drain_timeout", drain)
	l.admin.SetDraining()
	l.data.StopAccepting()

	drainCtx, cancel := context.WithTimeout(context.Background(), drain)
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
	for {
		select {
		case <-done:
			g.Stop()
			_ = g.Wait(context.Background()) // done is closed: the goroutine has returned
			l.logger.Info("stopped")
			return 0
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				l.logger.Warn("SIGHUP during the drain: configuration not reloaded")
				continue
			}
			// The operator insists: cut the drain short (the shutdown
			// goroutine sees its context end) and exit without waiting.
			l.logger.Error("second signal: exiting at once", "signal", sig.String())
			cancel()
			g.Stop()
			return 1
		}
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
	// First of all: a signal that arrives while starting (loading the
	// tokenizer takes a while) is kept, and a second one too; SIGHUP
	// (systemd's ExecReload may send one at once) then reloads once
	// serving instead of killing the process, Go's default.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(signals)
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
	level := new(slog.LevelVar)
	if l, err := parseLevel(cfg.LogLevel); err == nil { // Validate checked it
		level.Set(l)
	}
	logger, err := newLoggerVar(stderr, cfg.LogFormat, level)
	if err != nil { // Validate checked it
		panic("BUG: " + err.Error())
	}
	set := metrics.NewSet()
	floor := heapFloor(cfg.GCHeapFloor, set)
	defer runtime.KeepAlive(floor)
	certs, err := loadTLS(&cfg, set, componentLogger(logger, "serve"))
	if err != nil {
		fmt.Fprintf(stderr, "saltus serve: %v\n", err)
		return 1
	}
	sp, err := buildDataPlane(cfg, logger, set)
	if err != nil {
		fmt.Fprintf(stderr, "saltus serve: %v\n", err)
		return 1
	}
	sp.certs = certs
	return serveWith(cfg, args, sp, set, logger, level, signals)
}

// tlsCerts are the listeners' reloadable certificates; nil: that
// listener speaks plain HTTP.
type tlsCerts struct{ data, admin *tlsconf.Holder }

// loadTLS loads the configured certificate pairs (Validate checked they
// load) into holders, exports their metrics in set, and sets the
// listeners' TLS configs in cfg: Reactor.TLS for the data plane,
// Admin.TLS (with the client CAs, if any) for the admin listener, and
// Backend.TLS (the https backends' roots, or no verification, warned on
// l).
func loadTLS(cfg *serveConfig, set *metrics.Set, l *slog.Logger) (tlsCerts, error) {
	var c tlsCerts
	if cfg.BackendTLSCAFile != "" || cfg.BackendTLSInsecureSkipVerify {
		bc := &tls.Config{InsecureSkipVerify: cfg.BackendTLSInsecureSkipVerify}
		if cfg.BackendTLSCAFile != "" {
			pool, err := tlsconf.LoadCAFile(cfg.BackendTLSCAFile, true)
			if err != nil {
				return c, fmt.Errorf("backend-tls-ca-file: %w", err)
			}
			bc.RootCAs = pool
		}
		if bc.InsecureSkipVerify {
			l.Warn("backend-tls-insecure-skip-verify: https backends' certificates are not verified; anyone on the path can impersonate a backend")
		}
		cfg.Backend.TLS = bc
	}
	if cfg.TLSCertFile != "" {
		h, err := tlsconf.Load(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return c, fmt.Errorf("tls-cert-file: %w", err)
		}
		h.Register(set, "data")
		cfg.Reactor.TLS = h.ServerConfig()
		c.data = h
	}
	if cfg.AdminTLSCertFile != "" {
		h, err := tlsconf.Load(cfg.AdminTLSCertFile, cfg.AdminTLSKeyFile)
		if err != nil {
			return c, fmt.Errorf("admin-tls-cert-file: %w", err)
		}
		h.Register(set, "admin")
		tc := h.ServerConfig()
		if cfg.AdminTLSClientCAFile != "" {
			pool, err := tlsconf.LoadCAFile(cfg.AdminTLSClientCAFile, false)
			if err != nil {
				return c, fmt.Errorf("admin-tls-client-ca-file: %w", err)
			}
			tc.ClientCAs = pool
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
		cfg.Admin.TLS = tc
		c.admin = h
	}
	return c, nil
}

// reloadTLS reads the listeners' certificate files again (a reload:
// SIGHUP, POST /admin/reload): new handshakes get the new pair, open
// connections keep theirs, and a pair that does not load leaves the old
// one in use (logged, counted). It returns the listeners reloaded.
func reloadTLS(c tlsCerts, l *slog.Logger) (reloaded []string, err error) {
	var errs []error
	for _, x := range []struct {
		name string
		h    *tlsconf.Holder
	}{{"data", c.data}, {"admin", c.admin}} {
		if x.h == nil {
			continue
		}
		if err := x.h.Reload(); err != nil {
			l.Error("TLS certificate not reloaded", "listener", x.name, "err", err)
			errs = append(errs, err)
			continue
		}
		cert, _ := x.h.Files()
		l.Info("TLS certificate reloaded", "listener", x.name, "cert", cert, "expires", x.h.NotAfter().UTC())
		reloaded = append(reloaded, x.name)
	}
	return reloaded, errors.Join(errs...)
}

// heapFloor allocates the --gc-heap-floor block and exports its size as
// saltus_gc_heap_floor_bytes. The block is pointer-free (the collector
// never scans it) and never written: allocated first, it gets fresh
// zero pages from the OS, which stay unbacked until touched. It raises
// the collector's heap goal (with GOGC=100, twice the live heap, floor
// included) without using memory itself. The caller keeps it alive. nil
// for 0.
func init() {
	promtext.Describe(map[string]string{
		"saltus_gc_heap_floor_bytes": "Size of the never-written block that raises the Go collector's heap goal (--gc-heap-floor), in bytes.",
	})
}

func heapFloor(n int64, set *metrics.Set) []byte {
	set.NewGauge("saltus_gc_heap_floor_bytes", func() float64 { return float64(n) })
	if n <= 0 {
		return nil
	}
	return make([]byte, n)
}

// serveWith serves a built serving path with its admin listener until
// signals say stop; it returns the exit code (see lifecycle.run). It owns
// sp: it closes it on every path.
// args are the arguments cfg was loaded from (a reload loads them
// again); level is the logger's (a reload changes it; nil: fixed).
func serveWith(cfg serveConfig, args []string, sp *servingPath, set *metrics.Set, logger *slog.Logger, level *slog.LevelVar, signals <-chan os.Signal) int {
	l := componentLogger(logger, "serve")
	limit, from := cfg.Memory.Apply(memlimit.CgroupLimit())
	if from != "none" {
		l.Info("soft memory limit", "bytes", limit, "from", from)
	}
	mem := rules.NewGroup(context.Background())
	mem.Go("memory-governor", memlimit.New(cfg.Memory, limit, set).Run)
	defer func() {
		mem.Stop()
		_ = mem.Wait(context.Background()) // Run returns at once when stopped: nothing to time out
	}()
	rl := newReloader(args, cfg, sp.live, level, componentLogger(logger, "reload"), set)
	rl.certs = sp.certs
	if len(cfg.Backends) == 0 && cfg.Discovery == "" {
		l.Warn("no backends configured: /ready answers 503 until one is added with POST /admin/backends")
	}
	var serving atomic.Bool
	ac := cfg.adminConfig(readiness(&serving, sp))
	ac.Reload = rl.adminReload
	adm, err := admin.New(ac, sp.backends, sp.routes, set, componentLogger(logger, "admin"))
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
	rl.setAdmin(adm)
	return lifecycle{
		serving:      &serving,
		admin:        adm,
		data:         sp.data,
		closeRest:    sp.close,
		drainTimeout: cfg.DrainTimeout,
		reloader:     rl,
		logger:       l,
	}.run(signals)
}
