package chat

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseMessages(t *testing.T) {
	t.Parallel()
	ok := func(in string, want ...Message) {
		t.Helper()
		got, err := ParseMessages([]byte(in))
		if err != nil {
			t.Fatalf("ParseMessages(%s): %v", in, err)
		}
		for i := range got {
			got[i].parts = "" // TestParts checks them
		}
		if !slices.Equal(got, want) {
			t.Errorf("ParseMessages(%s):\n got %+v\nwant %+v", in, got, want)
		}
	}
	ok(`[]`)
	ok(`[{"role":"user","content":"hi"}]`, Message{Role: "user", Content: "hi"})
	ok(`[{"role":"assistant","content":null,"tool_calls":[{"id":"x"}]}, {"role":"assistant"}]`,
		Message{Role: "assistant"}, Message{Role: "assistant"})
	ok(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"b\u00e9"}]}]`,
		Message{Role: "user", Content: "<image>\na\nbé"})
	ok(`[{"role":"user","content":[{"type":"`+strings.Repeat("x", 40)+`"}]}]`, Message{Role: "user", Content: "<part>"})
	ok(`[{"role":"user","content":[]}]`, Message{Role: "user"})
	// vLLM drops empty and null texts before it joins the parts
	// (chat_utils.py: `if parse_res: content.append(parse_res)`).
	ok(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""},{"type":"text","text":"b"}]}]`, Message{Role: "user", Content: "a\nb"})
	ok(`[{"role":"user","content":[{"type":"text","text":null},{"type":"text"},{"type":"text","text":"b"},{"type":"text","text":""}]}]`, Message{Role: "user", Content: "b"})
	// Every part type that carries text, and a plain string part.
	ok(`[{"role":"user","content":["s",{"type":"input_text","text":"i"},{"type":"output_text","text":"o"},{"type":"refusal","refusal":"r"},{"type":"thinking","thinking":"t"},{"type":"tool_reference","name":"n"},{"type":"prompt_embeds","data":"AA"}]}]`,
		Message{Role: "user", Content: "s\ni\no\nr\nt\nn\n<prompt_embeds>"})
	// Media placeholders go first, by modality, also for a part without
	// a type; media alone is only the placeholders.
	ok(`[{"role":"user","content":[{"type":"text","text":"look"},{"type":"input_audio","input_audio":{"data":"A"}},{"image_url":{"url":"u"}},{"type":"video_url","video_url":{"url":"v"}},{"type":"file","file":{}}]}]`,
		Message{Role: "user", Content: "<audio>\n<image>\n<video>\n<file>\nlook"})
	ok(`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":""}]}]`, Message{Role: "user", Content: "<image>"})
	// Reasoning: an assistant's "reasoning" (vLLM renders it as
	// reasoning_content); a request's reasoning_content is dropped, and
	// "reasoning" of another role too.
	ok(`[{"role":"assistant","content":"x","reasoning":"why"},{"role":"assistant","content":"y","reasoning":null},{"role":"assistant","content":"z","reasoning":""}]`,
		Message{Role: "assistant", Content: "x", Reasoning: "why", HasReasoning: true}, Message{Role: "assistant", Content: "y"},
		Message{Role: "assistant", Content: "z", HasReasoning: true})
	ok(`[{"role":"assistant","content":"x","reasoning_content":"dropped"},{"role":"assistant","content":"y","reasoning_content":"dropped","reasoning":"kept"},{"role":"user","content":"u","reasoning":"r"}]`,
		Message{Role: "assistant", Content: "x"}, Message{Role: "assistant", Content: "y", Reasoning: "kept", HasReasoning: true}, Message{Role: "user", Content: "u"})

	// The messages do not share memory with raw (a borrowed buffer).
	raw := []byte(`[{"role":"user","content":"hello"}]`)
	msgs, err := ParseMessages(raw)
	if err != nil {
		t.Fatal(err)
	}
	clear(raw)
	if msgs[0].Role != "user" || msgs[0].Content != "hello" {
		t.Errorf("after raw was cleared: %+v", msgs[0])
	}

	bad := func(in, want string) {
		t.Helper()
		if _, err := ParseMessages([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMessages(%s) = %v, want an error containing %q", in, err, want)
		}
	}
	bad(``, "invalid JSON")
	bad(`[{"role":"user"`, "invalid JSON")
	bad(`{"messages":[]}`, "want a JSON array, got object")
	bad(`[1]`, "messages[0]: want an object, got number")
	bad(`[{"content":"x"}]`, "messages[0].role: missing")
	bad(`[{"role":"user"},{"role":7}]`, "messages[1].role: want a string, got number")
	bad(`[{"role":""}]`, "messages[0].role: empty")
	bad(`[{"role":"user","content":5}]`, "messages[0].content: want a string, an array of parts or null, got number")
	bad(`[{"role":"user","content":{"text":"x"}}]`, "messages[0].content: want a string, an array of parts or null, got object")
	bad(`[{"role":"user","content":[1]}]`, "messages[0].content[0]: want an object or a string, got number")
	bad(`[{"role":"user","content":[{"text":"x"}]}]`, "messages[0].content[0].type: missing")
	bad(`[{"role":"user","content":[{"type":5}]}]`, "messages[0].content[0].type: want a string, got number")
	bad(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":[]}]}]`, "messages[0].content[1].refusal: want a string or null, got array")
	bad(`[{"role":"user","content":[{"type":"text","text":1}]}]`, "messages[0].content[0].text: want a string or null, got number")
	bad(`[{"role":"assistant","reasoning":1}]`, "messages[0].reasoning: want a string or null, got number")
}

// FuzzParseMessages: client input never panics; whatever parses renders
// with every template (mistral and llama2 may refuse the roles with a
// RoleError, nothing else), and its segments tokenize as the whole prompt.
func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`,
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]`,
		`[{"role":"assistant","content":"<think>x</think>y","reasoning":null}]`,
		`[{"role":"user","content":["a",{"type":"text","text":""},{"image_url":{"url":"u"}},{"type":"refusal","refusal":"r"}]}]`,
		`[{"role":"tool","content":"\u0000\ud800"}]`,
		`[{"role":"user","content":5}]`,
		`[]`, `{}`, `[`, `null`,
	} {
		f.Add([]byte(s))
	}
	tok := loadTokenizer(f, "mistral7b")
	cfg := loadConfig(f, "mistral7b")
	var renderers []*Renderer
	for _, name := range Names() {
		r, err := New(name, tok, cfg)
		if err != nil {
			f.Fatal(err)
		}
		renderers = append(renderers, r)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		msgs, err := ParseMessages(raw)
		if err != nil {
			if msgs != nil {
				t.Fatalf("error %v with messages %v", err, msgs)
			}
			return
		}
		for _, r := range renderers {
			segs, err := r.Render(nil, msgs, Options{AddGenerationPrompt: true})
			if err != nil {
				var re *RoleError
				if !errors.As(err, &re) || (r.Name() != Mistral && r.Name() != Llama2 && r.Name() != Harmony) {
					t.Fatalf("%s: %v", r.Name(), err)
				}
				continue
			}
			if r.Name() == None {
				continue // not the engine's prompt: no whole-prompt claim
			}
			if got, want := encodeSegments(tok, segs), tok.Encode(nil, joinText(segs)); !slices.Equal(got, want) {
				t.Fatalf("%s: segment-wise %v, whole %v", r.Name(), got, want)
			}
		}
	})
}

