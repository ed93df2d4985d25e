package tokenpool

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_tokenizer_requests_total":        "Tokenize calls: requests whose prompt went to the tokenizer pool.",
		"saltus_tokenizer_budget_exceeded_total": "Requests whose text went past the token budget (--token-budget): the rest is keyed as 64-byte blocks.",
		"saltus_tokenizer_encoded_bytes_total":   "Bytes of text tokenized, by where: worker (the shards' tokenizer goroutines) or local (on the loop, small segments only).",
		"saltus_tokenizer_cache_hits_total":      "Text segments found in their shard's segment cache.",
		"saltus_tokenizer_cache_misses_total":    "Text segments not in their shard's segment cache (tokenized by a worker or locally).",
		"saltus_tokenizer_cache_evictions_total": "Segments evicted from the segment caches (LRU under the byte bound).",
		"saltus_tokenizer_cache_too_large_total": "Segments tokenized but not cached because they were over the size cap.",
		"saltus_tokenizer_cache_entries":         "Segments held by the segment caches, summed over shards.",
		"saltus_tokenizer_cache_bytes":           "Bytes the segment caches account for (text and ids), summed over shards.",
		"saltus_tokenizer_jobs_total":            "Tokenization jobs by where their misses ran (own: the shard's worker, cross: another shard's worker, local: on the loop under the 1-permit semaphore).",
		"saltus_tokenizer_ring_full_total":       "Job pushes refused by a full worker ring (one per shard tried).",
		"saltus_tokenizer_inflight_full_total":   "Misses that skipped the rings because their shard had its maximum of jobs out.",
		"saltus_tokenizer_bailouts_total":        "Requests keyed by byte blocks instead of token ids, by reason.",
		"saltus_tokenizer_shutdown_drops_total":  "Queued jobs completed without ids because the pool closed.",
		"saltus_tokenizer_latency_seconds":       "Time from a Tokenize call with misses to its completion, in seconds.",
	})
}

// Reason says why a request has no token ids: the caller keys it with
// tree.ByteBlockKeys instead.
type Reason uint8

const (
	// ReasonNone: the ids are valid.
	ReasonNone Reason = iota
	// ReasonNoTokenizer: the pool runs in byte-block mode.
	ReasonNoTokenizer
	// ReasonBusy: every ring was full (or the shard had MaxInFlight jobs
	// out) and another loop held the local permit.
	ReasonBusy
	// ReasonTooLong: every ring was full and the missing text exceeded
	// LocalMaxBytes, too long to tokenize on the loop.
	ReasonTooLong
	// ReasonShutdown: the pool was closed before the job ran.
	ReasonShutdown
	// ReasonTooLarge: the missing text exceeded MaxJobBytes.
	ReasonTooLarge
	numReasons
)

var reasonNames = [numReasons]string{"none", "no_tokenizer", "busy", "too_long", "shutdown", "too_large"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", r)
}

// Path says how a request's missing segments were tokenized.
type Path uint8

const (
	// PathNone: not tokenized (a bail-out).
	PathNone Path = iota
	// PathCache: every segment was in the shard's cache.
	PathCache
	// PathOwn: the shard's own worker.
	PathOwn
	// PathCross: another shard's worker.
	PathCross
	// PathLocal: the event loop, under the local permit.
	PathLocal
	numPaths
)

var pathNames = [numPaths]string{"none", "cache", "own", "cross", "local"}

func (p Path) String() string {
	if p < numPaths {
		return pathNames[p]
	}
	return fmt.Sprintf("Path(%d)", p)
}

