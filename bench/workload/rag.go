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
	w := u.w
	rank := int(u.zipf.Uint64())
	var req Request
	req, u.buf = docQuestion(&w.opts, w.size, u.r, u.buf, w.docs[rank].text, rank,
		ragHotRanks, ragWarmRanks, ragQuestMin, ragQuestMax)
	return req, true
}

// docQuestion is a document-question request (rag, manydocs): the
// document of popularity rank as the system message, then a unique
// question of questMin to questMax tokens drawn from r into buf (the
// user's, returned for reuse); tagged hot below rank hot, warm below
// warm, else cold.
func docQuestion(opts *Options, size sizer, r *rand.Rand, buf []byte, doc string, rank, hot, warm, questMin, questMax int) (Request, []byte) {
	tokens := questMin + r.IntN(questMax-questMin+1)
	buf = appendText(buf[:0], r, size.units(tokens), nil, nil)
	tag := "cold"
	switch {
	case rank < hot:
		tag = "hot"
	case rank < warm:
		tag = "warm"
	}
	return Request{
		Messages:  []Message{{"system", doc}, {"user", string(buf)}},
		MaxTokens: opts.MaxTokens,
		Model:     opts.Model,
		Think:     opts.think(r),
		Tag:       tag,
	}, buf
}

// Reply is ignored: rag requests are single-turn.
func (u *ragUser) Reply(string) {}
