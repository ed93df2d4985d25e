package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// Config configures the fleet's discovery of models. Immutable once New
// has validated it.
type Config struct {
	// Interval is how often each backend's GET /v1/models is fetched
	// again. Default 5 s: an adapter loaded on an engine behind saltus's
	// back is routable within about that (the issue asks 15 s), at one
	// small GET per engine each interval. 0: never fetched; only pinned
	// models are known, and unpinned backends serve any model.
	Interval time.Duration
	// Timeout bounds one fetch. Default 3 s: vLLM answers /v1/models
	// from memory in a millisecond; an engine that takes seconds is busy
	// or gone, and the next round asks again.
	Timeout time.Duration
	// Watch is how often the backend list and health are compared with
	// the last round's: a backend added or back up is fetched at once,
	// one removed leaves its pools. Default 250 ms (a look at a few
	// atomics per backend; no network unless something changed).
	Watch time.Duration
	// Parallel bounds the fetches in flight at once. Default 16.
	Parallel int
	// MaxModels bounds the models one backend may list; the rest are
	// ignored, counted. Default 4,096 (vLLM lists its served names and
	// its loaded adapters, at most --max-cpu-loras of those).
	MaxModels int
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{Interval: 5 * time.Second, Timeout: 3 * time.Second, Watch: 250 * time.Millisecond, Parallel: 16, MaxModels: 4096}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("fleet: models-interval must not be negative, got %v", c.Interval)
	case c.Interval > 0 && c.Interval < 100*time.Millisecond:
		return fmt.Errorf("fleet: models-interval must be 0 (off) or at least 100ms, got %v", c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("fleet: timeout must be positive, got %v", c.Timeout)
	case c.Watch <= 0:
		return fmt.Errorf("fleet: watch must be positive, got %v", c.Watch)
	case c.Parallel <= 0:
		return fmt.Errorf("fleet: parallel must be positive, got %d", c.Parallel)
	case c.MaxModels <= 0:
		return fmt.Errorf("fleet: max models must be positive, got %d", c.MaxModels)
	}
	return nil
}

// Source is what the fleet reads of the backend set (*backend.Set).
type Source interface {
	Snapshot() []*backend.Backend
	FetchModels(b *backend.Backend, deadline time.Time) ([]byte, error)
}

// Model is one served name as an engine lists it.
type Model struct {
	ID          string `json:"id"`
	Parent      string `json:"parent,omitempty"` // the base model of an adapter; "" for a base model
	OwnedBy     string `json:"owned_by,omitempty"`
	MaxModelLen int64  `json:"max_model_len,omitempty"`
	// Card is the model's JSON object as the engine sent it (the first
	// engine by backend ID): what GET /v1/models answers.
	Card []byte `json:"-"`
}

// Pool is the backends that serve one model name: a base model, an alias
// of one, or a LoRA adapter. Immutable.
type Pool struct {
	Model Model
	// IDs are its backends' IDs, ascending.
	IDs     []int
	members []uint64 // bit id set: a member
	// requests counts the requests admitted to the pool (any
	// goroutine: a metrics.Counter's Inc is an atomic add).
	requests *metrics.Counter
}

// Has reports whether backend id is in p. Any goroutine; nil p: false.
func (p *Pool) Has(id int) bool {
	if p == nil || id < 0 || id/64 >= len(p.members) {
		return false
	}
	return p.members[id/64]&(1<<(id%64)) != 0
}

// Admitted counts one request admitted to p. Any goroutine; nil p: none.
func (p *Pool) Admitted() {
	if p != nil && p.requests != nil {
		p.requests.Inc()
	}
}

// Requests is how many requests were admitted to p's model since start
// (the pools of one model share the count across rebuilds). Any
// goroutine; nil p: 0.
func (p *Pool) Requests() uint64 {
	if p == nil || p.requests == nil {
		return 0
	}
	return p.requests.Get()
}

