//go:build !race

package tokenizer

import (
	"strings"
	"testing"
	"time"
)

// TestRepeatedLetterNotQuadratic: one letter repeated costs O(n log n) on
// every model, including the regexp2 path: 100 KB takes less than 40
// times 12.5 KB (quadratic: 64). A ratio, so that a loaded machine does
// not fail it; the absolute number (≤ 50 ms per model for 100 KB, issue
// 34) is BenchmarkEncodeRepeated100K's, in BENCHMARKS.md.
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
	// Fastest of seven runs of each, interleaved, so that load on a
	// shared machine slows both alike. 8 times the bytes: O(n log n) is
	// ~9 times the time in theory, 15–18 measured on this 2-core machine
	// under load; quadratic is 64 times.
	fastest := func(tok *Tokenizer, short, long string) (time.Duration, time.Duration) {
		bs, bl := time.Duration(1<<62), time.Duration(1<<62)
		dst := make([]int32, 0, len(long))
		for range 7 {
			start := time.Now()
			dst = tok.Encode(dst[:0], short)
			bs = min(bs, time.Since(start))
			start = time.Now()
			dst = tok.Encode(dst[:0], long)
			bl = min(bl, time.Since(start))
		}
		return bs, bl
	}
	for name, tok := range toks {
		short, long := fastest(tok, strings.Repeat("a", 12_500), strings.Repeat("a", 100_000))
		t.Logf("%s: 12.5 KB %v, 100 KB %v", name, short, long)
		if long > 40*short {
			t.Errorf("%s: 100 KB of one letter took %v, 12.5 KB %v: worse than O(n log n)", name, long, short)
		}
	}
}
