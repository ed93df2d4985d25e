package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// TestNFC: HuggingFace's NFC (Unicode 9.0.0 data, no Stream-Safe Text
// Format) on the cases where x/text's differs; the expected strings are
// tokenizers 0.23.2's output.
func TestNFC(t *testing.T) {
	t.Parallel()
	f := func(in, want string) {
		t.Helper()
		for name, fn := range map[string]func(string) string{"nfc": nfc, "nfcSlow": nfcSlow} {
			if got := fn(in); got != want {
				t.Errorf("%s(%+q) = %+q, want %+q", name, in, got, want)
			}
		}
	}
	r := strings.Repeat
	f("", "")
	f("café", "café")
	f("cafe\u0301", "café")
	f("\u1100\u1161\u11a8", "\uac01") // Hangul L V T
	// 31 and more non-starters: no U+034F, one sort over the whole run.
	f("a"+r("\u0301", 31), "\u00e1"+r("\u0301", 30))
	f("a"+r("\u0301\u0323", 20), "\u1ea1"+r("\u0323", 19)+r("\u0301", 20))
	f("a"+r("\u0302\u0323", 20), "\u1ead"+r("\u0323", 19)+r("\u0302", 19))
	f(r("\u0301", 40)+"a", r("\u0301", 40)+"a")
	f("\u01d6"+r("\u0304", 30)+"b", "\u01d6"+r("\u0304", 30)+"b") // ǖ = u + 0308 + 0304, then 30 more
	// Marks assigned after 9.0.0 are starters to HuggingFace: they neither
	// reorder nor let the mark after them reach the base.
	f("a\u07fd\u0323", "a\u07fd\u0323")               // x/text: "\u1ea1\u07fd"
	f("a\u0323\u0c3c", "\u1ea1\u0c3c")                // U+0C3C TELUGU SIGN NUKTA (14.0)
	f("a\u0898\u0301", "a\u0898\u0301")               // x/text: "\u00e1\u0898"
	f("\U00011935\U00011930", "\U00011935\U00011930") // DIVES AKURU O (13.0) stays decomposed
	f("\U00011938", "\U00011938")
	// Invalid UTF-8 is x/text's.
	f("e\u0301\xff", "\u00e9\xff")
}

// TestNFCMatchesXText: where the two NFCs must agree (only characters of
// Unicode 9.0.0 and no run long enough for x/text's U+034F), nfc is
// x/text's NFC, on seeded random strings of marks of many classes,
// composing starters and Hangul; and nfc is idempotent everywhere.
func TestNFCMatchesXText(t *testing.T) {
	t.Parallel()
	pool := []rune{'a', 'e', 'o', 'u', 'A', ' ', '1', 0x00e9, 0x01d6, 0x1ea1, 0x0301, 0x0300, 0x0302, 0x0308, 0x0323,
		0x0327, 0x0316, 0x0334, 0x0338, 0x0344, 0x0345, 0x035c, 0x05b0, 0x05bc, 0x0651, 0x093c, 0x094d, 0x0e38,
		0x0f71, 0x0f72, 0x0f73, 0x1dfa, 0x302a, 0x3099, 0x1d165, 0x0b47, 0x0b3e, 0x0b57, 0x1100, 0x1161, 0x11a8,
		0xac00, 0x0915, 0x0cd5, 0x0dca, 0x07fd, 0x0898, 0x0c3c, 0x11935, 0x11930, 0x212b, 0xfb01}
	rng := rand.New(rand.NewPCG(1, 2))
	compared := 0
	for i := 0; i < 50000; i++ {
		rs := make([]rune, 1+rng.IntN(12+i%40))
		for k := range rs {
			rs[k] = pool[rng.IntN(len(pool))]
		}
		s := string(rs)
		got := nfc(s)
		if again := nfc(got); again != got {
			t.Fatalf("nfc(%+q) = %+q, not idempotent: %+q", s, got, again)
		}
		if nfcSlow(s) != got {
			t.Fatalf("nfcSlow(%+q) = %+q, nfc %+q", s, nfcSlow(s), got)
		}
		want := norm.NFC.String(s)
		if !allKnown9(s) || strings.Count(want, "\u034f") > 0 {
			continue
		}
		compared++
		if got != want {
			t.Fatalf("nfc(%+q) = %+q, x/text %+q", s, got, want)
		}
	}
	if compared < 10000 {
		t.Fatalf("only %d strings in the common domain", compared)
	}
}

func allKnown9(s string) bool {
	for _, r := range s {
		if !known9(r) {
			return false
		}
	}
	return true
}

// FuzzNFC: nfc is idempotent, its two paths agree, and where HuggingFace's
// and x/text's NFC must agree, they do.
func FuzzNFC(f *testing.F) {
	for _, s := range []string{"", "cafe\u0301", "a" + strings.Repeat("\u0301\u0323", 20), "a\u07fd\u0323", "\u1100\u1161\u11a8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		got := nfc(s)
		if again := nfc(got); again != got {
			t.Fatalf("nfc(%+q) = %+q, not idempotent: %+q", s, got, again)
		}
		if slow := nfcSlow(s); slow != got {
			t.Fatalf("nfcSlow(%+q) = %+q, nfc %+q", s, slow, got)
		}
		if want := norm.NFC.String(s); allKnown9(s) && !strings.Contains(want, "\u034f") && got != want {
			t.Fatalf("nfc(%+q) = %+q, x/text %+q", s, got, want)
		}
	})
}
