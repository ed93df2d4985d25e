package policy

import (
	"math/rand/v2"
	"slices"

	"github.com/saltus-lb/saltus/tree"
)

// Stage 7: the routing decision, a pure function of the tree's hits, the
// request's keys and the backends' state (plus, for round_robin and
// least_request, the deciding loop's cursor and random source in its
// Scratch). This file holds the ranvier policy and what the tree's
// policies share; cost.go the prefix policy and body_hash; baselines.go
// the others.

// Kind is a routing policy, parsed from its name (Parse).
type Kind uint8

// The routing policies, in the order of Names.
const (
	// Prefix: the least estimated time to first token (cost.go): queue
	// wait plus the prefill of the blocks a backend does not hold, with
	// the rules there for queueing backends, hot and cold prefixes. The
	// default.
	Prefix Kind = iota
	// RoundRobin: the routable backends in Set order, in turn.
	RoundRobin
	// LeastRequest: power of two choices, the one of two random routable
	// backends with fewer requests in flight.
	LeastRequest
	// ConsistentHash: rendezvous hash of the first blocks with bounded
	// load (Mirrokni et al.), no tree.
	ConsistentHash
	// BodyHash: rendezvous hash of the first 512 bytes of the request
	// body, no load term (nginx's `hash $request_body consistent`), no
	// tree.
	BodyHash
	// Ranvier: the deepest routable holder of the request's prefix in the
	// tree (one per route), else the rendezvous hash of the first blocks;
	// a pick above LoadFactor × the median in-flight count goes to the
	// least loaded (Ranvier's rule; prefix before issue 11).
	Ranvier
)

// names are the policies' names (--policy, the YAML's router.policy), in
// Kind order.
var names = [...]string{"prefix", "round_robin", "least_request", "consistent_hash", "body_hash", "ranvier"}

// Names returns the valid policy names, the default first, in Kind
// order; the caller may keep and change the slice. Any goroutine.
func Names() []string { return slices.Clone(names[:]) }

// String is k's name.
func (k Kind) String() string {
	if int(k) < len(names) {
		return names[k]
	}
	return "unknown"
}

// Parse maps a policy name to its Kind; false if unknown.
func Parse(name string) (Kind, bool) {
	i := slices.Index(names[:], name)
	return Kind(max(i, 0)), i >= 0
}

// UsesTree: the policy asks and teaches the tree (prefix and ranvier).
func (k Kind) UsesTree() bool { return k == Prefix || k == Ranvier }

// Route reasons, as X-Saltus-Route and saltus_route_decisions_total name
// them.
const (
	// ReasonTree: the deepest routable holder of the request's prefix.
	ReasonTree = "tree"
	// ReasonHash: no routable holder; rendezvous hash of the first blocks.
	ReasonHash = "hash"
	// ReasonOverride: the request's session header (shard.Config.SessionHeader)
	// names a session pinned to a routable backend that is not queueing.
	ReasonOverride = "override"
	// ReasonFallback: routed without the tree (the owner's mailbox was
	// full, or the request has no block key: shorter than a block, or a
	// non-routed endpoint): rendezvous hash of the keys if any, else the
	// least loaded backend. Also consistent_hash's answer to a request
	// without a block key.
	ReasonFallback = "fallback"
	// ReasonRoundRobin, ReasonLeastRequest, ReasonConsistentHash and
	// ReasonBodyHash: the policy of that name decided (baselines.go); the tree was not asked.
	ReasonRoundRobin     = "round_robin"
	ReasonLeastRequest   = "least_request"
	ReasonConsistentHash = "consistent_hash"
	ReasonBodyHash       = "body_hash"
)

