package shard

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/saltus-lb/saltus/internal/jsonscan"
	"github.com/saltus-lb/saltus/keys"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
)

// API keys (issue 30, optional; package keys): with a Ring set
// (UseKeys), every request of the API listener but OPTIONS and the
// adapter endpoints (which keep the admin token) presents a key, checked
// in serve before any body work; a missing or unknown one is a 401 in
// OpenAI's words. Admission (admit) then checks the key's models and
// charges its requests and tokens per minute: the tokens reserved are the
// prompt's estimate (a quarter of its bytes; its token count where the
// tokenizer gives one) plus the request's max tokens, as OpenAI counts
// them, corrected to the engine's usage when the answer ends (streams are
// asked for their usage, Config.LearnFromUsage's way). Every answer to a
// keyed request carries OpenAI's x-ratelimit-* headers as of its
// admission (keyedExchange). Without a Ring none of this runs: serve
// reads one pointer.

// UseKeys turns API keys on with ring (nil: off). Call it before the
// loops start.
func (r *Router) UseKeys(ring *keys.Ring) {
	if ring != nil && ring.Enabled() {
		r.keys = ring
	}
}

// authenticate finds the key x presents, or answers 401 and returns nil.
// Loop only (the connection's): one SHA-256 and a map lookup.
func (r *Router) authenticate(x exchange, rt routeID) *keys.Key {
	req := x.Request()
	secret := keys.Secret(req.HeaderValue("Authorization"), req.HeaderValue("X-Api-Key"))
	if k := r.keys.Lookup(secret); k != nil {
		return k
	}
	msg := "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or in an x-api-key header."
	if secret != "" {
		msg = "Incorrect API key provided: " + keys.Mask(secret) + ". Ask the operator of this gateway for a valid key."
	}
	r.fail(x, rt, &openai.Error{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg},
		reactor.Header{Name: "WWW-Authenticate", Value: "Bearer"})
	return nil
}

// keyedExchange is a keyed request's exchange: every answer, proxied or
// saltus's own, carries the key's x-ratelimit-* headers (hdr, set at
// admission), and saltus's own answers (Respond) settle the key's
// accounting, as Hooks.Events.Done does for forwarded ones. With a request
// sink (reqlog.go) every job's exchange is one, keyed or not (j.key nil):
// the log finds the job of saltus's own answers through it (jobOf).
type keyedExchange struct {
	exchange
	j   *job
	hdr []reactor.Header
}

func (k *keyedExchange) Respond(status int, hdr []reactor.Header, body []byte) {
	k.j.keyDone(status, openai.UsageCounts{})
	k.exchange.Respond(status, append(hdr, k.hdr...), body)
}

func (k *keyedExchange) RespondLoop(status int, hdr []reactor.Header, body []byte) {
	k.exchange.RespondLoop(status, append(hdr, k.hdr...), body)
}

func (k *keyedExchange) WriteHeaderLoop(status int, hdr []reactor.Header) (int64, error) {
	return k.exchange.WriteHeaderLoop(status, append(hdr, k.hdr...))
}

// keyState is a keyed job's accounting.
type keyState struct {
	// prompt is the prompt's tokens as known: estimated at admission,
	// counted by the tokenizer when it was; reserved is what the key's
	// tokens limiter holds for the request (prompt + max tokens).
	prompt, reserved int64
	settled          bool // keyDone ran
}

// keyLimits sets j's x-ratelimit-* headers from l. On j's loop (or its
// decode worker, which owns it).
func (j *job) keyLimits(l keys.Limits) {
	kx, ok := j.x.(*keyedExchange)
	if !ok {
		return
	}
	h := make([]reactor.Header, 0, 6)
	if l.Requests > 0 {
		h = append(h,
			reactor.Header{Name: "x-ratelimit-limit-requests", Value: strconv.FormatInt(l.Requests, 10)},
			reactor.Header{Name: "x-ratelimit-remaining-requests", Value: strconv.FormatInt(l.RemainingRequests, 10)},
			reactor.Header{Name: "x-ratelimit-reset-requests", Value: keys.FormatDuration(l.ResetRequests)})
	}
	if l.Tokens > 0 {
		h = append(h,
			reactor.Header{Name: "x-ratelimit-limit-tokens", Value: strconv.FormatInt(l.Tokens, 10)},
			reactor.Header{Name: "x-ratelimit-remaining-tokens", Value: strconv.FormatInt(l.RemainingTokens, 10)},
			reactor.Header{Name: "x-ratelimit-reset-tokens", Value: keys.FormatDuration(l.ResetTokens)})
	}
	kx.hdr = h
}

