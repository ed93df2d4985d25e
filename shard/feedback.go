package shard

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// Feedback from the engine (issue 11). A routed chat or completions
// request asks its forward for the answer's usage object (Hooks.Usage:
// the non-streamed body, or a stream's usage chunk); Done reads
// usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens and
// compares them with the tree's prediction for the backend that answered
// (Decision.MatchedBlocks × BlockSize, capped at prompt_tokens):
//   - metrics of predicted and actual cached tokens, a histogram of the
//     error in blocks, and predicted × actual hit counts (precision =
//     hit/hit over predicted hit; recall = hit/hit over actual hit);
//   - a contradicted holder (predicted at least contradictMinBlocks, the
//     engine reports at most a contradictRatio-th of it) is demoted at once
//     to what the engine reports (tree.Demote on the owner loop): the
//     engine evicted what the tree believed it kept, so the tree's ages for
//     that backend are not to be trusted for this prefix;
//   - the backend's prefill model is fed ObserveTTFT(uncached, FirstData:
//     the first event of the stream, as its head comes at once) with
//     the engine's own uncached count (prompt_tokens − cached_tokens), or
//     the predicted one when the answer had no usage.

// Contradiction thresholds: predicted at least contradictMinBlocks blocks
// and the engine's cached blocks at most predicted / contradictRatio. vLLM
// recomputes at least the last token of a fully cached prompt (its
// cached_tokens is then a block short), and a prefix evicted in part is
// still worth most of its blocks: neither is a contradiction.
const (
	contradictMinBlocks = 4
	contradictRatio     = 4
)

// errorBuckets are the le bounds of saltus_route_cached_error_blocks:
// actual − predicted cached blocks. Negative: the tree over-promised.
var errorBuckets = [...]float64{-256, -64, -16, -4, -1, 0, 1, 4, 16, 64, 256}

// ttftBuckets are the le bounds of saltus_route_ttft_seconds, in seconds:
// saltus_backend_ttfb_seconds's (a cached prompt's first token in
// milliseconds, a long miss in seconds, a queue in minutes).
var ttftBuckets = [...]float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

func init() {
	promtext.Describe(map[string]string{
		"saltus_route_predicted_cached_tokens_total": "Prompt tokens the route table predicted the answering backend had cached (matched blocks × block size, capped at prompt_tokens), over answers whose usage reported cached_tokens.",
		"saltus_route_actual_cached_tokens_total":    "Prompt tokens the engines reported cached (usage.prompt_tokens_details.cached_tokens), over the same answers.",
		"saltus_route_prompt_tokens_total":           "Prompt tokens (usage.prompt_tokens) of the same answers: actual cached over these is the token hit ratio.",
		"saltus_route_ttft_seconds":                  "Time from sending a routed streamed chat or completion request to the first bytes of its 2xx answer's body (the engine's first event, after its prefill), last attempt, in seconds.",
		"saltus_route_cached_error_blocks":           "Per answer, the engine's cached blocks minus the route table's prediction, in blocks (negative: the table over-promised).",
		"saltus_route_cache_predictions_total":       "Answers by predicted (the table said the backend held at least a block) and actual (the engine reported at least a block cached) hit or miss: precision and recall of the prediction.",
		"saltus_route_usage_absent_total":            "Routed 2xx answers without a usable usage.prompt_tokens_details.cached_tokens (the prefill model then gets the predicted uncached count).",
		"saltus_route_contradicted_total":            "Answers whose engine reported far fewer cached blocks than predicted (at least 4 predicted, at most a quarter reported): the holder is demoted.",
		"saltus_route_demoted_total":                 "Route table holders removed because an engine contradicted them.",
		"saltus_route_pending_total":                 "Pending routes: the decided backend inserted as holder of the request's prefix when the decision was made.",
		"saltus_route_pending_failed_total":          "Pending routes whose attempt got no 2xx from the decided backend (failure, or a retry answered by another).",
		"saltus_route_pending_removed_total":         "Route table holders removed when a pending route's attempt failed.",
		"saltus_route_decode_untracked_total":        "Streamed answers not tracked among their backend's decoding requests (its table of 512 was full): the slot wait prices them as untracked.",
		"saltus_route_demote_dropped_total":          "Holder removals (failed pending routes, contradictions) lost because the owner shard's mailbox was full.",
	})
}

// feedbackMetrics are the counters of pending routes and engine feedback.
// Any goroutine (atomics: Done runs on loops too).
type feedbackMetrics struct {
	predicted, actual, prompt                      *metrics.Counter
	usageAbsent, contradicted, demoted             *metrics.Counter
	pendingInserted, pendingFailed, pendingRemoved *metrics.Counter
	demoteDropped                                  *metrics.Counter
	decodeUntracked                                *metrics.Counter       // decoding.go
	predictions                                    [2][2]*metrics.Counter // [predicted hit][actual hit]
	errBuckets                                     [len(errorBuckets) + 1]atomic.Uint64
	errSum                                         atomic.Int64 // blocks
	ttft                                           [len(ttftBuckets) + 1]atomic.Uint64
	ttftSum                                        atomic.Int64 // nanoseconds

	// observe is (*backend.Backend).ObserveTTFT; tests replace it
	// before the first request. Immutable after that.
	observe func(b *backend.Backend, uncached int, ttfb time.Duration)
}

