package workload

import "testing"

// BenchmarkNext is the client-side cost of one request (bytes: its
// content), which the benchmark client pays per request sent.
func BenchmarkNext(b *testing.B) {
	for _, name := range synthetic {
		b.Run(name, func(b *testing.B) {
			u := mustNew(b, name, DefaultOptions()).NewUser(0)
			size := 0
			for range 100 {
				r, _ := u.Next()
				for _, m := range r.Messages {
					size += len(m.Content)
				}
				u.Reply("an answer")
			}
			b.SetBytes(int64(size / 100))
			b.ReportAllocs()
			for b.Loop() {
				u.Next()
				u.Reply("an answer")
			}
		})
	}
}

// BenchmarkNew is the cost of generating a workload's shared texts.
func BenchmarkNew(b *testing.B) {
	for _, name := range synthetic {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mustNew(b, name, DefaultOptions())
			}
		})
	}
}
