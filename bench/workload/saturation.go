package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// The saturation workload's classes (doc.go): two priorities, two
// tenants.
const (
	// SaturationHigh and SaturationLow are the requests' "priority"
	// values, half each.
	SaturationHigh = -10
	SaturationLow  = 10
	// SaturationSmall and SaturationBig are the tenants' keys (sent as
	// Authorization: Bearer): one request in saturationSmallEvery is the
	// small tenant's, as 4 of issue 30's 48 clients.
	SaturationSmall = "small"
	SaturationBig   = "big"
)

const (
	saturationSmallEvery = 12
	// A prompt is 256-512 tokens of unique text: short enough that a
	// request's time is mostly its 100 output tokens' decode, as in
	// issue 30's overload scenarios (1-2 KB prompts).
	saturationMinTokens = 256
	saturationMaxTokens = 512
)

// saturation sends unique requests open-loop, Poisson at Options.Rate,
// each with a priority and a tenant. Safe for concurrent use.
type saturation struct {
	opts Options
	size sizer
	key  uint64 // scrambles request numbers per seed

	mu   sync.Mutex // guards the schedule below, shared by every user
	next uint64     // the next arrival's number
	at   float64    // its send time, ns since the start
	gaps *rand.Rand // the gaps' draws, in arrival order
}

func newSaturation(opts Options) (Workload, error) {
	if opts.Rate <= 0 {
		return nil, errors.New("workload saturation: Rate must be positive (arrivals a second)")
	}
	w := &saturation{opts: opts, size: sizer{opts.TokensPerWord}, key: mix(uint64(opts.Seed) ^ 0x73617475)}
	w.Restart()
	return w, nil
}

// Restart rewinds the schedule: the next run's arrivals are the first
// run's, from time 0.
func (w *saturation) Restart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next, w.at = 0, 0
	w.gaps = rand.New(rand.NewPCG(uint64(w.opts.Seed), mix(streamUser+userSaturation<<40)))
}

func (w *saturation) Name() string { return "saturation" }

func (w *saturation) Describe() string {
	return fmt.Sprintf("saturation: open loop, Poisson arrivals at %.3g a second (client time), each a unique %d-%d-token user message; "+
		"\"priority\" %d or %d, half each; tenant (Authorization: Bearer) %q for 1 in %d, else %q; %s",
		w.opts.Rate, saturationMinTokens, saturationMaxTokens, SaturationHigh, SaturationLow, SaturationSmall, saturationSmallEvery, SaturationBig, tail(&w.opts))
}

// NewUser returns a user that takes the schedule's next arrival on every
// Next, as a trace's users share its cursor: which user sends which
// request depends on timing; a request's content and send time depend on
// its number only.
func (w *saturation) NewUser(int) User { return &saturationUser{w: w} }

// saturationUser is owned by its goroutine.
type saturationUser struct {
	w   *saturation
	buf []byte
}

func (u *saturationUser) Next() (Request, bool) {
	w := u.w
	w.mu.Lock()
	k, at := w.next, w.at
	w.next++
	w.at += w.gaps.ExpFloat64() * float64(time.Second) / w.opts.Rate
	w.mu.Unlock()
	r := rand.New(rand.NewPCG(uint64(w.opts.Seed), mix(streamUser+userSaturation<<40+1<<39+k)))
	tokens := saturationMinTokens + r.IntN(saturationMaxTokens-saturationMinTokens+1)
	lead := numberWords(k, w.key)
	u.buf = appendText(u.buf[:0], r, max(w.size.units(tokens), uniqueDigits+1), lead[:], nil)
	req := Request{
		Messages:  []Message{{"user", string(u.buf)}},
		MaxTokens: w.opts.MaxTokens,
		Model:     w.opts.Model,
		At:        time.Duration(at),
		Priority:  SaturationHigh,
		Key:       SaturationBig,
	}
	if r.IntN(2) == 1 {
		req.Priority = SaturationLow
	}
	if r.IntN(saturationSmallEvery) == 0 {
		req.Key = SaturationSmall
	}
	req.Tag = saturationTag(req.Priority, req.Key)
	return req, true
}

// saturationTag is "high/big", "low/small"…
func saturationTag(priority int, key string) string {
	if priority == SaturationHigh {
		return "high/" + key
	}
	return "low/" + key
}

// Reply is ignored: the requests are single-turn.
func (u *saturationUser) Reply(string) {}
