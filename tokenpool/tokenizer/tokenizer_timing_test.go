package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
)

func loadLlama3(tb testing.TB) *Tokenizer {
	tb.Helper()
	tok, err := Load(testdata + "models/llama3/tokenizer.json.gz")
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// prose4K returns the first 4 KiB chunks of the real corpus.
func prose4K(tb testing.TB) []string {
	tb.Helper()
	var corpus []string
	raw := readGzip(tb, testdata+"corpus/real.json.gz")
	if err := json.Unmarshal(raw, &corpus); err != nil {
		tb.Fatal(err)
	}
	return corpus
}

func BenchmarkEncodeLlama3Prose4K(b *testing.B) {
	tok := loadLlama3(b)
	chunks := prose4K(b)[:32]
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	dst := make([]int32, 0, 1<<16)
	b.SetBytes(int64(n) / int64(len(chunks)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		dst = tok.Encode(dst[:0], chunks[i%len(chunks)])
		i++
	}
}

func BenchmarkEncodeLlama3Repeated100K(b *testing.B) {
	tok := loadLlama3(b)
	s := strings.Repeat("a", 100_000)
	dst := make([]int32, 0, 1<<17)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		dst = tok.Encode(dst[:0], s)
	}
}

func BenchmarkLoadLlama3(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		loadLlama3(b)
	}
}

// BenchmarkNFCMarks100K is nfc's slow path at its worst: 100 KB of
// combining marks of mixed classes after one base (x/text would cut the
// run with U+034F; nfc sorts it whole).
func BenchmarkNFCMarks100K(b *testing.B) {
	s := "a" + strings.Repeat("\u0301\u0323\u0308\u0316", 100_000/8)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		nfc(s)
	}
}

// models are the shipped test models, for the per-model benchmarks.
var models = []string{"llama3", "qwen3", "mistral7b", "gemma3", "deepseek_v3", "gptoss"}

func loadModel(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	tok, err := Load(testdata + "models/" + name + "/tokenizer.json.gz")
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// BenchmarkEncodeProse4K is BenchmarkEncodeLlama3Prose4K for every model
// (issue 34: ≥ 25 MB/s each).
func BenchmarkEncodeProse4K(b *testing.B) {
	chunks := prose4K(b)[:32]
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	for _, m := range models {
		b.Run(m, func(b *testing.B) {
			tok := loadModel(b, m)
			dst := make([]int32, 0, 1<<16)
			b.SetBytes(int64(n) / int64(len(chunks)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				dst = tok.Encode(dst[:0], chunks[i%len(chunks)])
				i++
			}
		})
	}
}

// BenchmarkEncodeRepeated100K: 100 KB of one letter, the worst case of a
// BPE without a heap and of a backtracking regex (issue 34: ≤ 50 ms).
func BenchmarkEncodeRepeated100K(b *testing.B) {
	s := strings.Repeat("a", 100_000)
	for _, m := range models {
		b.Run(m, func(b *testing.B) {
			tok := loadModel(b, m)
			dst := make([]int32, 0, 1<<17)
			b.SetBytes(int64(len(s)))
			b.ReportAllocs()
			for b.Loop() {
				dst = tok.Encode(dst[:0], s)
			}
		})
	}
}

// BenchmarkLoad: Load of each model's tokenizer.json.gz (issue 34: Gemma 3
// ≤ 2 s).
func BenchmarkLoad(b *testing.B) {
	for _, m := range models {
		b.Run(m, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				loadModel(b, m)
			}
		})
	}
}
