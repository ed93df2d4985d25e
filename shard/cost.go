package shard

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/shard/backend"
	"github.com/saltus-lb/saltus/tree"
)

// The prefix policy: the least estimated time to first token.
//
// For each routable backend b, with T the request's blocks, H(b) the
// leading blocks the tree says b holds (its hit, capped at T), B the block
// size in tokens, and base(b), rate(b) b's prefill model (b.Prefill():
// learned from observed TTFTs, backend/prefill.go; the defaults until
// learned):
//
//	prefill(b) = (T − H(b)) × B / rate(b)            the tokens b must compute
//	queue(b)   = pending(b) / rate(b)                prefill sent to b, not yet answered
//	           + excess(b) × (base(b) + T × B / rate(b))
//	est(b)     = base(b) + queue(b) + prefill(b)
//
// pending(b) is b.PendingPrefill(): the predicted uncached tokens of the
// streamed requests the router sent to b that have had no first byte yet
// (added when sent, removed at the first byte or failure:
// pendingPrefill).
// excess(b) is how many requests b makes wait beyond what it runs:
// max(in-flight − min(Concurrency, bound), 0), bound being ranvier's
// LoadFactor × the median in-flight count of the routable backends (at
// least LoadFloor): without a scrape, the engine's real concurrency is
// unknown (vLLM runs up to --max-num-seqs, but a small KV cache holds
// far fewer long prompts), so a backend far above its peers is taken to
// make the surplus wait. Or the engine's own vllm:num_requests_waiting
// when scraped and fresh (b.Engine()) if that is more. Each waiting
// request is priced as one request like this one, fully uncached. (Not a
// diversion to the least loaded, as in ranvier: it only makes the
// backend queueing, so the cost comparison below decides.)
//
// b is queueing when a new request would wait before its prefill starts,
// as far as the router can tell: queue(b) ≥ QueueWait (prefill already
// ahead of it), or excess(b) > 0 (in flight above Concurrency, or the
// engine reports waiting requests), or the engine reports its KV cache at
// least kvFull used (it preempts). With no scrape, the in-flight count
// and the pending prefill alone decide.
//
// The choice:
//   - some holder (H > 0) is not queueing: M is the most blocks such a
//     holder holds; the backends holding at least M are eligible. A
//     backend that is not queueing is never skipped for one that holds
//     less.
//   - every holder is queueing (a hot prefix): the holders, plus the next
//     backend of the prefix's rendezvous order that holds nothing and is
//     not queueing (if all queue, the next that holds nothing). The order
//     is the same in every replica, so a hot prefix spreads over the few
//     backends its load needs, and pays its miss once per new holder.
//     That newcomer's miss is counted twice in the comparison (not in
//     est): once for this request, once for the blocks its copy evicts
//     from a KV cache that is usually full, which a later request misses;
//     so a copy is made only when the holders' queue exceeds about twice
//     the miss, and a hot prefix does not thrash the fleet's caches.
//   - no holder (a cold prefix): the first backend in rendezvous order
//     that is not queueing; if all queue, every backend.
//
// Among the eligible the least est wins; estimates within tieTolerance of
// the least (tieRel of it, at least tieAbs) are a tie, won by the first
// in rendezvous order, so replicas that see about the same loads agree. A
// session pin (scratch.pin, Config.SessionHeader) wins over all that
// while its backend is routable and not queueing.

// kvFull is the engine KV usage at which a backend counts as queueing.
const kvFull = 0.98

// The near-tie tolerance: within 5 % of the least estimate, or 2 ms.
const (
	tieRel = 0.05
	tieAbs = 0.002 // seconds
)

// cost is one view's terms, in seconds.
type cost struct {
	held                 int
	base, queue, prefill float64
	est                  float64
	cmp                  float64 // est, plus a newcomer's miss again: what pick compares
	queueing, eligible   bool
	rank                 int // rendezvous rank; -1: not routable
}

