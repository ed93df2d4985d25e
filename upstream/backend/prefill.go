package backend

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// PrefillModel is a backend's time to first token as a function of the
// prompt tokens it must compute (the uncached ones): TTFT ≈ Base +
// uncached / TokensPerSec, learned from observed TTFBs (ObserveTTFT).
type PrefillModel struct {
	Base         time.Duration // TTFT of a fully cached prompt
	TokensPerSec float64       // prefill throughput
	Samples      int64         // observations the fit rests on; 0: the defaults
}

// Defaults of the prefill model until a backend has been observed: a
// 13B model on an A100 (bench/vllmsim profile a100-13b: a 4,096-token miss
// 515 ms, a hit 24 ms).
const (
	DefaultPrefillBase         = 20 * time.Millisecond
	DefaultPrefillTokensPerSec = 8000
)

// The fit. ObserveTTFT keeps the last prefillWindow (uncached tokens,
// TTFB) samples in a ring; every prefillRefit samples, once at least
// prefillMinSamples are in (with a full window: at most once per
// prefillRefitEvery, and at least once per prefillWindow samples; under
// load a refit every 8 answers, two per backend and fleet, was 1-2 % of
// saltus's CPU on streamed requests), it refits Tukey's resistant line on the
// window: samples sorted by tokens, cut in thirds, the slope through the
// (median tokens, median TTFB) points of the outer thirds, the intercept
// the median of TTFB − slope × tokens. Each point is a median, so up to a
// sixth of the window can be outliers (a request stuck behind another's
// prefill, a GC pause) without moving the line much. A window whose token
// counts do not spread (outer medians within prefillMinSpread tokens)
// fits the base only, at the last known rate. The fit is clamped to
// [prefillMinRate, prefillMaxRate] tokens/s and a base in [0,
// prefillMaxBase]. Memory: the fixed ring, per backend.
const (
	prefillWindow     = 64
	prefillRefit      = 8
	prefillRefitEvery = 100 * time.Millisecond
	prefillMinSamples = 16
	prefillMinSpread  = 64
	prefillMinRate    = 100
	prefillMaxRate    = 1e7
	prefillMaxBase    = 10 * time.Second
)

type prefillSample struct {
	tokens float64
	secs   float64
}

// prefillState is a backend's learned prefill model and the tokens of
// its requests sent and not yet answered (their prefill still ahead of a
// new request). Any goroutine: ObserveTTFT takes mu with TryLock (a
// sample that meets a concurrent one is dropped, counted in dropped, so
// a loop never waits); Prefill reads model, an atomic pointer.
type prefillState struct {
	pending atomic.Int64 // uncached prompt tokens of requests before their first byte
	model   atomic.Pointer[PrefillModel]
	dropped atomic.Int64

	mu      sync.Mutex
	ring    [prefillWindow]prefillSample
	n, next int // samples in ring, next slot
	seen    int64
	fitAt   time.Time                    // the last refit throttled by prefillRefitEvery
	work    [prefillWindow]prefillSample // the fit's scratch
	ys      [prefillWindow]float64

	// The queue factor (ObserveQueued): decayed sums of the least-squares
	// fit through the origin, under mu; qoff is 1 − the factor, as float
	// bits (the zero value: a factor of 1, vLLM's, until learned).
	qxy, qxx float64
	qn       int64
	qoff     atomic.Uint64
	qset     atomic.Bool // the factor is learned (queueMinSamples in)
}

// The queue factor is the share of the prefill pending at an engine (sent,
// first token not yet back) that a new request's first token waits for:
// 1 on vLLM, whose scheduler runs prefills in the order they came within
// its token budget; near 0 on an engine that prefills its running
// requests side by side (llm-d-inference-sim's model, or a scheduler
// with room to spare). It is learned from the streamed answers sent while
// prefill was pending there: the first token's excess over the prefill
// model's estimate against the pending prefill's time, fitted through
// the origin, each sample's weight decaying by queueDecay, clamped to
// [0, 1]; 1 until queueMinSamples are in. Measured on the Mooncake
// conversation trace with llm-d-inference-sim engines (docs/BENCHMARKS.md):
// priced as a full queue, the pending prefill made the prefix policy
// leave the engine holding a conversation for one that held nothing.
const (
	queueDecay      = 0.98 // about the last 50 samples
	queueMinSamples = 16
)

