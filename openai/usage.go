package openai

import "github.com/valyala/fastjson"

// The answer's usage object: what the engine reports it computed and had
// cached. One reader, ReadUsage, parses it once at a request's end; the
// route table's feedback (shard/feedback.go), API keys' token charges
// (shard/keys.go) and the request log (shard/reqlog.go) share its counts.

// maxUsageBytes bounds the usage object parsed (vLLM's is ~150 bytes).
const maxUsageBytes = 4 << 10

// maxTokenCount bounds a count read: a larger one is not a count (a lying
// engine's), and sums of a few stay far from overflowing an int.
const maxTokenCount = 1 << 40

var usageParsers fastjson.ParserPool

// UsageCounts is what a usage object reports: prompt and completion
// tokens (OK: the prompt's count was there) and cached prompt tokens
// (HasCached: the engine reported them; vLLM does only with
// --enable-prompt-tokens-details).
type UsageCounts struct {
	Prompt, Completion, Cached int
	OK, HasCached              bool
}

// ReadUsage reads u's counts in one parse. The shapes:
//   - OpenAI's chat and completions: prompt_tokens, completion_tokens,
//     prompt_tokens_details.cached_tokens;
//   - the Responses API's: input_tokens, output_tokens,
//     input_tokens_details.cached_tokens;
//   - Anthropic's (POST /v1/messages), as vLLM writes it: input_tokens the
//     whole prompt, or, with cache_read_input_tokens (vLLM's cached tokens,
//     since its PR 40912), the prompt's uncached part, the prompt then
//     being input_tokens + cache_read_input_tokens +
//     cache_creation_input_tokens as Anthropic counts it.
//
// Counts are non-negative integers up to 2^40; anything else is absent.
// Cached is at most Prompt. A u over maxUsageBytes, not JSON, or without
// a prompt count reads as UsageCounts{}. Any goroutine.
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
	if v.Exists("prompt_tokens") {
		if c.Prompt, c.OK = count(v, "prompt_tokens"); !c.OK {
			return UsageCounts{} // there, and not a count
		}
		c.Cached, c.HasCached = count(v, "prompt_tokens_details", "cached_tokens")
	} else if c.Prompt, c.OK = count(v, "input_tokens"); c.OK {
		c.Cached, c.HasCached = count(v, "input_tokens_details", "cached_tokens")
		if read, ok := count(v, "cache_read_input_tokens"); ok { // Anthropic's
			created, _ := count(v, "cache_creation_input_tokens") // vLLM's is 0
			c.Prompt, c.Cached, c.HasCached = c.Prompt+read+created, read, true
		}
	} else {
		return UsageCounts{}
	}
	var ok bool
	if c.Completion, ok = count(v, "completion_tokens"); !ok {
		c.Completion, _ = count(v, "output_tokens")
	}
	c.Cached = min(c.Cached, c.Prompt)
	return c
}

// count is v's member at keys as a count (a non-negative integer up to
// maxTokenCount).
func count(v *fastjson.Value, keys ...string) (int, bool) {
	x := v.Get(keys...)
	if x == nil || x.Type() != fastjson.TypeNumber {
		return 0, false
	}
	n, err := x.Int()
	if err != nil || n < 0 || n > maxTokenCount {
		return 0, false
	}
	return n, true
}
