package shard

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// The prefix policy: the least estimated cost of answering, led by the
// time to first token.
//
// For each routable backend b, with T the request's blocks, H(b) the
// leading blocks the tree says b holds (its hit, capped at T), B the block
// size in tokens, n(b) its requests in flight, and base(b), rate(b) its
// prefill model (b.Prefill(): learned from observed TTFTs,
// backend/prefill.go; until b has its own, the fleet's pooled fit
// (backend.Fleet), the defaults before that; kept within fleetTrust
// of the fleet's median, so one bad fit cannot price a backend out of
// every decision and never learn again):
//
//	prefill(b) = (T − H(b)) × B / rate(b)            the tokens b must compute
//	queue(b)   = q(b) × (pending(b) / rate(b)        prefill sent to b, not yet answered
//	             + waiting(b) × (base(b) + T × B / rate(b)))
//	           + slot(b)                             the wait for a running slot
//	           + kv(b)                               the wait for KV room (kvWait)
//	est(b)     = base(b) + queue(b) + prefill(b)     the estimated TTFT
//	load(b)    = n(b) × (LoadTokens / rate(b) + prefill(b))
//	evict(b)   = fill(b) × prefill(b)
//	cost(b)    = est(b) + load(b) + evict(b)         what the choice compares
//
// q(b) is b.QueueFactor(): the share of the prefill ahead a new request
// waits for, learned from the first tokens of requests sent behind
// pending prefill while a running slot was free (pendingPrefill.slot;
// until learned by b or, pooled, by its fleet: 1, vLLM's;
// near 0 on engines that prefill their running requests side by side,
// backend/prefill.go).
// pending(b) is b.PendingPrefill(): the predicted uncached tokens of the
// streamed requests sent to b that have had no first byte yet (added when
// sent, removed at the first byte or failure: pendingPrefill). waiting(b)
// is the engine's own vllm:num_requests_waiting when scraped and fresh
// (b.Engine()), or the in-flight count above S(b) if more; each is
// priced as one request like this one, fully uncached. S(b), the requests
// b runs at once, is the engine's limit learned from the scrape (b.Slots,
// else the fleet's, learned the same way from every engine's scrape: what
// it runs while it reports requests waiting, vLLM's --max-num-seqs or its
// KV room) or Concurrency. When n(b) ≥ S(b) or requests wait, this
// request waits for a slot too: slot(b) = (waiting(b) + 1) × service(b) /
// R(b), service(b) being how long b takes to answer a request whole
// (b.Service, a running average of how long its 2xx answers held a
// slot: job.slotHold) and R(b) the requests
// it runs (the engine's running count while it reports requests waiting,
// for a slot or for KV room, else S(b)): one of them ends every
// service/R on average. On engines of 4 slots (the third-party
// simulator), a hot prefix's holders that all run 4 then price a wait of
// most of a decode, not a prefill, and a newcomer takes the request.
//
// load(b) is what the requests in flight on b and this one cost each
// other: one more request in the batch makes every decode step longer
// (Config.LoadTokens prices that as prompt tokens of prefill per request
// in flight), and this request's prefill stalls each of them for its
// length (chunked prefill shares the steps). A hit on a busy backend is
// cheap; a long miss on a busy one is not.
//
// evict(b) prices the prefixes this request's miss pushes out of b's KV
// cache, which later requests then miss: fill(b) is b.Footprint() (the
// prompt tokens of the prefixes in use there, footprint.go) over the
// engine's KV capacity (vllm:cache_config_info, when scraped), else
// Config.KVTokens, else the fleet's largest footprint, at most 1. A new
// or replicated long prefix thus goes where the fewest prefixes in use would be evicted, and two hot
// long prefixes do not share one engine's cache while another holds
// nothing (measured on stress: they evicted each other and the requests
// behind them waited seconds for KV room).
//
// b is queueing when a new request would wait, or b runs more than its
// share: queue(b) ≥ QueueWait, n(b) ≥ S(b), requests wait at an engine
// whose slot limit is learned (slotBound), this request would wait there
// for KV room (kv(b) > 0: the wait cannot be told well from the scrape,
// since requests that start together end together; on manydocs, 30 s
// runs, P99 TTFT 1,020 and 1,119 ms against 1,688 and 1,233 when only
// the priced wait counted, which 60 s runs did not confirm: 1,209 to
// 1,644 ms), or n(b) is at the bounded-load capacity,
// ⌈(1 + LoadSlack) × (Σn + 1) / N⌉ over the N routable backends (at least
// LoadFloor).
//
// The choice:
//   - some holder (H > 0) is not queueing: M is the most blocks such a
//     holder holds; the holders of M that are not queueing and the
//     (queueing) holders of more than M are eligible, and the least cost
//     among them wins. A backend that is not queueing is never skipped for
//     one that holds less.
//   - every holder is queueing (a hot prefix): the holders and one
//     newcomer, chosen among the backends that hold nothing as a cold
//     prefix's backend is (settle); those that would wait for KV room
//     drop out while another would not and is estimated no slower than
//     they would be with that wait at its bound, a whole service
//     (roomOnly: that wait lasts until running requests end, which the
//     estimate cannot tell well; on manydocs, 60 s runs, P99 TTFT 744 and
//     788 ms with the rule, 1,011 without, the router's own KV account in
//     both); the least cost wins, so a copy is made
//     only when the holders' load outweighs the newcomer's miss, the
//     stall it causes there and what it evicts, and requests then spread
//     over the holders by cost. Holders not used age out of the tree
//     (TTL) and out of the footprints (FootprintWindow), so the set
//     shrinks when the prefix cools.
//   - no holder (a cold prefix): settle among every backend.
//
// settle: among the candidates that are not queueing (all of them if
// every one is), the least cost sets a limit coldTie × (LoadTokens + T ×
// B) / rate(fleet median) above it (the price of coldTie requests in
// flight, each paying this request's miss);
// within it the prefix's home (the backend its group last went to,
// footprint.go) wins, else the first in the prefix's rendezvous order. A
// cold prefix so goes back where it was (its copy may have survived; if
// not, the miss is the same anywhere, and the fleet's caches stay
// partitioned, as a hash keeps them), and replicas that see about the
// same loads agree, unless that backend is clearly busier.
//
// Among eligible holders, costs within tieRel of the least (at least
// tieAbs) are a tie, won by the first in rendezvous order. A session pin
// (scratch.pin, Config.SessionHeader) wins over all that while its
// backend is routable and not queueing.

