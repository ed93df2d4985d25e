package tokenizer

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestEncodeSegment: a text segment right after an added token encodes as
// the rest of the whole input does, for every model and for the Metaspace
// "first" variant, where the position changes the ids.
func TestEncodeSegment(t *testing.T) {
	t.Parallel()
	var j map[string]any
	if err := json.Unmarshal(readGzip(t, testdata+"models/mistral7b/tokenizer.json.gz"), &j); err != nil {
		t.Fatal(err)
	}
	j["normalizer"] = nil
	j["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string]*Tokenizer{"mistral7b-metaspace-first": first}
	for _, m := range []string{"llama3", "qwen3", "mistral7b"} {
		if toks[m], err = Load(testdata + "models/" + m + "/tokenizer.json.gz"); err != nil {
			t.Fatal(err)
		}
	}
	corpus := loadCorpus(t, "targeted")
	for name, tok := range toks {
		bos := tok.added[0] // any added token splits the input
		differs := 0
		for _, s := range corpus {
			if got, want := tok.EncodeSegment(nil, s, true), tok.Encode(nil, s); !slices.Equal(got, want) {
				t.Fatalf("%s: EncodeSegment(%q, atStart) = %v, Encode = %v", name, s, got, want)
			}
			whole := tok.Encode(nil, bos.content+s)
			got := append([]int32{bos.id}, tok.EncodeSegment(nil, s, false)...)
			if !slices.Equal(got, whole) {
				t.Fatalf("%s: %q after %q: segment-wise %v, whole %v", name, s, bos.content, got, whole)
			}
			if !slices.Equal(got[1:], tok.Encode(nil, s)) {
				differs++
			}
		}
		// Only prepend_scheme "first" depends on the position.
		if (name == "mistral7b-metaspace-first") != (differs > 0) {
			t.Errorf("%s: %d strings encode differently after an added token", name, differs)
		}
	}
	for _, c := range []struct {
		content string
		id      int32
	}{{"<|eot_id|>", 128009}, {"<|begin_of_text|>", 128000}} {
		if id, ok := toks["llama3"].AddedTokenID(c.content); !ok || id != c.id {
			t.Errorf("AddedTokenID(%q) = %d, %v; want %d", c.content, id, ok, c.id)
		}
	}
	if _, ok := toks["llama3"].AddedTokenID("<|im_end|>"); ok {
		t.Error("llama3 AddedTokenID(<|im_end|>) found a token")
	}
}