// Candidate is one backend's row of Explain's table.
type Candidate struct {
	Backend   int     `json:"backend"`
	Name      string  `json:"name"`
	Held      int     `json:"held_blocks"`
	InFlight  int64   `json:"in_flight"`
	Pending   int64   `json:"pending_prefill_tokens"`
	BaseMS    float64 `json:"base_ms"`
	QueueMS   float64 `json:"queue_ms"`
	PrefillMS float64 `json:"prefill_ms"`
	EstMS     float64 `json:"est_ms"`
	Queueing  bool    `json:"queueing"`
	Eligible  bool    `json:"eligible"`
	Rank      int     `json:"rendezvous_rank"`
}

// decideCost is the prefix policy for a request with keys. It allocates
// only the Candidates slice (and, for Explain, the Table).
func decideCost(p policy, bs []view, hits []tree.Hit, keys []uint64, useTree bool, s *scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: len(keys)}
	s.scores = rendezvous(s.scores[:0], bs, keys)
	if len(s.scores) == 0 {
		return d
	}
	s.costs = s.costs[:0]
	for range bs {
		s.costs = append(s.costs, cost{rank: -1})
	}
	for r, sc := range s.scores {
		s.costs[sc.i].rank = r
	}
	deep := -1 // the deepest holder (ties: first in rendezvous order)
	if useTree {
		for _, h := range hits {
			i := indexOf(bs, h.Backend)
			if i < 0 || !bs[i].routable || h.Blocks <= 0 {
				continue
			}
			c := &s.costs[i]
			c.held = max(c.held, min(h.Blocks, len(keys)))
		}
	}
	total := float64(len(keys) * p.blockSize)
	s.loads = s.loads[:0]
	for _, sc := range s.scores {
		s.loads = append(s.loads, bs[sc.i].inFlight)
	}
	runs := min(p.concurrency, loadBound(p, s.loads))
	anyHolder, m := false, 0
	for _, sc := range s.scores {
		i := sc.i
		c := &s.costs[i]
		estimate(p, &bs[i], c, total, len(keys), runs)
		if c.held > 0 {
			anyHolder = true
			if deep < 0 || c.held > s.costs[deep].held {
				deep = i
			}
			if !c.queueing {
				m = max(m, c.held)
			}
		}
	}

	switch {
	case m > 0:
		for _, sc := range s.scores {
			s.costs[sc.i].eligible = s.costs[sc.i].held >= m
		}
	case anyHolder:
		next := -1
		for _, sc := range s.scores {
			c := &s.costs[sc.i]
			if c.held > 0 {
				c.eligible = true
			} else if !c.queueing && (next < 0 || s.costs[next].queueing) {
				next = sc.i
			} else if next < 0 {
				next = sc.i
			}
		}
		if next >= 0 {
			c := &s.costs[next]
			c.eligible = true
			c.cmp += c.prefill
		}
	default:
		first := -1
		for _, sc := range s.scores {
			if !s.costs[sc.i].queueing {
				first = sc.i
				break
			}
		}
		for _, sc := range s.scores {
			s.costs[sc.i].eligible = first < 0 || sc.i == first
		}
	}

	target := pick(s)
	reason := ReasonHash
	if pin := indexOf(bs, s.pin); s.pin >= 0 && pin >= 0 && bs[pin].routable && !s.costs[pin].queueing {
		target, reason = pin, ReasonOverride
	} else if s.costs[target].held > 0 {
		reason = ReasonTree
	}
	if !useTree {
		reason = ReasonFallback
	}
	if deep >= 0 && s.costs[target].held < s.costs[deep].held && reason != ReasonOverride {
		d.Diverted, d.Preferred = true, bs[deep].id
	}
	d.Backend, d.URL, d.Reason = bs[target].id, bs[target].url, reason
	d.MatchedBlocks = s.costs[target].held
	d.EstMS = s.costs[target].est * 1e3
	ru := -1
	for _, sc := range s.scores {
		if sc.i != target && (ru < 0 || s.costs[sc.i].est < s.costs[ru].est) {
			ru = sc.i
		}
	}
	if ru >= 0 {
		d.RunnerUp, d.RunnerUpMS = bs[ru].id, s.costs[ru].est*1e3
	}

	n := min(p.maxCandidates, len(s.scores))
	d.Candidates = append(s.cands[:0], d.Backend) // the loop's: see scratch.cands
	for _, sc := range s.scores {
		if len(d.Candidates) >= n {
			break
		}
		if sc.i != target {
			d.Candidates = append(d.Candidates, bs[sc.i].id)
		}
	}
	s.cands = d.Candidates
	if s.explain {
		d.Table = make([]Candidate, 0, len(s.scores))
		for _, sc := range s.scores {
			c, v := s.costs[sc.i], &bs[sc.i]
			d.Table = append(d.Table, Candidate{Backend: v.id, Name: v.name, Held: c.held, InFlight: v.inFlight,
				Pending: v.pending, BaseMS: c.base * 1e3, QueueMS: c.queue * 1e3, PrefillMS: c.prefill * 1e3,
				EstMS: c.est * 1e3, Queueing: c.queueing, Eligible: c.eligible, Rank: c.rank})
		}
	}
	return d
}

