package chat

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

const testdata = "../testdata/"

func readGzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Tokenizers load once per test binary (about a second each).
var (
	tokMu    sync.Mutex
	tokCache = map[string]*tokenizer.Tokenizer{}
)

// loadTokenizer loads a model of testdata, or a variant of one: name
// "base+edit" applies the edit gen.mjs's variants make (see
// tokenizer.TestGoldenVariants).
func loadTokenizer(t testing.TB, name string) *tokenizer.Tokenizer {
	t.Helper()
	tokMu.Lock()
	defer tokMu.Unlock()
	if tok, ok := tokCache[name]; ok {
		return tok
	}
	base, edit, _ := strings.Cut(name, "+")
	raw := readGzip(t, testdata+"models/"+base+"/tokenizer.json.gz")
	if edit != "" {
		var j map[string]any
		if err := json.Unmarshal(raw, &j); err != nil {
			t.Fatal(err)
		}
		switch edit {
		case "metaspace-first":
			j["normalizer"] = nil
			j["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}
		case "strip":
			for _, a := range j["added_tokens"].([]any) {
				a := a.(map[string]any)
				switch a["content"] {
				case "<|im_end|>", "<|eot_id|>", "</s>":
					a["lstrip"] = true
				case "<|im_start|>", "<|start_header_id|>", "<s>":
					a["rstrip"] = true
				}
			}
		default:
			t.Fatalf("unknown variant %q", name)
		}
		var err error
		if raw, err = json.Marshal(j); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	tokCache[name] = tok
	return tok
}

func loadConfig(t testing.TB, model string) Config {
	t.Helper()
	base, _, _ := strings.Cut(model, "+")
	c, err := LoadConfig(testdata + "models/" + base + "/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type chatCase struct {
	Messages       json.RawMessage `json:"messages"`
	AddGen         bool            `json:"add_generation_prompt"`
	EnableThinking *bool           `json:"enable_thinking"`
}

func (c chatCase) options() Options {
	return Options{AddGenerationPrompt: c.AddGen, DisableThinking: c.EnableThinking != nil && !*c.EnableThinking}
}

func loadChatCorpus(t testing.TB) ([]chatCase, [][]Message) {
	t.Helper()
	var cases []chatCase
	if err := json.Unmarshal(readGzip(t, testdata+"corpus/chat.json.gz"), &cases); err != nil {
		t.Fatal(err)
	}
	msgs := make([][]Message, len(cases))
	for i, c := range cases {
		var err error
		if msgs[i], err = ParseMessages(c.Messages); err != nil {
			t.Fatalf("conversation %d: %v", i, err)
		}
	}
	return cases, msgs
}

// goldenLines reads golden ids; a nil entry is "error" (the template
// raised an exception).
func goldenLines(t testing.TB, path string) [][]int32 {
	t.Helper()
	var out [][]int32
	sc := bufio.NewScanner(bytes.NewReader(readGzip(t, path)))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if sc.Text() == "error" {
			out = append(out, nil)
			continue
		}
		ids := []int32{}
		for _, f := range strings.Fields(sc.Text()) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, int32(n))
		}
		out = append(out, ids)
	}
	return out
}

// encodeSegments tokenizes each text segment on its own, as stage 4 does.
func encodeSegments(tok *tokenizer.Tokenizer, segs []Segment) []int32 {
	ids := []int32{}
	for i, s := range segs {
		if s.Special() {
			ids = append(ids, s.ID)
			continue
		}
		ids = tok.EncodeSegment(ids, s.Text, i == 0)
	}
	return ids
}

var combos = [][2]string{{"llama3", Llama3}, {"qwen3", Qwen3}, {"qwen3", ChatML}, {"mistral7b", Mistral}, {"mistral7b", Llama2}}

// TestGolden renders every golden conversation with each model's template
// and compares the segment-wise ids with HuggingFace's ids of the prompt
// rendered by the model's own Jinja template (testdata/README.md). It also
// checks that tokenizing the whole rendered prompt gives the same ids.
func TestGolden(t *testing.T) {
	t.Parallel()
	cases, msgs := loadChatCorpus(t)
	for _, c := range combos {
		t.Run(c[0]+"/"+c[1], func(t *testing.T) {
			t.Parallel()
			tok := loadTokenizer(t, c[0])
			r, err := New(c[1], tok, loadConfig(t, c[0]))
			if err != nil {
				t.Fatal(err)
			}
			want := goldenLines(t, testdata+"golden/chat."+c[0]+"."+c[1]+".ids.gz")
			if len(want) != len(cases) {
				t.Fatalf("%d golden lines for %d conversations", len(want), len(cases))
			}
			bad, refused := 0, 0
			for i := range cases {
				segs, err := r.Render(nil, msgs[i], cases[i].options())
				if want[i] == nil {
					var re *RoleError
					if !errors.As(err, &re) {
						t.Errorf("conversation %d: the template refuses it, Render returned %v", i, err)
						bad++
					}
					refused++
					continue
				}
				if err != nil {
					t.Errorf("conversation %d: %v", i, err)
					bad++
					continue
				}
				got := encodeSegments(tok, segs)
				if !slices.Equal(got, want[i]) {
					if bad < 3 {
						t.Errorf("conversation %d %.300s:\nsegments %q\n got %v\nwant %v", i, cases[i].Messages, segs, got, want[i])
					}
					bad++
				}
				if whole := tok.Encode(nil, joinText(segs)); !slices.Equal(whole, got) {
					t.Errorf("conversation %d: whole prompt %v, segment-wise %v", i, whole, got)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d conversations differ", bad, len(cases))
			}
			t.Logf("%s %s: %d of %d conversations match HuggingFace (%d of them refused by the template)", c[0], c[1], len(cases)-bad, len(cases), refused)
		})
	}
}

func joinText(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String()
}

// TestDetect: the template texts the goldens render are recognized by
// name; a changed one is not.
func TestDetect(t *testing.T) {
	t.Parallel()
	var texts map[string]string
	raw, err := os.ReadFile(testdata + "chat/templates.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &texts); err != nil {
		t.Fatal(err)
	}
	if len(texts) != 5 {
		t.Errorf("templates.json has %d templates, want 5", len(texts))
	}
	for name, text := range texts {
		if got, err := Detect(text); got != name || err != nil {
			t.Errorf("Detect(%s) = %q, %v", name, got, err)
		}
		if _, err := Detect(text + "{{ x }}"); !errors.Is(err, ErrNotRecognized) {
			t.Errorf("Detect(%s + change): %v, want ErrNotRecognized", name, err)
		}
	}
	for model, want := range map[string]string{"llama3": Llama3, "qwen3": Qwen3} {
		if got, err := Detect(loadConfig(t, model).Template); got != want || err != nil {
			t.Errorf("Detect(%s config) = %q, %v", model, got, err)
		}
	}
	if _, err := Detect(loadConfig(t, "mistral7b").Template); !errors.Is(err, ErrNotRecognized) || !strings.Contains(err.Error(), "no chat_template") {
		t.Errorf("Detect(mistral7b config, which has none): %v", err)
	}
}