func newPool(m Model, ids []int) *Pool {
	p := &Pool{Model: m, IDs: ids}
	for _, id := range ids {
		for id/64 >= len(p.members) {
			p.members = append(p.members, 0)
		}
		p.members[id/64] |= 1 << (id % 64)
	}
	return p
}

// State is what the fleet knows of one backend's models.
type State string

const (
	// StateUnknown: no /v1/models answer yet, and no pins: the backend
	// may serve any model (it is in Index.Wild).
	StateUnknown State = "unknown"
	// StateListed: its /v1/models answered; it serves what it listed.
	StateListed State = "listed"
	// StatePinned: configuration pins its models (Backend.PinnedModels).
	StatePinned State = "pinned"
)

// BackendModels is one backend as the fleet sees it, for the admin API.
type BackendModels struct {
	ID     int      `json:"id"`
	State  State    `json:"state"`
	Models []string `json:"models"` // served names, sorted
	// Error is the last fetch's failure ("" after a success).
	Error string `json:"error,omitempty"`
	// Refreshed is the last successful fetch (zero: none).
	Refreshed time.Time `json:"refreshed,omitzero"`
}

// Index is the fleet's pools at one moment: immutable, swapped whole by
// the refresh goroutine. Any goroutine reads it.
type Index struct {
	pools map[string]*Pool
	names []string // the pools' models, sorted
	// wild holds the backends whose models are unknown (StateUnknown):
	// nil when there are none.
	wild     *Pool
	backends []BackendModels // in ID order
	sig      string          // what the index was built from, to skip equal rebuilds
}

// Lookup returns the pool of model, nil if no known backend serves it.
// Any goroutine; a nil Index has no pools.
func (ix *Index) Lookup(model string) *Pool {
	if ix == nil {
		return nil
	}
	return ix.pools[model]
}

// Wild returns the pool of the backends whose models are unknown (they
// may serve any model; Pool.Model is empty), nil when every backend's
// models are known. Any goroutine.
func (ix *Index) Wild() *Pool {
	if ix == nil {
		return nil
	}
	return ix.wild
}

// Unknown returns the pool of the backends of snap whose models are not
// known: Wild's, and those added since the index was built (the next
// round fetches them). nil when there are none. Any goroutine; it
// allocates only when snap has backends the index has not seen.
func (ix *Index) Unknown(snap []*backend.Backend) *Pool {
	var wild *Pool
	if ix != nil {
		wild = ix.wild
	}
	var extra []int
	for _, b := range snap {
		if !ix.covers(b.ID) {
			extra = append(extra, b.ID)
		}
	}
	if len(extra) == 0 {
		return wild
	}
	if wild != nil {
		extra = append(extra, wild.IDs...)
		slices.Sort(extra)
	}
	return newPool(Model{}, extra)
}

// covers reports whether backend id was in the snapshot ix was built
// from.
func (ix *Index) covers(id int) bool {
	if ix == nil {
		return false
	}
	_, ok := slices.BinarySearchFunc(ix.backends, id, func(b BackendModels, id int) int { return b.ID - id })
	return ok
}

// Pools returns every pool, by model name. Any goroutine.
func (ix *Index) Pools() []*Pool {
	if ix == nil {
		return nil
	}
	out := make([]*Pool, len(ix.names))
	for i, n := range ix.names {
		out[i] = ix.pools[n]
	}
	return out
}

// Backends returns what the fleet knows of each backend, by ID. Any
// goroutine.
func (ix *Index) Backends() []BackendModels {
	if ix == nil {
		return nil
	}
	return ix.backends
}

// Backend returns what the fleet knows of backend id. Any goroutine.
func (ix *Index) Backend(id int) (BackendModels, bool) {
	if ix == nil {
		return BackendModels{}, false
	}
	i, ok := slices.BinarySearchFunc(ix.backends, id, func(b BackendModels, id int) int { return b.ID - id })
	if !ok {
		return BackendModels{}, false
	}
	return ix.backends[i], true
}

