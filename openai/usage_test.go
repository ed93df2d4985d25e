package openai

import (
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestReadUsage(t *testing.T) {
	t.Parallel()
	f := func(u string, want UsageCounts) {
		t.Helper()
		if got := ReadUsage([]byte(u)); got != want {
			t.Errorf("ReadUsage(%q) = %+v, want %+v", u, got, want)
		}
	}
	// OpenAI's chat and completions.
	f(`{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}`, UsageCounts{100, 7, 64, true, true})
	f(`{"prompt_tokens":100,"prompt_tokens_details":null}`, UsageCounts{Prompt: 100, OK: true})
	f(`{"prompt_tokens":100}`, UsageCounts{Prompt: 100, OK: true})
	f(`{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":64}}`, UsageCounts{10, 0, 10, true, true}) // capped
	f(`{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`, UsageCounts{Prompt: 12, Completion: 5, OK: true})
	f(`{"prompt_tokens":10,"completion_tokens":-1}`, UsageCounts{Prompt: 10, OK: true})
	f(`{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":"x"}}`, UsageCounts{Prompt: 3, OK: true})
	// The Responses API's.
	f(`{"input_tokens":9,"output_tokens":2,"input_tokens_details":{"cached_tokens":80}}`, UsageCounts{9, 2, 9, true, true}) // capped
	// Anthropic's, as vLLM writes it: input_tokens the whole prompt, or
	// its uncached part beside cache_read_input_tokens.
	f(`{"input_tokens":100,"output_tokens":5}`, UsageCounts{Prompt: 100, Completion: 5, OK: true})
	f(`{"input_tokens":36,"output_tokens":5,"cache_read_input_tokens":64,"cache_creation_input_tokens":0}`, UsageCounts{100, 5, 64, true, true})
	f(`{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":16,"cache_creation_input_tokens":2}`, UsageCounts{21, 4, 16, true, true})
	f(`{"input_tokens":36,"cache_read_input_tokens":"x"}`, UsageCounts{Prompt: 36, OK: true})
	// No prompt count: nothing.
	f(`{"completion_tokens":5}`, UsageCounts{})
	f(`{"output_tokens":5}`, UsageCounts{})
	f(`{"prompt_tokens":-1,"completion_tokens":5}`, UsageCounts{})
	f(`{"prompt_tokens":"x","input_tokens":5}`, UsageCounts{})
	f(`{"prompt_tokens":1.5}`, UsageCounts{})
	f(`{"prompt_tokens":1099511627777}`, UsageCounts{}) // over 2^40: not a count
	f(`not json`, UsageCounts{})
	f(``, UsageCounts{})
	f(`{"prompt_tokens":1,"x":"`+strings.Repeat("y", 5000)+`"}`, UsageCounts{}) // over the bound
}

// FuzzReadUsage: whatever the bytes, the counts are sane; and for usage
// objects built from the fuzzer's numbers in each shape, with members
// missing, null or of the wrong type, ReadUsage reads what was written.
func FuzzReadUsage(f *testing.F) {
	f.Add([]byte(`{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}`), int64(100), int64(64), int64(7), int64(0), uint8(0))
	f.Add([]byte(`{"input_tokens":5,"input_tokens_details":{"cached_tokens":3},"cache_read_input_tokens":2}`), int64(36), int64(64), int64(5), int64(2), uint8(2))
	f.Add([]byte(`{"prompt_tokens":1.5}`), int64(-1), int64(1<<41), int64(0), int64(0), uint8(0x55))
	f.Fuzz(func(t *testing.T, raw []byte, prompt, cached, completion, created int64, shape uint8) {
		c := ReadUsage(raw)
		if c.Prompt < 0 || c.Completion < 0 || c.Cached < 0 || c.Cached > c.Prompt || (!c.OK && c != UsageCounts{}) || (!c.HasCached && c.Cached != 0) {
			t.Fatalf("ReadUsage(%q) = %+v", raw, c)
		}
		if fastjson.ValidateBytes(raw) == nil && uniqueKeys(fastjson.MustParseBytes(raw)) {
			// Where fastjson, which read usage objects before, takes
			// the bytes for JSON and no key repeats (fastjson's Get
			// reads the first, ReadUsage the last), they read the same.
			if old := fastjsonReadUsage(raw); c != old {
				t.Fatalf("ReadUsage(%q) = %+v, fastjson read %+v", raw, c, old)
			}
		}
		u, want := usageOf(prompt, cached, completion, created, shape)
		if got := ReadUsage([]byte(u)); got != want {
			t.Fatalf("ReadUsage(%s) = %+v, want %+v", u, got, want)
		}
		if fastjson.Validate(u) != nil {
			t.Fatalf("usageOf wrote %q: not JSON", u)
		}
	})
}

// usageOf writes a usage object of shape%3 (OpenAI's, the Responses
// API's, Anthropic's) with the counts given, and the counts ReadUsage
// should read from it. shape's higher bits leave a member out (bits 2-5:
// cached, completion, created, prompt) or write a count as a string or
// null (bit 6, bit 7), which is then absent.
func usageOf(prompt, cached, completion, created int64, shape uint8) (string, UsageCounts) {
	isCount := func(n int64) bool { return n >= 0 && n <= maxTokenCount }
	num := func(n int64) string { return fmt.Sprint(n) }
	if shape&64 != 0 {
		num = func(n int64) string { return fmt.Sprintf("%q", fmt.Sprint(n)) }
		isCount = func(int64) bool { return false }
	} else if shape&128 != 0 {
		num = func(int64) string { return "null" }
		isCount = func(int64) bool { return false }
	}
	has := func(bit uint8) bool { return shape&(1<<bit) == 0 }
	names := [3][4]string{
		{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "cached_tokens"},
		{"input_tokens", "output_tokens", "input_tokens_details", "cached_tokens"},
		{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"},
	}[shape%3]
	var members []string
	var want UsageCounts
	if has(5) {
		members = append(members, fmt.Sprintf("%q:%s", names[0], num(prompt)))
		want.Prompt, want.OK = int(prompt), isCount(prompt)
	}
	if has(3) {
		members = append(members, fmt.Sprintf("%q:%s", names[1], num(completion)))
		if isCount(completion) {
			want.Completion = int(completion)
		}
	}
	anthropic := shape%3 == 2
	if has(2) {
		if anthropic {
			members = append(members, fmt.Sprintf("%q:%s", names[2], num(cached)))
		} else {
			members = append(members, fmt.Sprintf("%q:{%q:%s}", names[2], names[3], num(cached)))
		}
		if want.HasCached = isCount(cached); want.HasCached {
			want.Cached = int(cached)
		}
	}
	if anthropic && has(4) {
		members = append(members, fmt.Sprintf("%q:%s", names[3], num(created)))
	}
	if anthropic && want.HasCached && want.OK {
		want.Prompt += want.Cached
		if has(4) && isCount(created) {
			want.Prompt += int(created)
		}
	}
	if !want.OK {
		return "{" + strings.Join(members, ",") + "}", UsageCounts{}
	}
	want.Cached = min(want.Cached, want.Prompt)
	return "{" + strings.Join(members, ",") + "}", want
}

// BenchmarkReadUsage: a vLLM chat answer's usage object read, as every
// answer's end does when saltus learns from it or charges a key.
func BenchmarkReadUsage(b *testing.B) {
	u := []byte(`{"prompt_tokens":1024,"total_tokens":1224,"completion_tokens":200,"prompt_tokens_details":{"cached_tokens":768}}`)
	b.ReportAllocs()
	for b.Loop() {
		if c := ReadUsage(u); c.Cached != 768 {
			b.Fatal(c)
		}
	}
}

// uniqueKeys reports whether no object in v has a key twice.
func uniqueKeys(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeObject:
		seen, ok := map[string]bool{}, true
		v.GetObject().Visit(func(k []byte, x *fastjson.Value) {
			ok = ok && !seen[string(k)] && uniqueKeys(x)
			seen[string(k)] = true
		})
		return ok
	case fastjson.TypeArray:
		for _, x := range v.GetArray() {
			if !uniqueKeys(x) {
				return false
			}
		}
	}
	return true
}

// fastjsonReadUsage is ReadUsage as it read with a fastjson parse, before
// issue 33's cut: FuzzReadUsage's reference.
func fastjsonReadUsage(u []byte) (c UsageCounts) {
	if len(u) == 0 || len(u) > maxUsageBytes {
		return c
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(u)
	if err != nil {
		return c
	}
	count := func(keys ...string) (int, bool) {
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
	if v.Exists("prompt_tokens") {
		if c.Prompt, c.OK = count("prompt_tokens"); !c.OK {
			return UsageCounts{}
		}
		c.Cached, c.HasCached = count("prompt_tokens_details", "cached_tokens")
	} else if c.Prompt, c.OK = count("input_tokens"); c.OK {
		c.Cached, c.HasCached = count("input_tokens_details", "cached_tokens")
		if read, ok := count("cache_read_input_tokens"); ok {
			created, _ := count("cache_creation_input_tokens")
			c.Prompt, c.Cached, c.HasCached = c.Prompt+read+created, read, true
		}
	} else {
		return UsageCounts{}
	}
	var ok bool
	if c.Completion, ok = count("completion_tokens"); !ok {
		c.Completion, _ = count("output_tokens")
	}
	c.Cached = min(c.Cached, c.Prompt)
	return c
}
