package policy

import (
	"math"
	"slices"

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
// upstream/backend/prefill.go; until b has its own, the fleet's pooled fit
// (backend.Fleet), the defaults before that; kept within fleetTrust
// of the fleet's median, so one bad fit cannot price a backend out of
// every decision and never learn again):
//
//	prefill(b) = (T − H(b)) × B / rate(b)            the tokens b must compute
//	ahead(b)   = q(b) × max(pending(b) / rate(b),    prefill sent to b, not yet answered
//	             waiting(b) × (base(b) + T × B / rate(b)))
//	queue(b)   = max(ahead(b),                       the prefill ahead
//	             slot(b),                            the wait for a running slot
//	             kv(b))                              the wait for KV room (kvWait)
//	est(b)     = base(b) + queue(b) + prefill(b)     the estimated TTFT
//	load(b)    = n(b) × (LoadTokens / rate(b) + prefill(b))
//	evict(b)   = fill(b) × prefill(b)
//	cost(b)    = est(b) + load(b) + evict(b)         what the choice compares
//
// q(b) is b.QueueFactor(): the share of the prefill ahead a new request
// waits for, learned from the first tokens of requests sent behind
// pending prefill while a running slot was free (shard's pendingPrefill.slot;
// until learned by b or, pooled, by its fleet: 1, vLLM's;
// near 0 on engines that prefill their running requests side by side,
// upstream/backend/prefill.go).
// pending(b) is b.PendingPrefill(): the predicted uncached tokens of the
// streamed requests sent to b that have had no first byte yet (added when
// sent, removed at the first byte or failure: shard's pendingPrefill). waiting(b)
// is the engine's own vllm:num_requests_waiting when scraped and fresh
// (b.Engine()), or the in-flight count above S(b) if more; each is
// priced as one request like this one, fully uncached. S(b), the requests
// b runs at once, is the engine's limit learned from the scrape (b.Slots,
// else the fleet's, learned the same way from every engine's scrape: what
// it runs while it reports requests waiting, vLLM's --max-num-seqs or its
// KV room) or Concurrency. When n(b) ≥ S(b) or requests wait, this
// request waits for a slot too: slot(b) is the time to the
// (waiting(b) + 1)-th end of a request running there (slotWait), R(b)
// being the requests it runs (the engine's running count while it
// reports requests waiting, for a slot or for KV room, else S(b)): one
// ends every service(b)/R(b), service(b) being how long b takes to
// answer a request whole (b.Service, a running average of how long its
// 2xx answers held a slot: shard's job.slotHold), so (waiting(b) + 1) ×
// service(b) / R(b), or later when the router's requests decoding there
// are expected to end later (View.Decoding: their expected tokens at the
// backend's learned time per token). The three waits overlap (the prefill ahead runs
// while this request waits for a slot, and the slot and the KV room both
// come as running requests end), so the queue is the longest; the
// router's own requests waiting there are in both pending(b) and
// waiting(b), so the prefill ahead is the larger account, not their sum
// (summed, the estimates of engines serving long prompts at saturation
// were 1.4 to 4 times the first tokens measured: docs/BENCHMARKS.md,
// finding 10). On engines of 4 slots (the third-party
// simulator), a hot prefix's holders that all run 4 then price a wait of
// most of a decode, not a prefill, and a newcomer takes the request.
//
// load(b) is what the requests in flight on b and this one cost each
// other: one more request in the batch makes every decode step longer
// (Config.LoadTokens, shard.Config's too, prices that as prompt tokens of prefill per request
// in flight), and this request's prefill stalls each of them for its
// length (chunked prefill shares the steps). A hit on a busy backend is
// cheap; a long miss on a busy one is not.
//
// evict(b) prices the prefixes this request's miss pushes out of b's KV
// cache, which later requests then miss: fill(b) is b.Footprint() (the
// prompt tokens of the prefixes in use there, shard/footprint.go) over the
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
//     one that holds less, unless what that one lacks of M, (M − H) × B /
//     rate, is less than the near-tie tolerance of the holders' least
//     estimate: such a backend is eligible too (holdTie), so a hold worth
//     a near-tie does not confine a burst to its few holders.
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
// Scratch.Home, shard/footprint.go) wins, else the first in the prefix's rendezvous order. A
// cold prefix so goes back where it was (its copy may have survived; if
// not, the miss is the same anywhere, and the fleet's caches stay
// partitioned, as a hash keeps them), and replicas that see about the
// same loads agree, unless that backend is clearly busier.
//
// Among eligible holders, costs within tieRel of the least (at least
// tieAbs) are a tie, won by the first in rendezvous order. A session pin
// (Scratch.Pin, shard.Config.SessionHeader) wins over all that while its
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
	rate                 float64 // prefill tokens per second, as priced
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
func decideCost(p Config, bs []View, hits []tree.Hit, keys []uint64, useTree bool, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: len(keys)}
	s.costs = s.costs[:0]
	for range bs {
		s.costs = append(s.costs, cost{rank: -1})
	}
	if useTree {
		for _, h := range hits {
			i := indexOf(bs, h.Backend)
			if i < 0 || !bs[i].Routable || h.Blocks <= 0 {
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
	total := float64(len(keys) * p.BlockSize)
	var sum int64
	for _, sc := range s.scores {
		sum += max(bs[sc.i].InFlight, 0)
	}
	capn := loadCap(p, sum, len(s.scores))
	fm := medianModel(bs, s)
	coldSlack := coldTie * (p.LoadTokens + total) / fm.rate // coldTie requests in flight, each paying this miss too
	kv := p.KVTokens
	if kv <= 0 {
		for _, sc := range s.scores {
			kv = max(kv, float64(bs[sc.i].Footprint))
		}
	}
	kv = max(kv, total)
	anyHolder, m := false, 0
	for _, sc := range s.scores {
		i := sc.i
		c := &s.costs[i]
		estimate(p, &bs[i], c, total, len(keys), capn, kv, fm, s)
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
		tie := holdTie(s, m)
		for _, sc := range s.scores {
			c := &s.costs[sc.i]
			c.eligible = c.held > m || (c.held == m && !c.queueing) ||
				(!c.queueing && float64((m-c.held)*p.BlockSize)/c.rate < tie)
		}
	case anyHolder:
		// Every holder queues: the holders, and one newcomer (a backend
		// that holds nothing, chosen as a cold prefix's backend is).
		for _, sc := range s.scores {
			c := &s.costs[sc.i]
			c.eligible = false
			c.newcomer = c.held == 0
		}
		nc := settle(s, coldSlack, p.QueueWait)
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
		target = pick(s, 0, p.QueueWait)
	} else {
		target = settle(s, coldSlack, p.QueueWait)
	}
	target = noWait(s, target)
	reason := ReasonHash
	if pin := indexOf(bs, s.Pin); s.Pin >= 0 && pin >= 0 && bs[pin].Routable && !s.costs[pin].queueing {
		target, reason = pin, ReasonOverride
	} else if s.costs[target].held > 0 {
		reason = ReasonTree
	}
	if !useTree {
		reason = ReasonFallback
	}
	if deep >= 0 && s.costs[target].held < s.costs[deep].held && reason != ReasonOverride {
		d.Diverted, d.Preferred = true, bs[deep].ID
	}
	d.Backend, d.URL, d.Reason = bs[target].ID, bs[target].URL, reason
	d.MatchedBlocks = s.costs[target].held
	d.EstMS = s.costs[target].est * 1e3
	ru := -1
	for _, sc := range s.scores {
		if sc.i != target && (ru < 0 || s.costs[sc.i].est < s.costs[ru].est) {
			ru = sc.i
		}
	}
	if ru >= 0 {
		d.RunnerUp, d.RunnerUpMS = bs[ru].ID, s.costs[ru].est*1e3
	}

	n := min(p.MaxCandidates, len(s.scores))
	d.Candidates = append(s.cands[:0], d.Backend) // the loop's: see Scratch.cands
	for _, sc := range s.scores {
		if len(d.Candidates) >= n {
			break
		}
		if sc.i != target {
			d.Candidates = append(d.Candidates, bs[sc.i].ID)
		}
	}
	s.cands = d.Candidates
	if s.Explain {
		d.Table = make([]Candidate, 0, len(s.scores))
		for _, sc := range s.scores {
			c, v := s.costs[sc.i], &bs[sc.i]
			d.Table = append(d.Table, Candidate{Backend: v.ID, Name: v.Name, Held: c.held, InFlight: v.InFlight,
				Pending: v.Pending, BaseMS: c.base * 1e3, QueueMS: c.queue * 1e3, SlotWait: c.slotWait * 1e3, KVWait: c.kvWait * 1e3, Slots: v.Slots, ServiceMS: v.Service * 1e3, PrefillMS: c.prefill * 1e3,
				EstMS: c.est * 1e3, Footprint: v.Footprint, Pinned: v.Pinned, LoadMS: c.load * 1e3, EvictMS: c.evict * 1e3, CostMS: c.cmp * 1e3,
				Queueing: c.queueing, Eligible: c.eligible, Rank: c.rank})
		}
	}
	return d
}

// holdTie is the near-tie tolerance of the least estimate among the
// holders of m blocks that are not queueing: a backend that is not
// queueing and holds less than m is eligible beside them when what it
// lacks of m, priced at its prefill rate, is less than that (the hold
// saves a near-tie of the time to first token, so it does not restrict
// the choice, and the cost decides). Early in the Mooncake conversation
// trace, with 2,048-block engines, two engines had confirmed the
// trace's shared first block (8 blocks of 16 tokens, 10 ms of prefill in
// requests estimated at 300 ms on average) and every request went to them
// until they reached the bounded-load capacity, while the six others had
// free slots (docs/BENCHMARKS.md, finding 9).
func holdTie(s *Scratch, m int) float64 {
	best := math.Inf(1)
	for _, sc := range s.scores {
		if c := &s.costs[sc.i]; c.held == m && !c.queueing {
			best = min(best, c.est)
		}
	}
	return max(tieRel*best, tieAbs)
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
// rest of the request when it is all shared, its last RendezvousBlocks
// blocks then.
func sharedDepth(s *Scratch, bs []View, blocks int) int {
	s.fl = s.fl[:0]
	n := 0
	for i := range bs {
		if bs[i].Routable {
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
		d = max(blocks-RendezvousBlocks, 0)
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
func noWait(s *Scratch, target int) int {
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
func roomOnly(s *Scratch) {
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
func loadCap(p Config, sum int64, n int) int64 {
	c := int64(math.Ceil((1 + p.LoadSlack) * float64(sum+1) / float64(n)))
	return max(c, p.LoadFloor, 1)
}

// estimate fills c's terms for v (see the file's comment); total is the
// request's tokens, blocks its blocks, capn the bounded-load capacity.
func estimate(p Config, v *View, c *cost, total float64, blocks int, capn int64, kv float64, fm fleetModel, s *Scratch) {
	base, rate := modelOf(v)
	// A backend's fit is trusted within a factor of fleetTrust of the
	// fleet's median: a fit gone wrong (one slow sample too many) would
	// otherwise price that backend out of every decision, and one that
	// is never chosen never learns again.
	rate = min(max(rate, fm.rate/fleetTrust), fm.rate*fleetTrust)
	base = min(max(base, fm.base/fleetTrust), fm.base*fleetTrust)
	slots := p.Concurrency
	if v.Slots > 0 {
		slots = min(slots, v.Slots)
	}
	var waiting int64
	if v.Engine {
		waiting = max(v.Waiting, 0)
	}
	if v.InFlight > slots {
		waiting = max(waiting, v.InFlight-slots)
	}
	// This request would wait for a slot: b runs S(b) already, or the
	// engine, whose slot limit was learned, has requests waiting. Requests
	// an engine keeps waiting for KV room (no slot limit learned) are
	// priced by queue(b) but do not make b queue by themselves: replicating
	// on them evicts more and lowers the hit ratio (see slotBound).
	full := v.InFlight >= slots || (v.Slots > 0 && waiting > 0)
	runs := slots // how many answers free a slot as they end
	if v.Engine && v.Waiting > 0 && v.Running > 0 {
		runs = min(runs, v.Running) // the engine's own, while requests wait there
	}
	c.slotWait = 0
	if full && v.Service > 0 {
		c.slotWait = slotWait(v, waiting+1, runs, s)
	}
	n := float64(max(v.InFlight, 0))
	c.base, c.rate = base, rate
	c.prefill = float64((blocks-c.held)*p.BlockSize) / rate
	c.kvWait = kvWait(p, v, blocks-c.held, total)
	q := 1 - v.QueueOff // the share of the prefill ahead this request waits for
	// The prefill ahead, the larger account, and the longest wait (see
	// the file's comment).
	ahead := q * max(float64(max(v.Pending, 0))/rate, float64(waiting)*(base+total/rate))
	c.queue = max(ahead, c.slotWait, c.kvWait)
	c.est = base + c.queue + c.prefill
	c.kvBound = c.est
	if c.kvWait > 0 {
		c.kvBound += max(v.Service-c.kvWait, 0)
	}
	if v.KVCap > 0 {
		kv = float64(v.KVCap) // the engine's own, scraped
	}
	fill := min(float64(max(v.Footprint, 0))/kv, 1)
	c.load = (p.LoadTokens/rate + c.prefill) * n
	c.evict = fill * c.prefill
	c.cmp = c.est + c.load + c.evict
	c.queueing = c.queue >= p.QueueWait || full || v.InFlight >= capn || c.kvWait > 0
}

// slotWait is how long a request waits at v for a running slot when k−1
// wait there before it (k ≥ 1) and runs requests hold its slots: one
// ends every service/runs on average, so k × service / runs; longer when
// the requests running there are known to end later. The router's
// requests decoding there (View.Decoding: their first event came;
// upstream/backend/decoding.go) end when expected, the other runs − n (in
// their prefill, read whole, other routers') spread evenly over a whole
// service, the j-th at j × service / (runs − n); a freed slot goes to the
// next one waiting, whose answer then holds it a whole service: sorted
// ends e_1 ≤ … ≤ e_R, the k-th is e_((k−1) mod R + 1) + ⌊(k−1)/R⌋ ×
// service. The wait is the larger of the two: ends known to come sooner
// than the average spacing do not shorten it, since requests the router
// does not count yet (decided on another loop, another router's) take
// those slots too. Measured on the Mooncake trace (docs/BENCHMARKS.md,
// finding 11): the known ends alone made the estimates more accurate at
// saturation, and the mean TTFT at ×4 worse by 3 % in two runs of two.
func slotWait(v *View, k, runs int64, s *Scratch) float64 {
	service := v.Service
	ends := s.ends[:0]
	if v.Decoding != nil && s.Now != 0 {
		ends = v.Decoding.Remaining(s.Now, ends)
	}
	even := float64(k) * service / float64(runs)
	if len(ends) == 0 {
		return even
	}
	if u := runs - int64(len(ends)); u > 0 {
		for j := int64(1); j <= u; j++ {
			ends = append(ends, float64(j)*service/float64(u))
		}
	}
	slices.Sort(ends)
	s.ends = ends
	r := int64(len(ends))
	return max(ends[(k-1)%r]+float64((k-1)/r)*service, even)
}

// kvWait is how long a request waits at b's engine for KV room: an
// engine admits a request only when every block it will use, cached or
// not, fits beside the blocks its running requests pin (vLLM reserves
// them; nothing is preempted), first come first served, so a request
// waits behind those waiting already, and one sent to an engine whose
// cache is pinned full waits until enough of its running requests end.
// The pinned tokens U are the larger of the router's own account
// (b.Pinned, shard/footprint.go: its requests in flight there, waiting ones
// included, exact at once) and the scrape's when fresh (kvUsage × kvCap,
// plus W waiting requests each priced as this one, fully uncached, as
// queue(b) prices them: other routers' requests show there). This
// request needs room for its whole prompt (total), or only for its
// blocks b does not hold (missing) when a request of its group is in
// flight there and pins the rest (View.Shared). With R the requests
// running (the engine's count or the router's in flight, the larger),
// over = U + need − capacity; each running request frees U/R tokens on
// average when it ends, and one ends every service/R, so the wait is
// ⌈over / (U/R)⌉ × service / R, at most one whole service. The capacity
// is the engine's (vllm:cache_config_info) else Config.KVTokens. 0 when
// the capacity or service time is unknown, nothing runs, or the blocks
// fit. On manydocs, whose documents overflow the fleet's KV, the slowest
// first tokens (2-3 s, hits among them) waited for room behind a request
// that was sent while the engine ran four other documents.
func kvWait(p Config, v *View, missing int, total float64) float64 {
	capT := float64(v.KVCap)
	if capT <= 0 {
		capT = p.KVTokens
	}
	if capT <= 0 || v.Service <= 0 {
		return 0
	}
	used, r := float64(max(v.Pinned, 0)), float64(max(v.InFlight, 0))
	if v.Engine && v.KVCap > 0 {
		used = max(used, min(max(v.KVUsage, 0), 1)*capT+float64(max(v.Waiting, 0))*total)
		r = max(r, float64(v.Running))
	}
	need := total
	if v.Shared {
		need = float64(max(missing, 0) * p.BlockSize)
	}
	over := used + need - capT
	if over <= 0 || r <= 0 {
		return 0
	}
	ends := min(math.Ceil(over/max(used/r, 1)), r)
	return ends * v.Service / r
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
func settle(s *Scratch, slack, wait float64) int {
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
	if h := s.Home; h >= 0 && h < len(s.costs) && s.costs[h].eligible {
		best := pickBest(s)
		if within(s, h, best, slack, wait) {
			return h
		}
	}
	return pick(s, slack, wait)
}

// pickBest is the view index of the least cmp among the eligible (the
// first in rendezvous order on equal costs). At least one is eligible.
func pickBest(s *Scratch) int {
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
func modelOf(v *View) (base, rate float64) {
	if v.Rate <= 0 {
		return backend.DefaultPrefillBase.Seconds(), backend.DefaultPrefillTokensPerSec
	}
	return v.Base, v.Rate
}

// medianModel is the median base and rate over s.scores' views (s.fl is
// scratch).
func medianModel(bs []View, s *Scratch) fleetModel {
	return fleetModel{base: s.medianOf(bs, 0), rate: s.medianOf(bs, 1)}
}

// medianOf is the median of the prefill model's term k (0: base, 1:
// rate) over s.scores' views.
func (s *Scratch) medianOf(bs []View, k int) float64 {
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
func pick(s *Scratch, slack, wait float64) int {
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
func within(s *Scratch, i, best int, slack, wait float64) bool {
	c, b := &s.costs[i], &s.costs[best]
	return c.cmp <= b.cmp+max(tieRel*b.cmp, tieAbs, slack) && c.queue <= b.queue+wait
}

// bodyHashBytes is how much of the body body_hash hashes (nginx users
// hash a prefix of $request_body; 512 bytes covers a system prompt's
// opening).
const bodyHashBytes = 512

// DecideBodyHash is the body_hash policy: the routable backends in
// rendezvous order of the hash of the body's first 512 bytes; the first
// serves, no load term. Candidates: the next ones in that order. total is
// the request's blocks (for the route receipt). Loop only: s is the
// calling loop's.
func DecideBodyHash(p Config, bs []View, body []byte, total int, s *Scratch) Decision {
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

func decideBodyHashKey(p Config, bs []View, key uint64, total int, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: total}
	s.scores = s.scores[:0]
	for i := range bs {
		if bs[i].Routable {
			s.scores = append(s.scores, scored{score: mix64(key ^ bs[i].URLHash), i: i})
		}
	}
	if len(s.scores) == 0 {
		return d
	}
	sortScores(s.scores, bs)
	target := s.scores[0].i
	d.Backend, d.URL, d.Reason = bs[target].ID, bs[target].URL, ReasonBodyHash
	n := min(p.MaxCandidates, len(s.scores))
	d.Candidates = make([]int, 0, n)
	for _, sc := range s.scores[:n] {
		d.Candidates = append(d.Candidates, bs[sc.i].ID)
	}
	return d
}
