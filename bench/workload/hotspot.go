package workload

import (
	"fmt"
	"math/rand/v2"
)

const (
	hotspotHotTokens   = 2000 // the hot system prompt: the 2,000 words
	hotspotHotPercent  = 80
	hotspotOthers      = 30
	hotspotOtherMin    = 1000 // tokens
	hotspotOtherMax    = 2000
	hotspotTurnMin     = 16 // tokens of the unique user turn
	hotspotTurnMax     = 64
	hotspotOtherStream = 1 << 20 // pool index offset of the other prompts' lengths
)

type hotspot struct {
	opts   Options
	size   sizer
	hot    *pooled
	others [hotspotOthers]*pooled
}

func newHotspot(opts Options) (Workload, error) {
	w := &hotspot{opts: opts, size: sizer{opts.TokensPerWord}}
	o := newOpeners(opts.Seed)
	w.hot = newPooled(opts.Seed, poolStream(kindHotspotSystem, 0), w.size.units(hotspotHotTokens), o.take())
	lr := rand.New(rand.NewPCG(uint64(opts.Seed), poolStream(kindHotspotSystem, hotspotOtherStream)))
	for i := range w.others {
		n := hotspotOtherMin + lr.IntN(hotspotOtherMax-hotspotOtherMin+1)
		w.others[i] = newPooled(opts.Seed, poolStream(kindHotspotSystem, i+1), w.size.units(n), o.take())
	}
	return w, nil
}

func (w *hotspot) Name() string { return "hotspot" }

func (w *hotspot) Describe() string {
	return fmt.Sprintf("hotspot: %d%% of requests behind one %d-token system prompt, the rest behind one of %d others "+
		"(%d-%d tokens, uniform), then a unique %d-%d-token user turn; tags hot, other; %s",
		hotspotHotPercent, hotspotHotTokens, hotspotOthers, hotspotOtherMin, hotspotOtherMax,
		hotspotTurnMin, hotspotTurnMax, tail(&w.opts))
}

func (w *hotspot) NewUser(id int) User {
	return &hotspotUser{w: w, r: userRand(w.opts.Seed, userHotspot, id)}
}

// hotspotUser is owned by its goroutine.
type hotspotUser struct {
	w   *hotspot
	r   *rand.Rand
	buf []byte
}

func (u *hotspotUser) Next() (Request, bool) {
	w, r := u.w, u.r
	sys, tag := w.hot, "hot"
	if r.IntN(100) >= hotspotHotPercent {
		sys, tag = w.others[r.IntN(hotspotOthers)], "other"
	}
	turn := hotspotTurnMin + r.IntN(hotspotTurnMax-hotspotTurnMin+1)
	u.buf = appendText(u.buf[:0], r, w.size.units(turn), nil, nil)
	return Request{
		Messages:  []Message{{"system", sys.text}, {"user", string(u.buf)}},
		MaxTokens: w.opts.MaxTokens,
		Model:     w.opts.Model,
		Think:     w.opts.think(r),
		Tag:       tag,
	}, true
}

// Reply is ignored: hotspot requests are single-turn.
func (u *hotspotUser) Reply(string) {}