// TestParts: a content array's parts, as vLLM's "openai" content format
// hands them to a template, the same from the parse tree, the body's
// bytes and a Scratch.
func TestParts(t *testing.T) {
	t.Parallel()
	var sc Scratch
	f := func(in string, want ...[]Part) {
		t.Helper()
		tree, err := ParseMessages([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		body, err := MessagesFromBody([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		view, err := sc.MessagesFromBody([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			for _, got := range [][]Message{tree, body, view} {
				if ps := got[i].Parts(); !reflect.DeepEqual(ps, w) {
					t.Errorf("%s: message %d parts %q, want %q", in, i, ps, w)
				}
			}
		}
	}
	f(`[{"role":"user","content":"s"},{"role":"user","content":[]},{"role":"user","content":null}]`, nil, nil, nil)
	f(`[{"role":"user","content":[{"type":"text","text":"a\u00e9"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":""},{"type":"text","text":null},"s",{"type":"input_audio","input_audio":{"data":"A"}},{"type":"prompt_embeds","data":"AA"},{"type":"tool_reference","name":"n"}]}]`,
		[]Part{{"text", "aé"}, {"image", ""}, {"text", ""}, {"text", "s"}, {"audio", ""}, {"text", "<prompt_embeds>"}, {"tool_reference", "n"}})
	f(`[{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":[{"type":"`+strings.Repeat("z", 40)+`"},{"type":"text","text":"y"}]}]`,
		[]Part{{"text", "x"}}, []Part{{"part", ""}, {"text", "y"}})
	f(`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":""}]}]`, []Part{{"image", ""}, {"text", ""}})
	f(`[{"role":"user","content":[{"type":"text","text":"`+strings.Repeat("w", 300)+`"},{"type":"video_url","video_url":{"url":"v"}},{"type":"text","text":"b"}]}]`,
		[]Part{{"text", strings.Repeat("w", 300)}, {"video", ""}, {"text", "b"}})
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	ok := func(in string, want Config) {
		t.Helper()
		got, err := ParseConfig([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseConfig(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	ok(`{}`, Config{})
	ok(`{"bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},"chat_template":"T"}`, Config{BOS: "<s>", EOS: "</s>", Template: "T"})
	ok(`{"bos_token":null,"chat_template":[{"name":"tool_use","template":"U"},{"name":"default","template":"D"}]}`, Config{Template: "D"})
	ok(`{"add_bos_token":true,"unk_token":"<unk>","pad_token":{"content":"<pad>"},"added_tokens_decoder":{"1":{"content":"<b>"},"0":{"content":"<a>"}}}`,
		Config{Specials: map[string]string{"unk_token": "<unk>", "pad_token": "<pad>"}, Added: []string{"<a>", "<b>"}})
	bad := func(in, want string) {
		t.Helper()
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %q", in, err, want)
		}
	}
	bad(`[`, "cannot parse tokenizer_config.json")
	bad(`{"bos_token":1}`, "bos_token")
	bad(`{"eos_token":{"id":2}}`, "eos_token")
	bad(`{"chat_template":7}`, "chat_template")
	bad(`{"chat_template":[{"name":"tool_use","template":"U"}]}`, `no "default"`)
	if _, err := LoadConfig("/nonexistent/tokenizer_config.json"); err == nil || !strings.Contains(err.Error(), "cannot read tokenizer config") {
		t.Errorf("LoadConfig(missing): %v", err)
	}
	dir := t.TempDir()
	llama3 := loadConfig(t, "llama3")
	for name, data := range map[string]string{"tokenizer_config.json": `{"bos_token":"<|begin_of_text|>","eos_token":"<|eot_id|>"}`, "chat_template.jinja": llama3.Template} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	core := func(c Config) Config { return Config{Template: c.Template, BOS: c.BOS, EOS: c.EOS} }
	if c, err := LoadConfig(ConfigPath(dir)); err != nil || !reflect.DeepEqual(core(c), core(llama3)) {
		t.Errorf("LoadConfig with chat_template.jinja = %+v, %v; want %+v", c, err, llama3)
	}
	if got := ConfigPath(testdata + "models/llama3/tokenizer.json.gz"); got != testdata+"models/llama3/tokenizer_config.json" {
		t.Errorf("ConfigPath(.json.gz) = %q", got)
	}
	if got := ConfigPath(testdata + "models/llama3"); got != testdata+"models/llama3/tokenizer_config.json" {
		t.Errorf("ConfigPath(dir) = %q", got)
	}
}

// TestExtra: a message's tool_calls, tool_call_id and name, kept as vLLM
// keeps them (tool_calls of an assistant when an array, tool_call_id of
// a tool message, name of any message when strings), the same from the
// parse tree, the body's bytes and a Scratch; dropped without
// WantExtras; the parts unaffected.
func TestExtra(t *testing.T) {
	t.Parallel()
	in := `[{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"image_url"}],"tool_calls": [ {"id":"c1", "function":{"name":"f","arguments":"{\"a\":1}"}} ],"name":"b\u00e9"},` +
		`{"role":"tool","tool_call_id":"c1","content":"r","name":""},` +
		`{"role":"user","tool_calls":[],"tool_call_id":"x","name":7},` +
		`{"role":"assistant","tool_calls":"no"}]`
	want := []Extra{
		{ToolCalls: `[{"id":"c1","function":{"name":"f","arguments":"{\"a\":1}"}}]`, Name: "bé", HasName: true},
		{ToolCallID: "c1", HasToolCallID: true, HasName: true},
		{},
		{},
	}
	tree, err := ParseMessages([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	body, err := MessagesFromBody([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var sc Scratch
	view, err := sc.MessagesFromBody([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]Message{tree, body, view} {
		for i, w := range want {
			if x := got[i].Extra(); x != w {
				t.Errorf("message %d: extra %+v, want %+v", i, x, w)
			}
		}
		if ps := got[0].Parts(); !reflect.DeepEqual(ps, []Part{{"text", "t"}, {"image", ""}}) {
			t.Errorf("parts %q beside the extra", ps)
		}
		if ps := got[1].Parts(); ps != nil {
			t.Errorf("a string content with an extra has parts %q", ps)
		}
	}
	none, err := MessagesFromBodyFor([]byte(in), WantParts)
	if err != nil {
		t.Fatal(err)
	}
	sc.NoExtras = true
	viewNone, err := sc.MessagesFromBody([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]Message{none, viewNone} {
		for i := range got {
			if x := got[i].Extra(); x != (Extra{}) {
				t.Errorf("message %d: extra %+v without WantExtras", i, x)
			}
		}
		if ps := got[0].Parts(); len(ps) != 2 {
			t.Errorf("parts %q", ps)
		}
	}
}
