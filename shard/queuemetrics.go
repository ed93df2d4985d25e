package shard

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/upstream/queue"
)

// Per-pool metrics of the gateway queues and of saltus's own refusals
// (issue 30, items 5 and 6): each pool's queue depth by priority band, the
// wait of the requests it dispatched or expired, what became of the
// requests it took, and the requests saltus answered itself, by reason.
// The counts are atomics in one record per pool (poolStats): the loops
// update them (a loop never waits on a mutex: no metrics.Histogram, no
// GetOrCreate on a loop, rule R10) and writeMetrics writes them out.
//
// The model label is bounded by the fleet: a model some backend lists
// (fleet.Index) has its own series, up to maxMetricPools of them; every
// other name (a model no pool serves, one sent to the backends whose
// models are not known, pools past the bound, and every model without a
// fleet) is counted under model="(other)". A pool's record is never
// dropped, so its counters stay monotonic when it comes back.

// maxMetricPools bounds the pools with series of their own: each has
// 3 depth, 6 queue result and 7 refusal series, and up to 3 wait
// histograms of 21 lines; 100 pools write at most ~8,000 lines. A fleet
// with more model names (many LoRA adapters) counts the rest under
// OtherModel, and saltus_queue_pools_folded_total says how often.
const maxMetricPools = 100

// OtherModel is the model label (and QueueStatus's name) of what no pool
// of its own counts. The parentheses keep it apart from any model name an
// engine lists in practice.
const OtherModel = "(other)"

// Results of a queued request, the result label of
// saltus_queue_requests_total.
const (
	resQueued     = iota // pushed into its pool's queue
	resDispatched        // popped: a slot freed
	resFull              // refused: the queue held Queue.MaxEntries
	resExpired           // refused: waited Queue.MaxWait
	resGone              // its client left while queued
	resShutdown          // answered 503 shutting_down: saltus stops
	numQueueResults
)

var queueResultNames = [numQueueResults]string{"queued", "dispatched", "full", "expired", "gone", "shutdown"}

// waitBuckets are the le bounds of saltus_queue_wait_seconds: the TTFT
// histogram's (saltus_route_ttft_seconds), so a queue's wait and the first
// token it delays read on one scale, from a slot freed within a
// millisecond to a wait of minutes (Queue.MaxWait's default is 60 s).
var waitBuckets = ttftBuckets

// poolStats are one pool's (or OtherModel's) counts. Any goroutine:
// atomics only.
type poolStats struct {
	model string // the model label's value
	label string // promtext.QuoteLabel(model), in its quotes

	// depth: requests waiting in the pool's queue, by band; moved by the
	// gate's loop on every push, pop, removal and expiry.
	depth   [queue.NumBands]atomic.Int64
	wait    [queue.NumBands][len(waitBuckets) + 1]atomic.Uint64
	waitSum [queue.NumBands]atomic.Int64 // nanoseconds
	results [numQueueResults]atomic.Uint64
	refused [numRefused]atomic.Uint64
	// toHolder: dispatched with a slot free on the backend of its hint
	// (gate.go: dispatch).
	toHolder atomic.Uint64
	// transit: requests dispatched from the pool's queue and not decided
	// yet (gate.go: dispatch, arrived). Their slots are taken: until a
	// request is decided, no backend counts it in flight.
	transit atomic.Int64
}

// observeWait counts one request of band b that left the queue after
// waiting d (dispatched or expired).
func (s *poolStats) observeWait(b queue.Band, d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(waitBuckets) && sec > waitBuckets[i] {
		i++
	}
	s.wait[b][i].Add(1)
	s.waitSum[b].Add(int64(d))
}

// poolMetrics holds the records by model.
type poolMetrics struct {
	// pools is replaced whole (copy on write) when a pool gets its
	// record: readers on the loops never wait. At most maxMetricPools.
	pools  atomic.Pointer[map[string]*poolStats]
	other  *poolStats
	folded *metrics.Counter
}

func newPoolMetrics(set *metrics.Set) *poolMetrics {
	pm := &poolMetrics{
		other:  &poolStats{model: OtherModel, label: promtext.QuoteLabel(OtherModel)},
		folded: set.NewCounter("saltus_queue_pools_folded_total"),
	}
	pm.pools.Store(&map[string]*poolStats{})
	return pm
}

// statsFor returns the record that counts a request for model: its
// pool's when the fleet lists the model, else OtherModel's. Any
// goroutine; lock-free (a new pool's record is published by
// compare-and-swap).
func (r *Router) statsFor(model string) *poolStats {
	pm := r.pm
	if r.fleet == nil || model == "" || r.fleet.Index().Lookup(model) == nil {
		return pm.other
	}
	for {
		cur := pm.pools.Load()
		if s := (*cur)[model]; s != nil {
			return s
		}
		if len(*cur) >= maxMetricPools {
			pm.folded.Inc()
			return pm.other
		}
		next := make(map[string]*poolStats, len(*cur)+1)
		for k, v := range *cur {
			next[k] = v
		}
		s := &poolStats{model: model, label: promtext.QuoteLabel(model)}
		next[model] = s
		if pm.pools.CompareAndSwap(cur, &next) {
			return s
		}
	}
}

