package chat

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/tokenpool/chat/jinja"
)

// jinjaCombos: golden name, tokenizer_config.json source (testdata models/
// or chat/), template source ("" = the config's own chat_template; else a
// name in chat/templates.json), and the testdata model whose tokenizer
// splits the prompt ("" = none here).
var jinjaCombos = []struct{ name, model, carried, tok, parseErr string }{
	{"llama3", "llama3", "", "llama3", ""},
	{"qwen3", "qwen3", "", "qwen3", ""},
	{"chatml", "qwen3", "chatml", "qwen3", ""},
	{"mistral", "mistral7b", "mistral", "mistral7b", ""},
	{"llama2", "mistral7b", "llama2", "mistral7b", ""},
	// Gemma 3's own template, with its conditional expression inside
	// parentheses (`(first_user_prefix if loop.first else "")`), which
	// gonja, the engine before package jinja, could not parse.
	{"gemma3", "gemma3", "", "", ""},
	// The same template with that conditional written as if/set
	// (gen/chat.mjs), as it was checked while gonja rendered it: the same
	// rendering through a set inside a loop's if.
	{"gemma3_noparen", "gemma3", "gemma3_noparen", "", ""},
	{"deepseek_v3", "deepseek_v3", "", "", ""},
}

func jinjaConfig(t testing.TB, model, carried string) Config {
	t.Helper()
	var c Config
	if _, err := os.Stat(testdata + "models/" + model); err == nil {
		c = loadConfig(t, model)
	} else {
		var err error
		if c, err = ParseConfig(readGzip(t, testdata+"chat/"+model+"/tokenizer_config.json.gz")); err != nil {
			t.Fatal(err)
		}
	}
	if carried == "gemma3_noparen" {
		raw, err := os.ReadFile(testdata + "chat/gemma3/chat_template_noparen.jinja")
		if err != nil {
			t.Fatal(err)
		}
		c.Template = string(raw)
	} else if carried != "" {
		var texts map[string]string
		raw, err := os.ReadFile(testdata + "chat/templates.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &texts); err != nil {
			t.Fatal(err)
		}
		c.Template = texts[carried]
	}
	return c
}

type jinjaRow struct {
	Prompt *string `json:"prompt"`
	Error  *string `json:"error"`
}

// TestJinjaGolden renders every corpus conversation with each template
// through package jinja and compares the prompt string with @huggingface/jinja's
// (golden/chat.jinja.*.json.gz, gen/chat.mjs): zero differences. Where a
// tokenizer is at hand, the segments tokenize to the whole prompt's ids.
func TestJinjaGolden(t *testing.T) {
	t.Parallel()
	cases, msgs := loadChatCorpus(t)
	for _, c := range jinjaCombos {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := jinjaConfig(t, c.model, c.carried)
			var vocab Vocab
			if c.tok != "" {
				vocab = loadTokenizer(t, c.tok)
			}
			r, err := NewJinja(cfg.Template, vocab, cfg)
			if c.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.parseErr) {
					t.Fatalf("NewJinja: %v, want the parse error %q", err, c.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var rows []jinjaRow
			if err := json.Unmarshal(readGzip(t, testdata+"golden/chat.jinja."+c.name+".json.gz"), &rows); err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(cases) {
				t.Fatalf("%d golden rows for %d conversations", len(rows), len(cases))
			}
			bad := 0
			for i := range cases {
				got, err := r.jinja.execute(msgs[i], cases[i].options())
				if rows[i].Error != nil {
					var te *TemplateError
					if !errors.As(err, &te) || !te.Raised || te.Message != *rows[i].Error {
						t.Errorf("conversation %d: the template raises %q, got %q, %v", i, *rows[i].Error, got, err)
						bad++
					}
					continue
				}
				if err != nil || got != *rows[i].Prompt {
					if bad < 3 {
						t.Errorf("conversation %d %.300s:\n got %q, %v\nwant %q", i, cases[i].Messages, got, err, *rows[i].Prompt)
					}
					bad++
					continue
				}
				if c.tok == "" {
					continue
				}
				tok := loadTokenizer(t, c.tok)
				segs, err := r.Render(nil, msgs[i], cases[i].options())
				if err != nil {
					t.Fatalf("conversation %d: %v", i, err)
				}
				if ids, want := encodeSegments(tok, segs), tok.Encode(nil, got); !slices.Equal(ids, want) {
					t.Errorf("conversation %d: segment-wise %v, whole %v", i, ids, want)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d conversations differ from @huggingface/jinja", bad, len(cases))
			}
			t.Logf("%s: %d of %d conversations as @huggingface/jinja renders them", c.name, len(cases)-bad, len(cases))
		})
	}
}

