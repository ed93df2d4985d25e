package tokenizer

import (
	"fmt"
	"testing"
	"unicode"
)

// assigned15 reports whether r is assigned in Go's unicode tables (15.0.0).
// Go has no Cn table, and its C table holds unassigned code points too, so
// any category but C, or one of C's assigned parts.
func assigned15(r rune) bool {
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z,
		unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

// goWord is \w from Go's 15.0.0 tables (isWordChar before the generated
// tables).
func goWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) ||
		unicode.In(r, unicode.Nd, unicode.Nl, unicode.Pc, unicode.Other_Alphabetic, unicode.Join_Control)
}

// TestUnicodeTablesKeep15: for every code point assigned in Unicode 15.0.0
// the generated tables (16.0.0, 17.0.0) say what Go's unicode package says.
// No such code point changed L, N, \w or White_Space in 15.1-17.0, so there
// are no exceptions to list; a regenerated table that moved one fails here
// and must name it. unicode.mjs checks every code point against
// HuggingFace itself when it writes the tables.
func TestUnicodeTablesKeep15(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		ours, gos func(rune) bool
	}{
		{"L", isL, unicode.IsLetter},
		{"N", isN, unicode.IsNumber},
		{"numeric", isNumeric, unicode.IsNumber},
		{"word", isWordChar, goWord},
		{"White_Space", func(r rune) bool { return unicode.Is(space16, r) }, isS},
	} {
		var diff []string
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if assigned15(r) && c.ours(r) != c.gos(r) {
				diff = append(diff, fmt.Sprintf("%U", r))
			}
		}
		if len(diff) > 0 {
			t.Errorf("%s: %d code points assigned in 15.0.0 differ from Go's unicode: %.20v", c.name, len(diff), diff)
		}
	}
}

// TestUnicodeTablesNew: characters added in 15.1.0, 16.0.0 and 17.0.0 are
// classified as HuggingFace tokenizers 0.23.2 classifies them (measured
// with its Split, Digits and single_word; TestGolden's unicode set has
// every new code point in context).
func TestUnicodeTablesNew(t *testing.T) {
	t.Parallel()
	f := func(r rune, l, n, numeric, word bool) {
		t.Helper()
		if assigned15(r) {
			t.Fatalf("%U is assigned in 15.0.0: not a new character", r)
		}
		if isL(r) != l || isN(r) != n || isNumeric(r) != numeric || isWordChar(r) != word {
			t.Errorf("%U: L %v N %v numeric %v \\w %v, want %v %v %v %v", r, isL(r), isN(r), isNumeric(r), isWordChar(r), l, n, numeric, word)
		}
	}
	f(0x2EBF0, true, false, false, true)  // CJK Extension I (15.1)
	f(0x2EE5D, true, false, false, true)  // its last
	f(0x1CCF0, false, true, true, true)   // OUTLINED DIGIT ZERO (16.0)
	f(0x10D40, false, true, true, true)   // GARAY DIGIT ZERO (16.0)
	f(0x10D50, true, false, false, true)  // GARAY CAPITAL LETTER A (16.0)
	f(0x105C0, true, false, false, true)  // TODHRI LETTER A (16.0)
	f(0x16D70, false, true, true, true)   // KIRAT RAI DIGIT ZERO (16.0)
	f(0x11DE0, false, false, true, false) // TOLONG SIKI DIGIT ZERO (17.0): only Rust's char::is_numeric knows it
	f(0x16FF4, false, false, true, false) // 17.0, likewise
	f(0x2FFFD, false, false, false, false)
}
