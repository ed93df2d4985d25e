package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
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
	for _, model := range []string{"llama3", "qwen3", "mistral7b"} {
		tok, err := Load(testdata + "models/" + model + "/tokenizer.json.gz")
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range []string{"targeted", "real", "fuzz"} {
			var corpus []string
			if err := json.Unmarshal(readGzip(t, testdata+"corpus/"+set+".json.gz"), &corpus); err != nil {
				t.Fatal(err)
			}
			want := goldenIDs(t, testdata+"golden/"+model+"."+set+".ids.gz")
			if len(want) != len(corpus) {
				t.Fatalf("%s %s: %d golden lines for %d strings", model, set, len(want), len(corpus))
			}
			bad := 0
			for i, s := range corpus {
				if got := tok.Encode(nil, s); !slices.Equal(got, want[i]) {
					if bad < 3 {
						t.Errorf("%s %s #%d %.200q:\n got %v\nwant %v", model, set, i, s, got, want[i])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s %s: %d of %d strings differ", model, set, bad, len(corpus))
			}
			if set != "targeted" {
				continue
			}
			want = goldenIDs(t, testdata+"golden/"+model+".targeted.special.ids.gz")
			for i, s := range corpus {
				if got := tok.EncodeSpecial(nil, s); !slices.Equal(got, want[i]) {
					t.Fatalf("%s EncodeSpecial #%d %.200q:\n got %v\nwant %v", model, i, s, got, want[i])
				}
			}
		}
	}
}

// TestGoldenVariants checks pre-tokenizers that no shipped model here uses,
// on a real vocabulary: the edits mirror gen.mjs's variants.
func TestGoldenVariants(t *testing.T) {
	t.Parallel()
	for name, pre := range map[string]string{
		"mistral7b-metaspace-first":        `{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false}`,
		"mistral7b-metaspace-always-split": `{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}`,
	} {
		var j map[string]json.RawMessage
		if err := json.Unmarshal(readGzip(t, testdata+"models/mistral7b/tokenizer.json.gz"), &j); err != nil {
			t.Fatal(err)
		}
		j["normalizer"], j["pre_tokenizer"] = json.RawMessage("null"), json.RawMessage(pre)
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, set := range []string{"targeted", "fuzz"} {
			var corpus []string
			if err := json.Unmarshal(readGzip(t, testdata+"corpus/"+set+".json.gz"), &corpus); err != nil {
				t.Fatal(err)
			}
			want := goldenIDs(t, testdata+"golden/"+name+"."+set+".ids.gz")
			bad := 0
			for i, s := range corpus {
				if got := tok.Encode(nil, s); !slices.Equal(got, want[i]) {
					if bad < 3 {
						t.Errorf("%s %s #%d %.200q:\n got %v\nwant %v", name, set, i, s, got, want[i])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s %s: %d of %d strings differ", name, set, bad, len(corpus))
			}
		}
	}
}