// ObserveQueued feeds the queue factor one streamed answer whose request
// found ahead uncached tokens pending at b when it was sent, computed
// uncached tokens itself and had its first token after ttfb. Needs a
// prefill model learned by b or its fleet (no sample otherwise). The
// sample feeds b's own fit and the fleet's (the prior of backends that
// have not learned theirs). Any goroutine; never blocks (a sample meeting
// a concurrent one is dropped, counted with ObserveTTFT's).
func (b *Backend) ObserveQueued(uncached int, ahead int64, ttfb time.Duration) {
	m := b.Prefill()
	if uncached < 0 || ahead <= 0 || ttfb <= 0 || m.Samples == 0 {
		return
	}
	x := float64(ahead) / m.TokensPerSec
	r := ttfb.Seconds() - m.Base.Seconds() - float64(uncached)/m.TokensPerSec
	b.prefill.observeQueued(x, r)
	if b.fleet != nil {
		b.fleet.observeQueued(x, r)
	}
}

// observeQueued adds one sample (x: the pending prefill's time, r: the
// first token's excess over the model) to p's queue fit.
func (p *prefillState) observeQueued(x, r float64) {
	if !p.lock() {
		return
	}
	defer p.mu.Unlock()
	p.qxy = p.qxy*queueDecay + r*x
	p.qxx = p.qxx*queueDecay + x*x
	p.qn++
	if p.qn >= queueMinSamples && p.qxx > 0 {
		f := min(max(p.qxy/p.qxx, 0), 1)
		p.qoff.Store(math.Float64bits(1 - f))
		p.qset.Store(true)
	}
}

// QueueFactor is the share of b's pending prefill a new request waits
// for (see queueDecay): b's own once learned, else its fleet's once
// learned, else 1. Any goroutine.
func (b *Backend) QueueFactor() float64 {
	p := &b.prefill
	if !p.qset.Load() && b.fleet != nil && b.fleet.qset.Load() {
		p = &b.fleet.prefillState
	}
	return 1 - math.Float64frombits(p.qoff.Load())
}

// Fleet pools the prefill and queue-factor samples and the scraped slot
// limits of every backend of a Set: the prior of a backend that has not
// yet learned its own model, factor or limit (each needs
// prefillMinSamples, queueMinSamples or slotsSeen of its own). The
// engines of one fleet are nearly always alike, and the pooled fit has
// its samples N times sooner on N backends: on the
// Mooncake conversation trace at ×4 with 8 llm-d-inference-sim engines,
// the last engine learned its own factor some 35 s into a 75 s run, and
// until then the prefix policy priced the prefill pending there as a
// queue these engines do not have (docs/BENCHMARKS.md). Its memory is one
// backend's fit (a fixed ring).
type Fleet struct {
	prefillState
	slotMu sync.Mutex // serializes slots.learn (the scrapers of every backend)
	slots  slotLimit  // the fleet's learned limit (engine.go)
	// engineQueue is Config.EngineQueue + 1 (0: no bound), as the Set was
	// made or last retuned.
	engineQueue atomic.Int64
}

// lock takes mu if it is free; a sample that meets a concurrent one is
// dropped (counted) rather than waited for.
func (p *prefillState) lock() bool {
	if !p.mu.TryLock() {
		p.dropped.Add(1)
		return false
	}
	return true
}

// Prefill returns the backend's prefill model: learned, or the defaults
// (Samples 0). Any goroutine.
func (b *Backend) Prefill() PrefillModel {
	if m := b.prefill.model.Load(); m != nil {
		return *m
	}
	if b.fleet != nil {
		if m := b.fleet.model.Load(); m != nil {
			return *m
		}
	}
	return PrefillModel{Base: DefaultPrefillBase, TokensPerSec: DefaultPrefillTokensPerSec}
}

// ObserveTTFT feeds the prefill model one observation: a request whose
// engine computed uncached prompt tokens (from the engine's own
// usage.prompt_tokens_details.cached_tokens when known, else the
// router's prediction; the router adds the prefill pending ahead of the
// request when it was sent) answered its first byte after ttfb. Any
// goroutine; never blocks.
func (b *Backend) ObserveTTFT(uncached int, ttfb time.Duration) {
	if uncached < 0 || ttfb <= 0 {
		return
	}
	smp := prefillSample{tokens: float64(uncached), secs: ttfb.Seconds()}
	b.prefill.observe(smp, b.Prefill().TokensPerSec)
	if b.fleet != nil {
		b.fleet.observe(smp, b.fleet.rate())
	}
}

