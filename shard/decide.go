package shard

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// The glue between the Router and package policy: the policy's inputs
// read from the backends (job.go's views, costInputs), the session pin and the
// footprints' home set per decision (decideWith), and what a Decision
// leaves behind: the route receipt and the pending prefill.

// checkCostConfig validates the prefix policy's fields of c: the
// policy's knobs (policy.Config.Validate) and the footprints' and
// sessions' bounds, which are the Router's.
func checkCostConfig(c Config) []error {
	var errs []error
	if err := c.policy().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.FootprintWindow <= 0 {
		errs = append(errs, fmt.Errorf("shard: FootprintWindow must be positive, got %v", c.FootprintWindow))
	}
	if c.Footprints <= 0 {
		errs = append(errs, fmt.Errorf("shard: Footprints must be positive, got %d", c.Footprints))
	}
	if c.Sessions <= 0 {
		errs = append(errs, fmt.Errorf("shard: Sessions must be positive, got %d", c.Sessions))
	}
	if c.SessionTTL <= 0 {
		errs = append(errs, fmt.Errorf("shard: SessionTTL must be positive, got %v", c.SessionTTL))
	}
	return errs
}

// policy is c's routing policy and its knobs. An unknown Policy is
// prefix here; Validate reports it.
func (c Config) policy() policy.Config {
	kind, _ := policy.Parse(c.Policy)
	return policy.Config{Kind: kind, LoadFactor: c.LoadFactor, LoadFloor: int64(c.LoadFloor), MaxCandidates: c.MaxCandidates,
		BlockSize: c.BlockSize, Concurrency: int64(c.Concurrency), QueueWait: c.QueueWait.Seconds(),
		LoadTokens: float64(c.LoadTokens), LoadSlack: c.LoadSlack, KVTokens: float64(c.KVTokens),
		Bridge: int64(c.KVEventsBridge)}
}

// costInputs reads b's prefix-policy inputs into v, once per decision.
func costInputs(v *policy.View, b *backend.Backend) {
	m := b.Prefill()
	v.Base, v.Rate = m.Base.Seconds(), m.TokensPerSec
	peer := b.PeerLoad() // the cluster's load, as the in-flight count (liveState)
	v.Pending = b.PendingPrefill() + peer.Prefill
	v.QueueOff = 1 - b.QueueFactor()
	v.Footprint, v.Pinned = max(b.Footprint(), peer.Footprint), max(b.Pinned(), peer.Pinned)
	v.Slots, v.Service = b.Slots(), b.Service().Seconds()
	v.Decoding = b // read only when its slots are full
	if e, ok := b.Engine(); ok {
		v.Engine, v.Waiting, v.Running, v.KVUsage, v.KVCap = true, e.Waiting, e.Running, e.KVUsage, e.KVTokens
	}
}

// sessionOf is req's Config.SessionHeader value, copied (the request's
// buffers are reused); "" if the header is off or absent.
func (r *Router) sessionOf(req *reactor.Request) string {
	if r.cfg.SessionHeader == "" || r.pol.Kind != policy.Prefix {
		return ""
	}
	return strings.Clone(req.HeaderValue(r.cfg.SessionHeader))
}

// decideWith decides j on sh's loop with sh's views and scratch: body_hash
// with the body, the others through policy.Decide, the prefix policy with the
// session's pin. A session is (re)pinned to the backend decided. The
// session table is the deciding shard's (the keys' owner, or the loop
// deciding without the tree): the requests of a conversation share their
// first block, so they meet on one shard; one that does not is pinned
// separately on each shard it meets, each bounded. Loop only.
func (j *job) decideWith(sh *Shard, hits []tree.Hit, useTree bool) policy.Decision {
	r := j.r
	if r.pol.Kind == policy.BodyHash {
		return policy.DecideBodyHash(*r.tuned.Load(), sh.views, j.body(), len(j.keys), &sh.sc)
	}
	sess := j.session != "" && sh.sess != nil
	now := r.now()
	sh.sc.Pin, sh.sc.Explain, sh.sc.Home, sh.sc.Now = -1, j.explain != nil, -1, now
	if hits != nil || useTree {
		sh.sc.Home = sh.foot.scan(j.keys, sh.views, now)
	}
	if sess {
		if id, ok := sh.sess.lookup(j.session, now); ok {
			sh.sc.Pin = id
		}
	}
	d := policy.Decide(*r.tuned.Load(), sh.views, hits, j.keys, useTree, &sh.sc)
	sh.sc.Pin, sh.sc.Explain, sh.sc.Home = -1, false, -1
	if sess && d.Backend >= 0 && j.explain == nil {
		sh.sess.insert(j.session, d.Backend, now)
	}
	return d
}

// body is the request's body (Explain's when explaining).
func (j *job) body() []byte {
	if j.req != nil {
		return j.req.Body
	}
	return j.rawBody
}

