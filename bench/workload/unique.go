package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// uniqueDigits words open every unique request: the request's number
// (user id, sequence), scrambled, in base len(shortWords). Words of at
// most 8 bytes keep the opener, a possible sentence end included, within
// the first 64 bytes; TestUniqueOpenerCapacity checks that 7 digits hold
// 64 bits.
const uniqueDigits = 7

// shortWords are the indices of words of at most 8 bytes.
var shortWords = func() []int {
	var s []int
	for i, w := range words {
		if len(w) <= 8 {
			s = append(s, i)
		}
	}
	return s
}()

type unique struct {
	opts Options
	size sizer
	key  uint64 // scrambles request numbers per seed
}

// numberWords spells n, scrambled by key, as uniqueDigits short words:
// n -> x is a bijection (xor, then multiplication by an odd number mod
// 2^64), and so is x -> words, so distinct numbers open with distinct
// words.
func numberWords(n, key uint64) [uniqueDigits]int {
	var lead [uniqueDigits]int
	x := (n ^ key) * 0x9e3779b97f4a7c15
	for i := range lead {
		lead[i] = shortWords[x%uint64(len(shortWords))]
		x /= uint64(len(shortWords))
	}
	return lead
}

func newUnique(opts Options) (Workload, error) {
	return &unique{opts: opts, size: sizer{opts.TokensPerWord}, key: mix(uint64(opts.Seed) ^ 0x756e6971)}, nil
}

func (w *unique) Name() string { return "unique" }

func (w *unique) Describe() string {
	var b strings.Builder
	b.WriteString("unique: no shared prefix (every request opens with its own number in words), sizes of the stress mix (")
	for i, c := range stressClasses {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d%% %d-%d", c.percent, c.min, c.max)
	}
	fmt.Fprintf(&b, " tokens), one user message; the control: prefix routing must not lose to least-request; %s", tail(&w.opts))
	return b.String()
}

func (w *unique) NewUser(id int) User {
	return &uniqueUser{w: w, r: userRand(w.opts.Seed, userUnique, id), id: uint32(id)}
}

// uniqueUser is owned by its goroutine.
type uniqueUser struct {
	w   *unique
	r   *rand.Rand
	id  uint32
	seq uint32 // requests so far; wraps after 2^32, far beyond any run
	buf []byte
}

func (u *uniqueUser) Next() (Request, bool) {
	w, r := u.w, u.r
	c := pickClass(r)
	tokens := c.min + r.IntN(c.max-c.min+1)
	lead := numberWords(uint64(u.id)<<32|uint64(u.seq), w.key)
	u.seq++
	u.buf = appendText(u.buf[:0], r, max(w.size.units(tokens), uniqueDigits+1), lead[:], nil)
	return Request{
		Messages:  []Message{{"user", string(u.buf)}},
		MaxTokens: w.opts.MaxTokens,
		Model:     w.opts.Model,
		Think:     w.opts.think(r),
		Tag:       c.name,
	}, true
}

// Reply is ignored: unique requests are single-turn.
func (u *uniqueUser) Reply(string) {}