// slotBound: why requests waiting at an engine make it queue only when
// its slot limit is known. An engine at its KV room keeps requests
// waiting too, and its KV usage is then near 1; counting either as
// queueing (as this policy first did) made the holders of every document
// queue on KV-bound workloads, and the copies that followed evicted
// more: with the scrape on, 30 s runs on 8 a100-13b engines, token hit
// ratio rag 0.733 → 0.768–0.775, manydocs 0.662 → 0.68–0.70, multiturn
// 0.805 → 0.81 without those two flags; the wait is still priced, in
// queue(b). On engines of 4 slots (--max-num-seqs 4 --kv-tokens 10000),
// requests waiting for a slot still flag their engine once its limit is
// learned; hotspot's P99 there ranged 393–1,244 ms over repeated 30 s
// runs of the same code, with and without either flag, so no
// difference could be measured.

// The near-tie tolerance: within 5 % of the least estimate, or 2 ms.
const (
	tieRel = 0.05
	tieAbs = 0.002 // seconds
)

// cost is one view's terms, in seconds.
type cost struct {
	held                 int
	base, queue, prefill float64
	slotWait             float64 // part of queue: the wait for a running slot
	kvWait               float64 // part of queue: the wait for KV room
	kvBound              float64 // est with kvWait at its bound, one whole service (roomOnly)
	est                  float64
	load, evict          float64
	cmp                  float64 // est + load + evict: what pick compares
	queueing, eligible   bool
	newcomer             bool // holds nothing: a candidate for settle
	rank                 int  // rendezvous rank; -1: not routable
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
	SlotWait  float64 `json:"slot_wait_ms"`
	KVWait    float64 `json:"kv_wait_ms"`
	Slots     int64   `json:"slots"`
	ServiceMS float64 `json:"service_ms"`
	PrefillMS float64 `json:"prefill_ms"`
	EstMS     float64 `json:"est_ms"`
	Footprint int64   `json:"footprint_tokens"`
	Pinned    int64   `json:"pinned_tokens"`
	LoadMS    float64 `json:"load_ms"`
	EvictMS   float64 `json:"evict_ms"`
	CostMS    float64 `json:"cost_ms"`
	Queueing  bool    `json:"queueing"`
	Eligible  bool    `json:"eligible"`
	Rank      int     `json:"rendezvous_rank"`
}

