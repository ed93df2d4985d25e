package openai

import "github.com/valyala/fastjson"

// The answer's usage object: what the engine reports it computed and had
// cached (shard/feedback.go compares it with the route table's
// prediction).

// maxUsageBytes bounds the usage object parsed (vLLM's is ~150 bytes).
const maxUsageBytes = 4 << 10

var usageParsers fastjson.ParserPool

// PromptUsage reads prompt_tokens and prompt_tokens_details.cached_tokens
// from a usage object; ok false without prompt_tokens, hasCached false
// without cached_tokens (vLLM reports it only with
// --enable-prompt-tokens-details). Any goroutine.
func PromptUsage(u []byte) (prompt, cached int, hasCached, ok bool) {
	if len(u) == 0 || len(u) > maxUsageBytes {
		return 0, 0, false, false
	}
	p := usageParsers.Get()
	defer usageParsers.Put(p) // at most maxUsageBytes of values
	v, err := p.ParseBytes(u)
	if err != nil {
		return 0, 0, false, false
	}
	pv := v.Get("prompt_tokens")
	if pv == nil {
		return 0, 0, false, false
	}
	prompt, err = pv.Int()
	if err != nil || prompt < 0 {
		return 0, 0, false, false
	}
	if cv := v.Get("prompt_tokens_details", "cached_tokens"); cv != nil {
		if c, err := cv.Int(); err == nil && c >= 0 {
			return prompt, min(c, prompt), true, true
		}
	}
	return prompt, 0, false, true
}

// UsageTokens reads a usage object's prompt and completion tokens:
// OpenAI's prompt_tokens and completion_tokens, or input_tokens and
// output_tokens (Responses, Anthropic's messages). ok false without
// them. Any goroutine.
func UsageTokens(u []byte) (prompt, completion int64, ok bool) {
	if len(u) == 0 || len(u) > maxUsageBytes {
		return 0, 0, false
	}
	p := usageParsers.Get()
	defer usageParsers.Put(p) // at most maxUsageBytes of values
	v, err := p.ParseBytes(u)
	if err != nil {
		return 0, 0, false
	}
	get := func(names ...string) (int64, bool) {
		for _, n := range names {
			if x := v.Get(n); x != nil && x.Type() == fastjson.TypeNumber {
				if i, err := x.Int64(); err == nil && i >= 0 {
					return i, true
				}
			}
		}
		return 0, false
	}
	prompt, okp := get("prompt_tokens", "input_tokens")
	completion, _ = get("completion_tokens", "output_tokens")
	return prompt, completion, okp
}

// UsageCounts is what a usage object reports: prompt and completion
// tokens (OK: prompt_tokens or input_tokens was there) and cached prompt
// tokens (HasCached: prompt_tokens_details.cached_tokens, or
// input_tokens_details.cached_tokens of the Responses shape).
type UsageCounts struct {
	Prompt, Completion, Cached int
	OK, HasCached              bool
}

// ReadUsage reads u's counts in one parse (the request log's; feedback
// and keys read theirs with PromptUsage and UsageTokens). Any goroutine.
func ReadUsage(u []byte) (c UsageCounts) {
	if len(u) == 0 || len(u) > maxUsageBytes {
		return c
	}
	p := usageParsers.Get()
	defer usageParsers.Put(p) // at most maxUsageBytes of values
	v, err := p.ParseBytes(u)
	if err != nil {
		return c
	}
	get := func(keys ...string) (int, bool) {
		x := v.Get(keys...)
		if x == nil || x.Type() != fastjson.TypeNumber {
			return 0, false
		}
		i, err := x.Int()
		return i, err == nil && i >= 0
	}
	if c.Prompt, c.OK = get("prompt_tokens"); !c.OK {
		c.Prompt, c.OK = get("input_tokens")
	}
	if !c.OK {
		return UsageCounts{}
	}
	var ok bool
	if c.Completion, ok = get("completion_tokens"); !ok {
		c.Completion, _ = get("output_tokens")
	}
	if c.Cached, c.HasCached = get("prompt_tokens_details", "cached_tokens"); !c.HasCached {
		c.Cached, c.HasCached = get("input_tokens_details", "cached_tokens")
	}
	c.Cached = min(c.Cached, c.Prompt)
	return c
}
