package backend

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/rules"
)

// Backend is one upstream engine. Its exported fields never change; the
// rest are atomics or owned as commented. Any goroutine may call its
// methods.
type Backend struct {
	ID   int    // stable index (tree holder index), never reused while the process lives
	URL  string // e.g. http://127.0.0.1:8001 (normalized: scheme://host:port, no path)
	Name string // given to AddNamed, else "backend-<ID>"; unique in the Set
	// Identity names the backend the same way on every router of a
	// cluster (peer.go): the name given to AddNamed, else the URL. Key is
	// its hash, the 8 bytes gossip messages carry.
	Identity string
	Key      uint64

	host string               // host:port, the Host header and the dial address
	tls  *tls.Config          // https: the TLS client config (clientTLS); nil: http
	ctl  *fasthttp.HostClient // probes and /v1/models (requests go through the loop path, loop.go)

	inFlight atomic.Int64 // requests sent and not yet finished
	decided  atomic.Int64 // requests routed here on another loop, not yet sent (Decided)
	up       atomic.Bool  // active probes' verdict (starts true)
	tripped  atomic.Bool  // passive breaker open: not healthy until a probe succeeds
	draining atomic.Bool  // not routable; in-flight requests finish
	removed  atomic.Bool  // out of the Set
	passive  atomic.Int32 // consecutive passive failures (connect errors, 5xx)

	// Owned by the backend's probe goroutine.
	probeFails, probeOKs int
	probeErr             error // the last probe's failure, for the "backend down" log (a TLS certificate that does not verify, say)
	// wake (capacity 1) asks the probe goroutine to probe now: the
	// breaker tripped, so the fast schedule starts at once.
	wake chan struct{}

	engine    engineState   // the engine's own load, when scraped (engine.go)
	prefill   prefillState  // the learned prefill model and the prefill pending (prefill.go)
	fleet     *Fleet        // the Set's pooled fit, b's prior until it learns its own (prefill.go); nil: none
	peer      peerLoad      // peer routers' load on it (peer.go)
	fullUntil atomic.Int64  // Full (engine.go): unix nanoseconds; 0 never
	fullSoft  atomic.Int64  // the fullUntil of the last mark without the engine's Retry-After (engine.go: slotFreed)
	capacity  atomic.Int64  // Capacity (engine.go), learned from refusals
	priority  atomic.Bool   // PriorityScheduling
	maxConc   atomic.Int64  // MaxConcurrency (engine.go); 0 none
	capUntil  atomic.Int64  // when capacity stops holding: unix nanoseconds; 0 never learned
	footprint atomic.Int64  // Footprint (prefill.go)
	pinned    atomic.Int64  // Pinned (prefill.go)
	evented   atomic.Bool   // Evented
	decoding  decodingState // the router's requests decoding there, and the decode speed (decoding.go)

	// models are the model names configuration pins b to (Target.Models;
	// nil: none, b serves what its /v1/models lists). Set at Add and by a
	// source's Sync (upstream/fleet reads them).
	models atomic.Pointer[[]string]

	m backendMetrics
}

// InFlight is the number of requests sent to b and not yet finished. Any
// goroutine.
func (b *Backend) InFlight() int64 { return b.inFlight.Load() }

// Decided is the number of requests routed to b by a loop other than the
// one that sends them, and not sent yet (the hop between the owner
// shard's decision and the client loop's forward). The routing policies
// count them with InFlight: a burst of requests decided on one loop
// before the first is sent would otherwise all see the same load and
// herd to one backend. Any goroutine.
func (b *Backend) Decided() int64 { return b.decided.Load() }

// AddDecided adds delta to Decided: +1 when a request is routed to b on
// one loop for another to send, −1 when that loop takes it (before it
// sends). Any goroutine.
func (b *Backend) AddDecided(delta int64) { b.decided.Add(delta) }

// Healthy reports whether b is up per its health probes and its breaker is
// not tripped. A draining backend may be healthy; it is not routable. Any
// goroutine.
func (b *Backend) Healthy() bool { return b.up.Load() && !b.tripped.Load() }