// decideCost is the prefix policy for a request with keys. It allocates
// only the Candidates slice (and, for Explain, the Table).
func decideCost(p policy, bs []view, hits []tree.Hit, keys []uint64, useTree bool, s *scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: len(keys)}
	s.costs = s.costs[:0]
	for range bs {
		s.costs = append(s.costs, cost{rank: -1})
	}
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
	s.scores = rendezvous(s.scores[:0], bs, keys[sharedDepth(s, bs, len(keys)):])
	if len(s.scores) == 0 {
		return d
	}
	for r, sc := range s.scores {
		s.costs[sc.i].rank = r
	}
	deep := -1 // the deepest holder (ties: first in rendezvous order)
	total := float64(len(keys) * p.blockSize)
	var sum int64
	for _, sc := range s.scores {
		sum += max(bs[sc.i].inFlight, 0)
	}
	capn := loadCap(p, sum, len(s.scores))
	fm := medianModel(bs, s)
	coldSlack := coldTie * (p.loadTokens + total) / fm.rate // coldTie requests in flight, each paying this miss too
	kv := p.kvTokens
	if kv <= 0 {
		for _, sc := range s.scores {
			kv = max(kv, float64(bs[sc.i].foot))
		}
	}
	kv = max(kv, total)
	anyHolder, m := false, 0
	for _, sc := range s.scores {
		i := sc.i
		c := &s.costs[i]
		estimate(p, &bs[i], c, total, len(keys), capn, kv, fm)
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
			c := &s.costs[sc.i]
			c.eligible = c.held > m || (c.held == m && !c.queueing)
		}
	case anyHolder:
		// Every holder queues: the holders, and one newcomer (a backend
		// that holds nothing, chosen as a cold prefix's backend is).
		for _, sc := range s.scores {
			c := &s.costs[sc.i]
			c.eligible = false
			c.newcomer = c.held == 0
		}
		nc := settle(s, coldSlack, p.queueWait)
		for _, sc := range s.scores {
			c := &s.costs[sc.i]
			c.eligible = c.held > 0 || sc.i == nc
		}
	default:
		for _, sc := range s.scores {
			s.costs[sc.i].newcomer = true
		}
	}

	var target int
	if anyHolder {
		roomOnly(s)
		target = pick(s, 0, p.queueWait)
	} else {
		target = settle(s, coldSlack, p.queueWait)
	}
	target = noWait(s, target)
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
				Pending: v.pending, BaseMS: c.base * 1e3, QueueMS: c.queue * 1e3, SlotWait: c.slotWait * 1e3, KVWait: c.kvWait * 1e3, Slots: v.slots, ServiceMS: v.service * 1e3, PrefillMS: c.prefill * 1e3,
				EstMS: c.est * 1e3, Footprint: v.foot, Pinned: v.pinned, LoadMS: c.load * 1e3, EvictMS: c.evict * 1e3, CostMS: c.cmp * 1e3,
				Queueing: c.queueing, Eligible: c.eligible, Rank: c.rank})
		}
	}
	return d
}

