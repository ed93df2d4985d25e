package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
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

func goldenIDs(t *testing.T, path string) [][]int32 {
	t.Helper()
	var out [][]int32
	sc := bufio.NewScanner(strings.NewReader(string(readGzip(t, path))))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
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

// TestGolden compares every corpus string with HuggingFace's ids
// (testdata/README.md says how they were made).
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"llama3", "qwen3", "mistral7b", "gemma3", "deepseek_v3", "gptoss"} {
		tok, err := Load(testdata + "models/" + model + "/tokenizer.json.gz")
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range []string{"targeted", "real", "fuzz", "unicode"} {
			corpus := loadCorpus(t, set)
			checkGolden(t, model+" "+set, corpus, model+"."+set, tok.Encode)
			if set == "targeted" {
				checkGolden(t, model+" EncodeSpecial", corpus, model+".targeted.special", tok.EncodeSpecial)
			}
		}
	}
}

func loadCorpus(t *testing.T, set string) []string {
	t.Helper()
	var corpus []string
	if err := json.Unmarshal(readGzip(t, testdata+"corpus/"+set+".json.gz"), &corpus); err != nil {
		t.Fatal(err)
	}
	return corpus
}

// checkGolden encodes every corpus string and compares it with the golden
// file golden/<golden>.ids.gz, reporting the first three differences and
// the count.
func checkGolden(t *testing.T, label string, corpus []string, golden string, encode func([]int32, string) []int32) {
	t.Helper()
	want := goldenIDs(t, testdata+"golden/"+golden+".ids.gz")
	if len(want) != len(corpus) {
		t.Fatalf("%s: %d golden lines for %d strings", label, len(want), len(corpus))
	}
	bad := 0
	for i, s := range corpus {
		if got := encode(nil, s); !slices.Equal(got, want[i]) {
			if bad < 3 {
				t.Errorf("%s #%d %.200q:\n got %v\nwant %v", label, i, s, got, want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d strings differ", label, bad, len(corpus))
	}
}

// TestGoldenVariants checks components that no shipped model here uses
// (the Metaspace, Digits and standalone ByteLevel pre-tokenizers, Sequences
// of them, lstrip/rstrip/single_word added tokens) on real vocabularies:
// the edits mirror gen.mjs's variants.
func TestGoldenVariants(t *testing.T) {
	t.Parallel()
	metaspace := func(pre string) func(map[string]any) {
		return func(j map[string]any) {
			var v any
			if err := json.Unmarshal([]byte(pre), &v); err != nil {
				t.Fatal(err)
			}
			j["normalizer"], j["pre_tokenizer"] = nil, v
		}
	}
	strip := func(l, r map[string]bool) func(map[string]any) {
		return func(j map[string]any) {
			for _, a := range j["added_tokens"].([]any) {
				a := a.(map[string]any)
				c := a["content"].(string)
				if l[c] {
					a["lstrip"] = true
				}
				if r[c] {
					a["rstrip"] = true
				}
			}
		}
	}
	// pre sets pre_tokenizer to the JSON made from parts: "split" is the
	// model's own Split (its first pre-tokenizer), anything else JSON.
	pre := func(parts ...string) func(map[string]any) {
		return func(j map[string]any) {
			var seq []any
			for _, p := range parts {
				var v any
				if p == "split" || p == "split-merged-with-next" {
					v = j["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0]
					if p == "split-merged-with-next" {
						c := maps.Clone(v.(map[string]any))
						c["behavior"] = "MergedWithNext"
						v = c
					}
				} else if err := json.Unmarshal([]byte(p), &v); err != nil {
					t.Fatal(err)
				}
				seq = append(seq, v)
			}
			if len(seq) == 1 {
				j["pre_tokenizer"] = seq[0]
			} else {
				j["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": seq}
			}
		}
	}
	const (
		digitsTrue     = `{"type": "Digits", "individual_digits": true}`
		digitsFalse    = `{"type": "Digits", "individual_digits": false}`
		byteLevel      = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}`
		byteLevelGPT2  = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`
		byteLevelSpace = `{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`
	)
	split := func(pattern, behavior string, invert bool) string {
		return `{"type": "Split", "pattern": ` + pattern + `, "behavior": "` + behavior + `", "invert": ` + strconv.FormatBool(invert) + `}`
	}
	singleWord := func(j map[string]any) {
		for _, a := range j["added_tokens"].([]any) {
			a := a.(map[string]any)
			if c := a["content"]; c == "<|im_start|>" || c == "<|im_end|>" {
				a["single_word"] = true
			}
		}
		for _, w := range []string{"the", "ing"} {
			j["added_tokens"] = append(j["added_tokens"].([]any), map[string]any{
				"id": j["model"].(map[string]any)["vocab"].(map[string]any)[w], "content": w,
				"single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false,
			})
		}
	}
	for name, v := range map[string]struct {
		base string
		edit func(map[string]any)
	}{
		"mistral7b-metaspace-first":        {"mistral7b", metaspace(`{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}`)},
		"mistral7b-metaspace-always-split": {"mistral7b", metaspace(`{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}`)},
		"qwen3-strip":                      {"qwen3", strip(map[string]bool{"<|im_end|>": true}, map[string]bool{"<|im_start|>": true})},
		"llama3-strip":                     {"llama3", strip(map[string]bool{"<|eot_id|>": true}, map[string]bool{"<|eot_id|>": true})},
		"llama3-digits":                    {"llama3", pre(digitsTrue, byteLevel)},
		"llama3-split-digits":              {"llama3", pre("split", digitsTrue, byteLevel)},
		"llama3-bytelevel":                 {"llama3", pre(byteLevelGPT2)},
		"llama3-digits-bytelevel-prefix":   {"llama3", pre(digitsFalse, byteLevelSpace)},
		"mistral7b-digits-metaspace": {"mistral7b", func(j map[string]any) {
			j["normalizer"] = nil
			pre(digitsTrue, `{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true}`)(j)
		}},
		"qwen3-single-word": {"qwen3", singleWord},
		// Issue 34: the general Split (split.go, regex.go).
		"llama3-split-removed":    {"llama3", pre(split(`{"Regex": "\\s+"}`, "Removed", false), split(`{"String": "e"}`, "Removed", true), byteLevel)},
		"llama3-split-merged":     {"llama3", pre(split(`{"String": " "}`, "MergedWithPrevious", false), split(`{"Regex": "[\\p{P}\\p{S}]"}`, "MergedWithNext", false), byteLevel)},
		"llama3-split-contiguous": {"llama3", pre(split(`{"Regex": "\\p{L}|\\p{M}"}`, "Contiguous", false), split(`{"Regex": "\\p{N}"}`, "Contiguous", true), byteLevel)},
		"llama3-split-empty":      {"llama3", pre(split(`{"Regex": "\\s*"}`, "MergedWithNext", false), split(`{"Regex": "a*|(?=b)"}`, "MergedWithPrevious", false), split(`{"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d|ok)"}`, "Isolated", false), byteLevel)},
		"llama3-split-hand":       {"llama3", pre("split-merged-with-next", split(`{"Regex": "(?<=[a-z])\\p{Lu}+(?!\\p{Ll})|[\\u3040-\\u30ff]+"}`, "Isolated", true), byteLevel)},
	} {
		var j map[string]any
		if err := json.Unmarshal(readGzip(t, testdata+"models/"+v.base+"/tokenizer.json.gz"), &j); err != nil {
			t.Fatal(err)
		}
		v.edit(j)
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, set := range []string{"targeted", "fuzz", "unicode"} {
			checkGolden(t, name+" "+set, loadCorpus(t, set), name+"."+set, tok.Encode)
		}
	}
}
