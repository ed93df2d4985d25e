package openai

import "github.com/saltus-lb/saltus/internal/jsonscan"

// The answer's usage object: what the engine reports it computed and had
// cached. One reader, ReadUsage, reads it once at a request's end; the
// route table's feedback (shard/feedback.go), API keys' token charges
// (shard/keys.go) and the request log (shard/reqlog.go) share its counts.

// maxUsageBytes bounds the usage object read (vLLM's is ~150 bytes).
const maxUsageBytes = 4 << 10

// maxUsageDepth bounds its nesting (vLLM's is 2 deep).
const maxUsageDepth = 16

// maxTokenCount bounds a count read: a larger one is not a count (a lying
// engine's), and sums of a few stay far from overflowing an int.
const maxTokenCount = 1 << 40

// UsageCounts is what a usage object reports: prompt and completion
// tokens (OK: the prompt's count was there) and cached prompt tokens
// (HasCached: the engine reported them; vLLM does only with
// --enable-prompt-tokens-details).
type UsageCounts struct {
	Prompt, Completion, Cached int
	OK, HasCached              bool
}

// The members ReadUsage reads, by index in usageKeys.
const (
	uPrompt = iota
	uCompletion
	uPromptDetails
	uInput
	uOutput
	uInputDetails
	uCacheRead
	uCacheCreation
	uKeys
)

var (
	usageKeys  = [uKeys]string{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "input_tokens", "output_tokens", "input_tokens_details", "cache_read_input_tokens", "cache_creation_input_tokens"}
	cachedKeys = [1]string{"cached_tokens"}
)

// ReadUsage reads u's counts in one grammar check (the request bodies'
// scanner, bounded by maxUsageBytes and maxUsageDepth) and a read of the
// members by their offsets: no parse tree and no allocation, and the
// answer's reader (upstream/backend's usageOf) need not validate the
// object first. The shapes:
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
// Of a member repeated, the last counts (as the request decoders read
// one, Python's json's rule). Cached is at most Prompt. A u over
// maxUsageBytes, not JSON, or without a prompt count reads as
// UsageCounts{}. Any goroutine.
func ReadUsage(u []byte) (c UsageCounts) {
	if len(u) == 0 || len(u) > maxUsageBytes {
		return c
	}
	if _, _, se := scanJSON(u, maxUsageBytes, maxUsageDepth); se.kind != ScanOK {
		return c
	}
	var at [uKeys]int
	if jsonscan.Members(u, jsonscan.SkipWS(u, 0), usageKeys[:], at[:], nil) < 0 {
		return c // not an object
	}
	switch {
	case at[uPrompt] >= 0:
		if c.Prompt, c.OK = count(u, at[uPrompt]); !c.OK {
			return UsageCounts{} // there, and not a count
		}
		c.Cached, c.HasCached = cached(u, at[uPromptDetails])
	case at[uInput] >= 0:
		if c.Prompt, c.OK = count(u, at[uInput]); !c.OK {
			return UsageCounts{}
		}
		c.Cached, c.HasCached = cached(u, at[uInputDetails])
		if read, ok := count(u, at[uCacheRead]); ok { // Anthropic's
			created, _ := count(u, at[uCacheCreation]) // vLLM's is 0
			c.Prompt, c.Cached, c.HasCached = c.Prompt+read+created, read, true
		}
	default:
		return c
	}
	var ok bool
	if c.Completion, ok = count(u, at[uCompletion]); !ok {
		c.Completion, _ = count(u, at[uOutput])
	}
	c.Cached = min(c.Cached, c.Prompt)
	return c
}

// count is the value at u[i] (i < 0: none) as a count: a number that is
// a non-negative integer up to maxTokenCount.
func count(u []byte, i int) (int, bool) {
	if i < 0 || !jsonscan.IsNumber(u, i) {
		return 0, false
	}
	n, ok := jsonscan.Int64(u, i)
	if !ok || n < 0 || n > maxTokenCount {
		return 0, false
	}
	return int(n), true
}

// cached is the cached_tokens count of the details object at u[i].
func cached(u []byte, i int) (int, bool) {
	var at [1]int
	if jsonscan.Members(u, i, cachedKeys[:], at[:], nil) < 0 {
		return 0, false // absent, null, or not an object
	}
	return count(u, at[0])
}