// sharedDepth is how many leading blocks of the request the rendezvous
// order skips: those at least half the routable backends hold (s.costs'
// held), a prefix the fleet shares, such as a system prompt every
// request opens with. The order then comes from what follows, which
// tells the request's conversation or document from the others: ties
// between backends that hold the shared part alike, and the cold
// placement of what follows it, spread over the fleet by conversation,
// and each conversation's later turns find the same order again. Hashed
// from the first blocks alone, every request behind one system prompt
// had the same order and its ties went to one backend (the Mooncake
// conversation trace opens every request with one shared block:
// requests per engine 91-127, the most loaded waiting for slots). The
// rest of the request when it is all shared, its last rendezvousBlocks
// blocks then.
func sharedDepth(s *scratch, bs []view, blocks int) int {
	s.fl = s.fl[:0]
	n := 0
	for i := range bs {
		if bs[i].routable {
			n++
			s.fl = append(s.fl, float64(s.costs[i].held))
		}
	}
	if n < 2 {
		return 0
	}
	slices.Sort(s.fl)
	d := int(s.fl[n/2]) // held by ⌈n/2⌉ of them or more
	if d >= blocks {
		d = max(blocks-rendezvousBlocks, 0)
	}
	return d
}

// noWait is the wait guard (issue 31, item 5: affinity never costs time
// to first token that a least-loaded choice would have saved): when the
// choice would wait at its engine for a running slot or for KV room
// (slotWait, kvWait), and a backend that would wait for neither has a
// lower estimated TTFT (est) by more than the near-tie tolerance, that
// one (the least est among them) serves instead. Only these waits count:
// they last until requests running there end, which a hit cannot win
// back unless its saved prefill is longer, and the load and evict terms
// (costs to other requests, over which pick trades) cannot tell an engine
// whose slots are all taken from a busy one that runs this request at
// once. Measured on the Mooncake conversation trace with
// llm-d-inference-sim engines of 5 slots (docs/BENCHMARKS.md): without
// the guard, requests waited for a slot at holders while engines with a
// free slot and a lower estimate stood by.
func noWait(s *scratch, target int) int {
	t := &s.costs[target]
	if t.slotWait <= 0 && t.kvWait <= 0 {
		return target
	}
	best := -1
	for _, sc := range s.scores {
		c := &s.costs[sc.i]
		if c.slotWait > 0 || c.kvWait > 0 {
			continue
		}
		if best < 0 || c.est < s.costs[best].est {
			best = sc.i
		}
	}
	if best < 0 || s.costs[best].est+max(tieRel*s.costs[best].est, tieAbs) >= t.est {
		return target
	}
	return best
}

// roomOnly leaves out the eligible candidates that would wait for KV room
// while an eligible one that would not has an estimate no greater than
// theirs with that wait at its bound (kvBound: one whole service, the
// longest kvWait prices). Such a wait is not priced well enough to be
// traded against a miss: it lasts until enough running requests end, and
// requests that start together end together. Left out whatever the
// alternative's estimate (as this rule first was), the candidates with
// room took every request while the others waited for it: on the
// Mooncake conversation trace at ×16 with 8 llm-d-inference-sim engines,
// the engines serving short prompts never lacked room, and queued
// requests for 17-19 s while the others' estimates, KV wait included,
// were 6-10 s (P99 TTFT 1.30× least request's; docs/BENCHMARKS.md).
func roomOnly(s *scratch) {
	best := -1 // the least estimate among the eligible with room
	for _, sc := range s.scores {
		if c := &s.costs[sc.i]; c.eligible && c.kvWait == 0 && (best < 0 || c.est < s.costs[best].est) {
			best = sc.i
		}
	}
	if best < 0 {
		return
	}
	for _, sc := range s.scores {
		if c := &s.costs[sc.i]; c.kvWait > 0 && c.kvBound >= s.costs[best].est {
			c.eligible = false
		}
	}
}

// loadCap is the bounded-load capacity: the in-flight count a backend may
// reach before it counts as queueing, (1 + slack) × the fleet's mean with
// this request counted, rounded up, at least floor.
func loadCap(p policy, sum int64, n int) int64 {
	c := int64(math.Ceil((1 + p.loadSlack) * float64(sum+1) / float64(n)))
	return max(c, p.loadFloor, 1)
}

