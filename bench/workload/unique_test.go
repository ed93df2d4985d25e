package workload

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestUniqueOpenerCapacity(t *testing.T) {
	t.Parallel()
	if bits := uniqueDigits * math.Log2(float64(len(shortWords))); bits < 64 {
		t.Fatalf("%d digits of base %d hold %.1f bits, want 64", uniqueDigits, len(shortWords), bits)
	}
	// The longest opener (words of 8 bytes, spaces between, a full stop
	// among them) fits in 64 bytes.
	if n := uniqueDigits*8 + uniqueDigits - 1 + 1; n > 64 {
		t.Fatalf("an opener may take %d bytes", n)
	}
	for _, i := range shortWords {
		if len(words[i]) > 8 {
			t.Fatalf("short word %q", words[i])
		}
	}
}

func TestUniqueNoSharedStart(t *testing.T) {
	t.Parallel()
	// Requests of a quarter of the size (TokensPerWord 4) keep the
	// test fast; the opener is the same.
	opts := DefaultOptions()
	opts.TokensPerWord = 4
	w := mustNew(t, "unique", opts)
	seen := map[string]string{}
	firstBlocks := map[string]bool{}
	count := map[string]int{}
	n := 0
	// Users 0-9 and some far ids: the opener encodes the id's high bits too.
	for _, id := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1 << 16, 1<<31 - 1} {
		u := w.NewUser(id)
		for i := range 1000 {
			r, _ := u.Next()
			if len(r.Messages) != 1 || r.Messages[0].Role != "user" {
				t.Fatalf("%d messages, want one user message", len(r.Messages))
			}
			text := r.Messages[0].Content
			if len(text) < 64 {
				t.Fatalf("a request of %d bytes", len(text))
			}
			name := fmt.Sprintf("user %d request %d", id, i)
			if other, ok := seen[text[:64]]; ok {
				t.Fatalf("%s and %s share their first 64 bytes %q", name, other, text[:64])
			}
			seen[text[:64]] = name
			if i < 100 {
				first := fmt.Sprint(tokens(t, text[:min(len(text), 200)])[:16])
				if firstBlocks[first] {
					t.Fatalf("%s: first block seen before", name)
				}
				firstBlocks[first] = true
			}
			count[r.Tag]++
			n++
		}
	}
	for _, c := range stressClasses {
		if got := 100 * float64(count[c.name]) / float64(n); math.Abs(got-float64(c.percent)) > 1.5 {
			t.Errorf("%s: %.1f%% of requests, want %d%% ± 1.5", c.name, got, c.percent)
		}
	}
}

func TestUniqueSizes(t *testing.T) {
	t.Parallel()
	u := mustNew(t, "unique", DefaultOptions()).NewUser(3)
	for range 100 {
		r, _ := u.Next()
		n := len(tokens(t, r.Messages[0].Content))
		for _, c := range stressClasses {
			if c.name == r.Tag && (n < c.min || n > c.max) {
				t.Errorf("%s request of %d tokens, want %d-%d", r.Tag, n, c.min, c.max)
			}
		}
		if words := strings.Fields(strings.ReplaceAll(r.Messages[0].Content[:64], ".", " ")); len(words) < uniqueDigits {
			t.Errorf("first 64 bytes hold %d words, want the %d-word opener", len(words), uniqueDigits)
		}
	}
}