// observe adds one sample to p's ring and refits every prefillRefit
// samples once prefillMinSamples are in; rate is the one kept when the
// window's tokens do not spread.
func (p *prefillState) observe(smp prefillSample, rate float64) {
	if !p.lock() {
		return
	}
	defer p.mu.Unlock()
	p.ring[p.next] = smp
	p.next = (p.next + 1) % prefillWindow
	p.n = min(p.n+1, prefillWindow)
	p.seen++
	if p.n < prefillMinSamples || p.seen%prefillRefit != 0 {
		return
	}
	if p.n == prefillWindow && p.seen%prefillWindow != 0 {
		// A full window under load: at most one refit per
		// prefillRefitEvery, and one per window's worth of samples.
		now := time.Now()
		if now.Sub(p.fitAt) < prefillRefitEvery {
			return
		}
		p.fitAt = now
	}
	m := fitPrefill(p.ring[:p.n], p.work[:0], p.ys[:0], rate)
	m.Samples = p.seen
	p.model.Store(&m)
}

// rate is p's learned prefill rate, the default until learned.
func (p *prefillState) rate() float64 {
	if m := p.model.Load(); m != nil {
		return m.TokensPerSec
	}
	return DefaultPrefillTokensPerSec
}

// fitPrefill is the resistant line over samples (see the constants);
// work and ys are scratch of len(samples) capacity. rate is used when
// the tokens do not spread.
func fitPrefill(samples, work []prefillSample, ys []float64, rate float64) PrefillModel {
	work = append(work, samples...)
	slices.SortFunc(work, func(a, b prefillSample) int {
		switch {
		case a.tokens < b.tokens:
			return -1
		case a.tokens > b.tokens:
			return 1
		}
		return 0
	})
	third := len(work) / 3
	lx, ly := medians(work[:third], ys)
	rx, ry := medians(work[len(work)-third:], ys)
	if rx-lx >= prefillMinSpread && ry > ly {
		rate = (rx - lx) / (ry - ly)
	}
	rate = min(max(rate, prefillMinRate), prefillMaxRate)
	ys = ys[:0]
	for _, s := range work {
		ys = append(ys, s.secs-s.tokens/rate)
	}
	slices.Sort(ys)
	base := time.Duration(median(ys) * float64(time.Second))
	base = min(max(base, 0), prefillMaxBase)
	return PrefillModel{Base: base, TokensPerSec: rate}
}

// medians returns the median tokens and the median seconds of s (ys is
// scratch).
func medians(s []prefillSample, ys []float64) (x, y float64) {
	ys = ys[:0]
	for _, v := range s {
		ys = append(ys, v.tokens)
	}
	slices.Sort(ys)
	x = median(ys)
	ys = ys[:0]
	for _, v := range s {
		ys = append(ys, v.secs)
	}
	slices.Sort(ys)
	return x, median(ys)
}

// median of sorted v; NaN if empty.
func median(v []float64) float64 {
	n := len(v)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// PendingPrefill is the uncached prompt tokens of b's requests that were
// sent and have not had their first byte: prefill queued ahead of a new
// request. Any goroutine.
func (b *Backend) PendingPrefill() int64 { return b.prefill.pending.Load() }

// AddPendingPrefill adds n (negative: removes) to PendingPrefill. The
// router adds a request's predicted uncached tokens when it sends it and
// removes them on its first byte or failure, on every exit path. Any
// goroutine.
func (b *Backend) AddPendingPrefill(n int64) { b.prefill.pending.Add(n) }

// Footprint is the router's estimate of the prompt tokens b's KV cache
// keeps for prefixes in use: the sum, over the prefixes the router sent
// to b at least twice within the footprint window, of their longest
// prompt (shard/footprint.go keeps the table; the prefix policy reads
// the sum). Any goroutine.
func (b *Backend) Footprint() int64 { return b.footprint.Load() }

// AddFootprint adds n (negative: removes) to Footprint. Any goroutine.
func (b *Backend) AddFootprint(n int64) { b.footprint.Add(n) }

// Pinned is the router's estimate of the KV tokens b's engine keeps for
// the requests the router has in flight there (running or waiting): an
// engine admits a request only when all its blocks fit beside those
// (shard/footprint.go keeps the account; the prefix policy prices the
// wait for room with it). Any goroutine.
func (b *Backend) Pinned() int64 { return b.pinned.Load() }

// AddPinned adds n (negative: removes) to Pinned. Any goroutine.
func (b *Backend) AddPinned(n int64) { b.pinned.Add(n) }
