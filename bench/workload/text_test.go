package workload

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestWordsAreOneToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, w := range words {
		if seen[w] {
			t.Errorf("word %q twice", w)
		}
		seen[w] = true
		if n := len(tokens(t, " "+w)); n != 1 {
			t.Errorf("%q is %d tokens, want 1", " "+w, n)
		}
		if n := len(tokens(t, w)); n != 1 {
			t.Errorf("%q is %d tokens, want 1", w, n)
		}
	}
	for _, s := range []string{"word.", "word. word", "word.\n\nword"} {
		if got, want := len(tokens(t, s)), strings.Count(s, "word")+1; got != want {
			t.Errorf("%q is %d tokens, want %d", s, got, want)
		}
	}
}

// TestTextTokenCount measures generated text with the real Llama-3
// tokenizer: the issue asks for ±10 %; the construction gives exact.
func TestTextTokenCount(t *testing.T) {
	t.Parallel()
	worst := 0.0
	var bytes, toks int
	for _, n := range []int{1, 2, 7, 16, 64, 100, 500, 1000, 2000, 4000, 8000} {
		for seed := range uint64(5) {
			text := Text(seed, n)
			got := len(tokens(t, text))
			rel := math.Abs(float64(got-n)) / float64(n)
			worst = max(worst, rel)
			if rel > 0.10 {
				t.Errorf("Text(%d, %d) is %d tokens, more than 10%% off", seed, n, got)
			}
			bytes, toks = bytes+len(text), toks+got
		}
	}
	t.Logf("worst relative error %.4f; %.2f bytes a token", worst, float64(bytes)/float64(toks))
	if worst != 0 {
		t.Errorf("worst relative error %v, want 0 (every unit is one token)", worst)
	}
}

func TestTextShape(t *testing.T) {
	t.Parallel()
	if a, b := Text(1, 300), Text(1, 300); a != b {
		t.Fatal("Text is not deterministic")
	}
	if Text(1, 300) == Text(2, 300) {
		t.Fatal("Text ignores the seed")
	}
	s := Text(3, 3000)
	if !strings.Contains(s, ". ") || !strings.Contains(s, ".\n\n") {
		t.Errorf("no sentences or paragraphs in %.200q", s)
	}
	if strings.HasSuffix(s, "\n") || strings.HasPrefix(s, " ") || strings.Contains(s, "  ") || strings.Contains(s, "\n ") {
		t.Errorf("stray whitespace in %q", s)
	}
	if Text(1, 0) == "" || Text(1, -5) == "" {
		t.Error("Text of n < 1 is empty, want one token")
	}
}

func TestPooledCut(t *testing.T) {
	t.Parallel()
	p := newPooled(7, 1, 500, 3)
	if !strings.HasPrefix(p.text, words[3]+" ") {
		t.Fatalf("opener %q not first in %.50q", words[3], p.text)
	}
	if len(p.ends) != 500 || int(p.ends[499]) != len(p.text) {
		t.Fatalf("ends: %d entries, last %d, text %d bytes", len(p.ends), p.ends[len(p.ends)-1], len(p.text))
	}
	for _, n := range []int{1, 2, 15, 16, 17, 100, 499, 500, 501, 10000} {
		c := p.cut(n)
		if !strings.HasPrefix(p.text, c) {
			t.Fatalf("cut(%d) is not a prefix", n)
		}
		if strings.HasSuffix(c, " ") || strings.HasSuffix(c, "\n") {
			t.Errorf("cut(%d) ends in whitespace: %q", n, c[max(0, len(c)-20):])
		}
		if got, want := len(tokens(t, c)), min(n, 500); got != want {
			t.Errorf("cut(%d) is %d tokens, want %d", n, got, want)
		}
	}
}

func TestAppendTextLead(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	lead := []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}
	got := strings.Fields(strings.ReplaceAll(string(appendText(nil, r, 40, lead, nil)), ".", " "))
	for i, w := range lead {
		if got[i] != words[w] {
			t.Fatalf("word %d is %q, want %q (lead words must survive sentence ends): %q", i, got[i], words[w], got)
		}
	}
}