// Decision is where a request goes and why.
type Decision struct {
	// Backend is the chosen backend's ID, -1 if no backend is routable.
	Backend int    `json:"backend"`
	URL     string `json:"url"`
	Reason  string `json:"reason"` // one of the Reason constants
	// MatchedBlocks is how many leading blocks of the request the tree
	// says Backend holds; TotalBlocks is the request's full blocks.
	MatchedBlocks int `json:"matched_blocks"`
	TotalBlocks   int `json:"total_blocks"`
	// Candidates are the backend IDs to try, in order (for a connect error
	// before the first byte): Backend first, then, by policy, the next
	// ones in rendezvous order (prefix, ranvier, consistent_hash,
	// body_hash), in Set order (round_robin), or by load (least_request;
	// prefix and ranvier without keys).
	Candidates []int `json:"candidates"`
	// Diverted: the reason's first pick was over the load bound and
	// Backend is another one: the least loaded routable backend (ranvier:
	// bound LoadFactor × median in-flight), or the next in rendezvous
	// order within the bound (consistent_hash); prefix: Backend holds
	// less than the deepest holder (cost.go). Preferred is that first
	// pick's ID (-1 when not diverted). Not in the contract's Decision;
	// added fields only.
	Diverted  bool `json:"diverted"`
	Preferred int  `json:"preferred"`
	// The prefix policy's estimates (cost.go), in milliseconds: EstMS is
	// Backend's estimated time to first token, RunnerUp the routable
	// backend with the next lowest estimate (-1: none) and RunnerUpMS its
	// estimate. Table is every routable backend's terms, filled for
	// Explain only.
	EstMS      float64     `json:"est_ms"`
	RunnerUp   int         `json:"runner_up"`
	RunnerUpMS float64     `json:"runner_up_ms"`
	Table      []Candidate `json:"table,omitempty"`
	// Model is the request's model and Pool the IDs of the backends that
	// serve it (shard/pools.go; empty: every backend), for Explain only.
	// The caller fills them.
	Model string `json:"model,omitempty"`
	Pool  []int  `json:"pool,omitempty"`
}

// View is one backend as the decision sees it: plain values the caller
// reads from the backend once per decision (shard's views and
// costInputs). Only ID, URL, URLHash, InFlight and Routable matter to
// every policy; the rest are the prefix policy's inputs (cost.go), zero
// when unknown.
type View struct {
	ID       int    // the backend's ID, what Decision names
	URL      string // its base URL
	Name     string // its name, for Explain's table
	URLHash  uint64 // URLHash(URL): its rendezvous identity
	InFlight int64  // requests in flight there (the router's, and peers' when shared)
	Routable bool   // healthy, not draining, in the request's pool
	// Pending is the prefill tokens sent there and not yet answered.
	Pending int64
	// QueueOff is 1 − b.QueueFactor(): the share of Pending a new
	// request does not wait for (0 on vLLM, and in tests that leave it).
	QueueOff float64
	// Base and Rate are its prefill model: base seconds and tokens per
	// second; Rate 0: the defaults (backend.DefaultPrefillBase and
	// DefaultPrefillTokensPerSec).
	Base float64
	Rate float64
	// Engine: the engine's own load (Waiting, Running, KVUsage, KVCap) is
	// scraped and fresh.
	Engine    bool
	Waiting   int64
	Running   int64
	KVUsage   float64
	Footprint int64   // b.Footprint(): prompt tokens of the prefixes in use there
	KVCap     int64   // the engine's KV capacity in tokens when scraped; 0: unknown
	Slots     int64   // b.Slots(): the engine's learned running limit; 0: unknown
	Service   float64 // b.Service() in seconds: how long an answer holds a slot; 0: unknown
	Pinned    int64   // b.Pinned(): KV tokens the router's requests in flight there pin
	Shared    bool    // a request of this request's group is in flight there (shard's footprints)
	Evented   bool    // b.Evented(): its engine's KV events feed the tree (truth.go)
	// Decoding reads how long the router's requests decoding there are
	// expected to run on (backend.Backend.Remaining); nil: none tracked.
	// Read only when the backend's slots are full (cost.go's slot wait).
	Decoding Decoding
}

// Decoding is what a backend tells of its requests decoding: appended to
// dst, each one's expected remaining decode in seconds from now (unix
// nanoseconds). backend.Backend implements it.
type Decoding interface {
	Remaining(now int64, dst []float64) []float64
}