// estimate fills c's terms for v (see the file's comment); total is the
// request's tokens, blocks its blocks, runs the in-flight count over
// which requests wait.
func estimate(p policy, v *view, c *cost, total float64, blocks int, runs int64) {
	base, rate := v.base, v.rate
	if rate <= 0 {
		base, rate = backend.DefaultPrefillBase.Seconds(), backend.DefaultPrefillTokensPerSec
	}
	excess := max(v.inFlight-runs, 0)
	if v.engine {
		excess = max(excess, v.waiting)
	}
	c.base = base
	c.prefill = float64((blocks-c.held)*p.blockSize) / rate
	c.queue = float64(max(v.pending, 0))/rate + float64(excess)*(base+total/rate)
	c.est = base + c.queue + c.prefill
	c.cmp = c.est
	c.queueing = c.queue >= p.queueWait || excess > 0 || (v.engine && v.kvUsage >= kvFull)
}

// pick returns the view index of the least cmp among the eligible,
// near-ties to the first in rendezvous order. At least one is eligible.
func pick(s *scratch) int {
	best := -1
	for _, sc := range s.scores {
		if c := &s.costs[sc.i]; c.eligible && (best < 0 || c.cmp < s.costs[best].cmp) {
			best = sc.i
		}
	}
	limit := s.costs[best].cmp + max(tieRel*s.costs[best].cmp, tieAbs)
	for _, sc := range s.scores { // rendezvous order: the first within the limit
		if c := &s.costs[sc.i]; c.eligible && c.cmp <= limit {
			return sc.i
		}
	}
	return best
}

// bodyHashBytes is how much of the body body_hash hashes (nginx users
// hash a prefix of $request_body; 512 bytes covers a system prompt's
// opening).
const bodyHashBytes = 512

// decideBodyHash is the body_hash policy: the routable backends in
// rendezvous order of the hash of the body's first 512 bytes; the first
// serves, no load term. Candidates: the next ones in that order. total is
// the request's blocks (for the route receipt).
func decideBodyHash(p policy, bs []view, body []byte, total int, s *scratch) Decision {
	return decideBodyHashKey(p, bs, bodyKey(body), total, s)
}

// bodyKey is FNV-1a of body's first bodyHashBytes, finalized.
func bodyKey(body []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range body[:min(len(body), bodyHashBytes)] {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return mix64(h)
}

func decideBodyHashKey(p policy, bs []view, key uint64, total int, s *scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: total}
	s.scores = s.scores[:0]
	for i := range bs {
		if bs[i].routable {
			s.scores = append(s.scores, scored{score: mix64(key ^ bs[i].urlHash), i: i})
		}
	}
	if len(s.scores) == 0 {
		return d
	}
	sortScores(s.scores, bs)
	target := s.scores[0].i
	d.Backend, d.URL, d.Reason = bs[target].id, bs[target].url, ReasonBodyHash
	n := min(p.maxCandidates, len(s.scores))
	d.Candidates = make([]int, 0, n)
	for _, sc := range s.scores[:n] {
		d.Candidates = append(d.Candidates, bs[sc.i].id)
	}
	return d
}

