package backend

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

func TestInjectIncludeUsage(t *testing.T) {
	f := func(in, want string, wantOK bool) {
		t.Helper()
		got, ok := InjectIncludeUsage(nil, []byte(in))
		if ok != wantOK || string(got) != want {
			t.Errorf("InjectIncludeUsage(%s)\n = %s, %v\nwant %s, %v", in, got, ok, want, wantOK)
		}
		if ok && len(got)-len(in) > MaxInjectGrowth {
			t.Errorf("grew by %d > %d", len(got)-len(in), MaxInjectGrowth)
		}
	}
	f(`{"stream":true}`, `{"stream_options":{"include_usage":true},"stream":true}`, true)
	f(`{}`, `{"stream_options":{"include_usage":true}}`, true)
	f(` { "stream" : true } `, ` {"stream_options":{"include_usage":true}, "stream" : true } `, true)
	f(`{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true)
	f(`{"stream_options":{"include_usage":false},"stream":true}`, `{"stream_options":{"include_usage":true},"stream":true}`, true)
	f(`{"stream_options":{"include_usage":null}}`, `{"stream_options":{"include_usage":true}}`, true)
	f(`{"stream_options":{"continuous_usage_stats":true}}`, `{"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, true)
	f(`{"stream_options":{ }}`, `{"stream_options":{"include_usage":true }}`, true)
	f(`{"stream_options":{"include_usage":true}}`, `{"stream_options":{"include_usage":true}}`, false)
	// Duplicates: the last occurrence is the one the engine reads.
	f(`{"stream_options":{"include_usage":true},"stream_options":{"x":1}}`, `{"stream_options":{"include_usage":true},"stream_options":{"include_usage":true,"x":1}}`, true)
	f(`{"stream_options":{"x":1},"stream_options":{"include_usage":true}}`, `{"stream_options":{"x":1},"stream_options":{"include_usage":true}}`, false)
	f(`{"stream_options":{"include_usage":true,"include_usage":false}}`, `{"stream_options":{"include_usage":true,"include_usage":true}}`, true)
	// Nested look-alikes are not stream_options.
	f(`{"metadata":{"stream_options":{"include_usage":false}},"stream":true}`, `{"stream_options":{"include_usage":true},"metadata":{"stream_options":{"include_usage":false}},"stream":true}`, true)
	f(`{"messages":[{"content":"\"stream_options\":{}"}],"stream_options":{"a":[1,{"b":"}"}]}}`, `{"messages":[{"content":"\"stream_options\":{}"}],"stream_options":{"include_usage":true,"a":[1,{"b":"}"}]}}`, true)
	// An escaped key is the same key to the engine.
	f(`{"stream\u005foptions":{"include_usage":false}}`, `{"stream\u005foptions":{"include_usage":true}}`, true)
	// Not injectable: the engine refuses these anyway.
	f(`{"stream_options":"x"}`, `{"stream_options":"x"}`, false)
	f(`[1]`, `[1]`, false)
	f(`{"a":`, `{"a":`, false)
	f(``, ``, false)
}

// FuzzInjectIncludeUsage: on a JSON object the result is valid JSON,
// include_usage reads true, and every other field reads as before.
func FuzzInjectIncludeUsage(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `{"stream_options":{"continuous_usage_stats":true,"include_usage":false}}`,
		`{"stream_options":null,"stream_options":{}}`, ` {"a":[{"stream_options":1}] , "b":"\"}"}`, `{"stream\u005foptions":{"include\u005fusage":0}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, ok := InjectIncludeUsage(make([]byte, 0, len(in)+MaxInjectGrowth), in)
		if !bytes.Equal(in, orig) {
			t.Fatal("input modified")
		}
		var p1, p2 fastjson.Parser
		v, err := p1.ParseBytes(in)
		if err != nil || v.Type() != fastjson.TypeObject {
			return
		}
		so := chat.Field(v, "stream_options")
		asked := so != nil && so.Type() == fastjson.TypeObject && chat.Field(so, "include_usage") != nil && chat.Field(so, "include_usage").Type() == fastjson.TypeTrue
		injectable := so == nil || so.Type() == fastjson.TypeNull || so.Type() == fastjson.TypeObject
		if ok != (injectable && !asked) {
			t.Fatalf("ok %v for %s (asked %v)", ok, in, asked)
		}
		if !ok {
			if !bytes.Equal(out, in) {
				t.Fatalf("not ok but changed: %s", out)
			}
			return
		}
		if len(out)-len(in) > MaxInjectGrowth || len(out) <= len(in)-len("null") {
			t.Fatalf("size %d → %d", len(in), len(out))
		}
		w, err := p2.ParseBytes(out)
		if err != nil {
			t.Fatalf("invalid JSON %s: %v (from %s)", out, err, in)
		}
		if iu := chat.Field(w, "stream_options", "include_usage"); iu == nil || iu.Type() != fastjson.TypeTrue {
			t.Fatalf("include_usage not true in %s", out)
		}
		same := func(a, b *fastjson.Value, skip string) {
			ao, _ := a.Object()
			ao.Visit(func(k []byte, _ *fastjson.Value) {
				if string(k) == skip {
					return
				}
				x, y := chat.Field(a, string(k)), chat.Field(b, string(k))
				if y == nil || x.String() != y.String() {
					t.Fatalf("field %q changed: %s → %s", k, x, y)
				}
			})
		}
		same(v, w, "stream_options")
		if so != nil && so.Type() == fastjson.TypeObject {
			same(so, chat.Field(w, "stream_options"), "include_usage")
		}
	})
}

func TestUsageEvent(t *testing.T) {
	f := func(ev string, stripNull, wantDrop bool, wantOut string) {
		t.Helper()
		drop, cut, _ := usageEvent([]byte(ev), stripNull)
		out := ev
		if cut[1] > cut[0] {
			out = ev[:cut[0]] + ev[cut[1]:]
		}
		if drop != wantDrop || out != wantOut {
			t.Errorf("usageEvent(%q, %v) = %v %q, want %v %q", ev, stripNull, drop, out, wantDrop, wantOut)
		}
	}
	usage := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}` + "\n\n"
	f(usage, false, true, usage)
	f(`data:{"choices":[ ],"usage":{}}`+"\r\n\r\n", false, true, `data:{"choices":[ ],"usage":{}}`+"\r\n\r\n")
	chunk := `data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}` + "\n\n"
	f(chunk, true, false, `data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n")
	f(chunk, false, false, chunk)
	f(`data: {"usage":null,"id":"c"}`+"\n\n", true, false, `data: {"id":"c"}`+"\n\n")
	f(`data: {"usage":null}`+"\n\n", true, false, `data: {}`+"\n\n")
	// A continuous usage chunk (choices not empty) is the client's.
	cont := `data: {"choices":[{"index":0}],"usage":{"prompt_tokens":1}}` + "\n\n"
	f(cont, true, false, cont)
	// Not a single data line of one object: left alone.
	f("data: [DONE]\n\n", true, false, "data: [DONE]\n\n")
	f("event: x\ndata: {\"choices\":[],\"usage\":{}}\n\n", true, false, "event: x\ndata: {\"choices\":[],\"usage\":{}}\n\n")
	f("data: {\"choices\":[],\"usage\":{}}\ndata: {}\n\n", true, false, "data: {\"choices\":[],\"usage\":{}}\ndata: {}\n\n")
	f(`data: {"content":"\"usage\":null"}`+"\n\n", true, false, `data: {"content":"\"usage\":null"}`+"\n\n")
}

// FuzzUsageEvent: a cut leaves valid JSON without a top-level usage.
func FuzzUsageEvent(f *testing.F) {
	f.Add([]byte(`data: {"a":1,"usage":null,"b":2}` + "\n\n"))
	f.Add([]byte(`data: {"choices":[],"usage":{"x":1}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, ev []byte) {
		drop, cut, u := usageEvent(ev, true)
		if drop != (u != nil) || (drop && (u[0] != '{' || !bytes.Contains(ev, u))) {
			t.Fatalf("usageEvent(%q): drop %v, usage %q", ev, drop, u)
		}
		if cut[1] <= cut[0] {
			_ = drop
			return
		}
		if drop {
			t.Fatal("drop and cut")
		}
		out := append(append([]byte(nil), ev[:cut[0]]...), ev[cut[1]:]...)
		d, _ := bytes.CutPrefix(out, []byte("data:"))
		var p fastjson.Parser
		v, err := p.ParseBytes(bytes.TrimSpace(d))
		if err != nil {
			if _, err0 := p.ParseBytes(bytes.TrimSpace(ev[5:])); err0 == nil {
				t.Fatalf("cut %q → invalid %q: %v", ev, out, err)
			}
			return
		}
		if u := v.Get("usage"); u != nil && chat.Field(v, "usage").Type() == fastjson.TypeNull && bytes.Count(ev, usageKey) == 1 {
			t.Fatalf("usage:null left in %q", out)
		}
	})
}

// fakeVLLM answers a streamed chat as vLLM does: with include_usage, a
// usage chunk before [DONE] and, when oldChat (vLLM < 0.6), "usage":null
// in every other chunk.
func fakeVLLM(t *testing.T, oldChat bool) string {
	return upstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p fastjson.Parser
		v, err := p.ParseBytes(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		inc := chat.Field(v, "stream_options", "include_usage") != nil && chat.Field(v, "stream_options", "include_usage").GetBool()
		w.Header().Set("Content-Type", "text/event-stream")
		tail := "}"
		if inc && oldChat {
			tail = `,"usage":null}`
		}
		for _, c := range []string{"a", "b"} {
			io.WriteString(w, `data: {"id":"c","choices":[{"index":0,"delta":{"content":"`+c+`"}}]`+tail+"\n\n")
			w.(http.Flusher).Flush()
		}
		if inc {
			io.WriteString(w, `data: {"id":"c","choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":8}}}`+"\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}).URL
}

// TestDropUsageStream: a client that did not ask for usage gets the same
// bytes as without the injection, and Outcome.Usage has the engine's.
func TestDropUsageStream(t *testing.T) {
	t.Parallel()
	run := func(url string, body []byte, h Hooks) (string, Outcome) {
		e := newLoopEnv(t, nil)
		e.use(mustAdd(t, e.s, url))
		edit := func(hk *Hooks) {
			hk.DropUsage, hk.DropUsageNull, hk.Usage, hk.Edit = h.DropUsage, h.DropUsageNull, h.Usage, h.Edit
		}

		e.hooks.Store(&edit)
		c := e.dial(t)
		c.send(t, string(body))
		_, got := c.read(t)
		return got, e.outcome(t)
	}
	client := []byte(`{"model":"m","stream":true,"messages":[]}`)
	injected, ok := InjectIncludeUsage(nil, client)
	if !ok {
		t.Fatal("not injected")
	}
	for _, old := range []bool{false, true} {
		url := fakeVLLM(t, old)
		want, o0 := run(url, client, Hooks{Usage: true})
		if o0.Usage != nil || bytes.Contains([]byte(want), []byte("usage")) {
			t.Fatalf("without include_usage: %q, usage %s", want, o0.Usage)
		}
		// The member spliced in by InjectIncludeUsage, or written in
		// as the request goes (Hooks.Edit, IncludeUsageSplice with the
		// scan spared): the engine reads the same body either way.
		declined := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[]}`)
		replace, ok := IncludeUsageSplice(declined, false)
		if !ok || replace.To-replace.From != len("false") {
			t.Fatalf("IncludeUsageSplice(%s): %+v %v", declined, replace, ok)
		}
		e, ok := IncludeUsageSplice(append([]byte("  "), client...), true)
		if !ok || e.From != 3 || e.To != 3 {
			t.Fatalf("IncludeUsageSplice: %+v %v", e, ok)
		}
		for _, c := range []struct {
			body []byte
			h    Hooks
		}{
			{injected, Hooks{DropUsage: true, DropUsageNull: true}},
			{client, Hooks{DropUsage: true, DropUsageNull: true, Edit: Splice{e.From - 2, e.To - 2, e.Text}}},
			{declined, Hooks{DropUsage: true, DropUsageNull: true, Edit: replace}}, // a replacement, not an insertion
		} {
			got, o1 := run(url, c.body, c.h)
			if got != want {
				t.Errorf("old %v, edit %+v: client stream\n%q\nwant (byte-identical to no injection)\n%q", old, c.h.Edit, got, want)
			}
			if string(o1.Usage) != `{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":8}}` {
				t.Errorf("old %v, edit %+v: Outcome.Usage %s", old, c.h.Edit, o1.Usage)
			}
		}
		// A client that asked keeps its usage chunk.
		asked := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
		kept, o2 := run(url, asked, Hooks{Usage: true})
		if !bytes.Contains([]byte(kept), []byte(`"cached_tokens":8`)) || o2.Usage == nil {
			t.Errorf("old %v: a client that asked lost its usage: %q", old, kept)
		}
	}
}