// admitKey checks j's model against its key and charges the key's
// limits: 404 for a model the key may not use (nothing forwarded), 429
// with Retry-After over a limit. Any goroutine that owns j (admit's).
func (j *job) admitKey() *openai.Error {
	k, now := j.key, j.r.keys.Now()
	if k.Restricted() && !k.Allows(j.d.Model) {
		k.RefusedModel()
		j.keyLimits(k.Limits(now))
		j.ks.settled = true // refused: nothing taken, counted as such
		if j.d.Model == "" {
			return &openai.Error{Status: 400, Type: "invalid_request_error", Param: "model",
				Message: "you must provide a model parameter (this key may use only some models)"}
		}
		return &openai.Error{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Message: fmt.Sprintf("The model `%.200s` does not exist or you do not have access to it.", j.d.Model)}
	}
	var reserve int64
	if k.TPM > 0 {
		j.ks.prompt = j.promptEstimate()
		reserve = j.ks.prompt + maxTokensOf(j.req.Body)
	}
	ad := k.Admit(now, reserve)
	j.keyLimits(k.Limits(now))
	switch ad.Refused {
	case keys.NotRefused:
		j.ks.reserved = reserve
		return nil
	case keys.TooLarge:
		j.ks.settled = true // nothing was taken
		return &openai.Error{Status: 429, Type: "tokens", Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("Request too large for key %s on tokens per min (TPM): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
				k.Name, ad.Limit, ad.Requested)}
	}
	j.ks.settled = true
	what, typ := "requests per min (RPM)", "requests"
	if ad.Refused == keys.OverTokens {
		what, typ = "tokens per min (TPM)", "tokens"
	}
	return &openai.Error{Status: 429, Type: typ, Code: "rate_limit_exceeded", RetryAfter: max(1, int((ad.Wait+time.Second-1)/time.Second)),
		Message: fmt.Sprintf("Rate limit reached for key %s on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
			k.Name, what, ad.Limit, ad.Used, ad.Requested, keys.FormatDuration(ad.Wait))}
}

// promptEstimate is the prompt's tokens before the tokenizer counts
// them: its ids when given as ids, else a quarter of its text's bytes
// (of the body's for a route whose prompt is not decoded).
func (j *job) promptEstimate() int64 {
	if j.d.HasTokenIDs {
		return int64(len(j.d.TokenIDs))
	}
	n := 0
	if routedByPrefix(j.route) && len(j.texts) > 0 {
		for _, t := range j.texts {
			n += len(t)
		}
	} else {
		n = len(j.req.Body)
	}
	return int64(n+3) / 4
}

// maxTokensCap bounds a request's max tokens as a reservation (more than
// any key's limit is refused as too large anyway).
const maxTokensCap = keys.MaxTPM

// maxTokensOf is the most a request may generate: its
// max_completion_tokens, else max_tokens (chat, completions, Anthropic's
// messages), else max_output_tokens (responses); 0 when it names none (or
// not as a non-negative integer: the engine refuses that).
func maxTokensOf(body []byte) int64 {
	open := jsonscan.SkipWS(body, 0)
	if open >= len(body) || body[open] != '{' {
		return 0
	}
	for _, name := range [...]string{"max_completion_tokens", "max_tokens", "max_output_tokens"} {
		m, ok := jsonscan.LastMember(body, open, name)
		if !ok || m.Val < 0 {
			continue
		}
		v := body[m.Val:m.End]
		if bytes.Equal(v, []byte("null")) {
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			return 0 // not an integer: the engine's 400, not a reservation
		}
		return min(n, maxTokensCap)
	}
	return 0
}

// keyTokenized corrects j's reservation to the tokenizer's count of its
// prompt. On j's loop.
func (j *job) keyTokenized(n int) {
	if j.key == nil || j.key.TPM == 0 || j.ks.settled {
		return
	}
	delta := int64(n) - j.ks.prompt
	j.ks.prompt, j.ks.reserved = int64(n), j.ks.reserved+delta
	j.key.AdjustTokens(j.r.keys.Now(), delta)
}

// keyDone settles a keyed request's accounting once, when its answer is
// known: a 2xx is charged the engine's usage (prompt + completion; the
// reservation stays when the answer had none), anything else gets its
// tokens back. On the loop that answers (or saltus's own answer's
// goroutine, which owns j then).
func (j *job) keyDone(status int, u openai.UsageCounts) {
	if j.key == nil || j.ks.settled {
		return
	}
	j.ks.settled = true
	k := j.key
	if status < 200 || status >= 300 {
		k.AdjustTokens(j.r.keys.Now(), -j.ks.reserved)
		k.Done(keys.OutcomeError, 0, 0)
		return
	}
	prompt, completion, ok := int64(u.Prompt), int64(u.Completion), u.OK
	if !ok {
		prompt, completion = j.ks.prompt, 0
		if k.TPM == 0 {
			prompt = j.promptEstimate()
		}
	} else {
		k.AdjustTokens(j.r.keys.Now(), prompt+completion-j.ks.reserved)
	}
	k.Done(keys.OutcomeOK, prompt, completion)
}

// keyHolder is a keyed GET /v1/models on its way to a models worker.
type keyHolder struct {
	exchange
	key *keys.Key
}

// modelsKey is the key of a GET /v1/models request (nil: keys off). On a
// models worker.
func (r *Router) modelsKey(x exchange) *keys.Key {
	if kh, ok := x.(*keyHolder); ok {
		return kh.key
	}
	return nil
}
