package backend

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestDecodingTrack: tracked requests show their remaining decode from
// now (0 once past their end) until untracked; a full table refuses (-1)
// and takes requests again once a cell frees; untracking twice or an
// unknown cell changes nothing.
func TestDecodingTrack(t *testing.T) {
	t.Parallel()
	b := &Backend{}
	if got := b.Remaining(0, nil); len(got) != 0 || b.Decoding() != 0 {
		t.Fatalf("nothing tracked: %v, %d", got, b.Decoding())
	}
	b.Untrack(0) // no table yet: nothing
	const s = int64(time.Second)
	c1, c2, c3 := b.Track(10*s), b.Track(12*s), b.Track(20*s)
	if c1 < 0 || c2 < 0 || c3 < 0 || b.Decoding() != 3 {
		t.Fatalf("cells %d %d %d, decoding %d", c1, c2, c3, b.Decoding())
	}
	got := b.Remaining(11*s, nil)
	slices.Sort(got)
	if want := []float64{0, 1, 9}; !slices.Equal(got, want) {
		t.Fatalf("remaining at 11 s: %v, want %v", got, want)
	}
	b.Untrack(c2)
	b.Untrack(c2)
	b.Untrack(-1)
	b.Untrack(decodingCap)
	got = b.Remaining(11*s, got[:0])
	slices.Sort(got)
	if want := []float64{0, 9}; !slices.Equal(got, want) || b.Decoding() != 2 {
		t.Fatalf("after untracking one: %v (decoding %d), want %v", got, b.Decoding(), want)
	}
	b.Untrack(c1)
	b.Untrack(c3)
	cells := make([]int, 0, decodingCap)
	for range decodingCap {
		c := b.Track(30 * s)
		if c < 0 {
			t.Fatalf("refused with %d tracked, cap %d", len(cells), decodingCap)
		}
		cells = append(cells, c)
	}
	if c := b.Track(30 * s); c != -1 {
		t.Fatalf("a full table took a request: cell %d", c)
	}
	b.Untrack(cells[7])
	if c := b.Track(31 * s); c != cells[7] {
		t.Fatalf("after a free: cell %d, want %d", c, cells[7])
	}
	if n := len(b.Remaining(0, nil)); n != decodingCap {
		t.Fatalf("remaining lists %d, want %d", n, decodingCap)
	}
}

// TestDecodingConcurrent: loops tracking and untracking at once leave
// the count at zero and every cell free (run with -race).
func TestDecodingConcurrent(t *testing.T) {
	t.Parallel()
	b := &Backend{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				c := b.Track(int64(g*10000 + i + 1))
				_ = b.Remaining(0, nil)
				b.Untrack(c)
			}
		}()
	}
	wg.Wait()
	if n := b.Decoding(); n != 0 {
		t.Fatalf("decoding %d after every untrack", n)
	}
	if got := b.Remaining(0, nil); len(got) != 0 {
		t.Fatalf("cells left: %v", got)
	}
}

// TestExpectedTokens: ignore_eos makes max_tokens the answer's length;
// otherwise the backend's mean answer, within max_tokens; nothing before
// an answer was seen. ObserveDecode learns the time per token from the
// tokens after the first.
func TestExpectedTokens(t *testing.T) {
	t.Parallel()
	b := &Backend{}
	if n := b.ExpectedTokens(100, false); n != 0 {
		t.Fatalf("unlearned, no ignore_eos: %d", n)
	}
	if n := b.ExpectedTokens(100, true); n != 100 {
		t.Fatalf("ignore_eos: %d, want 100", n)
	}
	if n := b.ExpectedTokens(0, true); n != 0 {
		t.Fatalf("ignore_eos without max_tokens: %d", n)
	}
	b.ObserveDecode(0, time.Second) // nothing generated: nothing learned
	b.ObserveDecode(1, time.Second) // one token: its length, no speed
	if b.TokenTime() != 0 || b.ExpectedTokens(0, false) != 1 {
		t.Fatalf("one token: token time %v, expected %d", b.TokenTime(), b.ExpectedTokens(0, false))
	}
	b = &Backend{}
	b.ObserveDecode(201, 2*time.Second)
	if got := b.TokenTime(); got != 10*time.Millisecond {
		t.Fatalf("token time %v, want 10ms", got)
	}
	if n := b.ExpectedTokens(0, false); n != 201 {
		t.Fatalf("mean %d, want 201", n)
	}
	if n := b.ExpectedTokens(50, false); n != 50 {
		t.Fatalf("within max_tokens: %d, want 50", n)
	}
	b.ObserveDecode(401, 2*time.Second) // 5 ms per token
	want := 10*time.Millisecond - time.Duration(decodeWeight*float64(5*time.Millisecond))
	if got := b.TokenTime(); got != want {
		t.Fatalf("two samples: %v, want %v", got, want)
	}
}
