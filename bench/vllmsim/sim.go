package vllmsim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// Bounds of the HTTP side besides Config's.
const (
	// readBufferSize bounds a request head (fasthttp answers 431 over it).
	readBufferSize = 16 << 10
	// extraConns: connections served beyond MaxNumSeqs+MaxWaiting
	// requests in flight (probes, /metrics, requests that will get 503);
	// fasthttp answers 503 and closes over the total.
	extraConns = 256
	// maxStalls bounds X-Sim-Fail: stall connections held at once; more
	// get 503.
	maxStalls = 1024
	// readTimeout bounds reading one request; idleTimeout a keep-alive
	// connection's wait for the next.
	readTimeout = 30 * time.Second
	idleTimeout = 90 * time.Second
)

// Sim is one simulated engine: a fasthttp server on its own listener,
// one scheduler goroutine, its own metrics. Build it with New, serve with
// Start, stop with Close; several can run in one process.
type Sim struct {
	cfg    Config
	log    *slog.Logger
	p      *prompter
	eng    *engine
	set    *metrics.Set
	served *models // the base models and LoRA adapters served
	store  *respStore
	// loraInfo: /metrics ends with vllm:lora_requests_info, as vLLM's
	// does when LoRA is enabled (adapters at start, or run-time loading).
	loraInfo bool

	rejected, injected *metrics.Counter
	kvDropped          *metrics.Counter    // KV-event batches dropped (Config.KVEvents)
	pub                *kvevents.Publisher // nil until Start, or without KV events
	done               chan struct{}       // closed by Close
	ids                atomic.Uint64       // response ids
	draws              atomic.Uint64       // FailRate draws

	mu         sync.Mutex // guards the fields below
	srv        *fasthttp.Server
	ln         net.Listener
	group      *rules.Group
	closed     bool
	stalls     map[net.Conn]struct{} // X-Sim-Fail: stall connections, to close on Close
	stalling   int                   // stall hijacks registered and not yet returned
	stallsDone chan struct{}         // closed when closed and stalling reaches 0
}

// New builds a simulated engine from cfg (validated here; the tokenizer,
// if any, is loaded). logger may be nil; New adds component=vllmsim.
// Nothing listens until Start.
func New(cfg Config, logger *slog.Logger) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("component", "vllmsim"))
	p, err := newPrompter(cfg, logger)
	if err != nil {
		return nil, err
	}
	s := &Sim{
		cfg: cfg, log: logger, p: p, set: metrics.NewSet(),
		served:     newModels(cfg),
		loraInfo:   cfg.RuntimeLoRA || len(cfg.LoRAModules) > 0,
		stalls:     make(map[net.Conn]struct{}),
		stallsDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
	label := `{model_name="` + cfg.Model + `"}` // Validate allows no quotes or backslashes
	s.eng = newEngine(cfg, realClock{start: time.Now(), speedup: cfg.Speedup}, newEngineMetrics(s.set, label))
	s.set.NewGauge("vllm:num_requests_running"+label, func() float64 { return float64(s.eng.nRunning.Load()) })
	s.set.NewGauge("vllm:num_requests_waiting"+label, func() float64 { return float64(s.eng.nWaiting.Load()) })
	s.set.NewGauge("vllm:kv_cache_usage_perc"+label, func() float64 { return math.Float64frombits(s.eng.usage.Load()) })
	// vLLM's cache config as an info metric (labels, value 1): routers
	// read the KV capacity from it.
	s.set.NewGauge(fmt.Sprintf(`vllm:cache_config_info{model_name=%q,block_size="%d",num_gpu_blocks="%d"}`,
		cfg.Model, cfg.BlockSize, cfg.KVTokens/cfg.BlockSize), func() float64 { return 1 })
	s.rejected = s.set.NewCounter("vllmsim_rejected_total" + label) // waiting queue full
	s.store = newRespStore(cfg.ResponseStore, cfg.ResponseStoreBytes, s.set, label)
	s.injected = s.set.NewCounter("vllmsim_injected_failures_total" + label)
	if cfg.KVEvents.Enable {
		s.kvDropped = s.set.NewCounter("vllmsim_kv_events_dropped_total" + label)
	}
	return s, nil
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves
// until Close. Any goroutine; once.
func (s *Sim) Start(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("vllmsim: Start after Close")
	case s.srv != nil:
		return errors.New("vllmsim: started already")
	}
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("vllmsim: cannot listen on %s: %w", addr, err)
	}
	if s.cfg.TLS != nil {
		tl = tls.NewListener(tl, s.cfg.TLS)
	}
	if s.cfg.KVEvents.Enable {
		pub, err := kvevents.NewPublisher(s.cfg.KVEvents.publisherConfig(), s.log)
		if err != nil {
			_ = tl.Close() // never served
			return fmt.Errorf("vllmsim: KV events: %w", err)
		}
		s.pub = pub
		s.eng.kv.ev = &kvEvents{pub: pub, dropped: s.kvDropped, ints: s.cfg.KVEvents.HashForm == "int", blockSize: s.cfg.BlockSize}
	}
	ln := &signalListener{Listener: tl, accepting: make(chan struct{})}
	s.ln = ln
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.badFraming,
		Name:               "vllmsim",
		MaxRequestBodySize: s.cfg.MaxBody,
		ReadBufferSize:     readBufferSize,
		Concurrency:        s.cfg.MaxNumSeqs + s.cfg.MaxWaiting + extraConns,
		ReadTimeout:        readTimeout,
		IdleTimeout:        idleTimeout,
		// The worker pool's cleaner sees Shutdown only between sleeps of
		// this length (fasthttp's default: 10 s), so Close's goroutines end
		// soon after it; idle workers go as soon, which costs little here.
		MaxIdleWorkerDuration: 100 * time.Millisecond,
		CloseOnShutdown:       true,
		Logger:                debugLogger{s.log},
	}
	s.group = rules.NewGroup(context.Background())
	s.group.Go("vllmsim.scheduler", s.eng.run)
	if s.pub != nil {
		s.group.Go("vllmsim.kvevents", s.pub.Run)
	}
	srv := s.srv
	s.group.Go("vllmsim.serve", func(context.Context) {
		if err := srv.Serve(ln); err != nil {
			s.log.Error("serving stopped", "err", err)
		}
	})
	s.log.Info("simulated engine listening", "addr", ln.Addr().String(), "model", s.cfg.Model,
		"extra_models", len(s.cfg.ExtraModels), "lora_modules", len(s.cfg.LoRAModules), "runtime_lora", s.cfg.RuntimeLoRA,
		"profile", s.cfg.Name, "speedup", s.cfg.Speedup, "kv_tokens", s.cfg.KVTokens)
	return nil
}

