package openai

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/openai/openaitest"
	"github.com/saltus-lb/saltus/tokenpool/chat"
)

func TestDecodeChat(t *testing.T) {
	t.Parallel()
	var d Request
	body := `{"model":"m1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{}}]}],
		"stream":true,"stream_options":{"include_usage":true},"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false}}`
	if e := Decode(&d, KindChat, []byte(body), MaxScanDepth, nil); e != nil {
		t.Fatal(e)
	}
	if d.Model != "m1" || !d.Stream || !d.IncludeUsage || d.Options.AddGenerationPrompt || !d.Options.DisableThinking {
		t.Fatalf("decoded %+v", d)
	}
	if len(d.Messages) != 2 || d.Messages[0].Role != "system" || d.Messages[0].Content != "be brief" || d.Messages[1].Content != "<image>\nhi" {
		t.Fatalf("messages %+v", d.Messages)
	}
	// Defaults: generation prompt on, no stream.
	if e := Decode(&d, KindChat, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`), MaxScanDepth, nil); e != nil {
		t.Fatal(e)
	}
	if !d.Options.AddGenerationPrompt || d.Stream || d.IncludeUsage {
		t.Fatalf("defaults %+v", d)
	}
}

func TestDecodeChatKeepsNoView(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"model-a","messages":[{"role":"user","content":"hello there"}]}`)
	var d Request
	if e := Decode(&d, KindChat, body, MaxScanDepth, nil); e != nil {
		t.Fatal(e)
	}
	for i := range body {
		body[i] = 'X'
	}
	// Another decode reuses the pooled parser's buffer.
	var d2 Request
	_ = Decode(&d2, KindChat, []byte(`{"model":"zzzzzzz","messages":[{"role":"user","content":"yyyyyyyyyyy"}]}`), MaxScanDepth, nil)
	if d.Model != "model-a" || d.Messages[0].Content != "hello there" {
		t.Fatalf("decoded values alias a buffer: %q %q", d.Model, d.Messages[0].Content)
	}
}