// Scratch is reusable decision memory and the per-loop state of the
// stateful policies. Owned by one loop: each event loop decides with its
// own. The caller sets the exported fields; the rest are the decision's.
type Scratch struct {
	// Turn is round_robin's cursor: the view index the next turn starts
	// scanning at. One per loop, so no atomic on the hot path: each loop
	// cycles through the fleet on its own, starting at its own loop
	// index. Each backend thus gets within one request of 1/n of every
	// loop's requests, within `loops` of 1/n of all of them; what is given
	// up is one strict global order, which a shared atomic would buy with
	// a contended cache line on every request.
	Turn int
	// Rand is least_request's random source, one per loop (math/rand/v2's
	// global functions would be shared state); nil for other policies.
	Rand *rand.Rand
	// The prefix policy's per-decision inputs, set by the caller before
	// each decision: Pin, the session's backend ID (-1: none); Home, the
	// view index of the backend the request's prefix group was last sent
	// to (shard's footprints), -1 if none: a cold prefix goes back there
	// when it costs about the same; Explain: fill Decision.Table.
	Pin     int
	Home    int
	Explain bool
	// Now is the decision's time (unix nanoseconds), which View.Decoding
	// counts from; 0: no tracked request is read.
	Now int64

	loads  []int64
	scores []scored
	idx    []int // indices of the routable views (least_request)
	// cands backs the prefix policy's Decision.Candidates: valid until the
	// loop's next decision (the caller reads it at once; Explain clones).
	cands []int
	// tie is the keyless fallback's cursor (leastInTurn): the least
	// loaded backends' ties take turns.
	tie int
	// The prefix policy's (cost.go): per view, its terms.
	costs []cost
	fl    []float64 // medianModel's
	ends  []float64 // slotWait's
}

type scored struct {
	score uint64
	i     int // index into the views
}

// Decide picks a backend of bs by p's policy. hits are the tree's holders
// of keys (empty when the tree was not asked); useTree false makes the
// prefix policy's reason fallback. round_robin, least_request and
// consistent_hash ignore hits and useTree (the caller asks the tree only
// for prefix and ranvier), and
// consistent_hash without keys decides as prefix does without the tree:
// the least loaded backend, reason fallback. It allocates only the
// Candidates slice. Loop only: s is the calling loop's.
func Decide(p Config, bs []View, hits []tree.Hit, keys []uint64, useTree bool, s *Scratch) Decision {
	switch p.Kind {
	case Prefix:
		if len(keys) > 0 {
			return decideCost(p, bs, hits, keys, useTree, s)
		}
	case Ranvier:
	case BodyHash:
		// The caller calls DecideBodyHash with the body; here (tests,
		// Explain without a body) the keys stand in for it.
		return decideBodyHashKey(p, bs, keysHash(keys), len(keys), s)
	case RoundRobin:
		return decideRoundRobin(p, bs, len(keys), s)
	case LeastRequest:
		return decideLeastRequest(p, bs, len(keys), s)
	case ConsistentHash:
		if len(keys) > 0 {
			return decideConsistentHash(p, bs, keys, s)
		}
		hits, useTree = nil, false
	default:
		panic("BUG: unknown policy kind")
	}
	return decideRanvier(p, bs, hits, keys, useTree, s)
}

// decideRanvier is the ranvier policy (and prefix's for a request without
// keys): the deepest routable holder, else the rendezvous hash of the
// first blocks, else the least loaded; a pick above loadBound goes to the
// least loaded.
func decideRanvier(p Config, bs []View, hits []tree.Hit, keys []uint64, useTree bool, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: len(keys)}
	s.loads = s.loads[:0]
	least := -1
	for i := range bs {
		if !bs[i].Routable {
			continue
		}
		s.loads = append(s.loads, bs[i].InFlight)
		if least < 0 || bs[i].InFlight < bs[least].InFlight ||
			(bs[i].InFlight == bs[least].InFlight && bs[i].ID < bs[least].ID) {
			least = i
		}
	}
	if least < 0 {
		return d
	}

	// The first pick: the deepest routable holder, then the rendezvous
	// hash, then the least loaded.
	target, matched := -1, 0
	if useTree {
		for _, h := range hits {
			i := indexOf(bs, h.Backend)
			if i < 0 || !bs[i].Routable || h.Blocks <= 0 {
				continue // unroutable or unknown holders are skipped
			}
			if target < 0 || h.Blocks > matched ||
				(h.Blocks == matched && (bs[i].InFlight < bs[target].InFlight ||
					(bs[i].InFlight == bs[target].InFlight && bs[i].ID < bs[target].ID))) {
				target, matched = i, h.Blocks
			}
		}
	}
	s.scores = s.scores[:0]
	if len(keys) > 0 {
		s.scores = rendezvous(s.scores, bs, keys)
	}
	switch {
	case target >= 0:
		d.Reason = ReasonTree
	case len(s.scores) > 0:
		target = s.scores[0].i
		d.Reason = ReasonHash
	default:
		target = leastInTurn(bs, least, s)
		d.Reason = ReasonFallback
	}
	if !useTree {
		d.Reason = ReasonFallback
	}

	// Bounded load: skip a target far above the median.
	if bs[target].InFlight > loadBound(p, s.loads) && target != least {
		d.Diverted, d.Preferred = true, bs[target].ID
		target = least
		matched = 0
		for _, h := range hits {
			if h.Backend == bs[target].ID && useTree {
				matched = h.Blocks
			}
		}
	}
	d.Backend, d.URL, d.MatchedBlocks = bs[target].ID, bs[target].URL, matched

	n := min(p.MaxCandidates, len(s.loads))
	d.Candidates = append(s.cands[:0], d.Backend) // the loop's: see Scratch.cands
	for _, sc := range s.scores {
		if len(d.Candidates) >= n {
			break
		}
		if sc.i != target {
			d.Candidates = append(d.Candidates, bs[sc.i].ID)
		}
	}
	d.Candidates = appendByLoad(d.Candidates, bs, n) // no keys: the others by load
	s.cands = d.Candidates
	return d
}