// Addr is the address listened on; "" before Start. Any goroutine.
func (s *Sim) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is the engine's base URL, http://Addr() (https:// with
// Config.TLS). Any goroutine.
func (s *Sim) URL() string {
	if s.cfg.TLS != nil {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Close stops the engine: the scheduler stops and every request it holds
// fails (a waiting or running non-streamed one gets 503, a stream ends
// with an error event and no [DONE]), stalled connections close, the
// listener closes, and Close waits for every goroutine and connection,
// or ctx. Calling it again, or before Start, does no harm. Any goroutine.
func (s *Sim) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.stalls {
		// The stall handler's read fails and it returns; the error of a
		// connection the client closed already does not matter.
		_ = c.Close()
	}
	if s.stalling == 0 {
		close(s.stallsDone)
	}
	srv, group, ln := s.srv, s.group, s.ln
	s.mu.Unlock()
	if srv == nil {
		return nil // never started
	}
	group.Stop() // the scheduler aborts what it holds
	// fasthttp's Shutdown returns at once, and Serve then runs on, if
	// Serve has not registered the listener yet: wait until it accepts.
	select {
	case <-ln.(*signalListener).accepting:
	case <-ctx.Done():
	}
	err := srv.ShutdownWithContext(ctx)
	err = errors.Join(err, group.Wait(ctx))
	select {
	case <-s.stallsDone:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("vllmsim: stalled connections still open: %w", ctx.Err()))
	}
	if err != nil {
		return fmt.Errorf("vllmsim: close: %w (still running: %v)", err, group.Running())
	}
	return nil
}

// Stats returns a snapshot of the engine's state. Any goroutine.
func (s *Sim) Stats() Stats {
	return Stats{
		Running:       int(s.eng.nRunning.Load()),
		Waiting:       int(s.eng.nWaiting.Load()),
		KVUsage:       math.Float64frombits(s.eng.usage.Load()),
		PrefixQueries: s.eng.m.queries.Get(),
		PrefixHits:    s.eng.m.hits.Get(),
		Rejected:      s.rejected.Get(),
		Injected:      s.injected.Get(),
	}
}

// KVEventsAddr is where a binding KV-event publisher listens; "" before
// Start, without KV events, or when it connects. Any goroutine.
func (s *Sim) KVEventsAddr() string {
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	if pub == nil || pub.Addr() == nil {
		return ""
	}
	return pub.Addr().String()
}

// KVEventsReplayAddr is where the KV-event replay socket listens; ""
// before Start or without one. Any goroutine.
func (s *Sim) KVEventsReplayAddr() string {
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	if pub == nil || pub.ReplayAddr() == nil {
		return ""
	}
	return pub.ReplayAddr().String()
}

// Config returns the engine's configuration. Any goroutine.
func (s *Sim) Config() Config { return s.cfg }

// signalListener closes accepting on the first Accept: fasthttp's Serve
// has registered the listener by then, so Shutdown can close it.
type signalListener struct {
	net.Listener
	once      sync.Once
	accepting chan struct{}
}

func (l *signalListener) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	return l.Listener.Accept()
}

// debugLogger sends fasthttp's own messages (mostly connections the
// client broke) to the logger at debug level: they are expected here.
type debugLogger struct{ l *slog.Logger }

func (d debugLogger) Printf(format string, args ...any) {
	d.l.Debug("fasthttp: " + fmt.Sprintf(format, args...))
}
