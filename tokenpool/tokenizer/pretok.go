package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// splitPattern is a hand-written matcher for one of the Split regexes that
// real byte-level BPE models use. Go's regexp lacks the (?!\S) lookahead
// they need, and regex engines that have it were measured far slower (see
// DESIGN.md § Tokenizer); these patterns are simple enough to match by hand, exactly.
type splitPattern struct {
	// maxDigits is the {1,n} bound of the \p{N} alternative: 3 for Llama-3,
	// 1 for Qwen.
	maxDigits int
	// gpt2: GPT-2's pattern instead, which the ByteLevel pre-tokenizer
	// applies with use_regex (see matchGPT2).
	gpt2 bool
	// fn: another pattern's matcher (classes.go), returning the length
	// of the match at i, 0 for none.
	fn func(s string, i int) int
	// partial: some positions match no alternative (DeepSeek-V3's
	// patterns), so the pattern runs in the general splitter, which
	// walks over them.
	partial bool
	// asciiStarts: the ASCII bytes a match can start with, for a partial
	// pattern (nil: any); the splitter passes over the others without
	// calling fn.
	asciiStarts *[128]bool
}

// asciiDigits and asciiNone are asciiStarts of \p{N}{1,3} and of
// DeepSeek-V3's CJK class.
var asciiDigits, asciiNone = func() (d, n *[128]bool) {
	d = new([128]bool)
	for c := '0'; c <= '9'; c++ {
		d[c] = true
	}
	return d, new([128]bool)
}()