func TestDecodeCompletion(t *testing.T) {
	t.Parallel()
	f := func(body, prompt string, ids []int32) {
		t.Helper()
		var d Request
		if e := Decode(&d, KindCompletion, []byte(body), MaxScanDepth, nil); e != nil {
			t.Fatalf("%s: %v", body, e)
		}
		if d.Prompt != prompt || d.HasTokenIDs != (ids != nil) || !slices.Equal(d.TokenIDs, ids) {
			t.Fatalf("%s: got prompt %q ids %v (%v), want %q %v", body, d.Prompt, d.TokenIDs, d.HasTokenIDs, prompt, ids)
		}
	}
	f(`{"model":"m","prompt":"once upon"}`, "once upon", nil)
	f(`{"model":"m","prompt":["first","second"]}`, "first", nil)
	f(`{"model":"m","prompt":[1,2,3]}`, "", []int32{1, 2, 3})
	f(`{"model":"m","prompt":[[7,8],[9]]}`, "", []int32{7, 8})
	f(`{"model":"m","prompt_token_ids":[5,6]}`, "", []int32{5, 6})
	f(`{"model":"m","prompt":"ignored","prompt_token_ids":[4]}`, "", []int32{4})
	f(`{"model":"m","prompt":"p","prompt_token_ids":null}`, "p", nil)
	f(`{"model":"m","prompt":[2147483647]}`, "", []int32{2147483647})
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	f := func(k Kind, body, param, msgPart string) {
		t.Helper()
		var d Request
		e := Decode(&d, k, []byte(body), MaxScanDepth, nil)
		if e == nil {
			t.Fatalf("%s: no error", body)
		}
		if e.Status != 400 || e.Param != param || !strings.Contains(e.Message, msgPart) || e.Type != "invalid_request_error" {
			t.Fatalf("%s: got %d param %q msg %q", body, e.Status, e.Param, e.Message)
		}
		out := openaitest.CheckErrorBody(t, e.Body(), "invalid_request_error", "", param)
		if out.Message != e.Message {
			t.Fatalf("error body %s, message %q", e.Body(), e.Message)
		}
	}
	f(KindChat, `{"model":"m","messages":[{"role":"user"`, "", "invalid JSON")
	f(KindChat, `[1]`, "", "JSON object")
	f(KindChat, `{"messages":[{"role":"user","content":"x"}]}`, "model", "model: missing")
	f(KindChat, `{"model":3,"messages":[]}`, "model", "want a string")
	f(KindChat, `{"model":"","messages":[]}`, "model", "empty")
	f(KindChat, `{"model":"m"}`, "messages", "messages: missing")
	f(KindChat, `{"model":"m","messages":[]}`, "messages", "messages: empty")
	f(KindChat, `{"model":"m","messages":{}}`, "messages", "want a JSON array")
	f(KindChat, `{"model":"m","messages":[{"content":"x"}]}`, "messages", "messages[0].role: missing")
	f(KindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, "stream", "true or false")
	f(KindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":1}}`, "stream_options.include_usage", "true or false")
	f(KindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":3}`, "stream_options", "want an object")
	f(KindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":0}`, "add_generation_prompt", "true or false")
	f(KindCompletion, `{"model":"m"}`, "prompt", "prompt: missing")
	f(KindCompletion, `{"model":"m","prompt":null}`, "prompt", "prompt: missing")
	f(KindCompletion, `{"model":"m","prompt":[]}`, "prompt", "empty array")
	f(KindCompletion, `{"model":"m","prompt":{}}`, "prompt", "want a string")
	f(KindCompletion, `{"model":"m","prompt":["a",1]}`, "prompt", "prompt[1]")
	f(KindCompletion, `{"model":"m","prompt":[1,"a"]}`, "prompt", "prompt[1]: want a token id")
	f(KindCompletion, `{"model":"m","prompt":[1.5]}`, "prompt", "integer token id")
	f(KindCompletion, `{"model":"m","prompt":[-1]}`, "prompt", "integer token id")
	f(KindCompletion, `{"model":"m","prompt":[2147483648]}`, "prompt", "integer token id")
	f(KindCompletion, `{"model":"m","prompt":[[1],2]}`, "prompt", "prompt[1]")
	f(KindCompletion, `{"model":"m","prompt":[[]]}`, "prompt[0]", "empty array")
	f(KindCompletion, `{"model":"m","prompt":[true]}`, "prompt", "prompt[0]")
	f(KindCompletion, `{"model":"m","prompt_token_ids":"abc"}`, "prompt_token_ids", "want an array")
	f(KindCompletion, `{"model":"m","prompt_token_ids":[]}`, "prompt_token_ids", "empty array")
}

// FuzzDecode: no input panics, and every error is a 400 (or a 413 for a
// body nested deeper than MaxScanDepth) with a valid OpenAI error body.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream_options":{"include_usage":false}}`,
		`{"model":"m","prompt":["a","b"]}`, `{"model":"m","prompt":[[1,2],[3]]}`, `{"model":"m","prompt_token_ids":[1]}`,
		`{"model":"m","prompt":[1e3]}`, `{`, `null`, `{"model":"m","prompt":"\ud800"}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, isChat bool) {
		k := KindCompletion
		if isChat {
			k = KindChat
		}
		var d Request
		e := Decode(&d, k, body, MaxScanDepth, nil)
		if e == nil {
			if d.Model == "" || (k == KindChat && len(d.Messages) == 0) || (k == KindCompletion && d.HasTokenIDs && len(d.TokenIDs) == 0) {
				t.Fatalf("accepted without its required fields: %+v", d)
			}
			return
		}
		if (e.Status != 400 && (e.Status != 413 || e.Code != "json_too_deep")) || e.Type != "invalid_request_error" || !json.Valid(e.Body()) {
			t.Fatalf("bad error: %d %q %s", e.Status, e.Type, e.Body())
		}
	})
}

// TestDecodeDuplicateKeysLastWins: a repeated field is read as the Python
// engines read it, the last occurrence wins, for every field routing acts on.
func TestDecodeDuplicateKeysLastWins(t *testing.T) {
	t.Parallel()
	var r Request
	body := `{"model":"a","model":"b","messages":[{"role":"user","content":"x"}],` +
		`"messages":[{"role":"user","role":"system","content":"first","content":"last"}],` +
		`"stream":false,"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`
	if e := Decode(&r, KindChat, []byte(body), MaxScanDepth, nil); e != nil {
		t.Fatal(e)
	}
	if r.Model != "b" || !r.Stream || !r.IncludeUsage {
		t.Fatalf("model %q stream %v include_usage %v, want b true true", r.Model, r.Stream, r.IncludeUsage)
	}
	if len(r.Messages) != 1 || r.Messages[0].Role != "system" || r.Messages[0].Content != "last" {
		t.Fatalf("messages %+v, want one system message \"last\"", r.Messages)
	}
	if e := Decode(&r, KindCompletion, []byte(`{"model":"m","prompt":"first","prompt":"last"}`), MaxScanDepth, nil); e != nil || r.Prompt != "last" {
		t.Fatalf("prompt %q (%v), want last", r.Prompt, e)
	}
}

// TestDecodeJoinedParts: DecodeWith without parts decodes the same
// request, its messages' content parts not described (for a renderer
// that joins them), through a Scratch or copying.
func TestDecodeJoinedParts(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},"b",{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":""}]},{"role":"assistant","content":"c"}]}`)
	var want Request
	if e := Decode(&want, KindChat, body, 64, nil); e != nil {
		t.Fatal(e)
	}
	if ps := want.Messages[0].Parts(); len(ps) != 4 {
		t.Fatalf("setup: %d parts described, want 4", len(ps))
	}
	var sc Scratch
	for _, scr := range []*Scratch{nil, &sc} {
		var got Request
		if e := DecodeWith(&got, KindChat, body, 64, scr, 0); e != nil {
			t.Fatal(e)
		}
		for i, m := range got.Messages {
			if m.Parts() != nil || m.Role != want.Messages[i].Role || m.Content != want.Messages[i].Content {
				t.Fatalf("scratch %v: message %d = %q %q, %d parts; want %q %q and none",
					scr != nil, i, m.Role, m.Content, len(m.Parts()), want.Messages[i].Role, want.Messages[i].Content)
			}
		}
	}
	// The Scratch describes parts again when asked.
	var again Request
	if e := DecodeWith(&again, KindChat, body, 64, &sc, chat.WantParts|chat.WantExtras); e != nil || len(again.Messages[0].Parts()) != 4 {
		t.Fatalf("through the Scratch with parts: %v, %d parts", e, len(again.Messages[0].Parts()))
	}
}

// TestDecodeTemplateExtras: tools, chat_template_kwargs and
// reasoning_effort reach chat.Options (the first two in one written
// form) when the renderer wants them (a Jinja template, harmony), and
// cost nothing when it does not.
func TestDecodeTemplateExtras(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools": [ {"type":"function","function":{"name":"f","parameters":{"b":1,"a":2}}} ],"chat_template_kwargs":{"enable_thinking":false, "x":"\u00e9"},"reasoning_effort":"hi\u0067h"}`)
	var sc Scratch
	for _, s := range []*Scratch{nil, &sc} {
		var d Request
		if e := DecodeWith(&d, KindChat, body, 64, s, chat.WantExtras); e != nil {
			t.Fatal(e)
		}
		if want := `[{"type":"function","function":{"name":"f","parameters":{"b":1,"a":2}}}]`; d.Options.Tools != want {
			t.Errorf("tools %s, want %s", d.Options.Tools, want)
		}
		if want := `{"enable_thinking":false,"x":"é"}`; d.Options.Kwargs != want || !d.Options.DisableThinking {
			t.Errorf("kwargs %s (thinking off %v), want %s", d.Options.Kwargs, d.Options.DisableThinking, want)
		}
		if d.Options.ReasoningEffort != "high" {
			t.Errorf("reasoning_effort %q, want high", d.Options.ReasoningEffort)
		}
		d = Request{}
		if e := DecodeWith(&d, KindChat, body, 64, s, 0); e != nil {
			t.Fatal(e)
		}
		if d.Options.Tools != "" || d.Options.Kwargs != "" || d.Options.ReasoningEffort != "" || !d.Options.DisableThinking {
			t.Errorf("without WantExtras: %+v", d.Options)
		}
	}
}

// TestDecodeMaxTokens: the answer's bound is max_completion_tokens, else
// max_tokens, else max_output_tokens, each only as a non-negative
// integer (a bad one is the engine's to refuse: no error here); ignore_eos
// only when true.
func TestDecodeMaxTokens(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		members string
		max     int64
		eos     bool
	}{
		{``, 0, false},
		{`"max_tokens":7,`, 7, false},
		{`"max_tokens":7,"max_completion_tokens":9,"ignore_eos":true,`, 9, true},
		{`"max_completion_tokens":null,"max_tokens":7,`, 7, false},
		{`"max_completion_tokens":-1,"max_tokens":7,`, 7, false},
		{`"max_tokens":7.5,"max_output_tokens":3,`, 3, false},
		{`"max_tokens":"7","ignore_eos":"true",`, 0, false},
		{`"ignore_eos":false,"max_tokens":0,`, 0, false},
	} {
		body := `{` + c.members + `"model":"m","messages":[{"role":"user","content":"hi"}]}`
		var r Request
		if e := Decode(&r, KindChat, []byte(body), MaxScanDepth, nil); e != nil {
			t.Fatalf("%s: %+v", body, e)
		}
		if r.MaxTokens != c.max || r.IgnoreEOS != c.eos {
			t.Errorf("%s: max %d eos %v, want %d %v", body, r.MaxTokens, r.IgnoreEOS, c.max, c.eos)
		}
	}
}

// TestDecodeCacheSalt: vLLM's cache_salt, a string (unescaped), in every
// kind of request; anything else is the engine's to refuse.
func TestDecodeCacheSalt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind Kind
		body string
		want string
	}{
		{KindChat, `{"model":"m","cache_salt":"t-1","messages":[{"role":"user","content":"hi"}]}`, "t-1"},
		{KindCompletion, `{"model":"m","prompt":"hi","cache_salt":"a\"b"}`, `a"b`},
		{KindCompletion, `{"model":"m","prompt":[1,2],"cache_salt":""}`, ""},
		{KindCompletion, `{"model":"m","prompt":"hi","cache_salt":7}`, ""},
		{KindCompletion, `{"model":"m","prompt":"hi","cache_salt":null}`, ""},
		{KindResponses, `{"model":"m","input":"hi","cache_salt":"r"}`, "r"},
	} {
		var r Request
		if e := Decode(&r, c.kind, []byte(c.body), MaxScanDepth, nil); e != nil {
			t.Fatalf("%s: %+v", c.body, e)
		}
		if r.CacheSalt != c.want {
			t.Errorf("%s: cache salt %q, want %q", c.body, r.CacheSalt, c.want)
		}
	}
}