// TestBuiltinsAgreeWithJinja: each built-in template gives the ids of the
// Jinja rendering of its source on the corpus, and message ends at the
// same token positions wherever the Jinja rendering has one (the Jinja
// path splits at added tokens inside contents too, which the built-ins
// leave to the tokenizer: the segments differ there, the ids do not).
func TestBuiltinsAgreeWithJinja(t *testing.T) {
	t.Parallel()
	cases, msgs := loadChatCorpus(t)
	for _, c := range combos {
		t.Run(c[0]+"/"+c[1], func(t *testing.T) {
			t.Parallel()
			tok := loadTokenizer(t, c[0])
			carried := c[1]
			if c[1] == Llama3 || c[1] == Qwen3 {
				carried = ""
			}
			cfg := jinjaConfig(t, c[0], carried)
			built, err := New(c[1], tok, cfg)
			if err != nil {
				t.Fatal(err)
			}
			jr, err := NewJinja(cfg.Template, tok, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ends := 0
			for i := range cases {
				want, werr := built.Render(nil, msgs[i], cases[i].options())
				got, gerr := jr.Render(nil, msgs[i], cases[i].options())
				if (werr != nil) != (gerr != nil) {
					t.Fatalf("conversation %d: built-in error %v, jinja error %v", i, werr, gerr)
				}
				if werr != nil {
					continue
				}
				gids, gends := idsAndEnds(tok, got)
				wids, wends := idsAndEnds(tok, want)
				if !slices.Equal(gids, wids) {
					t.Errorf("conversation %d %.200s:\njinja    %q\nbuilt-in %q", i, cases[i].Messages, got, want)
					continue
				}
				for m, at := range gends {
					ends++
					if w, ok := wends[m]; ok && w != at {
						t.Errorf("conversation %d: message %d ends at token %d in the Jinja rendering, at %d (%v) in the built-in's", i, m, at, w, ok)
					}
				}
			}
			t.Logf("%d message ends agree", ends)
		})
	}
}

// idsAndEnds tokenizes segs as stage 4 does and maps each message end to
// its token position.
func idsAndEnds(tok interface {
	EncodeSegment([]int32, string, bool) []int32
}, segs []Segment) ([]int32, map[int32]int) {
	ids := []int32{}
	ends := map[int32]int{}
	for i, s := range segs {
		if s.Special() {
			ids = append(ids, s.ID)
		} else {
			ids = tok.EncodeSegment(ids, s.Text, i == 0)
		}
		if s.MsgEnd >= 0 {
			ends[s.MsgEnd] = len(ids)
		}
	}
	return ids, ends
}

// TestJinjaFeatures: the Jinja features transformers' environment has
// (loop controls, namespace, raise_exception, tojson, trim_blocks and
// lstrip_blocks, Python string methods, slices, tests, filters) render as
// @huggingface/jinja renders them (golden/chat.jinja.features.json.gz).
func TestJinjaFeatures(t *testing.T) {
	t.Parallel()
	var rows []struct {
		Template string          `json:"template"`
		Context  json.RawMessage `json:"context"`
		Prompt   *string         `json:"prompt"`
		Error    *string         `json:"error"`
	}
	if err := json.Unmarshal(readGzip(t, testdata+"golden/chat.jinja.features.json.gz"), &rows); err != nil {
		t.Fatal(err)
	}
	for i, row := range rows {
		j, err := newJinja(row.Template, nil, Config{})
		if err != nil {
			t.Errorf("feature %d %q: %v", i, row.Template, err)
			continue
		}
		data, err := orderedJSON(row.Context)
		if err != nil {
			t.Fatal(err)
		}
		got, err := j.executeData(data.(map[string]any), 0)
		switch {
		case row.Error != nil:
			var te *TemplateError
			if !errors.As(err, &te) || !te.Raised || te.Message != *row.Error {
				t.Errorf("feature %d %q: got %q, %v; want the error %q", i, row.Template, got, err, *row.Error)
			}
		case err != nil || got != *row.Prompt:
			t.Errorf("feature %d %q:\n got %q, %v\nwant %q", i, row.Template, got, err, *row.Prompt)
		}
	}
}

// orderedJSON decodes JSON as a template sees it: objects as jinja.Map in
// their order (Python dicts keep insertion order), the top level as a map.
func orderedJSON(raw []byte) (any, error) {
	v, err := jinja.DecodeJSON(raw)
	if err != nil {
		return nil, err
	}
	if d, ok := v.(*jinja.Map); ok {
		m := map[string]any{}
		for i, k := range d.Keys() {
			m[k.(string)] = d.Value(i)
		}
		return m, nil
	}
	return v, nil
}

func TestJinjaErrors(t *testing.T) {
	t.Parallel()
	bad := func(src, want string) {
		t.Helper()
		if _, err := NewJinja(src, nil, Config{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewJinja(%q) = %v, want an error containing %q", src, err, want)
		}
	}
	bad("", "empty")
	bad("hello\n{% for m in messages %}\n{{ m.content | }}\n{% endfor %}", "line 3")
	bad("{% if x %}", "line 1")
	bad("a\n\n{{ m.content }\n", "line 3, column 14: unexpected '}'")
	// Gemma 3's form, which gonja could not parse, parses.
	if _, err := NewJinja(`{{ 'a' + (b if c else "") }}`, nil, Config{}); err != nil {
		t.Errorf("a conditional expression in parentheses: %v", err)
	}
	bad("\xff", "UTF-8")

	r, err := NewJinja("{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here: ' + m.role) }}{% endif %}{{ m.content }}{% endfor %}", nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Render(nil, []Message{{Role: "user", Content: "a"}, {Role: "tool", Content: "b"}}, Options{})
	var te *TemplateError
	if !errors.As(err, &te) || !te.Raised || te.Message != "no tools here: tool" {
		t.Errorf("raise_exception: %v", err)
	}
	if err == nil || err.Error() != "chat template refused the conversation: no tools here: tool" {
		t.Errorf("raise_exception error text: %v", err)
	}
}

// TestJinjaMessageEnds: the segments of a Jinja rendering name the
// message ends the built-in templates name.
func TestJinjaMessageEnds(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "qwen3")
	cfg := loadConfig(t, "qwen3")
	r, err := NewJinja(cfg.Template, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "q1"}, {Role: "assistant", Content: "a1"}, {Role: "user", Content: "q2"}}
	segs, err := r.Render(nil, msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	var ends []int32
	for _, s := range segs {
		if s.MsgEnd >= 0 {
			ends = append(ends, s.MsgEnd)
		}
	}
	// Not 2: Qwen3 renders the last assistant turn after the last user
	// query with an empty <think> block, and an earlier one without: the
	// rendering of messages[:3] is no prefix of the whole.
	if !slices.Equal(ends, []int32{0, 1, 3}) {
		t.Errorf("message ends %v in %q, want 0 1 3", ends, segs)
	}
}

// FuzzJinja: a template file and a messages array from outside. A template
// either compiles or is an error; a compiled one renders the messages or
// returns an error, never panics; the segments join to the rendered
// prompt (qwen3's added tokens strip nothing), and message ends increase.
// Recursive macros and nested loops are fuzzed too: package jinja bounds
// a rendering's steps, work, depth and output. Templates with range are
// skipped for the fuzzer's throughput only: range(100000) nested is
// seconds of loop before the 10M-step bound stops it (package jinja's
// own fuzz tests run with small bounds).
func FuzzJinja(f *testing.F) {
	tok := loadTokenizer(f, "qwen3")
	cfg := loadConfig(f, "qwen3")
	f.Add(cfg.Template, `[{"role":"user","content":"hi"},{"role":"assistant","content":"<think>a</think>b"}]`)
	f.Add("{% for m in messages %}{% if m.role == 'x' %}{{ raise_exception('no') }}{% endif %}<|im_start|>{{ m['content'] | trim }}<|im_end|>{% endfor %}", `[{"role":"x"}]`)
	f.Add("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}", `[{"role":"user","content":[{"type":"text","text":"a"}]}]`)
	f.Add("{{ messages[-1].content.split('<')[-1] | tojson }}{% set ns = namespace(a=1) %}{{ ns.a }}", `[{"role":"user","content":"<x"}]`)
	f.Fuzz(func(t *testing.T, src, msgs string) {
		if len(src) > 4096 || strings.Contains(src, "range") {
			t.Skip()
		}
		r, err := NewJinja(src, tok, cfg)
		if err != nil {
			return
		}
		m, err := ParseMessages([]byte(msgs))
		if err != nil {
			return
		}
		full, ferr := r.jinja.execute(m, Options{AddGenerationPrompt: true})
		segs, err := r.Render(nil, m, Options{AddGenerationPrompt: true})
		if (err == nil) != (ferr == nil) {
			t.Fatalf("Render: %v, execute: %v", err, ferr)
		}
		if err != nil {
			return
		}
		if got := joinText(segs); got != full {
			t.Fatalf("segments join to %q, the rendering is %q", got, full)
		}
		last := int32(-1)
		for _, s := range segs {
			if s.MsgEnd >= 0 {
				if s.MsgEnd <= last || int(s.MsgEnd) >= len(m) {
					t.Fatalf("message ends out of order or range: %q", segs)
				}
				last = s.MsgEnd
			}
		}
	})
}

// TestJinjaConcurrent: one Jinja Renderer serves every shard at once
// (run with -race).
func TestJinjaConcurrent(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "qwen3")
	cfg := loadConfig(t, "qwen3")
	r, err := NewJinja(cfg.Template, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	msgs := bench4K()
	want, err := r.Render(nil, msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			var dst []Segment
			for i := range 20 {
				m := msgs[:len(msgs)-(i+g)%5]
				var err error
				if dst, err = r.Render(dst[:0], m, Options{AddGenerationPrompt: true}); err != nil {
					errs <- err
					return
				}
				if len(m) == len(msgs) && !slices.Equal(dst, want) {
					errs <- errors.New("a concurrent rendering differs")
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestPrefixCache: an entry put is got back, a slot's new entry replaces
// its old one, and a refused prefix reads as -1.
func TestPrefixCache(t *testing.T) {
	t.Parallel()
	c := newPrefixCache()
	c.put(42, 7, 70)
	if n, sum, ok := c.get(42); !ok || n != 7 || sum != 70 {
		t.Fatalf("get(42) = %d %d %v", n, sum, ok)
	}
	c.put(42+2*prefixSlots, 1, 1) // the same slot
	if _, _, ok := c.get(42); ok {
		t.Error("the slot's old entry survived a new one")
	}
	c.put(9, -1, 0)
	if n, _, ok := c.get(9); !ok || n != -1 {
		t.Errorf("refused prefix: %d %v", n, ok)
	}
}