// refusedFor counts a refusal of saltus's own for model, by reason
// (refusedNames). Any goroutine.
func (r *Router) refusedFor(model string, why int) {
	r.statsFor(model).refused[why].Add(1)
}

// records returns every record, by model, OtherModel's last.
func (pm *poolMetrics) records() []*poolStats {
	cur := *pm.pools.Load()
	out := make([]*poolStats, 0, len(cur)+1)
	for _, s := range cur {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *poolStats) int { return cmp.Compare(a.model, b.model) })
	return append(out, pm.other)
}

// writeMetrics writes the per-pool families (Prometheus text), each
// family's lines together.
func (pm *poolMetrics) writeMetrics(w io.Writer) {
	recs := pm.records()
	metrics.WriteMetadataIfNeeded(w, "saltus_queue_depth", "gauge")
	for _, s := range recs {
		for b := range queue.NumBands {
			fmt.Fprintf(w, "saltus_queue_depth{model=%s,class=%q} %d\n", s.label, b.String(), max(s.depth[b].Load(), 0))
		}
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_queue_wait_seconds", "histogram")
	for _, s := range recs {
		for b := range queue.NumBands {
			writeWait(w, s, b)
		}
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_queue_requests_total", "counter")
	for _, s := range recs {
		for i, n := range queueResultNames {
			fmt.Fprintf(w, "saltus_queue_requests_total{model=%s,result=%q} %d\n", s.label, n, s.results[i].Load())
		}
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_queue_dispatched_to_holder_total", "counter")
	for _, s := range recs {
		fmt.Fprintf(w, "saltus_queue_dispatched_to_holder_total{model=%s} %d\n", s.label, s.toHolder.Load())
	}
	metrics.WriteMetadataIfNeeded(w, "saltus_pool_refused_total", "counter")
	for _, s := range recs {
		for i, n := range refusedNames {
			fmt.Fprintf(w, "saltus_pool_refused_total{model=%s,reason=%q} %d\n", s.label, n, s.refused[i].Load())
		}
	}
}

// writeWait writes one wait histogram of s, band b; nothing before its
// first observation (3 bands × 21 lines per pool otherwise).
func writeWait(w io.Writer, s *poolStats, b queue.Band) {
	var counts [len(waitBuckets) + 1]uint64
	var total uint64
	for i := range counts {
		counts[i] = s.wait[b][i].Load()
		total += counts[i]
	}
	if total == 0 {
		return
	}
	labels := "model=" + s.label + `,class="` + b.String() + `"`
	var cum uint64
	for i, ub := range waitBuckets {
		cum += counts[i]
		fmt.Fprintf(w, "saltus_queue_wait_seconds_bucket{%s,le=\"%g\"} %d\n", labels, ub, cum)
	}
	cum += counts[len(waitBuckets)]
	fmt.Fprintf(w, "saltus_queue_wait_seconds_bucket{%s,le=\"+Inf\"} %d\n", labels, cum)
	fmt.Fprintf(w, "saltus_queue_wait_seconds_sum{%s} %g\n", labels, time.Duration(s.waitSum[b].Load()).Seconds())
	fmt.Fprintf(w, "saltus_queue_wait_seconds_count{%s} %d\n", labels, cum)
}

// QueueStatus is one pool's gateway queue, as GET /admin/pools shows it.
type QueueStatus struct {
	// Depth: requests waiting now, by band (queue.High, Normal, Low).
	Depth [queue.NumBands]int64
	// OldestWait: how long the request queued longest has waited, as the
	// queue's loop last published it (each 50 ms tick); 0 when empty.
	OldestWait time.Duration
	// Results: since start, by result (saltus_queue_requests_total):
	// Queued, Dispatched, Full, Expired, Gone, Shutdown.
	Queued, Dispatched, Full, Expired, Gone, Shutdown uint64
}

// QueueStatus returns model's queue (its pool's record; OtherModel for
// what no pool of its own counts). ok is false when nothing was ever
// counted for model. Any goroutine.
func (r *Router) QueueStatus(model string) (st QueueStatus, ok bool) {
	s := r.pm.other
	if model != OtherModel {
		if s = (*r.pm.pools.Load())[model]; s == nil {
			return st, false
		}
	}
	n := int64(0)
	for b := range queue.NumBands {
		st.Depth[b] = max(s.depth[b].Load(), 0)
		n += st.Depth[b]
	}
	res := func(i int) uint64 { return s.results[i].Load() }
	st.Queued, st.Dispatched, st.Full, st.Expired, st.Gone, st.Shutdown =
		res(resQueued), res(resDispatched), res(resFull), res(resExpired), res(resGone), res(resShutdown)
	if n > 0 {
		for _, sh := range r.shards {
			for _, g := range sh.gateSnaps() {
				if g.stats == s {
					st.OldestWait = max(st.OldestWait, g.oldest)
				}
			}
		}
	}
	return st, true
}

// gateSnap is one gate as its loop last published it (tickGates).
type gateSnap struct {
	stats  *poolStats
	oldest time.Duration // its queue's Oldest
}

// gateSnaps returns sh's gates as its loop last published them. Any
// goroutine.
func (sh *Shard) gateSnaps() []gateSnap {
	if p := sh.queues.Load(); p != nil {
		return *p
	}
	return nil
}
