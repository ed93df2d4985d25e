//go:build !race

package tokenizer

import (
	"strings"
	"testing"
	"time"
)

// TestRepeatedLetterNotQuadratic: one letter repeated costs O(n log n) on
// every model, including the regexp2 path: 100 KB takes less than 8 times
// 25 KB (quadratic: 16). A ratio of the fastest of five runs each, so that
// a loaded machine slows both alike; the absolute number (≤ 50 ms per model
// for 100 KB, issue 34) is BenchmarkEncodeRepeated100K's, in BENCHMARKS.md.
func TestRepeatedLetterNotQuadratic(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	regex := func() *Tokenizer {
		// llama3's vocabulary under a Split that only regexp2 runs.
		raw := readGzip(t, testdata+"models/llama3/tokenizer.json.gz")
		raw = []byte(strings.Replace(string(raw), `"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|`, `"Regex": "(?<=x)y|(?i:'s|'t|'re|'ve|'m|'ll|'d)|`, 1))
		tok, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if tok.stages[0].kind != stageSplitGeneral || tok.stages[0].general.re == nil {
			t.Fatal("the edited llama3 does not run on regexp2")
		}
		return tok
	}()
	toks := map[string]*Tokenizer{"regexp2": regex}
	for _, m := range models {
		toks[m] = loadModel(t, m)
	}
	fastest := func(tok *Tokenizer, s string) time.Duration {
		best := time.Duration(1 << 62)
		dst := make([]int32, 0, len(s))
		for range 5 {
			start := time.Now()
			dst = tok.Encode(dst[:0], s)
			best = min(best, time.Since(start))
		}
		return best
	}
	for name, tok := range toks {
		short, long := fastest(tok, strings.Repeat("a", 25_000)), fastest(tok, strings.Repeat("a", 100_000))
		t.Logf("%s: 25 KB %v, 100 KB %v", name, short, long)
		if long > 8*short {
			t.Errorf("%s: 100 KB of one letter took %v, 25 KB %v: worse than O(n log n)", name, long, short)
		}
	}
}
