package httplex

import "testing"

// BenchmarkNormalizePath: the already-normal paths every request takes
// (the fast path: no allocation), and one that must be rewritten.
func BenchmarkNormalizePath(b *testing.B) {
	for _, p := range []string{"/v1/chat/completions", "/v1/./x/../chat/%63ompletions"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := NormalizePath(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