// entry is one backend's fetched models. Owned by the refresh goroutine
// (Run) but for the copy in the Index.
type entry struct {
	listed    []Model // nil: never listed
	err       error
	refreshed time.Time
	next      time.Time // the next periodic fetch
	routable  bool      // at the last look: a backend back up is fetched at once
	warned    bool      // its "does not list its models" warning was logged
}

// Fleet discovers which models each backend serves (its GET /v1/models,
// configuration pins) and publishes them as pools (Index). One goroutine
// (Run) fetches and rebuilds; any goroutine reads Index. See the package
// doc.
type Fleet struct {
	cfg    Config
	src    Source
	logger *slog.Logger
	ms     *metrics.Set

	ix atomic.Pointer[Index]

	// Owned by Run.
	entries  map[int]*entry
	lastSnap []*backend.Backend

	mu sync.Mutex // guards the fields below
	// kicked: backend IDs a caller asked to fetch now (Refresh); started
	// counts the rounds that began, done those that ended; roundDone is
	// closed (and replaced) when a round ends.
	kicked    map[int]bool
	started   uint64
	done      uint64
	roundDone chan struct{}
	series    map[string]bool // the per-pool series registered, by model
	kick      chan struct{}   // capacity 1: wakes Run

	// kickq and kickAll are Kick's (lock-free: loops call it): IDs to
	// fetch, and "fetch every backend".
	kickq   chan int
	kickAll atomic.Bool

	first chan struct{} // closed when the first round ended

	fetches [numResults]*metrics.Counter
	// ignored[i]: models a backend listed that the fleet ignored, by
	// ignoredNames (over MaxModels; a name with control characters or
	// not UTF-8, which no engine serves and no metric label can carry).
	ignored [2]*metrics.Counter
	// refetch[i]: Suspect's kicks, by refetchNames (kicked, suppressed
	// by its rate limit).
	refetch [2]*metrics.Counter
	// lastSuspect is when Suspect last kicked (unix nanoseconds).
	lastSuspect atomic.Int64
}

// kickQueue bounds Kick's queue of backend IDs.
const kickQueue = 256

const (
	resultOK = iota
	resultError
	resultUnsupported
	numResults
)

var resultNames = [numResults]string{"ok", "error", "unsupported"}

// New returns a fleet over src; Run starts it. logger and set may be nil.
func New(cfg Config, src Source, logger *slog.Logger, set *metrics.Set) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("fleet: source is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if set == nil {
		set = metrics.NewSet()
	}
	f := &Fleet{cfg: cfg, src: src, logger: logger.With("component", "fleet"), ms: set,
		entries: make(map[int]*entry), kicked: make(map[int]bool), roundDone: make(chan struct{}),
		series: make(map[string]bool), kick: make(chan struct{}, 1), first: make(chan struct{}), kickq: make(chan int, kickQueue),
	}
	for i, n := range [2]string{"over_limit", "invalid_name"} {
		f.ignored[i] = set.GetOrCreateCounter(`saltus_fleet_models_ignored_total{reason="` + n + `"}`)
	}
	for i, n := range [2]string{"kicked", "suppressed"} {
		f.refetch[i] = set.GetOrCreateCounter(`saltus_fleet_refetch_total{result="` + n + `"}`)
	}
	for i, n := range resultNames {
		f.fetches[i] = set.GetOrCreateCounter(`saltus_fleet_model_fetches_total{result="` + n + `"}`)
	}
	set.GetOrCreateGauge("saltus_fleet_pools", func() float64 { return float64(len(f.Index().Pools())) })
	set.GetOrCreateGauge("saltus_fleet_unknown_backends", func() float64 { return float64(f.Index().Wild().Size()) })
	ix := f.build(src.Snapshot())
	f.ix.Store(ix)
	f.syncSeries(ix)
	return f, nil
}

// Size is how many backends p has (nil p: 0). Any goroutine.
func (p *Pool) Size() int {
	if p == nil {
		return 0
	}
	return len(p.IDs)
}

