package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of Unicode 16.0.0 for the hand matchers of the o200k
// (gpt-oss) and DeepSeek-V3 patterns, which name General_Category subsets
// (\p{Lu}, \p{Ll}, \p{M}, \p{P}, \p{S}, ...): Go's 15.0.0 categories with
// gc16Changes applied, as the regexp2 path sees them (regex.go).
const (
	cUp    = 1 << iota // Lu, Lt
	cLow               // Ll
	cLmo               // Lm, Lo
	cM                 // M
	cN                 // N
	cP                 // P
	cSym               // S
	cSpace             // White_Space

	cL = cUp | cLow | cLmo
)

// bmpClass holds the classes of the Basic Multilingual Plane, where almost
// all text lies: one load instead of several table searches per rune.
// Built once at init, immutable after.
var bmpClass = func() *[0x10000]uint8 {
	var t [0x10000]uint8
	for r := rune(0); r < 0x10000; r++ {
		t[r] = classOfSlow(r)
	}
	return &t
}()

// classOf returns the classes of r (utf8.RuneError for invalid bytes, as
// the matchers decode them).
func classOf(r rune) uint8 {
	if uint32(r) < 0x10000 {
		return bmpClass[r]
	}
	return classOfSlow(r)
}

func classOfSlow(r rune) uint8 {
	var c uint8
	if unicode.Is(space16, r) {
		c |= cSpace
	}
	gc, ok := gc16(r)
	in := func(cat string) bool {
		if ok {
			return gc == cat || (len(cat) == 1 && gc[0] == cat[0])
		}
		return unicode.Is(unicode.Categories[cat], r)
	}
	switch {
	case in("Lu"), in("Lt"):
		c |= cUp
	case in("Ll"):
		c |= cLow
	case in("Lm"), in("Lo"):
		c |= cLmo
	case in("M"):
		c |= cM
	case in("N"):
		c |= cN
	case in("P"):
		c |= cP
	case in("S"):
		c |= cSym
	}
	return c
}

// classAt decodes the rune at s[i] and returns its classes and width;
// width 0 at the end of s.
func classAt(s string, i int) (rune, uint8, int) {
	if i >= len(s) {
		return -1, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), bmpClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return r, classOf(r), w
}

// runOf returns the end of the run of runes from i whose classes meet mask.
func runOf(s string, i int, mask uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if bmpClass[c]&mask == 0 {
				return i
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if classOf(r)&mask == 0 {
			return i
		}
		i += w
	}
	return i
}

// runNot returns the end of the run of runes from i whose classes miss mask.
func runNot(s string, i int, mask uint8) int {
	for i < len(s) {
		_, c, w := classAt(s, i)
		if c&mask != 0 {
			return i
		}
		i += w
	}
	return i
}

// matchO200k matches gpt-oss's (o200k's) pattern at i, by hand:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Every position matches one alternative.
func matchO200k(s string, i int) int {
	const up, low = cUp | cLmo | cM, cLow | cLmo | cM
	// Fast path: an ASCII lowercase word, or a space then one.
	if c := s[i]; c >= 'a' && c <= 'z' {
		return o200kTail(s, runOf(s, i+1, low)) - i
	} else if c == ' ' && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z' {
		return o200kTail(s, runOf(s, i+2, low)) - i
	}
	r, c, w := classAt(s, i)
	// The first two alternatives, with and then without the optional
	// prefix (it can be a mark, which the letter runs also take).
	starts := [2]int{-1, i}
	if c&(cL|cN) == 0 && r != '\r' && r != '\n' {
		starts[0] = i + w
	}
	for _, st := range starts {
		if st < 0 {
			continue
		}
		// U*L+: the longest U* after which an L follows; greedy U*
		// gives back one rune at a time.
		j := runOf(s, st, up)
		if _, c2, _ := classAt(s, j); c2&low != 0 {
			return o200kTail(s, runOf(s, j, low)) - i
		}
		// The last rune of the U run that is also in L (Lm, Lo, M),
		// alone: the runes after it in the run are Lu or Lt.
		for q := j; q > st; {
			r2, w2 := utf8.DecodeLastRuneInString(s[st:q])
			q -= w2
			if classOf(r2)&low != 0 {
				end := q + w2
				if end == j {
					end = o200kTail(s, end)
				}
				return end - i
			}
		}
	}
	for _, st := range starts {
		// U+L*: U+ as long as it goes, then L*.
		if st < 0 {
			continue
		}
		if j := runOf(s, st, up); j > st {
			return o200kTail(s, runOf(s, j, low)) - i
		}
	}
	// \p{N}{1,3}
	if c&cN != 0 {
		return matchDSDigits(s, i)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	j := i
	if r == ' ' {
		j += w
	}
	if k := runNot(s, j, cSpace|cL|cN); k > j {
		for k < len(s) && (s[k] == '\r' || s[k] == '\n' || s[k] == '/') {
			k++
		}
		return k - i
	}
	return matchSpaces(s, i)
}

// o200kTail matches the optional contraction at i: the end of the match.
func o200kTail(s string, i int) int {
	if i < len(s) && s[i] == '\'' {
		if n := contraction(s, i+1); n > 0 {
			return i + 1 + n
		}
	}
	return i
}

// matchSpaces matches \s*[\r\n]+|\s+(?!\S)|\s+ at i, or returns 0.
func matchSpaces(s string, i int) int {
	if _, c, _ := classAt(s, i); c&cSpace == 0 {
		return 0
	}
	end, lastNL, lastW := i, -1, 0
	for {
		r, c, w := classAt(s, end)
		if c&cSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end + w
		}
		lastW = w
		end += w
	}
	if lastNL > 0 {
		return lastNL - i
	}
	if end == len(s) || end-lastW <= i {
		return end - i
	}
	return end - lastW - i
}

// DeepSeek-V3's three Split regexes, each Isolated, by hand. Not every
// position matches them: the splitter walks over the rest.

// matchDSDigits matches \p{N}{1,3} at i.
func matchDSDigits(s string, i int) int {
	n := 0
	for k := 0; k < 3; k++ {
		_, c, w := classAt(s, i+n)
		if c&cN == 0 {
			break
		}
		n += w
	}
	return n
}

// matchDSCJK matches [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+ at i.
func matchDSCJK(s string, i int) int {
	j := i
	for j < len(s) {
		if s[j] < utf8.RuneSelf {
			break
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if !(r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x30ff) {
			break
		}
		j += w
	}
	return j - i
}

// matchDSWords matches at i:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//	| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func matchDSWords(s string, i int) int {
	r, c, w := classAt(s, i)
	// ASCII punctuation then ASCII letters.
	if r < utf8.RuneSelf && r > ' ' && r < 0x7f && !isAlnumASCII(byte(r)) {
		j := i + 1
		for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
			j++
		}
		if j > i+1 {
			return j - i
		}
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: with the prefix, then without
	// (the prefix may be a mark).
	if c&(cL|cP|cSym) == 0 && r != '\r' && r != '\n' {
		if j := runOf(s, i+w, cL|cM); j > i+w {
			return j - i
		}
	}
	if j := runOf(s, i, cL|cM); j > i {
		return j - i
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*'
	j := i
	if r == ' ' {
		j += w
	}
	if k := runOf(s, j, cP|cSym); k > j {
		for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
			k++
		}
		return k - i
	}
	return matchSpaces(s, i)
}
