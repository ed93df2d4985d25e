package chat

import (
	"errors"
	"os"
	"path/filepath"
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
		if !slices.Equal(got, want) {
			t.Errorf("ParseMessages(%s):\n got %+v\nwant %+v", in, got, want)
		}
	}
	ok(`[]`)
	ok(`[{"role":"user","content":"hi"}]`, Message{Role: "user", Content: "hi"})
	ok(`[{"role":"assistant","content":null,"tool_calls":[{"id":"x"}]}, {"role":"assistant"}]`,
		Message{Role: "assistant"}, Message{Role: "assistant"})
	ok(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"b\u00e9"}]}]`,
		Message{Role: "user", Content: "a\n<image_url>\nbé"})
	ok(`[{"role":"user","content":[{"type":"`+strings.Repeat("x", 40)+`"}]}]`, Message{Role: "user", Content: "<part>"})
	ok(`[{"role":"user","content":[]}]`, Message{Role: "user"})
	ok(`[{"role":"assistant","content":"x","reasoning_content":"why"},{"role":"assistant","content":"y","reasoning_content":null}]`,
		Message{Role: "assistant", Content: "x", Reasoning: "why", HasReasoning: true}, Message{Role: "assistant", Content: "y"})

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
	bad(`[{"role":"user","content":["x"]}]`, "messages[0].content[0]: want an object, got string")
	bad(`[{"role":"user","content":[{"text":"x"}]}]`, "messages[0].content[0].type: missing or not a string")
	bad(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text"}]}]`, "messages[0].content[1].text: missing or not a string")
	bad(`[{"role":"user","content":[{"type":"text","text":1}]}]`, "messages[0].content[0].text: missing or not a string")
	bad(`[{"role":"assistant","reasoning_content":1}]`, "messages[0].reasoning_content: want a string or null, got number")
}

// FuzzParseMessages: client input never panics; whatever parses renders
// with every template (mistral and llama2 may refuse the roles with a
// RoleError, nothing else), and its segments tokenize as the whole prompt.
func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`,
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]`,
		`[{"role":"assistant","content":"<think>x</think>y","reasoning_content":null}]`,
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
				if !errors.As(err, &re) || (r.Name() != Mistral && r.Name() != Llama2) {
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

func TestParseConfig(t *testing.T) {
	t.Parallel()
	ok := func(in string, want Config) {
		t.Helper()
		got, err := ParseConfig([]byte(in))
		if err != nil || got != want {
			t.Errorf("ParseConfig(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	ok(`{}`, Config{})
	ok(`{"bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},"chat_template":"T"}`, Config{BOS: "<s>", EOS: "</s>", Template: "T"})
	ok(`{"bos_token":null,"chat_template":[{"name":"tool_use","template":"U"},{"name":"default","template":"D"}]}`, Config{Template: "D"})
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
	if c, err := LoadConfig(ConfigPath(dir)); err != nil || c != llama3 {
		t.Errorf("LoadConfig with chat_template.jinja = %+v, %v; want %+v", c, err, llama3)
	}
	if got := ConfigPath(testdata + "models/llama3/tokenizer.json.gz"); got != testdata+"models/llama3/tokenizer_config.json" {
		t.Errorf("ConfigPath(.json.gz) = %q", got)
	}
	if got := ConfigPath(testdata + "models/llama3"); got != testdata+"models/llama3/tokenizer_config.json" {
		t.Errorf("ConfigPath(dir) = %q", got)
	}
}