// The patterns matched by hand, by their exact regex text: Llama-3, Qwen,
// gpt-oss (o200k) and DeepSeek-V3's three. Others run on regexp2
// (regex.go); TestHandMatchersAgree and FuzzHandMatchers check these
// against it.
var knownSplits = map[string]splitPattern{
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`: {fn: matchO200k},
	`\p{N}{1,3}`: {fn: matchDSDigits, partial: true, asciiStarts: asciiDigits},
	"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+": {fn: matchDSCJK, partial: true, asciiStarts: asciiNone},
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+": {fn: matchDSWords, partial: true},
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                                   {maxDigits: 3},
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                                        {maxDigits: 1},
}

// ASCII character classes, precomputed: most text is ASCII, and the
// unicode tables cost a call and a range search per rune.
const (
	classL = 1 << iota
	classN
	classS
)

var asciiClass = func() (c [128]uint8) {
	for r := rune(0); r < 128; r++ {
		if unicode.IsLetter(r) {
			c[r] |= classL
		}
		if unicode.IsNumber(r) {
			c[r] |= classN
		}
		if unicode.IsSpace(r) {
			c[r] |= classS
		}
	}
	return c
}()

// isL, isN and isS keep their non-ASCII paths out of line, so that they
// inline into the matchers' loops; so does at, though it stays (just) over
// the inlining budget.
func isL(r rune) bool {
	if uint32(r) < 128 {
		return asciiClass[r]&classL != 0
	}
	return isLetter(r)
}

func isN(r rune) bool {
	if uint32(r) < 128 {
		return asciiClass[r]&classN != 0
	}
	return isNumber(r)
}

func isS(r rune) bool {
	if uint32(r) < 128 {
		return asciiClass[r]&classS != 0
	}
	return isSpace(r)
}

// isLetter and isNumber are \p{L} and \p{N} of HuggingFace's Oniguruma,
// Unicode 16.0.0 (unicode_tables.go): Go's unicode package is 15.0.0, and
// the letters and digits added since (CJK Extension I, Garay, Todhri, the
// outlined digits U+1CCF0..) would split differently. Latin-1 is the same
// in both, and Go's table for it is a direct lookup.
//
//go:noinline
func isLetter(r rune) bool {
	if uint32(r) <= unicode.MaxLatin1 {
		return unicode.IsLetter(r)
	}
	return unicode.Is(letter16, r)
}

//go:noinline
func isNumber(r rune) bool {
	if uint32(r) <= unicode.MaxLatin1 {
		return unicode.IsNumber(r)
	}
	return unicode.Is(number16, r)
}

// isNumeric is Rust's char::is_numeric, which the Digits pre-tokenizer
// calls: General_Category N of Unicode 17.0.0, the version of the Rust
// standard library the reference was built with.
func isNumeric(r rune) bool {
	if uint32(r) < 128 {
		return asciiClass[r]&classN != 0
	}
	return unicode.Is(numeric17, r)
}

//go:noinline
func isSpace(r rune) bool { return unicode.IsSpace(r) }

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

func at(s string, i int) (rune, int) {
	if i < len(s) && s[i] < utf8.RuneSelf {
		return rune(s[i]), 1
	}
	return atSlow(s, i)
}

//go:noinline
func atSlow(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(s[i:])
}

// next returns the length of the first piece of s (non-empty s), as the
// regex with "Isolated" behaviour would cut it: every byte of s ends up in
// exactly one piece.
func (p splitPattern) next(s string) int {
	if n := p.match(s, 0); n > 0 {
		return n
	}
	// Unreachable for these patterns: every rune matches some
	// alternative. Keep one rune as its own piece regardless.
	_, n := at(s, 0)
	return n
}

// match returns the length of the regex match at i (the first alternative
// that matches wins, as in the regex's ordered alternation).
func (p splitPattern) match(s string, i int) int {
	if p.fn != nil {
		return p.fn(s, i)
	}
	if p.gpt2 {
		return matchGPT2(s, i)
	}
	// Fast paths for the commonest pieces of prose, an ASCII word with or
	// without a space in front: the alternatives before
	// [^\r\n\p{L}\p{N}]?\p{L}+ cannot match there.
	if c := s[i]; c < utf8.RuneSelf {
		if asciiClass[c]&classL != 0 {
			return 1 + letters(s, i+1)
		}
		if c == ' ' && i+1 < len(s) && s[i+1] < utf8.RuneSelf && asciiClass[s[i+1]]&classL != 0 {
			return 2 + letters(s, i+2)
		}
	}
	r, w := at(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s, i+w); n > 0 {
			return w + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if !isCRLF(r) && !isL(r) && !isN(r) {
		if r2, w2 := at(s, i+w); r2 >= 0 && isL(r2) {
			return w + w2 + letters(s, i+w+w2)
		}
	}
	if isL(r) {
		return w + letters(s, i+w)
	}
	// \p{N}{1,n}
	if isN(r) {
		n := w
		for k := 1; k < p.maxDigits; k++ {
			r2, w2 := at(s, i+n)
			if r2 < 0 || !isN(r2) {
				break
			}
			n += w2
		}
		return n
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r == ' ' {
		j += w
	}
	if n := others(s, j); n > 0 {
		j += n
		for {
			r2, w2 := at(s, j)
			if r2 < 0 || !isCRLF(r2) {
				break
			}
			j += w2
		}
		return j - i
	}
	if !isS(r) {
		return 0
	}
	// The whitespace run from i, and where its last CR or LF ends.
	end, lastNL, lastW := i, -1, 0
	for {
		if end < len(s) && s[end] < utf8.RuneSelf {
			c := s[end]
			if asciiClass[c]&classS == 0 {
				break
			}
			if c == '\r' || c == '\n' {
				lastNL = end + 1
			}
			lastW = 1
			end++
			continue
		}
		r2, w2 := at(s, end)
		if r2 < 0 || !isS(r2) {
			break
		}
		if isCRLF(r2) {
			lastNL = end + w2
		}
		lastW = w2
		end += w2
	}
	// \s*[\r\n]+: greedy \s* backs off to the last CR/LF of the run.
	if lastNL > 0 {
		return lastNL - i
	}
	// \s+(?!\S): the whole run at the end of input, else all but its last
	// rune, if that leaves one.
	if end == len(s) {
		return end - i
	}
	if end-lastW > i {
		return end - lastW - i
	}
	// \s+
	return end - i
}

// contraction matches s|t|re|ve|m|ll|d case-insensitively at i (Unicode
// simple case folding: s also matches U+017F LATIN SMALL LETTER LONG S).
func contraction(s string, i int) int {
	r, w := at(s, i)
	switch unicode.ToLower(r) {
	case 's', 'ſ', 't', 'm', 'd':
		return w
	case 'r', 'v':
		if r2, w2 := at(s, i+w); unicode.ToLower(r2) == 'e' {
			return w + w2
		}
	case 'l':
		if r2, w2 := at(s, i+w); unicode.ToLower(r2) == 'l' {
			return w + w2
		}
	}
	return 0
}

// letters matches \p{L}* at i, ASCII bytes without decoding.
func letters(s string, i int) int {
	j := i
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if asciiClass[c]&classL == 0 {
				break
			}
			j++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if !isLetter(r) {
			break
		}
		j += w
	}
	return j - i
}

// others matches [^\s\p{L}\p{N}]* at i.
func others(s string, i int) int {
	j := i
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if asciiClass[c] != 0 {
				break
			}
			j++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if isS(r) || isL(r) || isN(r) {
			break
		}
		j += w
	}
	return j - i
}

// gpt2Split is GPT-2's pattern, which HuggingFace's ByteLevel
// pre-tokenizer applies when use_regex is true:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
var gpt2Split = splitPattern{gpt2: true}

// matchGPT2 returns the length of GPT-2's pattern's match at i. Unlike the
// Llama-3 pattern its contractions are case-sensitive, a letter, digit or
// other run takes only a space (not any non-letter) in front, digit runs
// are unbounded, and newlines get no alternative of their own.
func matchGPT2(s string, i int) int {
	r, w := at(s, i)
	// 's|'t|'re|'ve|'m|'ll|'d
	if r == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return 3
			}
		}
	}
	// ' ?' in front of the next three alternatives.
	j, r2, w2 := i, r, w
	if r == ' ' {
		j = i + w
		r2, w2 = at(s, j)
	}
	switch {
	case r2 < 0:
	case isL(r2): // ' ?\p{L}+'
		return j + w2 + letters(s, j+w2) - i
	case isN(r2): // ' ?\p{N}+'
		return j + w2 + digits(s, j+w2) - i
	case !isS(r2): // ' ?[^\s\p{L}\p{N}]+'
		return j + others(s, j) - i
	}
	if !isS(r) {
		return 0
	}
	end, lastW := i, 0
	for {
		r3, w3 := at(s, end)
		if r3 < 0 || !isS(r3) {
			break
		}
		lastW = w3
		end += w3
	}
	// \s+(?!\S): the whole run at the end of input, else all but its last
	// rune, if that leaves one; else \s+.
	if end < len(s) && end-lastW > i {
		return end - lastW - i
	}
	return end - i
}

func digits(s string, i int) int {
	n := 0
	for {
		r, w := at(s, i+n)
		if r < 0 || !isN(r) {
			return n
		}
		n += w
	}
}

// nextDigits returns the length of the first piece of s (non-empty) as the
// Digits pre-tokenizer cuts it: a run of numeric characters (Rust's
// char::is_numeric: Nd, Nl and No, see isNumeric), or with individual one
// numeric character, or a run of other characters.
func nextDigits(s string, individual bool) int {
	r, w := at(s, 0)
	if isNumeric(r) {
		if individual {
			return w
		}
		n := w
		for {
			r2, w2 := at(s, n)
			if r2 < 0 || !isNumeric(r2) {
				return n
			}
			n += w2
		}
	}
	n := w
	for {
		r2, w2 := at(s, n)
		if r2 < 0 || isNumeric(r2) {
			return n
		}
		n += w2
	}
}