func newFeedbackMetrics(set *metrics.Set) *feedbackMetrics {
	m := &feedbackMetrics{
		predicted:       set.NewCounter("saltus_route_predicted_cached_tokens_total"),
		actual:          set.NewCounter("saltus_route_actual_cached_tokens_total"),
		prompt:          set.NewCounter("saltus_route_prompt_tokens_total"),
		usageAbsent:     set.NewCounter("saltus_route_usage_absent_total"),
		contradicted:    set.NewCounter("saltus_route_contradicted_total"),
		demoted:         set.NewCounter("saltus_route_demoted_total"),
		pendingInserted: set.NewCounter("saltus_route_pending_total"),
		pendingFailed:   set.NewCounter("saltus_route_pending_failed_total"),
		pendingRemoved:  set.NewCounter("saltus_route_pending_removed_total"),
		demoteDropped:   set.NewCounter("saltus_route_demote_dropped_total"),
		decodeUntracked: set.NewCounter("saltus_route_decode_untracked_total"),
		observe:         (*backend.Backend).ObserveTTFT,
	}
	hm := [2]string{"miss", "hit"}
	for p := range 2 {
		for a := range 2 {
			m.predictions[p][a] = set.NewCounter(fmt.Sprintf("saltus_route_cache_predictions_total{predicted=%q,actual=%q}", hm[p], hm[a]))
		}
	}
	set.RegisterMetricsWriter(m.writeMetrics)
	return m
}

// observeError counts one actual − predicted difference, in blocks.
func (m *feedbackMetrics) observeError(blocks int) {
	i := 0
	for i < len(errorBuckets) && float64(blocks) > errorBuckets[i] {
		i++
	}
	m.errBuckets[i].Add(1)
	m.errSum.Add(int64(blocks))
}

// observeTTFT counts one time to first token.
func (m *feedbackMetrics) observeTTFT(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(ttftBuckets) && s > ttftBuckets[i] {
		i++
	}
	m.ttft[i].Add(1)
	m.ttftSum.Add(int64(d))
}

func (m *feedbackMetrics) writeMetrics(w io.Writer) {
	writeHistogram(w, "saltus_route_cached_error_blocks", errorBuckets[:], m.errBuckets[:], float64(m.errSum.Load()))
	writeHistogram(w, "saltus_route_ttft_seconds", ttftBuckets[:], m.ttft[:], time.Duration(m.ttftSum.Load()).Seconds())
}

// wantsUsage reports whether j's forward should parse the answer's usage:
// routed chat, completions and Anthropic messages requests (a Responses
// answer's usage has another shape; a pooling answer's tells no cached
// tokens). Any stage.
func (j *job) wantsUsage() bool {
	return j.learnsRoutes() && (j.route == routeChat || j.route == routeCompletions || j.route == routeMessages)
}

// feedback compares a 2xx answer's usage with the prediction, demotes a
// contradicted holder and feeds the backend's prefill model. Any
// goroutine (Done).
func (j *job) feedback(o backend.Outcome, u openai.UsageCounts) {
	if o.Status < 200 || o.Status >= 300 || o.Backend == nil || !j.wantsUsage() {
		return
	}
	m, bs := j.r.fb, j.r.cfg.BlockSize
	if o.FirstData > 0 {
		m.observeTTFT(o.FirstData)
	}
	predBlocks := 0 // what the tree said the answering backend held
	if j.fb.decided && o.Backend.ID == j.fb.backend {
		predBlocks = j.fb.matched
	}
	prompt, cached, hasCached := u.Prompt, u.Cached, u.HasCached
	if u.OK {
		j.dec.learn(o, u.Completion)
	} else {
		prompt = len(j.keys) * bs // a lower bound: full blocks only
	}
	predicted := min(predBlocks*bs, prompt)
	uncached := prompt - predicted
	if !hasCached {
		m.usageAbsent.Inc()
	} else {
		uncached = prompt - cached
		if j.fb.decided {
			m.predicted.Add(predicted)
			m.actual.Add(cached)
			m.prompt.Add(prompt)
			m.observeError(cached/bs - predicted/bs)
			m.predictions[b2i(predicted >= bs)][b2i(cached >= bs)].Inc()
			if pb, ab := predicted/bs, cached/bs; pb >= contradictMinBlocks && ab*contradictRatio <= pb {
				j.demote(o.Backend.ID, ab, m.demoted)
				m.contradicted.Inc()
			}
		}
	}
	if j.prefill.clean(o) { // streamed, first try, nothing pending ahead (decide.go: pendingPrefill)
		m.observe(o.Backend, uncached, o.FirstData) // the first event: the head comes before the prefill
	} else if j.prefill.queued(o) {
		o.Backend.ObserveQueued(uncached, j.prefill.ahead, o.FirstData)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