// estimate fills c's terms for v (see the file's comment); total is the
// request's tokens, blocks its blocks, capn the bounded-load capacity.
func estimate(p policy, v *view, c *cost, total float64, blocks int, capn int64, kv float64, fm fleetModel) {
	base, rate := modelOf(v)
	// A backend's fit is trusted within a factor of fleetTrust of the
	// fleet's median: a fit gone wrong (one slow sample too many) would
	// otherwise price that backend out of every decision, and one that
	// is never chosen never learns again.
	rate = min(max(rate, fm.rate/fleetTrust), fm.rate*fleetTrust)
	base = min(max(base, fm.base/fleetTrust), fm.base*fleetTrust)
	slots := p.concurrency
	if v.slots > 0 {
		slots = min(slots, v.slots)
	}
	var waiting int64
	if v.engine {
		waiting = max(v.waiting, 0)
	}
	if v.inFlight > slots {
		waiting = max(waiting, v.inFlight-slots)
	}
	// This request would wait for a slot: b runs S(b) already, or the
	// engine, whose slot limit was learned, has requests waiting. Requests
	// an engine keeps waiting for KV room (no slot limit learned) are
	// priced by queue(b) but do not make b queue by themselves: replicating
	// on them evicts more and lowers the hit ratio (see slotBound).
	full := v.inFlight >= slots || (v.slots > 0 && waiting > 0)
	runs := slots // how many answers free a slot as they end
	if v.engine && v.waiting > 0 && v.running > 0 {
		runs = min(runs, v.running) // the engine's own, while requests wait there
	}
	c.slotWait = 0
	if full && v.service > 0 {
		c.slotWait = float64(waiting+1) * v.service / float64(runs)
	}
	n := float64(max(v.inFlight, 0))
	c.base = base
	c.prefill = float64((blocks-c.held)*p.blockSize) / rate
	c.kvWait = kvWait(p, v, blocks-c.held, total)
	q := 1 - v.queueOff // the share of the prefill ahead this request waits for
	c.queue = q*(float64(max(v.pending, 0))/rate+float64(waiting)*(base+total/rate)) + c.slotWait + c.kvWait
	c.est = base + c.queue + c.prefill
	c.kvBound = c.est
	if c.kvWait > 0 {
		c.kvBound += max(v.service-c.kvWait, 0)
	}
	if v.kvCap > 0 {
		kv = float64(v.kvCap) // the engine's own, scraped
	}
	fill := min(float64(max(v.foot, 0))/kv, 1)
	c.load = (p.loadTokens/rate + c.prefill) * n
	c.evict = fill * c.prefill
	c.cmp = c.est + c.load + c.evict
	c.queueing = c.queue >= p.queueWait || full || v.inFlight >= capn || c.kvWait > 0
}

// kvWait is how long a request waits at b's engine for KV room: an
// engine admits a request only when every block it will use, cached or
// not, fits beside the blocks its running requests pin (vLLM reserves
// them; nothing is preempted), first come first served, so a request
// waits behind those waiting already, and one sent to an engine whose
// cache is pinned full waits until enough of its running requests end.
// The pinned tokens U are the larger of the router's own account
// (b.Pinned, footprint.go: its requests in flight there, waiting ones
// included, exact at once) and the scrape's when fresh (kvUsage × kvCap,
// plus W waiting requests each priced as this one, fully uncached, as
// queue(b) prices them: other routers' requests show there). This
// request needs room for its whole prompt (total), or only for its
// blocks b does not hold (missing) when a request of its group is in
// flight there and pins the rest (view.shared). With R the requests
// running (the engine's count or the router's in flight, the larger),
// over = U + need − capacity; each running request frees U/R tokens on
// average when it ends, and one ends every service/R, so the wait is
// ⌈over / (U/R)⌉ × service / R, at most one whole service. The capacity
// is the engine's (vllm:cache_config_info) else Config.KVTokens. 0 when
// the capacity or service time is unknown, nothing runs, or the blocks
// fit. On manydocs, whose documents overflow the fleet's KV, the slowest
// first tokens (2-3 s, hits among them) waited for room behind a request
// that was sent while the engine ran four other documents.
func kvWait(p policy, v *view, missing int, total float64) float64 {
	capT := float64(v.kvCap)
	if capT <= 0 {
		capT = p.kvTokens
	}
	if capT <= 0 || v.service <= 0 {
		return 0
	}
	used, r := float64(max(v.pinned, 0)), float64(max(v.inFlight, 0))
	if v.engine && v.kvCap > 0 {
		used = max(used, min(max(v.kvUsage, 0), 1)*capT+float64(max(v.waiting, 0))*total)
		r = max(r, float64(v.running))
	}
	need := total
	if v.shared {
		need = float64(max(missing, 0) * p.blockSize)
	}
	over := used + need - capT
	if over <= 0 || r <= 0 {
		return 0
	}
	ends := min(math.Ceil(over/max(used/r, 1)), r)
	return ends * v.service / r
}