// Index returns the pools now. Any goroutine.
func (f *Fleet) Index() *Index { return f.ix.Load() }

// Ready is closed once the first round of fetches ended: before it, a
// backend not fetched yet may serve any model. Any goroutine.
func (f *Fleet) Ready() <-chan struct{} { return f.first }

// Refresh fetches the given backends' models now (all of them when ids is
// empty) and returns once a round that began after the call has ended,
// or ctx is done. Any goroutine but an event loop (it waits).
func (f *Fleet) Refresh(ctx context.Context, ids ...int) error {
	f.mu.Lock()
	if len(ids) == 0 {
		for _, b := range f.src.Snapshot() {
			f.kicked[b.ID] = true
		}
	}
	for _, id := range ids {
		f.kicked[id] = true
	}
	target := f.started + 1
	f.mu.Unlock()
	f.wake()
	for {
		f.mu.Lock()
		done, ch := f.done, f.roundDone
		f.mu.Unlock()
		if done >= target {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Kick asks for the backends' models to be fetched soon (all of them
// when ids is empty: new ones, changed pins), without waiting: an engine
// answered 404 for a model it listed (an adapter unloaded behind saltus's
// back), a source added backends. It never blocks (an event loop calls
// it): the IDs go through a bounded queue, and past it every backend is
// fetched. Any goroutine.
func (f *Fleet) Kick(ids ...int) {
	if len(ids) == 0 {
		f.kickAll.Store(true)
	}
	for _, id := range ids {
		select {
		case f.kickq <- id:
		default:
			f.kickAll.Store(true) // full: fetch them all
		}
	}
	f.wake()
}

// suspectEvery is the least time between two of Suspect's kicks: an
// engine that answers 404 to every request of a client (a wrong path, a
// stale response id) costs at most four rounds a second.
const suspectEvery = 250 * time.Millisecond

// Suspect is Kick for backend id after it answered 404 to a request of a
// pool it is in (an adapter unloaded behind saltus's back), rate-limited
// to one kick per suspectEvery, counted. Never blocks. Any goroutine.
func (f *Fleet) Suspect(id int) {
	now := time.Now().UnixNano()
	last := f.lastSuspect.Load()
	if now-last < int64(suspectEvery) || !f.lastSuspect.CompareAndSwap(last, now) {
		f.refetch[1].Inc()
		return
	}
	f.refetch[0].Inc()
	f.Kick(id)
}

func (f *Fleet) wake() {
	select {
	case f.kick <- struct{}{}:
	default: // a wake is pending already
	}
}

// Run fetches and rebuilds until ctx ends: a round every Watch, or at
// once when Refresh or Kick asks. Start it once, in a rules.Group.
func (f *Fleet) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Watch)
	defer t.Stop()
	first := true
	for {
		f.round(ctx)
		if first {
			close(f.first)
			first = false
		}
		select {
		case <-ctx.Done():
			f.unregister()
			return
		case <-t.C:
		case <-f.kick:
		}
	}
}

// round fetches what is due (new backends, backends back up, the periodic
// refresh, kicked ones) and publishes a new Index if anything changed.
func (f *Fleet) round(ctx context.Context) {
	f.mu.Lock()
	f.started++
	kicked := f.kicked
	f.kicked = make(map[int]bool)
	f.mu.Unlock()
	now := time.Now()
	snap := f.src.Snapshot()
	for more := true; more; {
		select {
		case id := <-f.kickq:
			kicked[id] = true
		default:
			more = false
		}
	}
	if f.kickAll.Swap(false) {
		for _, b := range snap {
			if b.Routable() { // a down one is fetched when it is back
				kicked[b.ID] = true
			}
		}
	}
	var due []*backend.Backend
	for _, b := range snap {
		e := f.entries[b.ID]
		routable := b.Routable()
		if e == nil {
			e = &entry{}
			f.entries[b.ID] = e
		}
		back := routable && !e.routable
		e.routable = routable
		if !routable && !kicked[b.ID] {
			continue // down or draining: fetched when it is back
		}
		if back || kicked[b.ID] || (f.cfg.Interval > 0 && !now.Before(e.next)) {
			due = append(due, b)
		}
	}
	for id := range f.entries {
		if !slices.ContainsFunc(snap, func(b *backend.Backend) bool { return b.ID == id }) {
			delete(f.entries, id)
		}
	}
	fetched := len(due) > 0 && f.cfg.Interval > 0 // 0: never fetched (pins only)
	if fetched {
		f.fetch(ctx, due, now)
	}
	// Rebuilt when something it is built from may have changed: answers,
	// the backend list, or pins (a Sync kicks).
	if fetched || len(kicked) > 0 || !sameSnap(snap, f.lastSnap) {
		if ix := f.build(snap); ix.sig != f.ix.Load().sig {
			f.ix.Store(ix)
			f.syncSeries(ix)
		}
	}
	f.lastSnap = snap

	f.mu.Lock()
	f.done = f.started
	close(f.roundDone)
	f.roundDone = make(chan struct{})
	f.mu.Unlock()
}

// fetch GETs the due backends' /v1/models, Parallel at a time, and
// updates their entries.
func (f *Fleet) fetch(ctx context.Context, due []*backend.Backend, now time.Time) {
	type result struct {
		body []byte
		err  error
	}
	res := make([]result, len(due))
	g := rules.NewGroup(ctx)
	sem := make(chan struct{}, f.cfg.Parallel)
	deadline := now.Add(f.cfg.Timeout)
	var wg sync.WaitGroup
	for i, b := range due {
		wg.Add(1)
		sem <- struct{}{} // at most Parallel in flight
		g.Go("fleet.fetch", func(context.Context) {
			defer func() { <-sem; wg.Done() }()
			res[i].body, res[i].err = f.src.FetchModels(b, deadline)
		})
	}
	wg.Wait()
	g.Stop()
	_ = g.Wait(context.Background()) // every fetch returned: Wait returns at once
	for i, b := range due {
		e := f.entries[b.ID]
		e.next = now.Add(f.cfg.Interval)
		body, err := res[i].body, res[i].err
		var models []Model
		if err == nil {
			models, err = f.parse(body)
			if err != nil {
				err = fmt.Errorf("backend %s: bad /v1/models answer: %w", b.Name, err)
			}
		}
		var se *backend.StatusError
		switch {
		case err == nil:
			f.fetches[resultOK].Inc()
			if e.listed == nil || !sameModels(e.listed, models) {
				f.logger.Info("backend models", "backend", b.URL, "name", b.Name, "models", names(models))
			}
			e.listed, e.err, e.refreshed = models, nil, now
		case errors.As(err, &se) && (se.Code == 404 || se.Code == 405 || se.Code == 501):
			f.fetches[resultUnsupported].Inc()
			e.err = err
			if !e.warned && len(b.PinnedModels()) == 0 && e.listed == nil {
				e.warned = true
				f.logger.Warn("backend does not list its models: it is sent requests for any model; pin its models with --backend-models",
					"backend", b.URL, "name", b.Name, "err", err)
			}
		default:
			// Keep what it listed last: a slow or restarting engine
			// still serves its models when it is back, and the next
			// round asks again.
			f.fetches[resultError].Inc()
			e.err = err
			if errors.As(err, &se) && (se.Code == 401 || se.Code == 403) && !e.warned {
				e.warned = true
				f.logger.Warn("backend refuses GET /v1/models (vLLM's --api-key guards /v1): its models stay unknown; pin them with --backend-models",
					"backend", b.URL, "name", b.Name, "err", err)
			}
		}
	}
}

// parse reads an OpenAI model list: {"object":"list","data":[{"id":...}]}.
func (f *Fleet) parse(body []byte) ([]Model, error) {
	var p fastjson.Parser // off the loops, once per fetch
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, err
	}
	data := v.Get("data")
	if data == nil || data.Type() != fastjson.TypeArray {
		return nil, errors.New(`no "data" array`)
	}
	arr, _ := data.Array() // an array: checked above
	out := make([]Model, 0, min(len(arr), f.cfg.MaxModels))
	seen := make(map[string]bool, len(arr))
	for _, m := range arr {
		if m.Type() != fastjson.TypeObject {
			continue
		}
		id := string(m.GetStringBytes("id"))
		if id == "" || seen[id] {
			continue
		}
		if !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			f.ignored[1].Inc()
			continue
		}
		if len(out) == f.cfg.MaxModels {
			f.ignored[0].Inc()
			break
		}
		seen[id] = true
		mm := Model{ID: id, Parent: string(m.GetStringBytes("parent")), OwnedBy: string(m.GetStringBytes("owned_by")),
			Card: m.MarshalTo(nil)}
		if l := m.Get("max_model_len"); l != nil && l.Type() == fastjson.TypeNumber {
			mm.MaxModelLen = l.GetInt64()
		}
		out = append(out, mm)
	}
	return out, nil
}