// checkCostConfig validates the prefix policy's fields of c.
func checkCostConfig(c Config) []error {
	var errs []error
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("shard: Concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.QueueWait <= 0 {
		errs = append(errs, fmt.Errorf("shard: QueueWait must be positive, got %v", c.QueueWait))
	}
	if c.Sessions <= 0 {
		errs = append(errs, fmt.Errorf("shard: Sessions must be positive, got %d", c.Sessions))
	}
	if c.SessionTTL <= 0 {
		errs = append(errs, fmt.Errorf("shard: SessionTTL must be positive, got %v", c.SessionTTL))
	}
	return errs
}

// costInputs reads b's prefix-policy inputs into v, once per decision.
func costInputs(v *view, b *backend.Backend) {
	m := b.Prefill()
	v.base, v.rate = m.Base.Seconds(), m.TokensPerSec
	v.pending = b.PendingPrefill()
	if e, ok := b.Engine(); ok {
		v.engine, v.waiting, v.kvUsage = true, e.Waiting, e.KVUsage
	}
}

// sessionOf is req's Config.SessionHeader value, copied (the request's
// buffers are reused); "" if the header is off or absent.
func (r *Router) sessionOf(req *reactor.Request) string {
	if r.cfg.SessionHeader == "" || r.pol.kind != kindPrefix {
		return ""
	}
	return strings.Clone(req.HeaderValue(r.cfg.SessionHeader))
}

// decideWith decides j on sh's loop with sh's views and scratch: body_hash
// with the body, the others through decide, the prefix policy with the
// session's pin. A session is (re)pinned to the backend decided. The
// session table is the deciding shard's (the keys' owner, or the loop
// deciding without the tree): the requests of a conversation share their
// first block, so they meet on one shard; one that does not is pinned
// separately on each shard it meets, each bounded. Loop only.
func (j *job) decideWith(sh *shardState, hits []tree.Hit, useTree bool) Decision {
	r := j.r
	if r.pol.kind == kindBodyHash {
		return decideBodyHash(r.pol, sh.views, j.body(), len(j.keys), &sh.sc)
	}
	sess := j.session != "" && sh.sess != nil
	now := r.now()
	sh.sc.pin, sh.sc.explain = -1, j.explain != nil
	if sess {
		if id, ok := sh.sess.lookup(j.session, now); ok {
			sh.sc.pin = id
		}
	}
	d := decide(r.pol, sh.views, hits, j.keys, useTree, &sh.sc)
	sh.sc.pin, sh.sc.explain = -1, false
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
func appendReceipt(dst []byte, d Decision, snap []*backend.Backend) []byte {
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
	prec := 0
	if ms < 10 {
		prec = 1
	}
	dst = strconv.AppendFloat(dst, ms, 'f', prec, 64)
	return append(dst, "ms"...)
}

// pendingPrefill is a forwarded streamed request's share of its backend's
// PendingPrefill (a non-streamed answer's head comes only when its
// generation ends, so its first byte says nothing of its prefill: it is
// neither counted pending nor a sample of the fit; its load shows in the
// in-flight count): the predicted uncached tokens, added when it is sent
// (add), removed at its first byte (release, from Hooks.FirstByte) or at
// its end without one (done, from Hooks.Done: a failure, a refusal, a
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
}

func (p *pendingPrefill) add(d Decision, snap []*backend.Backend, blockSize int) {
	i := indexOfBackend(snap, d.Backend)
	if i < 0 {
		return
	}
	p.b = snap[i]
	p.tokens = int64((d.TotalBlocks - d.MatchedBlocks) * blockSize)
	p.ahead = max(p.b.PendingPrefill(), 0)
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

// clean reports whether o is a sample the prefill model may learn from
// (see pendingPrefill); job.feedback feeds it, with the engine's own
// uncached count when the answer's usage has one.
func (p *pendingPrefill) clean(o backend.Outcome) bool {
	return p.b != nil && p.ahead == 0 && o.Backend == p.b && o.Retries == 0 && o.Status >= 200 && o.Status < 300 && o.TTFB > 0
}
