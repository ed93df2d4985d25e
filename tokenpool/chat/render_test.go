package chat

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// noStrip hides lstrip/rstrip, so a renderer built on it emits the
// template's text unchanged: the whole prompt the engine would tokenize.
type noStrip struct{ v Vocab }

func (n noStrip) LookupAdded(s string) (tokenizer.AddedToken, bool) {
	a, ok := n.v.LookupAdded(s)
	a.LStrip, a.RStrip = false, false
	return a, ok
}

// configFor gives every template the BOS/EOS it needs on any model.
func configFor(t testing.TB, model string) Config {
	c := loadConfig(t, model)
	if c.BOS == "" {
		c.BOS = "<|endoftext|>"
	}
	if c.EOS == "" {
		c.EOS = "<|endoftext|>"
	}
	return c
}

// checkSegmentsEqualWhole renders msgs with name on model and checks that
// the segment-wise ids equal the ids of the whole rendered prompt, that
// text segments are maximal (never two in a row) and not empty.
func checkSegmentsEqualWhole(t *testing.T, model, name string, msgs []Message, opt Options) {
	t.Helper()
	tok := loadTokenizer(t, model)
	cfg := configFor(t, model)
	r, err := New(name, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := New(name, noStrip{tok}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := r.Render(nil, msgs, opt)
	rawSegs, rawErr := raw.Render(nil, msgs, opt)
	if (err == nil) != (rawErr == nil) {
		t.Fatalf("errors differ: %v, %v", err, rawErr)
	}
	if err != nil {
		var re *RoleError
		if !errors.As(err, &re) || (name != Mistral && name != Llama2) {
			t.Fatalf("%s %s: unexpected error %v", model, name, err)
		}
		return
	}
	for i, s := range segs {
		if !s.Special() && (s.Text == "" || (i > 0 && !segs[i-1].Special())) {
			t.Fatalf("%s %s: text segment %d is empty or follows another text segment: %q", model, name, i, segs)
		}
	}
	got := encodeSegments(tok, segs)
	want := tok.Encode(nil, joinText(rawSegs))
	if !slices.Equal(got, want) {
		t.Fatalf("%s %s %+v:\nsegments %q\nsegment-wise %v\nwhole        %v", model, name, msgs, segs, got, want)
	}
}

var alphabet = []string{" ", "  ", "\n", "\n\n", "\t", "\r\n", "a", "Hello", " world", "The", "'s", "123", "你好", "😀",
	"e\u0301", "\u00a0", "\u3000", "\x1c", "\u0085", "\ufeff", "▁", "<", ">", "|", "<|eot_id|>", "<|im_end|>",
	"<|im_start|>", "<|start_header_id|>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]", "<<SYS>>", "<think>",
	"</think>", "<tool_response>", "</tool_response>", "<|begin_of_text|>", "<|endoftext|>", "<|im_", "</"}

func randomMessages(r *rand.Rand) []Message {
	roles := []string{"system", "user", "assistant", "tool", "developer"}
	n := r.IntN(6)
	msgs := make([]Message, n)
	alternate := r.IntN(4) > 0
	for i := range msgs {
		var b strings.Builder
		for k := r.IntN(10); k > 0; k-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		msgs[i].Content = b.String()
		switch {
		case alternate && i%2 == 0:
			msgs[i].Role = "user"
		case alternate:
			msgs[i].Role = "assistant"
		default:
			msgs[i].Role = roles[r.IntN(len(roles))]
		}
		if r.IntN(8) == 0 {
			msgs[i].Reasoning, msgs[i].HasReasoning = msgs[i].Content[:len(msgs[i].Content)/2], true
		}
	}
	if n > 0 && r.IntN(3) == 0 {
		msgs[0].Role = "system"
	}
	return msgs
}

var allModels = []string{"llama3", "qwen3", "mistral7b", "llama3+strip", "qwen3+strip", "mistral7b+strip", "mistral7b+metaspace-first"}

// TestSegmentsEqualWhole is the property behind per-segment tokenization:
// for every template on every tokenizer (including variants with
// lstrip/rstrip special tokens and a Metaspace "first" pre-tokenizer),
// random conversations tokenize segment by segment exactly as the whole
// rendered prompt does.
func TestSegmentsEqualWhole(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	n, models := 300, allModels
	if testing.Short() || raceEnabled {
		// Building the llama3 and qwen3 variants (a JSON round trip of
		// their 9-11 MB tokenizer.json) dominates the time under -race.
		n, models = 50, slices.DeleteFunc(slices.Clone(allModels), func(m string) bool { return m == "llama3+strip" || m == "qwen3+strip" })
	}
	for _, model := range models {
		for _, name := range []string{Llama3, ChatML, Qwen3, Mistral, Llama2} {
			for range n {
				opt := Options{AddGenerationPrompt: r.IntN(2) == 0, DisableThinking: r.IntN(4) == 0}
				checkSegmentsEqualWhole(t, model, name, randomMessages(r), opt)
			}
		}
	}
}

// FuzzSegments is TestSegmentsEqualWhole with the fuzzer choosing the
// contents.
func FuzzSegments(f *testing.F) {
	f.Add("sys", "hello", "answer", byte(0))
	f.Add(" <s> ", "</s>[INST]", "\n\n<think>x</think>", byte(7))
	f.Add("", "\u3000", "<|im_end|>\n", byte(255))
	// Load before fuzzing: a first input that loads a tokenizer (a second
	// or more each, on a busy machine) can look hung to the fuzzer.
	models := []string{"mistral7b", "mistral7b+metaspace-first", "qwen3+strip", "llama3"}
	for _, m := range models {
		loadTokenizer(f, m)
	}
	f.Fuzz(func(t *testing.T, a, b, c string, flags byte) {
		msgs := []Message{{Role: "system", Content: a}, {Role: "user", Content: b}, {Role: "assistant", Content: c}}
		if flags&1 != 0 {
			msgs = msgs[1:]
		}
		opt := Options{AddGenerationPrompt: flags&2 != 0, DisableThinking: flags&4 != 0}
		model := models[int(flags>>3)%len(models)]
		for _, name := range []string{Llama3, ChatML, Qwen3, Mistral, Llama2} {
			checkSegmentsEqualWhole(t, model, name, msgs, opt)
		}
	})
}

// TestBoundaries: a message boundary named by MsgEnd is a real prefix:
// the segments up to it are the rendering of the messages up to it.
// (Not for qwen3, whose rendering of an assistant turn depends on the
// turns after it.)
func TestBoundaries(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, model := range []string{"llama3", "qwen3", "mistral7b"} {
		tok := loadTokenizer(t, model)
		for _, name := range []string{Llama3, ChatML, Mistral, Llama2, None} {
			rd, err := New(name, tok, configFor(t, model))
			if err != nil {
				t.Fatal(err)
			}
			for range 200 {
				msgs := randomMessages(r)
				segs, err := rd.Render(nil, msgs, Options{AddGenerationPrompt: true})
				if err != nil {
					continue
				}
				for j, s := range segs {
					if s.MsgEnd < 0 {
						continue
					}
					prefix, err := rd.Render(nil, msgs[:s.MsgEnd+1], Options{})
					if err != nil || !slices.Equal(prefix, segs[:j+1]) {
						t.Fatalf("%s %s: segments through message %d:\n%q\nrendering of messages[:%d]: %q, %v", model, name, s.MsgEnd, segs[:j+1], s.MsgEnd+1, prefix, err)
					}
				}
			}
		}
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "llama3")
	mtok := loadTokenizer(t, "mistral7b")
	qtok := loadTokenizer(t, "qwen3")
	type seg struct {
		text string
		end  int32
	}
	f := func(name string, vocab Vocab, cfg Config, msgs []Message, opt Options, want []seg) {
		t.Helper()
		r, err := New(name, vocab, cfg)
		if err != nil {
			t.Fatal(err)
		}
		dst := []Segment{{Text: "kept", ID: NoID, MsgEnd: -1}}
		segs, err := r.Render(dst, msgs, opt)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if segs[0].Text != "kept" {
			t.Fatalf("%s: Render did not append", name)
		}
		var got []seg
		for _, s := range segs[1:] {
			got = append(got, seg{s.Text, s.MsgEnd})
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	conv := []Message{{Role: "system", Content: " Be brief. "}, {Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello"}, {Role: "user", Content: "Bye"}}
	f(Llama3, tok, loadConfig(t, "llama3"), conv, Options{AddGenerationPrompt: true}, []seg{
		{"<|begin_of_text|>", -1},
		{"<|start_header_id|>", -1}, {"system", -1}, {"<|end_header_id|>", -1}, {"\n\nBe brief.", -1}, {"<|eot_id|>", 0},
		{"<|start_header_id|>", -1}, {"user", -1}, {"<|end_header_id|>", -1}, {"\n\nHi", -1}, {"<|eot_id|>", 1},
		{"<|start_header_id|>", -1}, {"assistant", -1}, {"<|end_header_id|>", -1}, {"\n\nHello", -1}, {"<|eot_id|>", 2},
		{"<|start_header_id|>", -1}, {"user", -1}, {"<|end_header_id|>", -1}, {"\n\nBye", -1}, {"<|eot_id|>", 3},
		{"<|start_header_id|>", -1}, {"assistant", -1}, {"<|end_header_id|>", -1}, {"\n\n", -1},
	})
	f(ChatML, qtok, Config{}, conv[:2], Options{AddGenerationPrompt: true}, []seg{
		{"<|im_start|>", -1}, {"system\n Be brief. ", -1}, {"<|im_end|>", -1}, {"\n", 0},
		{"<|im_start|>", -1}, {"user\nHi", -1}, {"<|im_end|>", -1}, {"\n", 1},
		{"<|im_start|>", -1}, {"assistant\n", -1},
	})
	f(Qwen3, qtok, Config{}, []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "<think>\nhm\n</think>\n\nHello"}}, Options{}, []seg{
		{"<|im_start|>", -1}, {"user\nHi", -1}, {"<|im_end|>", -1}, {"\n", 0},
		{"<|im_start|>", -1}, {"assistant\n", -1}, {"<think>", -1}, {"\nhm\n", -1}, {"</think>", -1}, {"\n\nHello", -1}, {"<|im_end|>", -1}, {"\n", 1},
	})
	f(Qwen3, qtok, Config{}, []Message{{Role: "user", Content: "Hi"}}, Options{AddGenerationPrompt: true, DisableThinking: true}, []seg{
		{"<|im_start|>", -1}, {"user\nHi", -1}, {"<|im_end|>", -1}, {"\n", 0},
		{"<|im_start|>", -1}, {"assistant\n", -1}, {"<think>", -1}, {"\n\n", -1}, {"</think>", -1}, {"\n\n", -1},
	})
	// The user turn ends inside a text run: no boundary for it.
	f(Mistral, mtok, loadConfig(t, "mistral7b"), conv[1:], Options{AddGenerationPrompt: true}, []seg{
		{"<s>", -1}, {"[INST] Hi [/INST]Hello", -1}, {"</s>", 1}, {"[INST] Bye [/INST]", 2},
	})
	f(Llama2, mtok, loadConfig(t, "mistral7b"), conv, Options{}, []seg{
		{"<s>", -1}, {"[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\nHi [/INST] Hello ", -1}, {"</s>", 2},
		{"<s>", -1}, {"[INST] Bye [/INST]", 3},
	})
	f(None, mtok, Config{}, conv, Options{AddGenerationPrompt: true}, []seg{
		{" Be brief. ", 0}, {"Hi", 1}, {"Hello", 2}, {"Bye", 3},
	})
	// Template text that is not an added token of the vocabulary is text.
	f(ChatML, mtok, Config{}, conv[1:2], Options{}, []seg{{"<|im_start|>user\nHi<|im_end|>\n", 0}})
	// Nothing to render.
	f(Llama3, tok, loadConfig(t, "llama3"), nil, Options{}, nil)
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	mtok := loadTokenizer(t, "mistral7b")
	cfg := loadConfig(t, "mistral7b")
	f := func(name string, msgs []Message, index int, reason string) {
		t.Helper()
		r, err := New(name, mtok, cfg)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]Segment, 1, 8)
		segs, err := r.Render(dst, msgs, Options{})
		var re *RoleError
		if !errors.As(err, &re) || re.Index != index || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s %v: error %v, want RoleError at %d with %q", name, msgs, err, index, reason)
		}
		if len(segs) != 1 {
			t.Errorf("%s: Render changed dst on error: %d segments", name, len(segs))
		}
	}
	u, a, s := Message{Role: "user", Content: "u"}, Message{Role: "assistant", Content: "a"}, Message{Role: "system", Content: "s"}
	f(Mistral, []Message{s, u}, 0, "alternate")
	f(Mistral, []Message{u, u}, 1, "alternate")
	f(Mistral, []Message{u, {Role: "tool"}}, 1, "only user and assistant")
	f(Llama2, []Message{s, a}, 1, "alternate")
	f(Llama2, []Message{u, a, a}, 2, "alternate")

	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"llama4", Config{}, `unknown chat template "llama4"`},
		{Llama3, Config{}, "bos_token"},
		{Mistral, Config{BOS: "<s>"}, "eos_token"},
	} {
		if _, err := New(c.name, mtok, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

func TestPyStripPieces(t *testing.T) {
	t.Parallel()
	f := func(in []string, want string) {
		t.Helper()
		if got := strings.Join(pyStripPieces(slices.Clone(in)), "|"); got != want {
			t.Errorf("pyStripPieces(%q) = %q, want %q", in, got, want)
		}
	}
	f(nil, "")
	f([]string{" \n", "\x1c", " a ", "\u3000 "}, "a")
	f([]string{"<<SYS>>\n", "", "\n<</SYS>>\n\n", "  "}, "<<SYS>>\n||\n<</SYS>>")
	f([]string{"\ufeffx\u0085"}, "\ufeffx")
}
