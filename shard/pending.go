package shard

import (
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// Pending routes (issue 11). When the prefix policy decides on the owner
// loop (job.lookup), the chosen backend is inserted at once as a holder of
// the request's whole chain: the next lookups see it, so concurrent
// siblings of a new prefix follow the first one to the same engine instead
// of racing to different ones and each paying the miss.
//
// The pending holder is an ordinary Local holder learned at decision time;
// what makes it pending is that the job remembers it (routeFeedback) and
// the attempt settles it:
//   - the decided backend answers 2xx (FirstByte): confirmed where it is,
//     with no message to the owner (the learn is skipped: the decision
//     inserted the chain), so a remote request makes two cross-loop hops.
//   - another backend answers 2xx after a retry: one message to the owner
//     both learns it and removes the pending holder beyond what the decided
//     backend held before the decision (Decision.MatchedBlocks), as on a
//     failure.
//   - no 2xx at all (connect error, 4xx/5xx, timeout, client gone before
//     the head, proxy refused): Done removes the pending holder beyond
//     MatchedBlocks with tree.Demote, posted to the owner loop (one message,
//     only on this path); a full mailbox loses it, counted, and the holder
//     then ages out by the TTL like any other route.
//
// The removal is conservative (tree.Demote drops a node that straddles the
// depth): after a pending insert the old depth is a node end of this chain
// (Insert splits there), so what the backend held before is kept exactly
// unless the tree changed shape meanwhile. A sibling that followed the
// pending holder and succeeded does not protect it: the failed attempt's
// removal wins, and the sibling's own learn (if not skipped as fresh)
// restores it.

// routeFeedback is what a job remembers of its tree decision for pending
// routes and engine feedback. Written on the owner loop by pend before the
// forward; then read, and confirmed written, only by the forward's hooks
// (FirstByte and Done run on the client connection's loop).
type routeFeedback struct {
	decided   bool // the owner loop decided with the tree; the fields below are set
	backend   int  // policy.Decision.Backend
	matched   int  // policy.Decision.MatchedBlocks: what backend held before
	total     int  // policy.Decision.TotalBlocks
	pending   bool // a pending holder of the whole chain was inserted for backend
	confirmed bool // backend's 2xx head arrived
	removed   bool // the learn of another backend's 2xx removed the pending holder
}

// learnsRoutes reports whether j's answer teaches the tree: the conditions
// of job.finish's learn. Any stage.
func (j *job) learnsRoutes() bool {
	return j.r.pol.Kind == policy.Prefix && len(j.keys) > 0 && j.d.PreviousResponseID == "" && routedByPrefix(j.route)
}

// pend records d for feedback and inserts its backend as a pending holder
// of j's chain. On the owner loop, in lookup, with the Match's now.
func (j *job) pend(d policy.Decision, now int64) {
	if j.explain != nil || d.Backend < 0 || !j.learnsRoutes() {
		return
	}
	j.fb = routeFeedback{decided: true, backend: d.Backend, matched: d.MatchedBlocks, total: d.TotalBlocks}
	if d.MatchedBlocks >= len(j.keys) {
		return // it holds the whole chain already: nothing would be pending
	}
	r := j.r
	sh := r.shards[j.owner]
	if err := sh.tree.Insert(j.keys, j.bounds, d.Backend, tree.Local, now); err != nil {
		r.m.learnErrors.Inc() // beyond tree.Config.MaxBackends: as learn does
		return
	}
	sh.known[d.Backend] = true
	r.share(wire.OpInsert, j.keys, j.bounds, d.Backend, 0)
	j.fb.pending = true
	r.fb.pendingInserted.Inc()
	sh.publish()
}

// confirm marks the pending holder confirmed when its backend answered
// 2xx. Called from learnFrom (FirstByte's 2xx path). Any goroutine.
func (j *job) confirm(backendID int) {
	if j.fb.pending && backendID == j.fb.backend {
		j.fb.confirmed = true
	}
}

// settle ends j's pending route and reads the engine's feedback: called by
// Hooks.Events.Done with the outcome, on the client connection's loop.
func (j *job) settle(o backend.Outcome, u openai.UsageCounts) {
	if j.fb.pending && !j.fb.confirmed && !j.fb.removed {
		j.r.fb.pendingFailed.Inc()
		j.demote(j.fb.backend, j.fb.matched, j.r.fb.pendingRemoved)
	}
	if o.Backend != nil && o.Err == nil && o.Retries == 0 && o.Status >= 200 && o.Status < 300 {
		o.Backend.ObserveService(j.slotHold(o)) // how long an answer holds a slot (policy/cost.go's slot wait)
	}
	j.feedback(o, u)
}

// slotHold is how long o's request held a running slot at its engine:
// from the start of its prefill to its last byte. An engine that runs its
// slots full keeps a new request waiting, with no slot, until one frees;
// that wait is in the first token's time, not in the slot's. For a
// streamed answer it is the whole time less the first token's, plus the
// prefill the request needed (the backend's prefill model for the
// uncached tokens predicted, at most the first token's time); an answer
// read whole tells no first token, and its whole time counts. Counting
// the waits (as this did first) made a saturated engine's slot wait
// grow with its own queue: on the Mooncake conversation trace at ×16
// with 8 llm-d-inference-sim engines, service times of 10-12 s for
// answers that ran 2 s, and slot waits priced at 60-85 s where requests
// waited 15 s, by which the choice followed that noise rather than the
// queues (docs/BENCHMARKS.md).
func (j *job) slotHold(o backend.Outcome) time.Duration {
	if o.FirstData <= 0 || o.FirstData > o.Total {
		return o.Total
	}
	m := o.Backend.Prefill()
	uncached := 0
	if j.prefill.b == o.Backend {
		uncached = int(j.prefill.tokens)
	}
	prefill := m.Base + time.Duration(float64(uncached)/m.TokensPerSec*float64(time.Second))
	return o.Total - o.FirstData + min(prefill, o.FirstData)
}

// demote removes backend's holder from j's chain beyond keep, on the owner
// loop (posted), adding the holders removed to removed. A full mailbox
// loses it, counted. Any goroutine.
func (j *job) demote(backendID, keep int, removed *metrics.Counter) {
	r := j.r
	sh := r.shards[j.owner]
	keys := j.keys
	if !r.postTo(j.owner, func() {
		removed.Add(sh.tree.Demote(keys, backendID, keep, r.now()))
		r.share(wire.OpDemote, keys, nil, backendID, keep)
		sh.publish()
	}) {
		r.fb.demoteDropped.Inc()
	}
}