// appendReceipt appends the prefix policy's winner and runner-up, by
// name, with their estimates to an X-Saltus-Route value: " backend-2=35ms
// backend-5=410ms" (one decimal below 10 ms). Nothing for the other
// policies.
func appendReceipt(dst []byte, d policy.Decision, snap []*backend.Backend) []byte {
	if d.EstMS <= 0 {
		return dst
	}
	dst = appendCost(dst, d.Backend, d.EstMS, snap)
	if d.RunnerUp >= 0 {
		dst = appendCost(dst, d.RunnerUp, d.RunnerUpMS, snap)
	}
	return dst
}

func appendCost(dst []byte, id int, ms float64, snap []*backend.Backend) []byte {
	dst = append(dst, ' ')
	if i := indexOfBackend(snap, id); i >= 0 && snap[i].Name != "" {
		dst = append(dst, snap[i].Name...)
	} else {
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	dst = append(dst, '=')
	return append(appendMS(dst, ms), "ms"...)
}

// appendMS appends ms rounded to a whole number, or to one decimal below
// 10, by integer formatting (AppendFloat cost ~100 ns a number, two per
// request); a value out of int64's range as AppendFloat writes it.
func appendMS(dst []byte, ms float64) []byte {
	if !(ms >= 0 && ms < 1e15) { // NaN too
		return strconv.AppendFloat(dst, ms, 'f', 0, 64)
	}
	if ms >= 10 {
		return strconv.AppendInt(dst, int64(math.Round(ms)), 10)
	}
	t := int64(math.Round(ms * 10)) // tenths
	dst = strconv.AppendInt(dst, t/10, 10)
	return append(dst, '.', byte('0'+t%10))
}

// pendingPrefill is a forwarded streamed request's share of its backend's
// PendingPrefill (a non-streamed answer's head comes only when its
// generation ends, so its first byte says nothing of its prefill: it is
// neither counted pending nor a sample of the fit; its load shows in the
// in-flight count): the predicted uncached tokens, added when it is sent
// (add), removed at its first event (release, from Hooks.Events.FirstData: a
// stream's head comes before its prefill) or at
// its end without one (done, from Hooks.Events.Done: a failure, a refusal, a
// timeout), whichever comes first; FirstByte and Done run in order on
// one goroutine. The prefill model learns from one kind of sample: a 2xx
// answered by the backend predicted, first try, sent when no prefill was
// pending ahead of it there (its TTFB is then its own prefill, not a
// queue's: a fit on queued samples learns a slow rate, which makes every
// backend look queueing); job.feedback feeds it (clean), with the
// engine's own uncached count when the answer's usage has one.
type pendingPrefill struct {
	b      *backend.Backend // nil: nothing added, or released
	tokens int64            // the request's predicted uncached tokens
	ahead  int64            // b's pending prefill when it was sent
	held   bool             // tokens are still in b's PendingPrefill
	// slot: b had a free running slot when it was sent (its learned
	// limit above its in-flight count, or no limit learned). Only such
	// requests teach the queue factor (queued): one that waited for a
	// slot waited for an answer to end, which slot(b) prices; at
	// saturation that wait grows with the prefill pending, and the factor
	// learned from it counted the wait twice (Mooncake ×16:
	// docs/BENCHMARKS.md).
	slot bool
}

func (p *pendingPrefill) add(d policy.Decision, snap []*backend.Backend, blockSize int) {
	i := indexOfBackend(snap, d.Backend)
	if i < 0 {
		return
	}
	p.b = snap[i]
	p.tokens = int64((d.TotalBlocks - d.MatchedBlocks) * blockSize)
	p.ahead = max(p.b.PendingPrefill(), 0)
	n := p.b.Slots()
	p.slot = n <= 0 || p.b.InFlight() < n
	if p.tokens > 0 {
		p.b.AddPendingPrefill(p.tokens)
		p.held = true
	}
}

func (p *pendingPrefill) release() {
	if p.held {
		p.b.AddPendingPrefill(-p.tokens)
		p.held = false
	}
}

func (p *pendingPrefill) done(o backend.Outcome) { p.release() }

// queued reports whether o is a sample the queue factor may learn from
// (backend.ObserveQueued): as clean, but sent with prefill pending ahead.
func (p *pendingPrefill) queued(o backend.Outcome) bool {
	return p.b != nil && p.ahead > 0 && p.slot && o.Backend == p.b && o.Retries == 0 && o.Status >= 200 && o.Status < 300 && o.FirstData > 0
}

// clean reports whether o is a sample the prefill model may learn from
// (see pendingPrefill); job.feedback feeds it, with the engine's own
// uncached count when the answer's usage has one.
func (p *pendingPrefill) clean(o backend.Outcome) bool {
	return p.b != nil && p.ahead == 0 && o.Backend == p.b && o.Retries == 0 && o.Status >= 200 && o.Status < 300 && o.FirstData > 0
}