// Evented reports whether b's engine's KV events feed the route table
// now (the shard's exact view is live: it received a batch and was not
// closed or reset for the backend's health since). Any goroutine.
func (b *Backend) Evented() bool { return b.evented.Load() }

// SetEvented sets what Evented reports; the exact view's owner calls it.
// Any goroutine.
func (b *Backend) SetEvented(on bool) {
	if b.evented.Load() != on {
		b.evented.Store(on)
	}
}

// Draining reports whether Drain was called for b. Any goroutine.
func (b *Backend) Draining() bool { return b.draining.Load() }

// Routable reports whether new requests may go to b: healthy, not draining,
// not removed. Any goroutine.
func (b *Backend) Routable() bool {
	return b.Healthy() && !b.draining.Load() && !b.removed.Load()
}

// passiveResult feeds the breaker: ok resets the count (and brings back
// a backend the probes marked down: it just answered), a failure counts
// and trips the breaker at cfg.BreakerFails in a row.
func (b *Backend) passiveResult(ok bool, limit int, logger *slog.Logger) {
	if ok {
		if b.passive.Load() != 0 {
			b.passive.Store(0)
		}
		if !b.up.Load() && b.up.CompareAndSwap(false, true) {
			logger.Info("backend up: it answered a request", "backend", b.URL)
		}
		return
	}
	if n := b.passive.Add(1); limit > 0 && int(n) >= limit && !b.tripped.Swap(true) {
		b.m.trips.Inc()
		logger.Warn("backend breaker tripped", "backend", b.URL, "consecutive_failures", n)
		select {
		case b.wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// Label is how clients see b (Config.BackendHeader): its URL, or its
// name. Any goroutine.
func (s *Set) Label(b *Backend) string { return s.label(b) }

func (s *Set) label(b *Backend) string {
	if s.tune().BackendHeader == "url" {
		return b.URL
	}
	return b.Name
}

type backendMetrics struct {
	lbl          string // the backend label value, quoted
	inFlightName string
	// the prefix policy's inputs, as gauges (prefill.go): pending
	// prefill, footprint and pinned tokens
	policyNames [3]string
	codes       [600]atomic.Pointer[metrics.Counter] // by status code; [0] for codes outside 100..599
	errs        [numErrKinds]*metrics.Counter
	trips       *metrics.Counter
	ttfb, total *metrics.PrometheusHistogram // latencyBuckets (metrics.go)
	// names are the series registered at Add (counters and histograms
	// beside the gauges above), which Remove unregisters with the codes'.
	names []string
}

// codeName is the series of b's answers with status code index i
// (countCode's; 0: codes outside 100..599).
func (m *backendMetrics) codeName(i int) string {
	if i == 0 {
		return "saltus_backend_requests_total{backend=" + m.lbl + ",code=\"other\"}"
	}
	return "saltus_backend_requests_total{backend=" + m.lbl + ",code=\"" + strconv.Itoa(i) + "\"}"
}

// errKind labels saltus_upstream_errors_total.
type errKind uint8

const (
	kindConnect errKind = iota
	kindTimeout
	kindReset
	kindMidstream
	kindStreamIdle
	numErrKinds
)

var errKindNames = [numErrKinds]string{"connect", "timeout", "reset", "midstream", "stream_idle"}

func (k errKind) String() string { return errKindNames[k] }

// snapshot is the immutable backend list behind Set.snap.
type snapshot struct {
	all []*Backend // in ID order; never modified after it is published
}

// Set is the backend registry: an immutable []*Backend snapshot behind
// atomic.Pointer; Add, Remove and Drain build and swap a new one. Any
// goroutine may call its methods.
type Set struct {
	cfg    Config
	tun    atomic.Pointer[Tunables] // cfg's tunable fields as Retune last set them
	logger *slog.Logger
	ms     *metrics.Set

	snap atomic.Pointer[snapshot]

	mu     sync.Mutex // guards the fields below and serializes Add/Remove/Drain
	nextID int
	probes *rules.Group // from Start; nil before
	stops  map[int]context.CancelFunc

	// gate lets spawn start goroutines in proxies without racing Close's
	// Stop (Go after Stop panics): spawn holds it shared with TryRLock
	// (never waits, so an event loop may call it), Close takes it
	// exclusively to set closed.
	gate    sync.RWMutex
	proxies *rules.Group // the loop path's metrics flusher, joined by Close
	// watchWorkers runs it on a reused goroutine of proxies (rules.Workers
	// says why).
	watchWorkers *rules.Workers
	inFlight     atomic.Int64 // requests in flight on the loop path (bounded by cfg.MaxInFlight)
	closed       atomic.Bool
	idPrefix     string // random per Set: generated X-Request-IDs are prefix-loop-seq (loop.go)
	fleet        *Fleet // every backend's pooled prefill fit, their prior (prefill.go)

	connMu sync.Mutex                // guards conns
	conns  map[*trackedConn]struct{} // every open upstream connection

	retries, overload *metrics.Counter
	// refusals counts the engines' 429 and 503 before an answer byte
	// (engine.go: a full engine, tried again elsewhere).
	refusals *metrics.Counter
	// statusRetries counts the engines' 500, 502 and 504 heads sent to
	// the next candidate instead of the client (loop.go's engineFailed).
	statusRetries *metrics.Counter
	// refusalOutcomes counts what followed each refusal, by
	// refusalOutcomeNames (loop.go's engineRefused).
	refusalOutcomes [numRefusalOutcomes]*metrics.Counter

	// probeFn is probe; tests replace it before Start.
	probeFn func(b *Backend, timeout time.Duration) bool
	// scrapeFn is scrape, scrapes its counters by result (scrape.go).
	scrapeFn func(b *Backend, timeout time.Duration) ([]byte, error)
	scrapes  [numScrapeResults]*metrics.Counter

	// The loop path (loop.go); set by UseLoops before the loops run,
	// read-only after.
	lp           Loops
	perLoopConns int // MaxConnsPerBackend's share per loop
	samples      chan []sample
	// bodySpilled counts answers over MaxResponseBody (spill.go);
	// samplesDropped, metric samples lost to a full flusher queue.
	// streamOverflow, streams ended because the client did not read
	// (loopstream.go).
	bodySpilled, samplesDropped, streamOverflow *metrics.Counter
}

// NewSet returns an empty Set. logger and set may be nil.
func NewSet(cfg Config, logger *slog.Logger, set *metrics.Set) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if set == nil {
		set = metrics.NewSet()
	}
	s := &Set{
		cfg:      cfg,
		logger:   logger.With("component", "backend"),
		ms:       set,
		stops:    make(map[int]context.CancelFunc),
		conns:    make(map[*trackedConn]struct{}),
		fleet:    new(Fleet),
		proxies:  rules.NewGroup(context.Background()),
		retries:  set.GetOrCreateCounter("saltus_retries_total"),
		overload: set.GetOrCreateCounter("saltus_backend_overload_total"),
		refusals: set.GetOrCreateCounter("saltus_engine_refusals_total"),

		statusRetries: set.GetOrCreateCounter("saltus_engine_error_retries_total"),

		bodySpilled:    set.GetOrCreateCounter("saltus_upstream_body_spilled_total"),
		samplesDropped: set.GetOrCreateCounter("saltus_backend_loop_samples_dropped_total"),
		streamOverflow: set.GetOrCreateCounter("saltus_stream_overflow_total"),
	}
	s.tun.Store(new(cfg.tunables()))
	s.fleet.engineQueue.Store(int64(cfg.EngineQueue) + 1)
	s.probeFn = s.probe
	s.scrapeFn = s.scrape
	for i, o := range refusalOutcomeNames {
		s.refusalOutcomes[i] = set.GetOrCreateCounter(`saltus_engine_refusal_outcomes_total{outcome="` + o + `"}`)
	}
	for i, r := range scrapeResults {
		s.scrapes[i] = set.GetOrCreateCounter(`saltus_engine_scrapes_total{result="` + r + `"}`)
	}
	s.watchWorkers = rules.NewWorkers(s.proxies, "backend-watch", workerIdle)
	s.snap.Store(&snapshot{})
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never returns an error (Go ≥ 1.24)
	s.idPrefix = hex.EncodeToString(rnd[:]) + "-"
	set.GetOrCreateGauge("saltus_proxy_in_flight", func() float64 { return float64(s.inFlight.Load()) })
	return s, nil
}

// Tunables are the Config fields that may change while the Set runs
// (Retune): the timeouts, the probe intervals and how clients see a
// backend. Every other field is fixed at NewSet.
type Tunables struct {
	ConnectTimeout, FirstByteTimeout, RequestTimeout, StreamIdleTimeout time.Duration
	HealthInterval, HealthDownInterval                                  time.Duration
	BackendHeader                                                       string
}

func (c Config) tunables() Tunables {
	return Tunables{ConnectTimeout: c.ConnectTimeout, FirstByteTimeout: c.FirstByteTimeout, RequestTimeout: c.RequestTimeout,
		StreamIdleTimeout: c.StreamIdleTimeout, HealthInterval: c.HealthInterval, HealthDownInterval: c.HealthDownInterval,
		BackendHeader: c.BackendHeader}
}

// tune returns the tunable fields in force. Any goroutine.
func (s *Set) tune() *Tunables { return s.tun.Load() }

// Retune applies c's tunable fields (Tunables) after validating c; only
// they are read. Requests already sent keep the deadlines they were
// given; the next ones, and each probe's next wait, use the new values.
// Any goroutine.
func (s *Set) Retune(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	s.tun.Store(new(c.tunables()))
	s.fleet.engineQueue.Store(int64(c.EngineQueue) + 1)
	return nil
}

// ErrNotFound is returned by Remove and Drain for an id not in the Set.
var ErrNotFound = errors.New("backend: no such backend")

// ErrDuplicate is returned by Add for a URL already in the Set.
var ErrDuplicate = errors.New("backend: duplicate backend")

// ParseURL validates a backend URL and returns it normalized
// (http://host:port or https://host:port) with its host:port. The path
// must be empty or "/" (a base path prefix is not supported: engines
// serve /v1 at the root); no query, fragment or user info; the port is
// required.
func ParseURL(raw string) (norm, hostport string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("backend: invalid URL %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "", fmt.Errorf("backend: invalid URL %q: scheme must be http or https", raw)
	case u.User != nil:
		return "", "", fmt.Errorf("backend: invalid URL %q: user info not allowed", raw)
	case u.Path != "" && u.Path != "/":
		return "", "", fmt.Errorf("backend: invalid URL %q: path must be empty or \"/\" (no base path prefix)", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", "", fmt.Errorf("backend: invalid URL %q: no query or fragment allowed", raw)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return "", "", fmt.Errorf("backend: invalid URL %q: want %s://host:port", raw, u.Scheme)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return "", "", fmt.Errorf("backend: invalid URL %q: bad port %q", raw, port)
	}
	hostport = net.JoinHostPort(host, port)
	return u.Scheme + "://" + hostport, hostport, nil
}

// Add is AddNamed without a name: the backend is named "backend-<ID>".
// Any goroutine.
func (s *Set) Add(rawURL string) (*Backend, error) { return s.AddNamed("", rawURL) }

// PinnedModels returns the model names configuration pins b to (a copy
// is not made: do not modify it), nil when none are pinned: then b serves
// what its /v1/models lists. Any goroutine.
func (b *Backend) PinnedModels() []string {
	if p := b.models.Load(); p != nil {
		return *p
	}
	return nil
}

// SetPinnedModels replaces b's pinned models (nil or empty: none); the
// fleet (upstream/fleet) applies them at its next refresh. Any goroutine.
func (b *Backend) SetPinnedModels(models []string) {
	if len(models) == 0 {
		b.models.Store(nil)
		return
	}
	c := slices.Clone(models)
	b.models.Store(&c)
}

// PriorityScheduling reports whether b's engine runs vLLM's
// --scheduling-policy priority (configuration says so): only then is a
// request's "priority" field passed on to it (vLLM refuses a non-zero
// one otherwise). Any goroutine.
func (b *Backend) PriorityScheduling() bool { return b.priority.Load() }

// SetPriorityScheduling records whether b's engine runs priority
// scheduling. Any goroutine.
func (b *Backend) SetPriorityScheduling(on bool) { b.priority.Store(on) }

// AddTarget is AddNamed for t, with t's pinned models. Any goroutine.
func (s *Set) AddTarget(t Target) (*Backend, error) {
	return s.addNamed(t.Name, t.URL, t.Models)
}

// CheckName reports whether name can name a backend: 1 to 64 letters,
// digits, '.', '_' or '-', and not of the form "backend-<digits>" (the
// default names).
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("backend: name %q must be 1 to 64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("backend: name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	if rest, ok := strings.CutPrefix(name, "backend-"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
		return fmt.Errorf("backend: name %q is reserved (backend-<id> names the backends without a name)", name)
	}
	return nil
}

// AddNamed validates rawURL and name ("" = "backend-<ID>"), adds a
// backend for them with a fresh ID and returns it. A URL or name already
// in the Set (draining ones included) is ErrDuplicate. The new backend
// starts healthy; if Start ran, its probe starts now. Any goroutine.
func (s *Set) AddNamed(name, rawURL string) (*Backend, error) {
	return s.addNamed(name, rawURL, nil)
}

func (s *Set) addNamed(name, rawURL string, models []string) (*Backend, error) {
	norm, hostport, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if name != "" {
		if err := CheckName(name); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, errors.New("backend: Add after Close")
	}
	old := s.snap.Load()
	for _, b := range old.all {
		if b.URL == norm {
			return nil, fmt.Errorf("%w: %s is already backend %d", ErrDuplicate, norm, b.ID)
		}
		if name != "" && b.Name == name {
			return nil, fmt.Errorf("%w: the name %s is already backend %d's", ErrDuplicate, name, b.ID)
		}
	}
	ident := identity(name, norm)
	if name == "" {
		name = "backend-" + strconv.Itoa(s.nextID)
	}
	b := &Backend{ID: s.nextID, URL: norm, Name: name, Identity: ident, Key: IdentityKey(ident), host: hostport, wake: make(chan struct{}, 1), fleet: s.fleet}
	if strings.HasPrefix(norm, "https://") {
		b.tls = s.clientTLS(hostport)
	}
	s.nextID++
	b.SetPinnedModels(models)
	b.up.Store(true)
	b.ctl = s.newHostClient(hostport, b.tls, ctlConns)
	s.registerMetricsLocked(b)
	next := &snapshot{all: append(slices.Clip(old.all), b)}
	s.snap.Store(next)
	if s.probes != nil {
		s.startProbeLocked(b)
	}
	s.logger.Info("backend added", "id", b.ID, "name", b.Name, "backend", b.URL)
	return b, nil
}

func (s *Set) registerMetricsLocked(b *Backend) {
	lbl := strconv.Quote(b.URL)
	b.m.inFlightName = "saltus_backend_in_flight{backend=" + lbl + "}"
	// A URL removed and added again gets a new gauge bound to the new
	// Backend; Remove unregisters the old one.
	s.ms.GetOrCreateGauge(b.m.inFlightName, func() float64 { return float64(b.inFlight.Load()) })
	for i, g := range [...]struct {
		name string
		f    func() int64
	}{{"saltus_backend_pending_prefill_tokens", b.PendingPrefill}, {"saltus_backend_footprint_tokens", b.Footprint}, {"saltus_backend_kv_pinned_tokens", b.Pinned}} {
		b.m.policyNames[i] = g.name + "{backend=" + lbl + "}"
		s.ms.GetOrCreateGauge(b.m.policyNames[i], func() float64 { return float64(g.f()) })
	}
	b.m.names = b.m.names[:0]
	for k := range numErrKinds {
		name := "saltus_upstream_errors_total{backend=" + lbl + ",kind=\"" + k.String() + "\"}"
		b.m.errs[k] = s.ms.GetOrCreateCounter(name)
		b.m.names = append(b.m.names, name)
	}
	trips := "saltus_backend_breaker_trips_total{backend=" + lbl + "}"
	ttfb := "saltus_backend_ttfb_seconds{backend=" + lbl + "}"
	total := "saltus_backend_request_duration_seconds{backend=" + lbl + "}"
	b.m.trips = s.ms.GetOrCreateCounter(trips)
	b.m.ttfb = s.ms.GetOrCreatePrometheusHistogramExt(ttfb, latencyBuckets)
	b.m.total = s.ms.GetOrCreatePrometheusHistogramExt(total, latencyBuckets)
	b.m.names = append(b.m.names, trips, ttfb, total)
	b.m.lbl = lbl
}

// unregisterMetricsLocked removes every series of b from the metrics set
// (rule R15): a fleet whose backends come and go (a discovery) does not
// keep the series of every backend it ever had. Requests still in flight
// on b count into the unregistered values.
func (s *Set) unregisterMetricsLocked(b *Backend) {
	s.ms.UnregisterMetric(b.m.inFlightName)
	for _, n := range b.m.policyNames {
		s.ms.UnregisterMetric(n)
	}
	for _, n := range b.m.names {
		s.ms.UnregisterMetric(n)
	}
	for i := range b.m.codes {
		if b.m.codes[i].Load() != nil {
			s.ms.UnregisterMetric(b.m.codeName(i))
		}
	}
}

// countCode counts one answer of b with status code.
func (s *Set) countCode(b *Backend, code int) {
	i := code
	if i < 100 || i > 599 {
		i = 0
	}
	c := b.m.codes[i].Load()
	if c == nil {
		c = s.ms.GetOrCreateCounter(b.m.codeName(i))
		b.m.codes[i].Store(c)
		if b.removed.Load() {
			// Counted after Remove (a request that was in flight):
			// the series must not outlive the backend.
			s.ms.UnregisterMetric(b.m.codeName(i))
		}
	}
	c.Inc()
}

// ctlConns bounds a backend's probe and /v1/models connections.
const ctlConns = 4

// clientTLS is an https backend's TLS client config: Config.TLS's roots
// and verification (nil: the system roots, verified), the URL's host as
// the server name (SNI and the name verified), TLS 1.2 at least, ALPN
// http/1.1 (the loop path speaks HTTP/1.1).
func (s *Set) clientTLS(hostport string) *tls.Config {
	c := &tls.Config{}
	if s.cfg.TLS != nil {
		c = s.cfg.TLS.Clone()
	}
	host, _, _ := net.SplitHostPort(hostport) // ParseURL made it
	c.ServerName = host
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	c.NextProtos = []string{"http/1.1"}
	return c
}

// newHostClient is a backend's fasthttp client: probes, /v1/models and
// the engine scrape; tlsCfg nil: plain HTTP.
func (s *Set) newHostClient(hostport string, tlsCfg *tls.Config, maxConns int) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:      hostport,
		IsTLS:     tlsCfg != nil, // fasthttp wraps the dialed conn in tls.Client
		TLSConfig: tlsCfg,
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			connect := s.tune().ConnectTimeout
			if timeout <= 0 || timeout > connect {
				timeout = connect
			}
			if s.closed.Load() {
				return nil, &dialError{err: ErrClosed}
			}
			c, err := net.DialTimeout("tcp", addr, timeout)
			if err != nil {
				return nil, &dialError{err: err}
			}
			tc := newTrackedConn(c, s)
			s.connMu.Lock()
			s.conns[tc] = struct{}{}
			s.connMu.Unlock()
			return tc, nil
		},
		MaxConns:                 maxConns,
		MaxIdleConnDuration:      s.cfg.IdleConnTimeout,
		MaxConnWaitTimeout:       s.cfg.ConnectTimeout,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
		StreamResponseBody:       true,     // the scrape bounds what it reads
		ReadBufferSize:           16 << 10, // also bounds the response head
		WriteBufferSize:          16 << 10,
	}
}

