package tokenizer

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

var (
	fuzzOnce sync.Once
	fuzzTok  *Tokenizer
	fuzzPipe *Tokenizer // qwen3 under Sequence[Split, Digits, ByteLevel(use_regex)]
	fuzzErr  error
	idBytes  map[int32]string
)

func fuzzTokenizer(t *testing.T) (*Tokenizer, *Tokenizer, map[int32]string) {
	fuzzOnce.Do(func() {
		fuzzTok, fuzzErr = Load(testdata + "models/qwen3/tokenizer.json.gz")
		if fuzzErr != nil {
			return
		}
		// The general pipeline, with stages that cut but do not rewrite
		// the text, so the same lossless check applies.
		var j map[string]any
		if fuzzErr = json.Unmarshal(readGzip(t, testdata+"models/qwen3/tokenizer.json.gz"), &j); fuzzErr != nil {
			return
		}
		split := j["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0]
		j["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{split,
			map[string]any{"type": "Digits", "individual_digits": true},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}}}
		raw, err := json.Marshal(j)
		if err != nil {
			fuzzErr = err
			return
		}
		if fuzzPipe, fuzzErr = Parse(raw); fuzzErr != nil {
			return
		}
		idBytes = make(map[int32]string, len(fuzzTok.vocab)+len(fuzzTok.added))
		for b, id := range fuzzTok.vocab {
			idBytes[id] = b
		}
		for _, a := range fuzzTok.added {
			idBytes[a.id] = a.content
		}
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzTok, fuzzPipe, idBytes
}

// FuzzEncode checks that encoding is lossless (byte-level BPE: the ids'
// bytes concatenate to the NFC-normalized input, outside added tokens),
// for Qwen3 and for Qwen3 under the general pre-tokenizer pipeline, and
// that the pre-tokenizers (the Llama-3, Qwen and GPT-2 patterns, Digits)
// cut every input into non-empty pieces covering it. Golden agreement with HuggingFace is TestGolden's job.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello world", "I'M here 123456", "  \r\n\t x", "你好<|im_end|>x", "e\u0301", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			// HuggingFace takes Rust strings; the caller's job is to
			// pass valid UTF-8 (the pool will replace invalid bytes).
			return
		}
		tok, pipe, bytesOf := fuzzTokenizer(t)
		for _, next := range []func(string) int{
			splitPattern{maxDigits: 1}.next, splitPattern{maxDigits: 3}.next, gpt2Split.next,
			func(s string) int { return nextDigits(s, false) }, func(s string) int { return nextDigits(s, true) },
		} {
			n := 0
			for rest := s; len(rest) > 0; {
				k := next(rest)
				if k <= 0 || k > len(rest) {
					t.Fatalf("piece length %d at offset %d of %q", k, n, s)
				}
				n += k
				rest = rest[k:]
			}
		}
		// Added tokens are cut out before normalization: the ids spell
		// the NFC form (HuggingFace's, nfc) of the text between them, and the tokens
		// themselves.
		var want strings.Builder
		for rest := s; len(rest) > 0; {
			i, a := tok.findAdded(rest, 0)
			want.WriteString(nfc(rest[:i]))
			if a == nil {
				break
			}
			want.WriteString(a.content)
			rest = rest[i+len(a.content):]
		}
		for _, tk := range []*Tokenizer{tok, pipe} {
			var b strings.Builder
			for _, id := range tk.Encode(nil, s) {
				b.WriteString(bytesOf[id])
			}
			if b.String() != want.String() {
				t.Fatalf("ids spell %q, want %q", b.String(), want.String())
			}
		}
	})
}

// FuzzEncodeModels checks that encoding is lossless for the models of
// issue 34's pipelines: gpt-oss (o200k matched by hand, ignore_merges),
// DeepSeek-V3 (three Splits in the general splitter, ByteLevel without its
// regex) and Gemma 3 (a Split on a String, SentencePiece-style BPE cut
// before ▁, byte fallback, 6,415 added tokens): the ids spell the input
// (for Gemma 3 with spaces as ▁, which its normalizer writes).
func FuzzEncodeModels(f *testing.F) {
	for _, s := range []string{"", "Hello WORLD it's", "helloWorld 123456 日本語のテキスト", "  \r\n\t x", "<start_of_turn>user\nhi<end_of_turn>",
		"a> </b \u2581x", "<｜begin▁of▁sentence｜>x", "<|start|>x<|end|>", "e\u0301 ǅ ʰ\u0301", "\U0002EBF0\U0001CCF0", strings.Repeat("ab ", 40)} {
		f.Add(s)
	}
	type model struct {
		tok   *Tokenizer
		spell map[int32]string
		norm  func(string) string
	}
	var models []model
	for _, name := range []string{"gptoss", "deepseek_v3", "gemma3"} {
		tok := loadModel(f, name)
		m := model{tok: tok, spell: make(map[int32]string, len(tok.vocab)+len(tok.added)), norm: func(s string) string { return s }}
		for b, id := range tok.vocab {
			m.spell[id] = b
		}
		if tok.byteFallback {
			for b, id := range tok.byteTok {
				m.spell[id] = string([]byte{byte(b)})
			}
			m.norm = func(s string) string { return strings.ReplaceAll(s, " ", spaceMark) }
		}
		for _, a := range tok.added {
			m.spell[a.id] = a.content
		}
		models = append(models, m)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, m := range models {
			var want strings.Builder
			for rest := s; len(rest) > 0; {
				i, a := m.tok.findAdded(rest, 0)
				want.WriteString(m.norm(rest[:i]))
				if a == nil {
					break
				}
				want.WriteString(a.content)
				rest = rest[i+len(a.content):]
			}
			var got strings.Builder
			for _, id := range m.tok.Encode(nil, s) {
				got.WriteString(m.spell[id])
			}
			if got.String() != want.String() {
				t.Fatalf("ids spell %q, want %q", got.String(), want.String())
			}
		}
	})
}
