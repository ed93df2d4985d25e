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
// --enable-prompt-tokens-details). An Anthropic usage object (POST
// /v1/messages) is read as vLLM writes it: input_tokens the whole prompt,
// or, with cache_read_input_tokens (vLLM's cached_tokens, since its
// PR 40912), the prompt's uncached part, the prompt then being
// input_tokens + cache_read_input_tokens + cache_creation_input_tokens
// as Anthropic counts it. Any goroutine.
func PromptUsage(u []byte) (prompt, cached int, hasCached, ok bool) {
	prompt, cached, _, hasCached, ok = PromptCompletion(u)
	return prompt, cached, hasCached, ok
}

// PromptCompletion is PromptUsage with the completion tokens read in the
// same parse: completion_tokens, else output_tokens (Anthropic's), 0
// when neither is a non-negative integer. Any goroutine.
func PromptCompletion(u []byte) (prompt, cached, completion int, hasCached, ok bool) {
	if len(u) == 0 || len(u) > maxUsageBytes {
		return 0, 0, 0, false, false
	}
	p := usageParsers.Get()
	defer usageParsers.Put(p) // at most maxUsageBytes of values
	v, err := p.ParseBytes(u)
	if err != nil {
		return 0, 0, 0, false, false
	}
	if completion, ok = nonNegative(v, "completion_tokens"); !ok {
		completion, _ = nonNegative(v, "output_tokens")
	}
	prompt, cached, hasCached, ok = promptOf(v)
	return prompt, cached, completion, hasCached, ok
}

// promptOf is PromptUsage of the parsed usage object v.
func promptOf(v *fastjson.Value) (prompt, cached int, hasCached, ok bool) {
	pv := v.Get("prompt_tokens")
	if pv == nil {
		return anthropicPrompt(v)
	}
	var err error
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

// anthropicPrompt is PromptUsage for Anthropic's usage object v.
func anthropicPrompt(v *fastjson.Value) (prompt, cached int, hasCached, ok bool) {
	in, ok := nonNegative(v, "input_tokens")
	if !ok {
		return 0, 0, false, false
	}
	read, hasRead := nonNegative(v, "cache_read_input_tokens")
	if !hasRead {
		return in, 0, false, true
	}
	created, _ := nonNegative(v, "cache_creation_input_tokens") // vLLM's is 0
	return in + read + created, read, true, true
}

// nonNegative is v's member name as a non-negative int.
func nonNegative(v *fastjson.Value, name string) (int, bool) {
	x := v.Get(name)
	if x == nil || x.Type() != fastjson.TypeNumber {
		return 0, false
	}
	n, err := x.Int()
	if err != nil || n < 0 || n > 1<<40 {
		return 0, false
	}
	return n, true
}

// UsageTokens reads a usage object's prompt and completion tokens:
// OpenAI's prompt_tokens and completion_tokens, or input_tokens and
// output_tokens (Responses, Anthropic's messages, whose prompt adds
// cache_read_input_tokens and cache_creation_input_tokens: see
// PromptUsage). ok false without them. Any goroutine.
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
	if v.Get("prompt_tokens") == nil {
		if p, _, hc, ok := anthropicPrompt(v); ok && hc {
			prompt = int64(p)
		}
	}
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
	if v.Get("prompt_tokens") == nil {
		// Anthropic's (POST /v1/messages), as PromptUsage reads it.
		if p, cached, hc, ok := anthropicPrompt(v); ok && hc {
			c.Prompt, c.Cached, c.HasCached = p, cached, true
		}
	}
	c.Cached = min(c.Cached, c.Prompt)
	return c
}
