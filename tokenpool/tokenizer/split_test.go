package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// TestSplitBehaviors: HuggingFace's own examples of the five behaviors
// (its SplitDelimiterBehavior docs), with a String and a Regex pattern,
// inverted and not. The goldens of the llama3-split-* variants check the
// same against the library on the corpora.
func TestSplitBehaviors(t *testing.T) {
	t.Parallel()
	re, err := newRegexPattern(`-`)
	if err != nil {
		t.Fatal(err)
	}
	letters, err := newRegexPattern(`\p{L}+`)
	if err != nil {
		t.Fatal(err)
	}
	f := func(sp *splitter, s string, want ...string) {
		t.Helper()
		var got []string
		sp.split(s, func(start, end int) { got = append(got, s[start:end]) })
		if !slices.Equal(got, want) {
			t.Errorf("%+v on %q: got %q, want %q", *sp, s, got, want)
		}
	}
	const s = "the-final--countdown"
	for _, pat := range []splitter{{literal: "-"}, {re: re}, {re: letters, invert: true}} {
		for how, want := range map[behavior][]string{
			removed:            {"the", "final", "countdown"},
			isolated:           {"the", "-", "final", "-", "-", "countdown"},
			mergedWithPrevious: {"the-", "final-", "-", "countdown"},
			mergedWithNext:     {"the", "-final", "-", "-countdown"},
			contiguous:         {"the", "-", "final", "--", "countdown"},
		} {
			sp := pat
			sp.how = how
			if pat.re == letters {
				// \p{L}+ inverted: "--" is one match already.
				want = map[behavior][]string{
					removed:            {"the", "final", "countdown"},
					isolated:           {"the", "-", "final", "--", "countdown"},
					mergedWithPrevious: {"the-", "final--", "countdown"},
					mergedWithNext:     {"the", "-final", "--countdown"},
					contiguous:         {"the", "-", "final", "--", "countdown"},
				}[how]
			}
			f(&sp, s, want...)
		}
	}
	// Empty matches: a zero-length match right after a match is skipped
	// (Oniguruma's find_iter), others count as match pieces.
	star, err := newRegexPattern(`a*`)
	if err != nil {
		t.Fatal(err)
	}
	f(&splitter{re: star, how: isolated}, "baab", "b", "aa", "b")
	f(&splitter{re: star, how: mergedWithPrevious}, "baab", "baa", "b")
	f(&splitter{literal: "", how: isolated}, "abc", "abc")
}

func TestTranslateRegex(t *testing.T) {
	t.Parallel()
	f := func(src, want, wantErr string) {
		t.Helper()
		got, _, err := translateRegex(src)
		switch {
		case wantErr != "":
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("translateRegex(%q): %q, %v; want an error with %q", src, got, err, wantErr)
			}
		case err != nil || got != want:
			t.Errorf("translateRegex(%q) = %q, %v; want %q", src, got, err, want)
		}
	}
	f(`(?i:'s|'k)`, "(?:'[sS\u017f]|'[kK\u212a])", "")
	f(`\d+\p{L}{1,3}?`, `\p{Nd}+\p{L}{1,3}?`, "")
	f(`[\u3040-\u30ffa-z\-\]_]`, "[\u3040-\u30ffa-z\\-\\]_]", "")
	f(`[\x{1F600}\x41]\.`, "[\U0001F600A]\\.", "")
	f(`\w+`, "", `escape \w`)
	f(`\bx`, "", `escape \b`)
	f(`^x`, "", "anchor ^")
	f(`x$`, "", "anchor $")
	f(`a++`, "", "possessive")
	f(`a{,3}`, "", "{,n}")
	f(`[[:alpha:]]`, "", "POSIX")
	f(`[a&&b]`, "", "&&")
	f(`\p{Greek}`, "", "property")
	f(`[^\p{C}]`, "", "property")
	f(`\p{^L}`, "", "property")
	f(`(?i:ss)`, "", "folds to one character")
	f(`(?i)x`, "", "unsupported group")
	f(`(?<name>x)`, "", "unsupported group")
	f(`[ab`, "", "unterminated class")
}

// TestRegexUnicode16: the regexp2 path classifies as Unicode 16.0.0 does
// (HuggingFace's Oniguruma), not as Go's 15.0.0 tables do.
func TestRegexUnicode16(t *testing.T) {
	t.Parallel()
	p, err := newRegexPattern(`\p{L}+|\p{N}+|[\p{Lu}\p{Ll}]`)
	if err != nil {
		t.Fatal(err)
	}
	f := func(s string, want ...string) {
		t.Helper()
		var got []string
		p.find(s, func(start, end int) { got = append(got, s[start:end]) })
		if !slices.Equal(got, want) {
			t.Errorf("find(%q) = %q, want %q", s, got, want)
		}
	}
	f("ab\U0002EBF0c 12\U0001CCF03", "ab\U0002EBF0c", "12\U0001CCF03") // CJK Ext I, outlined digit
	f("\u1C89x", "\u1C89x")                                            // CYRILLIC CAPITAL LETTER TJE (16.0)
}