// sameSnap reports whether two backend snapshots are the same list (the
// Set swaps a new slice on every change).
func sameSnap(a, b []*backend.Backend) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func sameModels(a, b []Model) bool {
	return slices.EqualFunc(a, b, func(x, y Model) bool {
		return x.ID == y.ID && x.Parent == y.Parent && x.MaxModelLen == y.MaxModelLen
	})
}

func names(ms []Model) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// build makes the Index of snap from the entries and the pins. On Run's
// goroutine (or New's, before it).
func (f *Fleet) build(snap []*backend.Backend) *Index { return buildIndex(snap, f.entries, f.ms) }

// NewIndex is the Index of a fleet whose backends (snap) listed the
// models of listed (by backend ID; a backend absent from it has not
// listed its models yet), with their pins: what a Fleet publishes after
// those answers, without its metrics. For code that routes a fixed fleet
// (tests, a benchmark's).
func NewIndex(snap []*backend.Backend, listed map[int][]Model) *Index {
	entries := make(map[int]*entry, len(listed))
	for id, ms := range listed {
		entries[id] = &entry{listed: ms}
	}
	return buildIndex(snap, entries, nil)
}

func buildIndex(snap []*backend.Backend, entries map[int]*entry, ms *metrics.Set) *Index {
	ix := &Index{pools: make(map[string]*Pool)}
	type acc struct {
		m   Model
		ids []int
	}
	accs := make(map[string]*acc)
	var wild []int
	var sig strings.Builder
	for _, b := range snap {
		e := entries[b.ID]
		bm := BackendModels{ID: b.ID, State: StateUnknown}
		if e != nil {
			if e.err != nil {
				bm.Error = e.err.Error()
			}
			bm.Refreshed = e.refreshed
		}
		var served []Model
		switch pins := b.PinnedModels(); {
		case len(pins) > 0:
			bm.State = StatePinned
			for _, id := range pins {
				m := Model{ID: id}
				if e != nil {
					if i := slices.IndexFunc(e.listed, func(l Model) bool { return l.ID == id }); i >= 0 {
						m = e.listed[i] // the engine's own card for a pinned name
					}
				}
				served = append(served, m)
			}
		case e != nil && len(e.listed) > 0:
			// An empty list says nothing (no OpenAI-compatible engine
			// serves no model): such a backend stays unknown.
			bm.State = StateListed
			served = e.listed
		default:
			wild = append(wild, b.ID)
		}
		sig.WriteString(strconv.Itoa(b.ID))
		sig.WriteByte(':')
		for _, m := range served {
			bm.Models = append(bm.Models, m.ID)
			a := accs[m.ID]
			if a == nil {
				a = &acc{m: m}
				accs[m.ID] = a
			} else if a.m.Card == nil && m.Card != nil {
				a.m = m // a listed card beats a pin's bare name
			}
			a.ids = append(a.ids, b.ID)
			sig.WriteString(m.ID)
			sig.WriteByte('\x00')
			sig.WriteString(m.Parent)
			sig.WriteByte('\x00')
			sig.WriteString(strconv.FormatInt(m.MaxModelLen, 10))
			sig.WriteByte('\x01')
		}
		sig.WriteString(string(bm.State))
		sig.WriteByte('\x00')
		sig.WriteString(bm.Error) // a fetch failing or recovering shows in the admin API at once
		sig.WriteByte('\n')
		slices.Sort(bm.Models)
		ix.backends = append(ix.backends, bm)
	}
	for id, a := range accs {
		if a.m.Card == nil {
			a.m.Card = pinnedCard(a.m.ID)
		}
		p := newPool(a.m, a.ids)
		if ms != nil {
			p.requests = ms.GetOrCreateCounter(poolSeries("saltus_pool_requests_total", id))
		}
		ix.pools[id] = p
		ix.names = append(ix.names, id)
	}
	slices.Sort(ix.names)
	if len(wild) > 0 {
		ix.wild = newPool(Model{}, wild)
	}
	ix.sig = sig.String()
	// A backend's fetch error is part of sig (the admin API shows it);
	// its refresh time is not (it changes every round): Refreshed is
	// the one of the last round that changed the index.
	return ix
}

