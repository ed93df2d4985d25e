package shard

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestDecodeChat(t *testing.T) {
	t.Parallel()
	var d request
	body := `{"model":"m1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{}}]}],
		"stream":true,"stream_options":{"include_usage":true},"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false}}`
	if e := decode(&d, kindChat, []byte(body)); e != nil {
		t.Fatal(e)
	}
	if d.model != "m1" || !d.stream || !d.includeUsage || d.opt.AddGenerationPrompt || !d.opt.DisableThinking {
		t.Fatalf("decoded %+v", d)
	}
	if len(d.msgs) != 2 || d.msgs[0].Role != "system" || d.msgs[0].Content != "be brief" || d.msgs[1].Content != "<image>\nhi" {
		t.Fatalf("messages %+v", d.msgs)
	}
	// Defaults: generation prompt on, no stream.
	if e := decode(&d, kindChat, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)); e != nil {
		t.Fatal(e)
	}
	if !d.opt.AddGenerationPrompt || d.stream || d.includeUsage {
		t.Fatalf("defaults %+v", d)
	}
}

func TestDecodeChatKeepsNoView(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"model-a","messages":[{"role":"user","content":"hello there"}]}`)
	var d request
	if e := decode(&d, kindChat, body); e != nil {
		t.Fatal(e)
	}
	for i := range body {
		body[i] = 'X'
	}
	// Another decode reuses the pooled parser's buffer.
	var d2 request
	_ = decode(&d2, kindChat, []byte(`{"model":"zzzzzzz","messages":[{"role":"user","content":"yyyyyyyyyyy"}]}`))
	if d.model != "model-a" || d.msgs[0].Content != "hello there" {
		t.Fatalf("decoded values alias a buffer: %q %q", d.model, d.msgs[0].Content)
	}
}

func TestDecodeCompletion(t *testing.T) {
	t.Parallel()
	f := func(body, prompt string, ids []int32) {
		t.Helper()
		var d request
		if e := decode(&d, kindCompletion, []byte(body)); e != nil {
			t.Fatalf("%s: %v", body, e)
		}
		if d.prompt != prompt || d.hasIDs != (ids != nil) || !slices.Equal(d.ids, ids) {
			t.Fatalf("%s: got prompt %q ids %v (%v), want %q %v", body, d.prompt, d.ids, d.hasIDs, prompt, ids)
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
	f := func(k kind, body, param, msgPart string) {
		t.Helper()
		var d request
		e := decode(&d, k, []byte(body))
		if e == nil {
			t.Fatalf("%s: no error", body)
		}
		if e.status != 400 || e.param != param || !strings.Contains(e.msg, msgPart) || e.typ != "invalid_request_error" {
			t.Fatalf("%s: got %d param %q msg %q", body, e.status, e.param, e.msg)
		}
		out := checkErrorBody(t, e.body(), "invalid_request_error", "", param)
		if out.Message != e.msg {
			t.Fatalf("error body %s, message %q", e.body(), e.msg)
		}
	}
	f(kindChat, `{"model":"m","messages":[{"role":"user"`, "", "invalid JSON")
	f(kindChat, `[1]`, "", "JSON object")
	f(kindChat, `{"messages":[{"role":"user","content":"x"}]}`, "model", "model: missing")
	f(kindChat, `{"model":3,"messages":[]}`, "model", "want a string")
	f(kindChat, `{"model":"","messages":[]}`, "model", "empty")
	f(kindChat, `{"model":"m"}`, "messages", "messages: missing")
	f(kindChat, `{"model":"m","messages":[]}`, "messages", "messages: empty")
	f(kindChat, `{"model":"m","messages":{}}`, "messages", "want a JSON array")
	f(kindChat, `{"model":"m","messages":[{"content":"x"}]}`, "messages", "messages[0].role: missing")
	f(kindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, "stream", "true or false")
	f(kindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":1}}`, "stream_options.include_usage", "true or false")
	f(kindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":3}`, "stream_options", "want an object")
	f(kindChat, `{"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":0}`, "add_generation_prompt", "true or false")
	f(kindCompletion, `{"model":"m"}`, "prompt", "prompt: missing")
	f(kindCompletion, `{"model":"m","prompt":null}`, "prompt", "prompt: missing")
	f(kindCompletion, `{"model":"m","prompt":[]}`, "prompt", "empty array")
	f(kindCompletion, `{"model":"m","prompt":{}}`, "prompt", "want a string")
	f(kindCompletion, `{"model":"m","prompt":["a",1]}`, "prompt", "prompt[1]")
	f(kindCompletion, `{"model":"m","prompt":[1,"a"]}`, "prompt", "prompt[1]: want a token id")
	f(kindCompletion, `{"model":"m","prompt":[1.5]}`, "prompt", "integer token id")
	f(kindCompletion, `{"model":"m","prompt":[-1]}`, "prompt", "integer token id")
	f(kindCompletion, `{"model":"m","prompt":[2147483648]}`, "prompt", "integer token id")
	f(kindCompletion, `{"model":"m","prompt":[[1],2]}`, "prompt", "prompt[1]")
	f(kindCompletion, `{"model":"m","prompt":[[]]}`, "prompt[0]", "empty array")
	f(kindCompletion, `{"model":"m","prompt":[true]}`, "prompt", "prompt[0]")
	f(kindCompletion, `{"model":"m","prompt_token_ids":"abc"}`, "prompt_token_ids", "want an array")
	f(kindCompletion, `{"model":"m","prompt_token_ids":[]}`, "prompt_token_ids", "empty array")
}

// FuzzDecode: no input panics, and every error is a 400 with a valid
// OpenAI error body.
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
		k := kindCompletion
		if isChat {
			k = kindChat
		}
		var d request
		e := decode(&d, k, body)
		if e == nil {
			if d.model == "" || (k == kindChat && len(d.msgs) == 0) || (k == kindCompletion && d.hasIDs && len(d.ids) == 0) {
				t.Fatalf("accepted without its required fields: %+v", d)
			}
			return
		}
		if e.status != 400 || e.typ != "invalid_request_error" || !json.Valid(e.body()) {
			t.Fatalf("bad error: %d %q %s", e.status, e.typ, e.body())
		}
	})
}