// leastInTurn is a routable view as loaded as bs[least], the ties taken in
// turn by the loop's cursor rather than the lowest id: requests without
// a key (shorter than a block) sent one at a time to an idle fleet spread
// over it instead of all landing on one backend.
func leastInTurn(bs []View, least int, s *Scratch) int {
	n := len(bs)
	start := s.tie % n
	s.tie++
	for k := range n {
		if i := (start + k) % n; bs[i].Routable && bs[i].InFlight == bs[least].InFlight {
			return i
		}
	}
	return least
}

// rendezvous appends the routable views' (index, score) for keys to dst,
// sorted by rendezvous order: highest score first, a tie (a 64-bit
// collision) by lower id. The order is a function of the first blocks and
// the backends' URLs alone, the same in every router replica.
func rendezvous(dst []scored, bs []View, keys []uint64) []scored {
	kh := keysHash(keys)
	for i := range bs {
		if bs[i].Routable {
			dst = append(dst, scored{score: mix64(kh ^ bs[i].URLHash), i: i})
		}
	}
	sortScores(dst, bs)
	return dst
}

// sortScores sorts by score, highest first, a tie by lower id.
func sortScores(dst []scored, bs []View) {
	slices.SortFunc(dst, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return bs[a.i].ID - bs[b.i].ID
	})
}

// appendByLoad appends routable backends not yet in cands, fewest in
// flight first, then lower id, until cands has n. n must not exceed the
// routable backends.
func appendByLoad(cands []int, bs []View, n int) []int {
	for len(cands) < n {
		next := -1
		for i := range bs {
			if !bs[i].Routable || slices.Contains(cands, bs[i].ID) {
				continue
			}
			if next < 0 || bs[i].InFlight < bs[next].InFlight ||
				(bs[i].InFlight == bs[next].InFlight && bs[i].ID < bs[next].ID) {
				next = i
			}
		}
		cands = append(cands, bs[next].ID)
	}
	return cands
}

// loadBound is the in-flight count above which a target is skipped:
// LoadFactor × the median of loads, at least LoadFloor. loads is reordered.
func loadBound(p Config, loads []int64) int64 {
	slices.Sort(loads)
	n := len(loads)
	var median float64
	if n%2 == 1 {
		median = float64(loads[n/2])
	} else {
		median = float64(loads[n/2-1]+loads[n/2]) / 2
	}
	return max(int64(p.LoadFactor*median), p.LoadFloor)
}

func indexOf(bs []View, id int) int {
	for i := range bs {
		if bs[i].ID == id {
			return i
		}
	}
	return -1
}

// RendezvousBlocks is how many leading keys the cold-prefix hash combines:
// four blocks (64 tokens at block size 16). Requests that share at least
// that much (a system prompt) agree on their cold backend; requests whose
// openings differ within it spread over the fleet.
const RendezvousBlocks = 4

// keysHash combines the first min(4, len(keys)) keys. Keys chain (key i
// names its whole prefix), so this is a function of that prefix alone, the
// same in every router replica.
func keysHash(keys []uint64) uint64 {
	h := uint64(0x243f_6a88_85a3_08d3) // arbitrary; part of cross-replica agreement
	for _, k := range keys[:min(RendezvousBlocks, len(keys))] {
		h = mix64(h ^ k)
	}
	return h
}

// URLHash is FNV-1a of a backend URL, finalized: with keysHash it gives
// every (prefix, backend) pair an independent score, the same in every
// replica that names the backend by the same URL.
func URLHash(url string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(url); i++ {
		h ^= uint64(url[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is the splitmix64 finalizer: a bijection with full avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
