package shard

import (
	"slices"

	"github.com/saltus-lb/saltus/tree"
)

// Stage 7: the routing decision, a pure function of the tree's hits, the
// request's keys and the backends' state.

// Route reasons, as X-Saltus-Route and saltus_route_decisions_total name
// them.
const (
	// ReasonTree: the deepest routable holder of the request's prefix.
	ReasonTree = "tree"
	// ReasonHash: no routable holder; rendezvous hash of the first blocks.
	ReasonHash = "hash"
	// ReasonOverride is reserved for a session header (a later issue).
	ReasonOverride = "override"
	// ReasonFallback: routed without the tree (the owner's mailbox was
	// full, or the request has no block key: shorter than a block, or a
	// non-routed endpoint): rendezvous hash of the keys if any, else the
	// least loaded backend.
	ReasonFallback = "fallback"
)

// Decision is where a request goes and why.
type Decision struct {
	// Backend is the chosen backend's ID, -1 if no backend is routable.
	Backend int    `json:"backend"`
	URL     string `json:"url"`
	Reason  string `json:"reason"` // ReasonTree, ReasonHash, ReasonOverride or ReasonFallback
	// MatchedBlocks is how many leading blocks of the request the tree
	// says Backend holds; TotalBlocks is the request's full blocks.
	MatchedBlocks int `json:"matched_blocks"`
	TotalBlocks   int `json:"total_blocks"`
	// Candidates are the backend IDs to try, in order: Backend first, then
	// the next ones in rendezvous order (for a connect error before the
	// first byte).
	Candidates []int `json:"candidates"`
	// Diverted: the reason's first pick was over the load bound
	// (LoadFactor × median in-flight) and Backend is the least loaded
	// routable backend instead; Preferred is that first pick's ID (-1 when
	// not diverted). Not in the contract's Decision; added fields only.
	Diverted  bool `json:"diverted"`
	Preferred int  `json:"preferred"`
}

// view is one backend as the decision sees it, read once per decision.
type view struct {
	id       int
	url      string
	urlHash  uint64
	inFlight int64
	routable bool
}

// policy holds the decision's knobs.
type policy struct {
	loadFactor    float64
	loadFloor     int64
	maxCandidates int
}

// scratch is reusable decision memory, owned by one loop.
type scratch struct {
	loads  []int64
	scores []scored
}

type scored struct {
	score uint64
	i     int // index into the views
}

// decide picks a backend. hits are the tree's holders of keys (empty when
// the tree was not asked); useTree false makes the reason fallback. It
// allocates only the Candidates slice.
func decide(p policy, bs []view, hits []tree.Hit, keys []uint64, useTree bool, s *scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, TotalBlocks: len(keys)}
	s.loads = s.loads[:0]
	least := -1
	for i := range bs {
		if !bs[i].routable {
			continue
		}
		s.loads = append(s.loads, bs[i].inFlight)
		if least < 0 || bs[i].inFlight < bs[least].inFlight ||
			(bs[i].inFlight == bs[least].inFlight && bs[i].id < bs[least].id) {
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
			if i < 0 || !bs[i].routable || h.Blocks <= 0 {
				continue // unroutable or unknown holders are skipped
			}
			if target < 0 || h.Blocks > matched ||
				(h.Blocks == matched && (bs[i].inFlight < bs[target].inFlight ||
					(bs[i].inFlight == bs[target].inFlight && bs[i].id < bs[target].id))) {
				target, matched = i, h.Blocks
			}
		}
	}
	s.scores = s.scores[:0]
	if len(keys) > 0 {
		kh := keysHash(keys)
		for i := range bs {
			if bs[i].routable {
				s.scores = append(s.scores, scored{score: mix64(kh ^ bs[i].urlHash), i: i})
			}
		}
		// Highest score first; a tie (a 64-bit collision) by lower id.
		slices.SortFunc(s.scores, func(a, b scored) int {
			switch {
			case a.score > b.score:
				return -1
			case a.score < b.score:
				return 1
			}
			return bs[a.i].id - bs[b.i].id
		})
	}
	switch {
	case target >= 0:
		d.Reason = ReasonTree
	case len(s.scores) > 0:
		target = s.scores[0].i
		d.Reason = ReasonHash
	default:
		target = least
		d.Reason = ReasonFallback
	}
	if !useTree {
		d.Reason = ReasonFallback
	}

	// Bounded load: skip a target far above the median.
	if bs[target].inFlight > loadBound(p, s.loads) && target != least {
		d.Diverted, d.Preferred = true, bs[target].id
		target = least
		matched = 0
		for _, h := range hits {
			if h.Backend == bs[target].id && useTree {
				matched = h.Blocks
			}
		}
	}
	d.Backend, d.URL, d.MatchedBlocks = bs[target].id, bs[target].url, matched

	n := min(p.maxCandidates, len(s.loads))
	d.Candidates = make([]int, 0, n)
	d.Candidates = append(d.Candidates, d.Backend)
	for _, sc := range s.scores {
		if len(d.Candidates) >= n {
			break
		}
		if sc.i != target {
			d.Candidates = append(d.Candidates, bs[sc.i].id)
		}
	}
	if len(d.Candidates) < n { // no keys: the others by load, then id
		for len(d.Candidates) < n {
			next := -1
			for i := range bs {
				if !bs[i].routable || slices.Contains(d.Candidates, bs[i].id) {
					continue
				}
				if next < 0 || bs[i].inFlight < bs[next].inFlight ||
					(bs[i].inFlight == bs[next].inFlight && bs[i].id < bs[next].id) {
					next = i
				}
			}
			d.Candidates = append(d.Candidates, bs[next].id)
		}
	}
	return d
}

// loadBound is the in-flight count above which a target is skipped:
// LoadFactor × the median of loads, at least LoadFloor. loads is reordered.
func loadBound(p policy, loads []int64) int64 {
	slices.Sort(loads)
	n := len(loads)
	var median float64
	if n%2 == 1 {
		median = float64(loads[n/2])
	} else {
		median = float64(loads[n/2-1]+loads[n/2]) / 2
	}
	return max(int64(p.loadFactor*median), p.loadFloor)
}

func indexOf(bs []view, id int) int {
	for i := range bs {
		if bs[i].id == id {
			return i
		}
	}
	return -1
}

// rendezvousBlocks is how many leading keys the cold-prefix hash combines:
// four blocks (64 tokens at block size 16). Requests that share at least
// that much (a system prompt) agree on their cold backend; requests whose
// openings differ within it spread over the fleet.
const rendezvousBlocks = 4

// keysHash combines the first min(4, len(keys)) keys. Keys chain (key i
// names its whole prefix), so this is a function of that prefix alone, the
// same in every router replica.
func keysHash(keys []uint64) uint64 {
	h := uint64(0x243f_6a88_85a3_08d3) // arbitrary; part of cross-replica agreement
	for _, k := range keys[:min(rendezvousBlocks, len(keys))] {
		h = mix64(h ^ k)
	}
	return h
}

// urlHash is FNV-1a of a backend URL, finalized: with keysHash it gives
// every (prefix, backend) pair an independent score, the same in every
// replica that names the backend by the same URL.
func urlHash(url string) uint64 {
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
