package openai

import (
	"strings"
	"testing"
)

func TestPromptUsage(t *testing.T) {
	t.Parallel()
	f := func(u string, prompt, cached int, hasCached, ok bool) {
		t.Helper()
		p, c, hc, k := PromptUsage([]byte(u))
		if p != prompt || c != cached || hc != hasCached || k != ok {
			t.Errorf("PromptUsage(%q) = %d %d %v %v, want %d %d %v %v", u, p, c, hc, k, prompt, cached, hasCached, ok)
		}
	}
	f(`{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":64}}`, 100, 64, true, true)
	f(`{"prompt_tokens":100,"prompt_tokens_details":null}`, 100, 0, false, true)
	f(`{"prompt_tokens":100}`, 100, 0, false, true)
	f(`{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":64}}`, 10, 10, true, true) // capped
	f(`{"completion_tokens":1}`, 0, 0, false, false)
	f(`{"prompt_tokens":-1}`, 0, 0, false, false)
	f(`{"prompt_tokens":"x"}`, 0, 0, false, false)
	f(`not json`, 0, 0, false, false)
	f(``, 0, 0, false, false)
	f(`{"prompt_tokens":1,"x":"`+strings.Repeat("y", 5000)+`"}`, 0, 0, false, false) // over the bound
	// Anthropic's, as vLLM writes it: input_tokens the whole prompt, or
	// its uncached part beside cache_read_input_tokens.
	f(`{"input_tokens":100,"output_tokens":5}`, 100, 0, false, true)
	f(`{"input_tokens":36,"output_tokens":5,"cache_read_input_tokens":64,"cache_creation_input_tokens":0}`, 100, 64, true, true)
	f(`{"input_tokens":36,"cache_read_input_tokens":"x"}`, 36, 0, false, true)
	f(`{"output_tokens":5}`, 0, 0, false, false)
}

func TestUsageTokens(t *testing.T) {
	t.Parallel()
	for u, want := range map[string][3]int64{
		`{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`:                                      {12, 5, 1},
		`{"input_tokens":3,"output_tokens":4}`:                                                              {3, 4, 1},
		`{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":16,"cache_creation_input_tokens":0}`: {19, 4, 1},
		`{"prompt_tokens":12}`:    {12, 0, 1},
		`{"completion_tokens":5}`: {0, 5, 0},
		`{"prompt_tokens":-1}`:    {0, 0, 0},
		`not json`:                {0, 0, 0},
		``:                        {0, 0, 0},
	} {
		p, c, ok := UsageTokens([]byte(u))
		if p != want[0] || (ok && c != want[1]) || ok != (want[2] == 1) {
			t.Errorf("UsageTokens(%s) = %d, %d, %v; want %v", u, p, c, ok, want)
		}
	}
}

func TestReadUsage(t *testing.T) {
	t.Parallel()
	f := func(u string, want UsageCounts) {
		t.Helper()
		if got := ReadUsage([]byte(u)); got != want {
			t.Errorf("ReadUsage(%q) = %+v, want %+v", u, got, want)
		}
	}
	f(`{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}`, UsageCounts{100, 7, 64, true, true})
	f(`{"prompt_tokens":100,"prompt_tokens_details":null}`, UsageCounts{Prompt: 100, OK: true})
	f(`{"input_tokens":9,"output_tokens":2,"input_tokens_details":{"cached_tokens":80}}`, UsageCounts{9, 2, 9, true, true})                      // capped
	f(`{"input_tokens":36,"output_tokens":5,"cache_read_input_tokens":64,"cache_creation_input_tokens":0}`, UsageCounts{100, 5, 64, true, true}) // Anthropic's
	f(`{"completion_tokens":5}`, UsageCounts{})
	f(`{"prompt_tokens":-1,"completion_tokens":5}`, UsageCounts{})
	f(`not json`, UsageCounts{})
	f(``, UsageCounts{})
}

// FuzzReadUsage checks ReadUsage against PromptUsage and UsageTokens on
// the OpenAI shape.
func FuzzReadUsage(f *testing.F) {
	f.Add([]byte(`{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}`))
	f.Add([]byte(`{"prompt_tokens":1.5}`))
	f.Add([]byte(`{"input_tokens":5,"input_tokens_details":{"cached_tokens":3},"cache_read_input_tokens":2}`))
	f.Add([]byte(`{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":"x"}}`))
	f.Fuzz(func(t *testing.T, u []byte) {
		c := ReadUsage(u)
		if c.Prompt < 0 || c.Completion < 0 || c.Cached < 0 || c.Cached > c.Prompt {
			t.Fatalf("ReadUsage(%q) = %+v", u, c)
		}
		p, _, ok := UsageTokens(u)
		pp, cached, hasCached, pok := PromptUsage(u)
		if pok && (!c.OK || c.Prompt != pp || (hasCached && (!c.HasCached || c.Cached != cached))) {
			t.Fatalf("ReadUsage(%q) = %+v, PromptUsage %d %d %v", u, c, pp, cached, hasCached)
		}
		if ok && c.OK && int64(c.Prompt) != p {
			t.Fatalf("ReadUsage(%q) = %+v, UsageTokens prompt %d", u, c, p)
		}
	})
}

// TestPromptCompletion: PromptUsage's counts, and the completion tokens
// (completion_tokens, else Anthropic's output_tokens) from the same parse.
func TestPromptCompletion(t *testing.T) {
	t.Parallel()
	for u, want := range map[string]int{
		`{"prompt_tokens":10,"completion_tokens":7}`:  7,
		`{"input_tokens":36,"output_tokens":5}`:       5,
		`{"prompt_tokens":10,"completion_tokens":-1}`: 0,
		`{"prompt_tokens":10}`:                        0,
	} {
		p, c, n, hc, ok := PromptCompletion([]byte(u))
		pp, pc, phc, pok := PromptUsage([]byte(u))
		if n != want || p != pp || c != pc || hc != phc || ok != pok {
			t.Errorf("PromptCompletion(%s) = %d %d %d %v %v, want completion %d and PromptUsage's %d %d %v %v", u, p, c, n, hc, ok, want, pp, pc, phc, pok)
		}
	}
}