// pinnedCard is the model object of a pinned name no engine listed.
func pinnedCard(id string) []byte {
	b, err := json.Marshal(struct {
		ID      string  `json:"id"`
		Object  string  `json:"object"`
		Created int64   `json:"created"`
		OwnedBy string  `json:"owned_by"`
		Root    string  `json:"root"`
		Parent  *string `json:"parent"`
	}{id, "model", 0, "saltus", id, nil})
	if err != nil {
		panic("BUG: cannot encode a model card: " + err.Error())
	}
	return b
}

// poolSeries is a per-pool series' name: model names come from the
// engines, so the label is quoted for the text format (promtext).
func poolSeries(family, model string) string {
	return family + `{model=` + promtext.QuoteLabel(model) + `}`
}

// syncSeries registers the gauges of pools that appeared and unregisters
// every series of pools that are gone (rule R15: the series are bounded by
// the pools that exist).
func (f *Fleet) syncSeries(ix *Index) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for model := range f.series {
		if ix.Lookup(model) == nil {
			for _, fam := range poolFamilies {
				f.ms.UnregisterMetric(poolSeries(fam, model))
			}
			delete(f.series, model)
		}
	}
	for _, model := range ix.names {
		if f.series[model] {
			continue
		}
		f.series[model] = true
		f.ms.GetOrCreateGauge(poolSeries("saltus_pool_backends", model), func() float64 {
			return float64(f.Index().Lookup(model).Size())
		})
		f.ms.GetOrCreateGauge(poolSeries("saltus_pool_routable_backends", model), func() float64 {
			return float64(f.routable(f.Index().Lookup(model)))
		})
	}
}

var fleetFamilies = [...]string{"saltus_fleet_pools", "saltus_fleet_unknown_backends"}

var poolFamilies = [...]string{"saltus_pool_backends", "saltus_pool_routable_backends", "saltus_pool_requests_total"}

// routable counts p's routable backends. Any goroutine.
func (f *Fleet) routable(p *Pool) int {
	n := 0
	for _, b := range f.src.Snapshot() {
		if p.Has(b.ID) && b.Routable() {
			n++
		}
	}
	return n
}

// unregister removes the gauges that read the fleet and every per-pool
// series (the fleet stops; R15). The counters stay: they read nothing.
func (f *Fleet) unregister() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range fleetFamilies {
		f.ms.UnregisterMetric(n)
	}
	for model := range f.series {
		for _, fam := range poolFamilies {
			f.ms.UnregisterMetric(poolSeries(fam, model))
		}
		delete(f.series, model)
	}
}