// coldTie is settle's slack in requests in flight: a cold prefix stays
// with its home, or its rendezvous order, unless that costs more than
// coldTie requests in flight over the cheapest, each priced as LoadTokens
// plus this request's own prompt (what each of them would pay for its
// miss). Priced by LoadTokens alone, the slack was far smaller than the
// load terms of a long document, which then moved to the least loaded
// engine at each eviction: on 30 s runs, manydocs' token hit ratio went
// from 0.65–0.69 to 0.70 and rag's from 0.73–0.76 to 0.78 with the
// prompt counted (bench/results/issue11-cost).
const coldTie = 4

// settle chooses where a prefix that the chosen backend will not hold
// goes (a cold prefix, or a hot prefix's new holder) among the newcomers
// (cost.newcomer): those not queueing, or all of them if every one
// queues. The least cost sets a limit, slack above it; within the limit
// the prefix's home wins (s.home, the backend its group last went to:
// its copy there may have survived, and if not, the miss costs the same
// anywhere while the fleet's caches stay partitioned), else the first in
// the prefix's rendezvous order, so replicas that see about the same
// loads agree. It marks the candidates eligible and returns the choice,
// -1 if there is no newcomer.
func settle(s *scratch, slack, wait float64) int {
	free := false
	for _, sc := range s.scores {
		if c := &s.costs[sc.i]; c.newcomer && !c.queueing {
			free = true
			break
		}
	}
	found := false
	for _, sc := range s.scores {
		c := &s.costs[sc.i]
		c.eligible = c.newcomer && (!free || !c.queueing)
		found = found || c.eligible
	}
	if !found {
		return -1
	}
	if h := s.home; h >= 0 && h < len(s.costs) && s.costs[h].eligible {
		best := pickBest(s)
		if within(s, h, best, slack, wait) {
			return h
		}
	}
	return pick(s, slack, wait)
}

// pickBest is the view index of the least cmp among the eligible (the
// first in rendezvous order on equal costs). At least one is eligible.
func pickBest(s *scratch) int {
	best := -1
	for _, sc := range s.scores {
		if c := &s.costs[sc.i]; c.eligible && (best < 0 || c.cmp < s.costs[best].cmp) {
			best = sc.i
		}
	}
	return best
}

// fleetTrust bounds how far one backend's prefill model may stray from
// the fleet's median (a factor).
const fleetTrust = 2

// fleetModel is the median prefill model of the routable backends.
type fleetModel struct{ base, rate float64 }

// modelOf is v's prefill model, the defaults until learned.
func modelOf(v *view) (base, rate float64) {
	if v.rate <= 0 {
		return backend.DefaultPrefillBase.Seconds(), backend.DefaultPrefillTokensPerSec
	}
	return v.base, v.rate
}

// medianModel is the median base and rate over s.scores' views (s.fl is
// scratch).
func medianModel(bs []view, s *scratch) fleetModel {
	return fleetModel{base: s.medianOf(bs, 0), rate: s.medianOf(bs, 1)}
}

// medianOf is the median of the prefill model's term k (0: base, 1:
// rate) over s.scores' views.
func (s *scratch) medianOf(bs []view, k int) float64 {
	s.fl = s.fl[:0]
	for _, sc := range s.scores {
		base, rate := modelOf(&bs[sc.i])
		s.fl = append(s.fl, [2]float64{base, rate}[k])
	}
	slices.Sort(s.fl)
	return median(s.fl)
}