// errorBody is the OpenAI error answer's "error" object.
type errorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// checkErrorBody parses an OpenAI error body and checks its type, code and
// param ("" wants null); typ "" accepts any non-empty type.
func checkErrorBody(t *testing.T, body []byte, typ, code, param string) errorBody {
	t.Helper()
	var out struct {
		Error errorBody `json:"error"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	e := out.Error
	if e.Message == "" || e.Type == "" || (typ != "" && e.Type != typ) ||
		(code == "") != (e.Code == nil) || (e.Code != nil && *e.Code != code) ||
		(param == "") != (e.Param == nil) || (e.Param != nil && *e.Param != param) {
		t.Fatalf("error body %s, want type %q code %q param %q", body, typ, code, param)
	}
	return e
}

// TestDecodeDuplicateKeysLastWins: a repeated field is read as the Python
// engines read it, the last occurrence wins, for every field routing acts on.
func TestDecodeDuplicateKeysLastWins(t *testing.T) {
	t.Parallel()
	var r request
	body := `{"model":"a","model":"b","messages":[{"role":"user","content":"x"}],` +
		`"messages":[{"role":"user","role":"system","content":"first","content":"last"}],` +
		`"stream":false,"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`
	if e := decode(&r, kindChat, []byte(body)); e != nil {
		t.Fatal(e)
	}
	if r.model != "b" || !r.stream || !r.includeUsage {
		t.Fatalf("model %q stream %v include_usage %v, want b true true", r.model, r.stream, r.includeUsage)
	}
	if len(r.msgs) != 1 || r.msgs[0].Role != "system" || r.msgs[0].Content != "last" {
		t.Fatalf("messages %+v, want one system message \"last\"", r.msgs)
	}
	if e := decode(&r, kindCompletion, []byte(`{"model":"m","prompt":"first","prompt":"last"}`)); e != nil || r.prompt != "last" {
		t.Fatalf("prompt %q (%v), want last", r.prompt, e)
	}
}
