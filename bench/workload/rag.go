package workload

import (
	"fmt"
	"math/rand/v2"
)

const (
	ragDocs      = 50
	ragDocMin    = 2000 // tokens
	ragDocMax    = 8000
	ragZipfS     = 1.1 // popularity of the document of rank k ∝ (k+1)^-s
	ragQuestMin  = 16  // tokens
	ragQuestMax  = 64
	ragHotRanks  = 5  // tags: ranks below are "hot",
	ragWarmRanks = 20 // then "warm", then "cold"
)

type rag struct {
	opts Options
	size sizer
	docs [ragDocs]*pooled // by popularity rank
}

func newRAG(opts Options) (Workload, error) {
	w := &rag{opts: opts, size: sizer{opts.TokensPerWord}}
	o := newOpeners(opts.Seed)
	lr := rand.New(rand.NewPCG(uint64(opts.Seed), poolStream(kindRAGLength, 0)))
	for i := range w.docs {
		n := ragDocMin + lr.IntN(ragDocMax-ragDocMin+1)
		w.docs[i] = newPooled(opts.Seed, poolStream(kindRAGDoc, i), w.size.units(n), o.take())
	}
	return w, nil
}

func (w *rag) Name() string { return "rag" }

func (w *rag) Describe() string {
	return fmt.Sprintf("rag: one of %d documents (%d-%d tokens, as the system message) with Zipf(%.1f) popularity, "+
		"then a unique %d-%d-token question; tags hot (top %d documents), warm (top %d), cold; %s",
		ragDocs, ragDocMin, ragDocMax, ragZipfS, ragQuestMin, ragQuestMax, ragHotRanks, ragWarmRanks, tail(&w.opts))
}

func (w *rag) NewUser(id int) User {
	r := userRand(w.opts.Seed, userRAG, id)
	return &ragUser{w: w, r: r, zipf: rand.NewZipf(r, ragZipfS, 1, ragDocs-1)}
}

// ragUser is owned by its goroutine.
type ragUser struct {
	w    *rag
	r    *rand.Rand
	zipf *rand.Zipf // draws from r
	buf  []byte
}

func (u *ragUser) Next() (Request, bool) {
	w, r := u.w, u.r
	rank := int(u.zipf.Uint64())
	tokens := ragQuestMin + r.IntN(ragQuestMax-ragQuestMin+1)
	u.buf = appendText(u.buf[:0], r, w.size.units(tokens), nil, nil)
	tag := "cold"
	switch {
	case rank < ragHotRanks:
		tag = "hot"
	case rank < ragWarmRanks:
		tag = "warm"
	}
	return Request{
		Messages:  []Message{{"system", w.docs[rank].text}, {"user", string(u.buf)}},
		MaxTokens: w.opts.MaxTokens,
		Model:     w.opts.Model,
		Think:     w.opts.think(r),
		Tag:       tag,
	}, true
}

// Reply is ignored: rag requests are single-turn.
func (u *ragUser) Reply(string) {}
