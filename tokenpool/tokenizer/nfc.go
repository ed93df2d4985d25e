package tokenizer

import (
	"slices"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// nfc is the NFC normalizer exactly as HuggingFace applies it. Its NFC
// (the Rust crate unicode-normalization-alignments 0.1.12) differs from
// golang.org/x/text/unicode/norm's in two ways:
//
//   - x/text writes the Stream-Safe Text Format (UAX #15): after 30
//     non-starters in a row it inserts U+034F and reorders each part on its
//     own; HuggingFace reorders the whole run and inserts nothing.
//   - Its data is Unicode 9.0.0 (x/text: 15.0.0): a character assigned
//     since then has combining class 0 and neither decomposes nor composes
//     (U+07FD, U+0C3C, the Arabic marks U+0898.., U+11938, ...).
//
// A string that x/text finds normal (its quick check fails on such a run)
// is normal for HuggingFace too: its own characters' data is the same in
// 9.0.0 (Unicode's stability policy), and a later character, a starter to
// the 9.0.0 data, only blocks reordering and composition, which a normal
// string does not need. So normal text, nearly all text, costs the quick
// check alone, as norm.NFC.String did; the rest goes through nfcSlow.
func nfc(s string) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	return nfcSlow(s)
}

// nfcChar is one code point of the decomposed text and its combining
// class in the 9.0.0 data.
type nfcChar struct {
	r   rune
	ccc uint8
}

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
const (
	hangulS0, hangulL0, hangulV0, hangulT0 = 0xAC00, 0x1100, 0x1161, 0x11A7
	hangulLN, hangulVN, hangulTN           = 19, 21, 28
	hangulN                                = hangulVN * hangulTN
	hangulSN                               = hangulLN * hangulN
)

// nfcSlow is the canonical algorithm over the whole string: full canonical
// decomposition, a stable sort of every run of non-starters by combining
// class, canonical composition; each with the 9.0.0 data (known9).
func nfcSlow(s string) string {
	if !utf8.ValidString(s) {
		// HuggingFace's text is a Rust String, always valid UTF-8 (the
		// request decoder replaced invalid bytes already); keep x/text's
		// answer rather than invent one.
		return norm.NFC.String(s)
	}
	cs := make([]nfcChar, 0, len(s))
	for _, r := range s {
		cs = decompose(cs, r)
	}
	for i := 0; i < len(cs); {
		if cs[i].ccc == 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(cs) && cs[j].ccc != 0 {
			j++
		}
		slices.SortStableFunc(cs[i:j], func(a, b nfcChar) int { return int(a.ccc) - int(b.ccc) })
		i = j
	}
	// Compose in place. starter: the index in out of the last starter, -1
	// before the first. last: the class of the last character kept after
	// it, -1 while every one since was composed into it (adjacent).
	out, starter, last := cs[:0], -1, -1
	for _, c := range cs {
		if starter >= 0 && (last < 0 || last < int(c.ccc)) {
			if r, ok := compose(out[starter].r, c.r); ok {
				out[starter].r = r
				continue
			}
		}
		if c.ccc == 0 {
			starter, last = len(out), -1
		} else {
			last = int(c.ccc)
		}
		out = append(out, c)
	}
	b := make([]byte, 0, len(s))
	for _, c := range out {
		b = utf8.AppendRune(b, c.r)
	}
	return string(b)
}

// known9 reports whether r has normalization data in Unicode 9.0.0.
func known9(r rune) bool { return unicode.Is(assigned9, r) }

// decompose appends the full canonical decomposition of r.
func decompose(cs []nfcChar, r rune) []nfcChar {
	if !known9(r) {
		return append(cs, nfcChar{r: r})
	}
	if i := r - hangulS0; i >= 0 && i < hangulSN {
		cs = append(cs, nfcChar{r: hangulL0 + i/hangulN}, nfcChar{r: hangulV0 + i%hangulN/hangulTN})
		if t := i % hangulTN; t != 0 {
			cs = append(cs, nfcChar{r: hangulT0 + t})
		}
		return cs
	}
	var buf [utf8.UTFMax]byte
	p := norm.NFD.Properties(utf8.AppendRune(buf[:0], r))
	d := p.Decomposition()
	if d == nil {
		return append(cs, nfcChar{r: r, ccc: p.CCC()})
	}
	for len(d) > 0 {
		r2, w := utf8.DecodeRune(d)
		cs = decompose(cs, r2)
		d = d[w:]
	}
	return cs
}

// compose returns the primary composite of a starter a and the character
// b, if there is one in the 9.0.0 data. x/text's NFC of the pair answers
// it: the pair's composite, when one exists, is the same in 15.0.0.
func compose(a, b rune) (rune, bool) {
	if !known9(a) || !known9(b) {
		return 0, false
	}
	if l, v := a-hangulL0, b-hangulV0; l >= 0 && l < hangulLN && v >= 0 && v < hangulVN {
		return hangulS0 + l*hangulN + v*hangulTN, true
	}
	if s, t := a-hangulS0, b-hangulT0; s >= 0 && s < hangulSN && s%hangulTN == 0 && t > 0 && t < hangulTN {
		return a + t, true
	}
	var in, out [4 * utf8.UTFMax]byte
	pair := utf8.AppendRune(utf8.AppendRune(in[:0], a), b)
	res := norm.NFC.Append(out[:0], pair...)
	r, w := utf8.DecodeRune(res)
	if w != len(res) {
		return 0, false
	}
	return r, true
}
