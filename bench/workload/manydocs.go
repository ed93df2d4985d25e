package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

const (
	// manydocsDocs documents of manydocsDocMin to manydocsDocMax tokens
	// are about 192k tokens, 1.5× the KV of the fleet (8 a100-13b
	// engines of 16,384 tokens): no placement keeps them all, so what a
	// router evicts matters.
	manydocsDocs   = 64
	manydocsDocMin = 2000 // tokens
	manydocsDocMax = 4000
	// manydocsZipfS is flatter than rag's 1.1 (the top document takes
	// 14 % of requests, the top 8 46 %, the top 24 71 %): the working set, not a few hot
	// documents, is what must fit. math/rand/v2's Zipf needs s > 1, so
	// the draw is by inverse CDF over the ranks' weights.
	manydocsZipfS     = 0.8
	manydocsQuestMin  = 16 // tokens
	manydocsQuestMax  = 64
	manydocsHotRanks  = 8  // tags: ranks below are "hot",
	manydocsWarmRanks = 24 // then "warm", then "cold"
)

type manydocs struct {
	opts Options
	size sizer
	docs [manydocsDocs]*pooled // by popularity rank
	cdf  [manydocsDocs]float64 // cdf[k]: share of requests on ranks 0..k
}

func newManydocs(opts Options) (Workload, error) {
	w := &manydocs{opts: opts, size: sizer{opts.TokensPerWord}}
	o := newOpeners(opts.Seed)
	lr := rand.New(rand.NewPCG(uint64(opts.Seed), poolStream(kindManydocsLength, 0)))
	for i := range w.docs {
		n := manydocsDocMin + lr.IntN(manydocsDocMax-manydocsDocMin+1)
		w.docs[i] = newPooled(opts.Seed, poolStream(kindManydocsDoc, i), w.size.units(n), o.take())
	}
	sum := 0.0
	for k := range w.cdf {
		sum += math.Pow(float64(k+1), -manydocsZipfS)
		w.cdf[k] = sum
	}
	for k := range w.cdf {
		w.cdf[k] /= sum
	}
	w.cdf[manydocsDocs-1] = 1 // no rounding gap past the last rank
	return w, nil
}

func (w *manydocs) Name() string { return "manydocs" }

func (w *manydocs) Describe() string {
	return fmt.Sprintf("manydocs: one of %d documents (%d-%d tokens, as the system message; more than 8 engines of 16k tokens hold) "+
		"with Zipf(%.1f) popularity, then a unique %d-%d-token question; tags hot (top %d documents), warm (top %d), cold; %s",
		manydocsDocs, manydocsDocMin, manydocsDocMax, manydocsZipfS, manydocsQuestMin, manydocsQuestMax,
		manydocsHotRanks, manydocsWarmRanks, tail(&w.opts))
}

func (w *manydocs) NewUser(id int) User {
	return &manydocsUser{w: w, r: userRand(w.opts.Seed, userManydocs, id)}
}

// manydocsUser is owned by its goroutine.
type manydocsUser struct {
	w   *manydocs
	r   *rand.Rand
	buf []byte
}

func (u *manydocsUser) Next() (Request, bool) {
	w := u.w
	rank := min(sort.SearchFloat64s(w.cdf[:], u.r.Float64()), manydocsDocs-1)
	var req Request
	req, u.buf = docQuestion(&w.opts, w.size, u.r, u.buf, w.docs[rank].text, rank,
		manydocsHotRanks, manydocsWarmRanks, manydocsQuestMin, manydocsQuestMax)
	return req, true
}

// Reply is ignored: manydocs requests are single-turn.
func (u *manydocsUser) Reply(string) {}
