//go:build !race

package tokenizer

import "testing"

// TestEncodeZeroAllocs backs Encode's doc: with room in dst, Llama-3 prose
// encodes without allocating. Not parallel: AllocsPerRun counts the
// allocations of every goroutine.
func TestEncodeZeroAllocs(t *testing.T) {
	tok := loadLlama3(t)
	chunks := prose4K(t)[:32]
	dst := make([]int32, 0, 1<<16)
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		dst = tok.Encode(dst[:0], chunks[i%len(chunks)])
		i++
	}); n != 0 {
		t.Errorf("Encode allocates %v times per 4 KiB chunk, want 0", n)
	}
}