// Stats is a snapshot of a shard's counters, or their sum over a pool.
// Counters count since New; CacheEntries and CacheBytes are levels.
type Stats struct {
	Requests uint64 // Tokenize calls
	// Segment cache, per segment.
	CacheHits, CacheMisses, CacheEvictions, CacheTooLarge uint64
	CacheEntries, CacheBytes                              uint64
	// Jobs by where their misses were tokenized.
	OwnJobs   uint64 // sent to the shard's own worker
	CrossJobs uint64 // sent to another shard's worker
	Local     uint64 // tokenized on the loop under the local permit
	// RingFull counts pushes refused by a full ring (a request that found
	// every ring full counts one per shard).
	RingFull uint64
	// InFlightFull counts misses that skipped the rings because the shard
	// had MaxInFlight jobs out.
	InFlightFull uint64
	// Bailouts counts results without ids, by Reason (index ReasonNone is
	// unused).
	Bailouts [numReasons]uint64
	// ShutdownDrops counts queued jobs completed with ReasonShutdown
	// (also counted in Bailouts[ReasonShutdown]).
	ShutdownDrops uint64
	// WorkerJobs counts jobs this shard's worker encoded, from any shard;
	// WorkerBytes the bytes of text it encoded for them.
	WorkerJobs, WorkerBytes uint64
	// LocalBytes counts the bytes of text the loop encoded itself (Local).
	LocalBytes uint64
	// BudgetCuts counts requests over Config.TokenBudget, tokenized up to
	// a cut and keyed as byte blocks after it.
	BudgetCuts uint64
	// Latency is the histogram saltus_tokenizer_latency_seconds.
	Latency LatencySnapshot
}

// latencyBuckets are the upper bounds of the latency histogram.
var latencyBuckets = [...]time.Duration{
	100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
}

// LatencySnapshot is the latency histogram: the time from Tokenize to the
// ids of a request with a miss, whether a worker or the loop encoded them
// (cache hits, sub-microsecond, and bail-outs are not observed). Counts[i]
// holds the observations in bucket i, not cumulative; the upper bounds are
// 100 µs, 500 µs, 1 ms, 5 ms, 10 ms, 50 ms, 100 ms, and the last bucket
// holds those above 100 ms.
type LatencySnapshot struct {
	Counts [len(latencyBuckets) + 1]uint64
	Sum    time.Duration
}

// Count returns the number of observations.
func (l LatencySnapshot) Count() (n uint64) {
	for _, c := range l.Counts {
		n += c
	}
	return n
}

