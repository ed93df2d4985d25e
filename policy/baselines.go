package policy

import "math/rand/v2"

// The policies other than prefix: baselines the benchmark compares the
// prefix policy with on identical backends (issue 5). None of them asks
// or teaches the tree: the caller (shard's Router) decides on the
// connection's loop, with that loop's Scratch, and learns nothing. MatchedBlocks is always 0;
// TotalBlocks is still the request's block count (the request is keyed as
// under prefix, so X-Saltus-Route reads "0/12 round_robin" and the
// per-request cost before the decision is the same for every policy).

// decideRoundRobin: the first routable backend at or after the loop's
// cursor s.rr, in Set (snapshot) order, wrapping; the cursor moves past
// it. An unroutable (unhealthy, draining) backend is skipped and its turn
// goes to the next routable one, so the routable ones share the requests
// evenly. Candidates: the next routable ones in that order.
func decideRoundRobin(p Config, bs []View, total int, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: total}
	n, routable, target := len(bs), 0, -1
	for k := range n {
		i := (s.Turn + k) % n
		if bs[i].Routable {
			routable++
			if target < 0 {
				target = i
			}
		}
	}
	if target < 0 {
		return d
	}
	s.Turn = (target + 1) % n
	d.Backend, d.URL, d.Reason = bs[target].ID, bs[target].URL, ReasonRoundRobin
	d.Candidates = make([]int, 1, min(p.MaxCandidates, routable))
	d.Candidates[0] = d.Backend
	for k := 1; k < n && len(d.Candidates) < cap(d.Candidates); k++ {
		if i := (target + k) % n; bs[i].Routable {
			d.Candidates = append(d.Candidates, bs[i].ID)
		}
	}
	return d
}

// decideLeastRequest: power of two choices (Mitzenmacher). Two distinct
// routable backends drawn uniformly from the loop's source s.rng; the one
// with fewer requests in flight serves, a tie going to the first drawn
// (uniformly random, so an idle fleet is not biased to low IDs). A single
// routable backend serves alone. Candidates: the other routable backends,
// fewest in flight first, then lower ID.
func decideLeastRequest(p Config, bs []View, total int, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: total}
	s.idx = s.idx[:0]
	for i := range bs {
		if bs[i].Routable {
			s.idx = append(s.idx, i)
		}
	}
	if len(s.idx) == 0 {
		return d
	}
	target := s.idx[0]
	if len(s.idx) > 1 {
		a, b := drawTwo(s.Rand, len(s.idx))
		target = s.idx[a]
		if bs[s.idx[b]].InFlight < bs[target].InFlight {
			target = s.idx[b]
		}
	}
	d.Backend, d.URL, d.Reason = bs[target].ID, bs[target].URL, ReasonLeastRequest
	n := min(p.MaxCandidates, len(s.idx))
	d.Candidates = appendByLoad(append(make([]int, 0, n), d.Backend), bs, n)
	return d
}

// drawTwo returns two distinct uniform indices in [0, n), n ≥ 2.
func drawTwo(r *rand.Rand, n int) (a, b int) {
	a, b = r.IntN(n), r.IntN(n-1)
	if b >= a {
		b++
	}
	return a, b
}

// Bounded load of consistent_hash (Mirrokni, Thorup, Zadimoghaddam,
// "Consistent Hashing with Bounded Loads", SODA 2018) with c = 1.25: no
// backend takes a request that would put it above ⌈c × the average
// in-flight count⌉. c is hashBalanceNum/hashBalanceDen, integers so that
// the bound is exact.
const (
	hashBalanceNum = 5
	hashBalanceDen = 4
)

// hashCapacity is ⌈c × (total + 1) / n⌉: the most requests a backend may
// have in flight once it takes this one, total being the routable
// backends' in-flight sum and n their count. The arriving request counts
// in the average, as in the paper, so an idle fleet's capacity is 1.
func hashCapacity(total int64, n int) int64 {
	num := hashBalanceNum * (total + 1)
	den := int64(hashBalanceDen * n)
	return (num + den - 1) / den
}

// decideConsistentHash: the routable backends in rendezvous order of the
// request's first min(4, len(keys)) block keys (keysHash: the same order
// the prefix policy uses for a cold prefix, so requests sharing their
// first 64 tokens agree, in every replica); the first one with fewer in
// flight than hashCapacity serves. One always has: if all n had at least
// the capacity, their sum would be at least c × (total + 1) > total.
// Rendezvous rather than a ring of virtual nodes: the same 1/N movement
// when a backend comes or goes, no ring to build, and a skipped backend's
// overflow goes to a key-dependent next backend, spread over the fleet,
// rather than always to its ring neighbour. A skip sets Diverted and
// Preferred. Candidates: the walk goes on in rendezvous order after
// Backend, then wraps to the ones skipped. keys must not be empty.
func decideConsistentHash(p Config, bs []View, keys []uint64, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, RunnerUp: -1, TotalBlocks: len(keys)}
	s.scores = rendezvous(s.scores[:0], bs, keys)
	n := len(s.scores)
	if n == 0 {
		return d
	}
	var total int64
	for _, sc := range s.scores {
		total += bs[sc.i].InFlight
	}
	limit := hashCapacity(total, n)
	k := 0
	for k < n && bs[s.scores[k].i].InFlight >= limit {
		k++
	}
	if k == n {
		// Unreachable while in-flight counts are not negative (see
		// above); the first in order is as good as any.
		k = 0
	}
	target := s.scores[k].i
	if k > 0 {
		d.Diverted, d.Preferred = true, bs[s.scores[0].i].ID
	}
	d.Backend, d.URL, d.Reason = bs[target].ID, bs[target].URL, ReasonConsistentHash
	c := min(p.MaxCandidates, n)
	d.Candidates = make([]int, 0, c)
	for j := range c {
		d.Candidates = append(d.Candidates, bs[s.scores[(k+j)%n].i].ID)
	}
	return d
}
