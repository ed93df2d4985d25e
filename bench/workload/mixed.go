package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// The mixed workload's model names: two base models, an adapter of the
// first, and a model no engine serves (issue 29's mixed fleet; package
// bench's layout "mixed" serves the first three).
const (
	ModelAlpha      = "org/alpha"
	ModelAlphaTuned = "alpha-tuned" // a LoRA adapter of org/alpha
	ModelBeta       = "org/beta"
	ModelUnknown    = "org/gamma" // served by no engine: saltus answers 404
)

// mixedSlots assigns user id's model by id mod len: 40 % org/alpha,
// 20 % alpha-tuned, 40 % org/beta, exact for a multiple of 5 users and
// interleaved so that any count of users is close to it.
var mixedSlots = [...]string{ModelAlpha, ModelBeta, ModelAlphaTuned, ModelAlpha, ModelBeta}

// mixedUnknownEvery: one request in that many of each user names
// ModelUnknown (2 %), at a user's own offset (mixedUnknownOffset), so
// that the run's unknown requests are spread over its time and user 0's
// first request is one (a short run has some).
const (
	mixedUnknownEvery = 50
	mixedUnknownStep  = 17 // coprime with mixedUnknownEvery: offsets spread over 0..49
)

// MixedModels returns the models the mixed workload's users use, in the
// order of their shares (ModelUnknown is not among them).
func MixedModels() []string { return []string{ModelAlpha, ModelAlphaTuned, ModelBeta} }

// mixed is the multiturn workload's users, each on one model, plus a
// few requests for a model nobody serves.
type mixed struct {
	opts  Options
	turns *multiturn
}

func newMixed(opts Options) (Workload, error) {
	opts.Model = "" // the users name their own models
	w, err := newMultiturn(opts)
	if err != nil {
		return nil, err
	}
	return &mixed{opts: opts, turns: w.(*multiturn)}, nil
}

func (w *mixed) Name() string { return "mixed" }

func (w *mixed) Describe() string {
	only := ""
	if w.opts.Models != nil {
		only = fmt.Sprintf(" (only the users of %v send)", w.opts.Models)
	}
	return fmt.Sprintf("mixed: multiturn's conversations, each user on one model: 40%% %s, 20%% %s (an adapter of %s), 40%% %s%s; "+
		"the %d system prompts are shared by every model; %d%% of each user's requests name %s, which no engine serves; %s",
		ModelAlpha, ModelAlphaTuned, ModelAlpha, ModelBeta, only, multiturnSystems, 100/mixedUnknownEvery, ModelUnknown, tail(&w.opts))
}

func (w *mixed) NewUser(id int) User {
	model := mixedSlots[uint(id)%uint(len(mixedSlots))]
	if w.opts.Models != nil && !slices.Contains(w.opts.Models, model) {
		return idleUser{}
	}
	return &mixedUser{
		w: w, model: model,
		conv:   w.turns.NewUser(id),
		r:      userRand(w.opts.Seed, userMixed, id),
		offset: int(uint(id) * mixedUnknownStep % mixedUnknownEvery),
	}
}

// idleUser sends nothing: a user of a model left out (Options.Models).
type idleUser struct{}

func (idleUser) Next() (Request, bool) { return Request{}, false }
func (idleUser) Reply(string)          {}

// mixedUser is a multiturn user whose requests name its model, with a
// request for ModelUnknown every mixedUnknownEvery. Owned by its
// goroutine.
type mixedUser struct {
	w     *mixed
	model string
	conv  User       // the conversation (a multiturn user)
	r     *rand.Rand // the unknown-model requests' own draws: they shift nothing of conv's
	buf   []byte
	sent  int
	// offset is the index mod mixedUnknownEvery of this user's
	// unknown-model requests.
	offset int
	// unknown: the request out is for ModelUnknown; its reply (none,
	// it gets 404) is not the conversation's.
	unknown bool
}

func (u *mixedUser) Next() (Request, bool) {
	i := u.sent
	u.sent++
	u.unknown = i%mixedUnknownEvery == u.offset
	if u.unknown {
		w, r := u.w, u.r
		tokens := multiturnUserMin + r.IntN(multiturnUserMax-multiturnUserMin+1)
		u.buf = appendText(u.buf[:0], r, w.turns.size.units(tokens), nil, nil)
		return Request{
			Messages: []Message{
				{"system", w.turns.systems[r.IntN(multiturnSystems)].text},
				{"user", string(u.buf)},
			},
			MaxTokens: w.opts.MaxTokens,
			Model:     ModelUnknown,
			Think:     w.opts.think(r),
			Tag:       "unknown",
		}, true
	}
	req, ok := u.conv.Next()
	req.Model = u.model
	return req, ok
}

func (u *mixedUser) Reply(text string) {
	if u.unknown {
		u.unknown = false
		return
	}
	u.conv.Reply(text)
}
