package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

const (
	multiturnSystems      = 4
	multiturnSystemTokens = 400
	multiturnMinTurns     = 3
	multiturnMaxTurns     = 10
	multiturnUserMin      = 20 // tokens per user message
	multiturnUserMax      = 200
	multiturnBranchPct    = 20
)

type multiturn struct {
	opts    Options
	size    sizer
	systems [multiturnSystems]*pooled
}

func newMultiturn(opts Options) (Workload, error) {
	w := &multiturn{opts: opts, size: sizer{opts.TokensPerWord}}
	o := newOpeners(opts.Seed)
	for i := range w.systems {
		w.systems[i] = newPooled(opts.Seed, poolStream(kindMultiturnSystem, i), w.size.units(multiturnSystemTokens), o.take())
	}
	return w, nil
}

func (w *multiturn) Name() string { return "multiturn" }

func (w *multiturn) Describe() string {
	return fmt.Sprintf("multiturn: conversations of %d-%d turns behind one of %d system prompts (%d tokens); "+
		"user messages %d-%d tokens, the assistant's replies appended; %d%% of conversations branch "+
		"(drop the last k turns, continue differently); %s",
		multiturnMinTurns, multiturnMaxTurns, multiturnSystems, multiturnSystemTokens,
		multiturnUserMin, multiturnUserMax, multiturnBranchPct, tail(&w.opts))
}

func (w *multiturn) NewUser(id int) User {
	return &multiturnUser{w: w, r: userRand(w.opts.Seed, userMultiturn, id)}
}

// multiturnUser holds one conversation at a time. Owned by its goroutine.
type multiturnUser struct {
	w   *multiturn
	r   *rand.Rand
	buf []byte
	// hist is the conversation: the system prompt, then user and
	// assistant messages in turn, and while a request is out (pending)
	// its user message last. At most 2*multiturnMaxTurns+1 messages.
	hist    []Message
	pending bool
	left    int // requests left in this conversation
	sent    int // requests sent in this conversation
	// branchAt > 0: when sent reaches it, drop the last branchDrop turns.
	branchAt, branchDrop int
}

func (u *multiturnUser) Next() (Request, bool) {
	w, r := u.w, u.r
	if u.pending { // no Reply: the request failed; forget its turn
		u.forget()
	}
	tag := ""
	if u.left == 0 {
		u.hist = append(u.hist[:0], Message{"system", w.systems[r.IntN(multiturnSystems)].text})
		u.left = multiturnMinTurns + r.IntN(multiturnMaxTurns-multiturnMinTurns+1)
		u.sent, u.branchAt, u.branchDrop = 0, 0, 0
		if r.IntN(100) < multiturnBranchPct {
			// Branch after at least two turns and before the last, back
			// to at least the first: the branch shares a real history.
			u.branchAt = 2 + r.IntN(u.left-2)
			u.branchDrop = 1 + r.IntN(u.branchAt-1)
		}
	} else if u.branchAt > 0 && u.sent == u.branchAt {
		turns := (len(u.hist) - 1) / 2
		u.hist = u.hist[:1+2*(turns-min(u.branchDrop, turns))]
		tag = "branch"
	}
	tokens := multiturnUserMin + r.IntN(multiturnUserMax-multiturnUserMin+1)
	u.buf = appendText(u.buf[:0], r, w.size.units(tokens), nil, nil)
	u.hist = append(u.hist, Message{"user", string(u.buf)})
	u.pending = true
	u.sent++
	u.left--
	if tag == "" {
		tag = fmt.Sprintf("turn%d", len(u.hist)/2)
	}
	return Request{
		Messages:  slices.Clone(u.hist),
		MaxTokens: w.opts.MaxTokens,
		Model:     w.opts.Model,
		Think:     w.opts.think(r),
		Tag:       tag,
	}, true
}

// Reply appends the answer to the conversation; "" (a failed request)
// forgets the turn instead, as a user would ask again.
func (u *multiturnUser) Reply(text string) {
	if !u.pending {
		return // no request out: nothing to answer
	}
	if text == "" {
		u.forget()
		return
	}
	u.pending = false
	u.hist = append(u.hist, Message{"assistant", text})
}

// forget drops the user message of the request that is out.
func (u *multiturnUser) forget() {
	u.pending = false
	u.hist = u.hist[:len(u.hist)-1]
}
