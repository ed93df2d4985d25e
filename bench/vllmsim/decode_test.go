package vllmsim

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
)

// FuzzDecodeRequest: any body decodes or gets a 400 with a valid error
// body, never a panic; a decoded request has exactly one prompt, its
// priority is the body's (checkPriority; /tokenize ignores it), and its
// byte-block tokenization is consistent (4 bytes a token, a key per full
// 64-byte block; token ids: a key per 16 ids).
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":3}`,
		`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"image_url"}]},{"role":"user","content":null}]}`,
		`{"model":"m","prompt":"once upon a time","max_completion_tokens":7,"n":1}`,
		`{"prompt":[1,2,3],"prompt_token_ids":[4,5]}`,
		`{"prompt":[[1,2,3]]}`,
		`{"prompt":["x"],"add_special_tokens":false}`,
		`{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false}}`,
		`{"model":null,"prompt":"x","max_tokens":null,"stream":null}`,
		`{"prompt":[1e3]}`, `{"prompt":[]}`, `[]`, `{`, `{"max_tokens":-1}`, `{"n":2.5}`,
		`{"prompt":"x","priority":-7}`, `{"messages":[{"role":"user","content":"x"}],"priority":3,"priority":1}`,
		`{"prompt":"x","priority":1.5}`, `{"prompt":"x","priority":null}`, `{"prompt":"x","pr\u0069ority":2}`,
		`{"prompt":"x","priority":9223372036854775808}`,
	} {
		for k := kindChat; k <= kindTokenize; k++ {
			f.Add([]byte(seed), uint8(k))
		}
	}
	p, err := newPrompter(DefaultConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	m := newModels(DefaultConfig()).primary
	f.Fuzz(func(t *testing.T, body []byte, k uint8) {
		k = k%3 + 1
		r, e := decodeRequest(body, kind(k))
		if e != nil {
			var v struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if e.status != 400 || json.Unmarshal(e.body(), &v) != nil || v.Error.Message == "" || v.Error.Type != "invalid_request_error" {
				t.Fatalf("error %d %s", e.status, e.body())
			}
			return
		}
		if r.maxTokens < 0 || (kind(k) == kindTokenize && (r.stream || r.maxTokens != 0 || r.priority != 0)) {
			t.Fatalf("decoded %+v", r)
		}
		if kind(k) != kindTokenize {
			checkPriority(t, body, r.priority)
		}
		prompts := 0
		if r.msgs != nil {
			prompts++
		}
		if r.hasIDs {
			prompts++
			if len(r.ids) == 0 {
				t.Fatal("empty ids decoded")
			}
		}
		if prompts != 1 && !(prompts == 0 && kind(k) != kindChat) { // a text prompt may be ""
			t.Fatalf("%d prompts in %+v", prompts, r)
		}
		if kind(k) == kindChat && len(r.msgs) == 0 {
			t.Fatal("chat without messages decoded")
		}
		tk, e := p.encode(&r, m, true)
		if e != nil {
			t.Fatalf("encode: %v (the none template refuses no conversation)", e)
		}
		if len(tk.ids) != tk.n {
			t.Fatalf("%d ids, count %d", len(tk.ids), tk.n)
		}
		want := tk.n / 16
		if !r.hasIDs {
			bytes := len(r.text)
			if r.msgs != nil {
				segs, err := p.tmpl.Render(nil, r.msgs, r.opt)
				if err != nil {
					t.Fatal(err)
				}
				bytes = 0
				for _, s := range segs {
					bytes += len(s.Text)
				}
			}
			if tk.n != (bytes+3)/4 {
				t.Fatalf("%d bytes, %d tokens", bytes, tk.n)
			}
			want = bytes / 64
		}
		if len(tk.keys) != want {
			t.Fatalf("%d keys for %d tokens, want %d", len(tk.keys), tk.n, want)
		}
	})
}

// checkPriority is the fuzz tests' oracle for "priority": a decoded
// request holds the body's "priority" as encoding/json reads the body
// (the last of duplicate keys, escapes undone), an integer, or 0 when
// the body has none. Bodies encoding/json refuses are not checked.
func checkPriority(t *testing.T, body []byte, got int64) {
	t.Helper()
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return
	}
	raw, ok := m["priority"]
	if !ok {
		if got != 0 {
			t.Fatalf("no priority in the body, %d decoded", got)
		}
		return
	}
	want, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || got != want {
		t.Fatalf("priority %s decoded as %d", raw, got)
	}
}
