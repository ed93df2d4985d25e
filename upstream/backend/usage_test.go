package backend

import (
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestUsageOfBounded(t *testing.T) {
	t.Parallel()
	f := func(body, want string) {
		t.Helper()
		if got := string(usageOf([]byte(body))); got != want {
			t.Errorf("usageOf(%.60q…) = %q, want %q", body, got, want)
		}
	}
	u := `{"prompt_tokens":9000,"prompt_tokens_details":{"cached_tokens":8192}}`
	big := strings.Repeat("x", 100<<10)
	f(`{"id":"a","usage":`+u+`}`, u)
	// A body of any size: only its usage object is copied.
	f(`{"choices":[{"message":{"content":"`+big+`"}}],"usage":`+u+`}`, u)
	f(`{"choices":[{"message":{"content":"`+big+`"}}], "usage" : `+u+` }`, u)
	// A "usage" inside a string (escaped quotes) is not the key.
	f(`{"choices":[{"message":{"content":"`+big+`\"usage\":{}"}}]}`, ``)
	// A usage object longer than the bound, or not an object, is ignored.
	f(`{"choices":[],"usage":{"x":"`+big+`"}}`, ``)
	f(`{"choices":"`+big+`","usage":null}`, ``)
	f(`{"choices":"`+big+`","usage":{"a":"}"}}`, `{"a":"}"}`)
	f(`{"usage":null}`, ``)
	f(`not json "usage"`, ``)
}

// FuzzUsageOf: whatever the body, usageOf does not panic and returns nil
// or bytes that open an object, at most maxUsageParse of them; for a body
// that is a valid JSON object it agrees with a whole parse (its last
// top-level "usage" when that is an object of at most maxUsageParse
// bytes, else nil).
func FuzzUsageOf(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":3}}`), uint16(0))
	f.Add([]byte(`{"a":"\"usage\":{}","usage":{"b":[1,{"c":"}"}]}}`), uint16(65000))
	f.Add([]byte(`{"usage":{"a":1},"us\u0061ge":{"b":2}}`), uint16(0)) // the last one, its key escaped
	f.Fuzz(func(t *testing.T, body []byte, pad uint16) {
		if len(body) > 4096 {
			return
		}
		small := usageOf(body)
		padded := append([]byte(strings.Repeat(" ", int(pad)+int(pad)%3*(40<<10))), body...)
		for _, got := range [][]byte{small, usageOf(padded)} {
			if got == nil {
				continue
			}
			if got[0] != '{' || len(got) > maxUsageParse {
				t.Fatalf("usageOf(%q) = %q: not an object within the bound", body, got)
			}
		}
		if fastjson.ValidateBytes(body) != nil {
			return // fastjson's parser takes some bodies its validator refuses (a raw control byte in a string)
		}
		whole := fastjson.MustParseBytes(body)
		if whole.Type() != fastjson.TypeObject {
			return
		}
		var last *fastjson.Value // the last "usage" member, as engines' JSON readers take it
		whole.GetObject().Visit(func(k []byte, v *fastjson.Value) {
			if string(k) == "usage" {
				last = v
			}
		})
		var want []byte
		if last != nil && last.Type() == fastjson.TypeObject && len(last.MarshalTo(nil)) <= maxUsageParse {
			want = last.MarshalTo(nil)
		}
		var got []byte
		if small != nil {
			got = fastjson.MustParseBytes(small).MarshalTo(nil)
		}
		if string(got) != string(want) {
			t.Fatalf("usageOf(%q) = %q, a whole parse finds %q", body, got, want)
		}
	})
}

// BenchmarkUsageOf: a vLLM chat answer's usage read, as every
// non-streamed answer's end does when its hooks want usage.
func BenchmarkUsageOf(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-8f3a","object":"chat.completion","created":1733500000,"model":"llama3",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("The quick brown fox. ", 40) +
		`","tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],` +
		`"usage":{"prompt_tokens":1024,"total_tokens":1224,"completion_tokens":200,"prompt_tokens_details":{"cached_tokens":768}},` +
		`"prompt_logprobs":null}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if usageOf(body) == nil {
			b.Fatal("no usage")
		}
	}
}
