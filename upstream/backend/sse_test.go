package backend

import (
	"bytes"
	"testing"

	"github.com/valyala/fastjson"
)

func TestSSEEventEnd(t *testing.T) {
	t.Parallel()
	f := func(in string, want int) {
		t.Helper()
		if got := sseEventEnd([]byte(in)); got != want {
			t.Errorf("sseEventEnd(%q) = %d, want %d", in, got, want)
		}
	}
	f("", -1)
	f("data: x", -1)
	f("data: x\n", -1)
	f("data: x\n\n", 9)
	f("data: x\n\ndata: y\n\n", 9)
	f("data: x\r\n\r\n", 11)
	f("data: x\r\r", -1) // the last CR may be half of a CRLF
	f("data: x\r\rd", 9)
	f("data: x\r\n\r", -1) // the last CR may be half of a CRLF
	f("data: x\r", -1)
	f("data: x\n\r\n", 10)
	f("data: x\r\n\n", 10)
	f("\n", -1)
	f("\n\n", 2)
	f("a\nb\nc\n\nd", 7)
}

// normalize turns CRLF and CR line ends into LF.
func normalize(p []byte) []byte {
	p = bytes.ReplaceAll(p, []byte("\r\n"), []byte("\n"))
	return bytes.ReplaceAll(p, []byte("\r"), []byte("\n"))
}

func FuzzSSEEventEnd(f *testing.F) {
	for _, s := range []string{"data: x\n\n", "a\r\n\r\nb", "x\r", "\r\n\r", ":c\rdata: 1\r\r", "data: {}\n\ndata: [DONE]\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		e := sseEventEnd(p)
		if e < 0 {
			// No blank line in p, reading a trailing CR as half a CRLF.
			q := bytes.TrimSuffix(p, []byte("\r"))
			if bytes.Contains(normalize(q), []byte("\n\n")) {
				t.Fatalf("sseEventEnd(%q) = -1, but it holds a blank line", p)
			}
			return
		}
		if e > len(p) || e < 2 {
			t.Fatalf("sseEventEnd(%q) = %d out of range", p, e)
		}
		ev := normalize(p[:e])
		if i := bytes.Index(ev, []byte("\n\n")); i != len(ev)-2 {
			t.Fatalf("sseEventEnd(%q) = %d: event %q does not end at its first blank line", p, e, p[:e])
		}
		// The event does not end in the middle of a CRLF.
		if p[e-1] == '\r' && e < len(p) && p[e] == '\n' {
			t.Fatalf("sseEventEnd(%q) = %d splits a CRLF", p, e)
		}
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	f := func(body, want string) {
		t.Helper()
		if got := string(usageOf([]byte(body))); got != want {
			t.Errorf("usageOf(%q) = %q, want %q", body, got, want)
		}
	}
	f(`{"usage":{"prompt_tokens":3}}`, `{"prompt_tokens":3}`)
	f(`{"usage":null}`, "")
	f(`{"usage":1}`, "")
	f(`{"id":"x"}`, "")
	f(`{"usage":{`, "")
	f(`not json "usage"`, "")
	g := func(ev, want string) {
		t.Helper()
		if got := string(sseUsage([]byte(ev))); got != want {
			t.Errorf("sseUsage(%q) = %q, want %q", ev, got, want)
		}
	}
	g("data: {\"usage\":{\"a\":1}}\n\n", `{"a":1}`)
	g("event: x\r\ndata:{\"usage\":\r\ndata: {\"b\":2}}\r\n\r\n", `{"b":2}`) // multi-line data joins
	g("data: [DONE]\n\n", "")
	g("", "")
}

func FuzzUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":3}}`))
	f.Add([]byte("data: {\"usage\":{\"a\":1}}\n\n"))
	f.Add([]byte(`{"usage":{""}}`)) // found by the fuzzer when usageOf stopped validating
	// usageOf does not validate the object it finds (openai.ReadUsage
	// does as it reads it): what it returns opens an object and stays
	// within the bound; from a body that is JSON, it is a JSON object.
	f.Fuzz(func(t *testing.T, p []byte) {
		for i, u := range [][]byte{usageOf(p), sseUsage(p)} {
			if u == nil {
				continue
			}
			if u[0] != '{' || len(u) > maxUsageParse {
				t.Fatalf("usage %q of %q: not an object within the bound", u, p)
			}
			if i == 0 && fastjson.ValidateBytes(p) == nil {
				if v, err := fastjson.ParseBytes(u); err != nil || v.Type() != fastjson.TypeObject {
					t.Fatalf("usage %q of JSON %q is not a JSON object: %v", u, p, err)
				}
			}
		}
	})
}
