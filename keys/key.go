package keys

import (
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Key is one loaded key: immutable once its Set is published, but for its
// Account, whose limiters and counters are atomics. Any goroutine.
type Key struct {
	Name     string
	RPM, TPM int64   // per Window; 0: unlimited
	Weight   float64 // fair share in the gateway queue
	models   map[string]struct{}
	acct     *Account
}

// Account is what a key accumulates: its two limiters and its counters.
// It survives a reload that keeps the key's name (its limits may change:
// the limiters take the limit at each call). Any goroutine.
type Account struct {
	req, tok Limiter
	requests [numOutcomes]atomic.Uint64
	tokens   [numKinds]atomic.Uint64
	refused  [numReasons]atomic.Uint64
}

// Outcomes of a keyed request (saltus_key_requests_total's label).
const (
	OutcomeOK    = iota // a 2xx answer
	OutcomeError        // any other answer after admission (the engine's, saltus's own)
	numOutcomes
)

// Token kinds (saltus_key_tokens_total's label).
const (
	KindPrompt = iota
	KindCompletion
	numKinds
)

// Refusal reasons per key (saltus_key_refused_total's label).
const (
	ReasonRateRequests    = iota // over its requests per minute
	ReasonRateTokens             // over its tokens per minute (or one request larger than the limit)
	ReasonModelNotAllowed        // a model the key may not use
	numReasons
)

var (
	outcomeNames = [numOutcomes]string{"ok", "error"}
	kindNames    = [numKinds]string{"prompt", "completion"}
	reasonNames  = [numReasons]string{"rate_requests", "rate_tokens", "model_not_allowed"}
)

func newKey(s Spec, acct *Account) *Key {
	k := &Key{Name: s.Name, RPM: s.RPM, TPM: s.TPM, Weight: s.Weight, acct: acct}
	if len(s.Models) > 0 {
		k.models = make(map[string]struct{}, len(s.Models))
		for _, m := range s.Models {
			k.models[m] = struct{}{}
		}
	}
	return k
}

// Allows reports whether the key may use model.
func (k *Key) Allows(model string) bool {
	if k.models == nil {
		return true
	}
	_, ok := k.models[model]
	return ok
}

// Restricted reports whether the key names the models it may use.
func (k *Key) Restricted() bool { return k.models != nil }

// Models returns the models the key may use, sorted; nil: every model.
func (k *Key) Models() []string {
	if k.models == nil {
		return nil
	}
	out := make([]string, 0, len(k.models))
	for m := range k.models {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Refusal is why Admit refused a request (NotRefused: it did not).
type Refusal uint8

const (
	NotRefused   Refusal = iota
	OverRequests         // no request left this minute
	OverTokens           // not enough tokens left this minute
	TooLarge             // the request alone needs more tokens than the key's whole limit
)

// Admission is Admit's verdict and, when refused, what the client is
// told (OpenAI's words: "Limit 3, Used 3, Requested 1").
type Admission struct {
	Refused                Refusal
	Wait                   time.Duration // until it would fit (not for TooLarge)
	Limit, Used, Requested int64
}

// Admit charges a request against the key's limits at now (the Ring's
// clock): one request and tokens (its reservation: an estimate of its
// prompt plus its max tokens), both or neither. A refusal is counted.
func (k *Key) Admit(now, tokens int64) Admission {
	a := k.acct
	if k.RPM > 0 {
		if ok, wait := a.req.Take(now, 1, k.RPM); !ok {
			rem, _ := a.req.State(now, k.RPM)
			a.refused[ReasonRateRequests].Add(1)
			return Admission{Refused: OverRequests, Wait: wait, Limit: k.RPM, Used: k.RPM - rem, Requested: 1}
		}
	}
	if k.TPM > 0 && tokens > 0 {
		ad := Admission{Limit: k.TPM, Requested: tokens}
		if tokens > k.TPM {
			ad.Refused = TooLarge
		} else if ok, wait := a.tok.Take(now, tokens, k.TPM); !ok {
			ad.Refused, ad.Wait = OverTokens, wait
		}
		if ad.Refused != NotRefused {
			rem, _ := a.tok.State(now, k.TPM)
			ad.Used = k.TPM - rem
			if k.RPM > 0 {
				a.req.Adjust(now, -1, k.RPM) // not served: its request back
			}
			a.refused[ReasonRateTokens].Add(1)
			return ad
		}
	}
	return Admission{}
}

// AdjustTokens corrects the key's tokens by delta (the engine's usage,
// or the tokenizer's count, against what was reserved): a refund when
// negative, a charge past the limit when positive.
func (k *Key) AdjustTokens(now, delta int64) {
	if k.TPM > 0 && delta != 0 {
		k.acct.tok.Adjust(now, delta, k.TPM)
	}
}

// RefusedModel counts a request for a model the key may not use.
func (k *Key) RefusedModel() { k.acct.refused[ReasonModelNotAllowed].Add(1) }

// Done counts a keyed request's answer: its outcome (OutcomeOK,
// OutcomeError) and its tokens.
func (k *Key) Done(outcome int, prompt, completion int64) {
	a := k.acct
	a.requests[outcome].Add(1)
	if prompt > 0 {
		a.tokens[KindPrompt].Add(uint64(prompt))
	}
	if completion > 0 {
		a.tokens[KindCompletion].Add(uint64(completion))
	}
}

// Limits is a key's limits now, as OpenAI's x-ratelimit-* headers give
// them: for each limited dimension (a limit of 0 is unlimited, and has no
// headers) the limit, what is left and the time until all of it is.
type Limits struct {
	Requests, RemainingRequests int64
	ResetRequests               time.Duration
	Tokens, RemainingTokens     int64
	ResetTokens                 time.Duration
}

// Limits returns the key's limits at now.
func (k *Key) Limits(now int64) Limits {
	l := Limits{Requests: k.RPM, Tokens: k.TPM}
	if k.RPM > 0 {
		l.RemainingRequests, l.ResetRequests = k.acct.req.State(now, k.RPM)
	}
	if k.TPM > 0 {
		l.RemainingTokens, l.ResetTokens = k.acct.tok.State(now, k.TPM)
	}
	return l
}

// FormatDuration writes d as OpenAI's x-ratelimit-reset-* and its
// rate-limit messages do: Go's notation at millisecond precision ("1s",
// "6m0s", "20ms", "1.5s"), "0s" for nothing.
func FormatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Millisecond {
		d = time.Millisecond // not yet whole: never "0s"
	}
	return d.Round(time.Millisecond).String()
}

// Mask writes a presented secret as OpenAI's "Incorrect API key
// provided" does: its first five and last two characters, the rest
// starred; a short one starred whole. Only printable ASCII is shown.
func Mask(secret string) string {
	printable := true
	for i := 0; i < len(secret); i++ {
		if secret[i] <= ' ' || secret[i] >= 0x7f {
			printable = false
			break
		}
	}
	if !printable || len(secret) < 12 {
		return "***"
	}
	return secret[:5] + strings.Repeat("*", min(len(secret)-7, 32)) + secret[len(secret)-2:]
}