// median of sorted v (not empty).
func median(v []float64) float64 {
	if n := len(v); n%2 == 1 {
		return v[n/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// pick returns the view index of the least cmp among the eligible,
// near-ties to the first in rendezvous order. At least one is eligible.
func pick(s *scratch, slack, wait float64) int {
	best := pickBest(s)
	for _, sc := range s.scores { // rendezvous order: the first within the limit
		if s.costs[sc.i].eligible && within(s, sc.i, best, slack, wait) {
			return sc.i
		}
	}
	return best
}

// within: candidate i may be preferred to best, the least cost: its
// cost is within slack of best's (at least the near-tie tolerance), and
// it does not make the request wait more than wait (QueueWait) longer
// than best would. The slack (coldTie requests of the miss) is for
// what a partitioned cache saves later, and must not buy a wait now of
// up to that many prefills at home.
func within(s *scratch, i, best int, slack, wait float64) bool {
	c, b := &s.costs[i], &s.costs[best]
	return c.cmp <= b.cmp+max(tieRel*b.cmp, tieAbs, slack) && c.queue <= b.queue+wait
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
	if !(c.LoadSlack >= 0) || math.IsInf(c.LoadSlack, 0) { // also rejects NaN
		errs = append(errs, fmt.Errorf("shard: LoadSlack must be a finite number of at least 0, got %g", c.LoadSlack))
	}
	if c.LoadTokens < 0 {
		errs = append(errs, fmt.Errorf("shard: LoadTokens must not be negative, got %d", c.LoadTokens))
	}
	if c.KVTokens < 0 {
		errs = append(errs, fmt.Errorf("shard: KVTokens must not be negative (0 = unknown), got %d", c.KVTokens))
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

// costInputs reads b's prefix-policy inputs into v, once per decision.
func costInputs(v *view, b *backend.Backend) {
	m := b.Prefill()
	v.base, v.rate = m.Base.Seconds(), m.TokensPerSec
	peer := b.PeerLoad() // the cluster's load, as the in-flight count (liveState)
	v.pending = b.PendingPrefill() + peer.Prefill
	v.queueOff = 1 - b.QueueFactor()
	v.foot, v.pinned = max(b.Footprint(), peer.Footprint), max(b.Pinned(), peer.Pinned)
	v.slots, v.service = b.Slots(), b.Service().Seconds()
	if e, ok := b.Engine(); ok {
		v.engine, v.waiting, v.running, v.kvUsage, v.kvCap = true, e.Waiting, e.Running, e.KVUsage, e.KVTokens
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
func (j *job) decideWith(sh *Shard, hits []tree.Hit, useTree bool) Decision {
	r := j.r
	if r.pol.kind == kindBodyHash {
		return decideBodyHash(*r.tuned.Load(), sh.views, j.body(), len(j.keys), &sh.sc)
	}
	sess := j.session != "" && sh.sess != nil
	now := r.now()
	sh.sc.pin, sh.sc.explain, sh.sc.home = -1, j.explain != nil, -1
	if hits != nil || useTree {
		sh.sc.home = sh.foot.scan(j.keys, sh.views, now)
	}
	if sess {
		if id, ok := sh.sess.lookup(j.session, now); ok {
			sh.sc.pin = id
		}
	}
	d := decide(*r.tuned.Load(), sh.views, hits, j.keys, useTree, &sh.sc)
	sh.sc.pin, sh.sc.explain, sh.sc.home = -1, false, -1
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
// (add), removed at its first event (release, from Hooks.FirstData: a
// stream's head comes before its prefill) or at
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
	// slot: b had a free running slot when it was sent (its learned
	// limit above its in-flight count, or no limit learned). Only such
	// requests teach the queue factor (queued): one that waited for a
	// slot waited for an answer to end, which slot(b) prices; at
	// saturation that wait grows with the prefill pending, and the factor
	// learned from it counted the wait twice (Mooncake ×16:
	// docs/BENCHMARKS.md).
	slot bool
}

func (p *pendingPrefill) add(d Decision, snap []*backend.Backend, blockSize int) {
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
