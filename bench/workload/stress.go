package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// sizeClass is a share of requests and their size range in tokens
// (inclusive, drawn uniformly).
type sizeClass struct {
	name     string
	percent  int
	min, max int
}

// stressClasses is Ranvier's published stress distribution (doc.go).
var stressClasses = [...]sizeClass{
	{"small", 10, 100, 500},
	{"medium", 20, 500, 2000},
	{"large", 30, 2000, 4000},
	{"xlarge", 40, 4000, 8000},
}

const (
	stressPrefixes    = 5
	stressQuestions   = 10
	stressQuestionMin = 16 // tokens
	stressQuestionMax = 48
	// stressPrefixTokens is the length of each shared prefix: the largest
	// request. A large or xlarge request sends its prefix cut to the
	// request's size, so all requests on one prefix share their first
	// min(size) tokens byte for byte, and an engine that served the
	// prefix once holds most of any later request on it.
	stressPrefixTokens = 8000
	stressCategories   = 5
	// stressCategoryTokens is the length of each category system prompt:
	// the largest medium request. Like a prefix, it is cut to the
	// request's size less its unique user turn (stressTurnMin to
	// stressTurnMax tokens): an application's system prompt is most of a
	// short chat request, and requests of one category share their first
	// min(size) tokens byte for byte.
	stressCategoryTokens  = 2000
	stressCategoryPercent = 90
	stressTurnMin         = 16
	stressTurnMax         = 64
)

// Pool kinds (for poolStream) and user kinds (for userRand).
const (
	kindStressPrefix = iota + 1
	kindStressQuestion
	kindStressCategory
	kindMultiturnSystem
	kindRAGDoc
	kindRAGLength
	kindHotspotSystem
	kindManydocsDoc
	kindManydocsLength
)

const (
	userStress = iota + 1
	userMultiturn
	userRAG
	userUnique
	userTrace
	userHotspot
	userManydocs
	userMixed
	userSaturation
)

type stress struct {
	opts       Options
	size       sizer
	prefixes   [stressPrefixes]*pooled
	questions  [stressQuestions]*pooled
	categories [stressCategories]*pooled
}

func newStress(opts Options) (Workload, error) {
	w := &stress{opts: opts, size: sizer{opts.TokensPerWord}}
	o := newOpeners(opts.Seed)
	for i := range w.prefixes {
		w.prefixes[i] = newPooled(opts.Seed, poolStream(kindStressPrefix, i), w.size.units(stressPrefixTokens), o.take())
	}
	lr := rand.New(rand.NewPCG(uint64(opts.Seed), poolStream(kindStressQuestion, 1<<20)))
	for i := range w.questions {
		n := stressQuestionMin + lr.IntN(stressQuestionMax-stressQuestionMin+1)
		// Questions follow a prefix in their own message: their openers
		// need not differ from the prefixes'; random ones do.
		w.questions[i] = newPooled(opts.Seed, poolStream(kindStressQuestion, i), w.size.units(n), lr.IntN(len(words)))
	}
	for i := range w.categories {
		w.categories[i] = newPooled(opts.Seed, poolStream(kindStressCategory, i), w.size.units(stressCategoryTokens), o.take())
	}
	return w, nil
}

func (w *stress) Name() string { return "stress" }

func (w *stress) Describe() string {
	var b strings.Builder
	b.WriteString("stress: Ranvier's mix of ")
	for i, c := range stressClasses {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d%% %s (%d-%d tokens)", c.percent, c.name, c.min, c.max)
	}
	fmt.Fprintf(&b, "; large/xlarge: one of %d shared %d-token prefixes cut to size, then one of %d questions; "+
		"small/medium: one of %d category system prompts (%d tokens, cut to size) %d%% of the time, then a unique turn; %s",
		stressPrefixes, stressPrefixTokens, stressQuestions, stressCategories, stressCategoryTokens, stressCategoryPercent,
		tail(&w.opts))
	return b.String()
}

// tail is the end of every synthetic workload's Describe.
func tail(o *Options) string {
	s := fmt.Sprintf("max_tokens %d", o.MaxTokens)
	if o.MaxTokens == 0 {
		s = "max_tokens engine default"
	}
	if o.ThinkMax == 0 {
		return s + ", no think time, seed " + fmt.Sprint(o.Seed)
	}
	return fmt.Sprintf("%s, think %v-%v, seed %d", s, o.ThinkMin, o.ThinkMax, o.Seed)
}

func (w *stress) NewUser(id int) User {
	return &stressUser{w: w, r: userRand(w.opts.Seed, userStress, id)}
}

// stressUser is owned by its goroutine.
type stressUser struct {
	w   *stress
	r   *rand.Rand
	buf []byte // reused for unique text
}

// pickClass draws a size class by its percent.
func pickClass(r *rand.Rand) *sizeClass {
	x := r.IntN(100)
	for i := range stressClasses {
		if x < stressClasses[i].percent {
			return &stressClasses[i]
		}
		x -= stressClasses[i].percent
	}
	panic("BUG: stress class percentages do not sum to 100")
}

func (u *stressUser) Next() (Request, bool) {
	w, r := u.w, u.r
	c := pickClass(r)
	tokens := c.min + r.IntN(c.max-c.min+1)
	req := Request{MaxTokens: w.opts.MaxTokens, Model: w.opts.Model}
	switch c.name {
	case "large", "xlarge":
		p, q := r.IntN(stressPrefixes), r.IntN(stressQuestions)
		question := w.questions[q].text
		prefix := w.prefixes[p].cut(w.size.units(tokens) - len(w.questions[q].ends))
		req.Messages = []Message{{"system", prefix}, {"user", question}}
		req.Tag = fmt.Sprintf("%s/prefix%d", c.name, p)
	default:
		units := w.size.units(tokens)
		if r.IntN(100) < stressCategoryPercent {
			k := r.IntN(stressCategories)
			turn := min(w.size.units(stressTurnMin+r.IntN(stressTurnMax-stressTurnMin+1)), units/2)
			sys := w.categories[k].cut(units - turn)
			u.buf = appendText(u.buf[:0], r, turn, nil, nil)
			req.Messages = []Message{{"system", sys}, {"user", string(u.buf)}}
			req.Tag = fmt.Sprintf("%s/category%d", c.name, k)
		} else {
			u.buf = appendText(u.buf[:0], r, units, nil, nil)
			req.Messages = []Message{{"user", string(u.buf)}}
			req.Tag = c.name + "/none"
		}
	}
	req.Think = w.opts.think(r)
	return req, true
}

// Reply is ignored: stress requests are single-turn.
func (u *stressUser) Reply(string) {}
