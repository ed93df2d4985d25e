//go:build !race

package tree

import "testing"

// The race detector allocates on its own; these run without it.

func TestZeroAllocs(t *testing.T) {
	tr, prompt := routeTable(t, 2_000)
	toks := make([]int32, promptTokens)
	dst := make([]uint64, 0, promptTokens/DefaultBlockSize)
	hits := make([]Hit, 0, 16)
	var bounds []int
	for i := 16; i < len(prompt); i += 16 {
		bounds = append(bounds, i)
	}
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"BlockKeys", func() { dst = BlockKeys(dst[:0], 1, toks, DefaultBlockSize) }},
		{"Match", func() { hits, _ = tr.Match(hits[:0], prompt, 2) }},
		{"InsertRefresh", func() { _ = tr.Insert(prompt, bounds, 1, Local, 3) }},
		{"Demote", func() { _ = tr.Demote(prompt, 1, len(prompt)/2, 4) }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", tc.name, n)
		}
	}
}