// Remove takes backend id out of the Set: not routable from now on, its
// probe stops, its idle connections close; requests in flight on it
// finish. Its ID is never reused. Any goroutine.
func (s *Set) Remove(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	i := slices.IndexFunc(old.all, func(b *Backend) bool { return b.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: id %d", ErrNotFound, id)
	}
	b := old.all[i]
	b.removed.Store(true)
	next := &snapshot{all: slices.Delete(slices.Clone(old.all), i, i+1)}
	s.snap.Store(next)
	if stop := s.stops[id]; stop != nil {
		stop()
		delete(s.stops, id)
	}
	b.ctl.CloseIdleConnections()
	s.unregisterMetricsLocked(b)
	s.logger.Info("backend removed", "id", id, "backend", b.URL, "in_flight", b.InFlight())
	return nil
}

// Drain marks backend id not routable; requests in flight finish and it
// stays in the Set (Remove takes it out). Draining twice is not an error.
// Any goroutine.
func (s *Set) Drain(id int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.snap.Load().all {
		if b.ID == id {
			if !b.draining.Swap(true) {
				s.logger.Info("backend draining", "id", id, "backend", b.URL, "in_flight", b.InFlight())
			}
			return nil
		}
	}
	return fmt.Errorf("%w: id %d", ErrNotFound, id)
}

// Snapshot returns the current backends in ID order, draining and
// unhealthy ones included. The slice is never modified: do not modify it
// either. Any goroutine.
func (s *Set) Snapshot() []*Backend { return s.snap.Load().all }

// Lookup returns the backend with id in the current snapshot, or nil. Any
// goroutine.
func (s *Set) Lookup(id int) *Backend {
	for _, b := range s.snap.Load().all {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// Start starts one health probe goroutine per backend (and per backend
// added later) in g. Call it once. Any goroutine.
func (s *Set) Start(g *rules.Group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probes != nil {
		panic("BUG: backend.Set.Start called twice")
	}
	s.probes = g
	for _, b := range s.snap.Load().all {
		s.startProbeLocked(b)
	}
}

// Close stops new Forwards (they get 503), cancels the ones in flight
// (it closes every upstream connection: a request waiting for its head
// fails at once, a streamed answer ends as after the client left),
// joins their goroutines and stops the probes (their group is the
// caller's: Stop and Wait it too). Call it after the reactor's Shutdown.
// Any goroutine but an event loop.
func (s *Set) Close() {
	s.gate.Lock()
	s.closed.Store(true)
	s.gate.Unlock()
	s.mu.Lock()
	for id, stop := range s.stops {
		stop()
		delete(s.stops, id)
	}
	s.mu.Unlock()
	s.closeLoops()
	s.proxies.Stop()
	for _, b := range s.snap.Load().all {
		b.ctl.CloseIdleConnections()
	}
	// Probes and /v1/models calls waiting for an answer end when their
	// connection closes.
	s.connMu.Lock()
	open := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		open = append(open, c)
	}
	s.connMu.Unlock()
	for _, c := range open {
		_ = c.Conn.Close() // the owner's Close forgets it; an error means it was closed already
	}
	_ = s.proxies.Wait(context.Background()) // Background never ends: Wait returns nil
}

// workerIdle is how long a proxy or watcher goroutine waits for its next
// task before it returns.
const workerIdle = 10 * time.Second

// spawn runs fn on one of w's goroutines unless the Set is closing; false
// then. It never blocks. Any goroutine.
func (s *Set) spawn(w *rules.Workers, fn func(ctx context.Context)) bool {
	if !s.gate.TryRLock() {
		return false // Close holds or waits for the gate
	}
	defer s.gate.RUnlock()
	if s.closed.Load() {
		return false
	}
	w.Go(fn)
	return true
}

// ctlScheme makes a control request's URI absolute for an https backend:
// fasthttp's HostClient refuses a request whose scheme (http by default)
// is not its own, and once the URI is parsed its host is the one sent.
func (b *Backend) ctlScheme(req *fasthttp.Request) {
	if b.tls != nil {
		req.URI().SetScheme("https")
		req.URI().SetHost(b.host)
	}
}