// histogram is a fixed-bucket histogram of atomics, lock-free for the
// loop. Why not metrics.PrometheusHistogram (VictoriaMetrics/metrics
// v1.45.0, which has explicit buckets through NewPrometheusHistogramExt):
// its Update takes a sync.Mutex, which its exporter also holds while it
// formats every bucket line, and an event loop must never wait on a mutex
// (DESIGN.md § Shards). The Set still exports this one, through a metrics writer.
type histogram struct {
	counts [len(latencyBuckets) + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(latencyBuckets) && d > latencyBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

func (h *histogram) snapshot() (s LatencySnapshot) {
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// shardStats are a shard's counters. The loop writes all of them except
// workerJobs (its worker) and shutdownDrops (any worker); any goroutine
// reads them.
type shardStats struct {
	requests                                              atomic.Uint64
	cacheHits, cacheMisses, cacheEvictions, cacheTooLarge atomic.Uint64
	cacheEntries, cacheBytes                              atomic.Uint64
	ownJobs, crossJobs, local                             atomic.Uint64
	ringFull, inFlightFull                                atomic.Uint64
	localBytes, budgetCuts                                atomic.Uint64
	bailouts                                              [numReasons]atomic.Uint64
	_                                                     [64]byte // the worker-written counters on their own line
	shutdownDrops                                         atomic.Uint64
	workerJobs, workerBytes                               atomic.Uint64
	lat                                                   histogram
}

func (s *shardStats) snapshot() (o Stats) {
	o.Requests = s.requests.Load()
	o.CacheHits, o.CacheMisses = s.cacheHits.Load(), s.cacheMisses.Load()
	o.CacheEvictions, o.CacheTooLarge = s.cacheEvictions.Load(), s.cacheTooLarge.Load()
	o.CacheEntries, o.CacheBytes = s.cacheEntries.Load(), s.cacheBytes.Load()
	o.OwnJobs, o.CrossJobs, o.Local = s.ownJobs.Load(), s.crossJobs.Load(), s.local.Load()
	o.RingFull, o.InFlightFull = s.ringFull.Load(), s.inFlightFull.Load()
	for i := range s.bailouts {
		o.Bailouts[i] = s.bailouts[i].Load()
	}
	o.ShutdownDrops, o.WorkerJobs = s.shutdownDrops.Load(), s.workerJobs.Load()
	o.WorkerBytes, o.LocalBytes = s.workerBytes.Load(), s.localBytes.Load()
	o.BudgetCuts = s.budgetCuts.Load()
	o.Latency = s.lat.snapshot()
	return o
}

func (o *Stats) add(s Stats) {
	o.Requests += s.Requests
	o.CacheHits += s.CacheHits
	o.CacheMisses += s.CacheMisses
	o.CacheEvictions += s.CacheEvictions
	o.CacheTooLarge += s.CacheTooLarge
	o.CacheEntries += s.CacheEntries
	o.CacheBytes += s.CacheBytes
	o.OwnJobs += s.OwnJobs
	o.CrossJobs += s.CrossJobs
	o.Local += s.Local
	o.RingFull += s.RingFull
	o.InFlightFull += s.InFlightFull
	for i := range o.Bailouts {
		o.Bailouts[i] += s.Bailouts[i]
	}
	o.ShutdownDrops += s.ShutdownDrops
	o.WorkerJobs += s.WorkerJobs
	o.WorkerBytes += s.WorkerBytes
	o.LocalBytes += s.LocalBytes
	o.BudgetCuts += s.BudgetCuts
	for i := range o.Latency.Counts {
		o.Latency.Counts[i] += s.Latency.Counts[i]
	}
	o.Latency.Sum += s.Latency.Sum
}

// writeMetrics writes the pool's counters, summed over shards, in the
// Prometheus text format; registered with the metrics.Set given to New.
func (p *Pool) writeMetrics(w io.Writer) {
	s := p.Stats()
	counter := func(name string, v uint64) {
		metrics.WriteMetadataIfNeeded(w, name, "counter")
		fmt.Fprintf(w, "%s %d\n", name, v)
	}
	gauge := func(name string, v uint64) {
		metrics.WriteMetadataIfNeeded(w, name, "gauge")
		fmt.Fprintf(w, "%s %d\n", name, v)
	}
	counter("saltus_tokenizer_requests_total", s.Requests)
	counter("saltus_tokenizer_cache_hits_total", s.CacheHits)
	counter("saltus_tokenizer_cache_misses_total", s.CacheMisses)
	counter("saltus_tokenizer_cache_evictions_total", s.CacheEvictions)
	counter("saltus_tokenizer_cache_too_large_total", s.CacheTooLarge)
	gauge("saltus_tokenizer_cache_entries", s.CacheEntries)
	gauge("saltus_tokenizer_cache_bytes", s.CacheBytes)
	metrics.WriteMetadataIfNeeded(w, "saltus_tokenizer_jobs_total", "counter")
	fmt.Fprintf(w, "saltus_tokenizer_jobs_total{path=%q} %d\n", PathOwn.String(), s.OwnJobs)
	fmt.Fprintf(w, "saltus_tokenizer_jobs_total{path=%q} %d\n", PathCross.String(), s.CrossJobs)
	fmt.Fprintf(w, "saltus_tokenizer_jobs_total{path=%q} %d\n", PathLocal.String(), s.Local)
	counter("saltus_tokenizer_ring_full_total", s.RingFull)
	counter("saltus_tokenizer_inflight_full_total", s.InFlightFull)
	metrics.WriteMetadataIfNeeded(w, "saltus_tokenizer_bailouts_total", "counter")
	for r := ReasonNone + 1; r < numReasons; r++ {
		fmt.Fprintf(w, "saltus_tokenizer_bailouts_total{reason=%q} %d\n", r.String(), s.Bailouts[r])
	}
	counter("saltus_tokenizer_shutdown_drops_total", s.ShutdownDrops)
	counter("saltus_tokenizer_budget_exceeded_total", s.BudgetCuts)
	metrics.WriteMetadataIfNeeded(w, "saltus_tokenizer_encoded_bytes_total", "counter")
	fmt.Fprintf(w, "saltus_tokenizer_encoded_bytes_total{path=%q} %d\n", "worker", s.WorkerBytes)
	fmt.Fprintf(w, "saltus_tokenizer_encoded_bytes_total{path=%q} %d\n", PathLocal.String(), s.LocalBytes)
	const lat = "saltus_tokenizer_latency_seconds"
	metrics.WriteMetadataIfNeeded(w, lat, "histogram")
	var cum uint64
	for i, ub := range latencyBuckets {
		cum += s.Latency.Counts[i]
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", lat, ub.Seconds(), cum)
	}
	cum += s.Latency.Counts[len(latencyBuckets)]
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", lat, cum)
	fmt.Fprintf(w, "%s_sum %g\n", lat, s.Latency.Sum.Seconds())
	fmt.Fprintf(w, "%s_count %d\n", lat, cum)
}
