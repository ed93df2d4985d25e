package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// gcChange is a run of code points whose Unicode 16.0.0 General_Category
// (gc) is not the one Go's unicode package (15.0.0) gives them.
type gcChange struct {
	lo, hi rune
	gc     string
}

// regexPattern is a Split regex that no hand matcher knows, run on
// github.com/dlclark/regexp2 (a backtracking engine with lookaround, like
// HuggingFace's Oniguruma). Two differences between the engines matter and
// are bridged here:
//
//   - Unicode version: regexp2 classifies with Go's tables (15.0.0),
//     HuggingFace with 16.0.0's. The pattern runs on a copy of the text in
//     which each code point whose General_Category changed since
//     (gc16Changes) is replaced by a proxy: a code point that has, in Go's
//     tables, the 16.0.0 category of the one it stands for, and that no
//     literal of the pattern names. Classes are all category-based or
//     literal (anything else is refused), so the proxy matches exactly
//     where the original does in HuggingFace.
//   - Case folding: regexp2 lowercases, Oniguruma folds (s also matches
//     U+017F LONG S, k the KELVIN SIGN). (?i:...) groups of plain letters
//     are rewritten into explicit classes with Oniguruma's folds; the
//     inline flag is refused anywhere else.
//
// Constructs whose meaning differs between the two (^ and $, which are
// line anchors in Oniguruma; \w, \b; POSIX brackets; class set
// operations; {,n}; possessive quantifiers) are refused at load.
//
// A regexp2.Regexp is safe for concurrent use: it pools its matchers
// under a mutex. No match timeout is set (a timeout would cut a match
// short, which is not exact), so regexp2 starts no clock goroutine.
type regexPattern struct {
	re    *regexp2.Regexp
	proxy map[string]rune // 16.0.0 category -> stand-in in Go's tables
}

// newRegexPattern translates and compiles an Oniguruma pattern.
func newRegexPattern(src string) (*regexPattern, error) {
	tr, lits, err := translateRegex(src)
	if err != nil {
		return nil, fmt.Errorf("unsupported Split regex %q: %w", src, err)
	}
	re, err := regexp2.Compile(tr, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("unsupported Split regex %q: %w", src, err)
	}
	p := &regexPattern{re: re, proxy: map[string]rune{}}
	for _, c := range gc16Changes {
		if _, ok := p.proxy[c.gc]; ok {
			continue
		}
		px, ok := pickProxy(c.gc, lits)
		if !ok {
			return nil, fmt.Errorf("unsupported Split regex %q: its literals cover every code point of category %s", src, c.gc)
		}
		p.proxy[c.gc] = px
	}
	return p, nil
}

// pickProxy returns the highest code point of category gc in Go's tables
// that no literal range of the pattern contains.
func pickProxy(gc string, lits [][2]rune) (rune, bool) {
	tab := unicode.Categories[gc]
	if tab == nil {
		return 0, false
	}
	in := func(r rune) bool {
		for _, l := range lits {
			if r >= l[0] && r <= l[1] {
				return true
			}
		}
		return false
	}
	for i := len(tab.R32) - 1; i >= 0; i-- {
		rg := tab.R32[i]
		for r := rune(rg.Hi); r >= rune(rg.Lo); r -= rune(rg.Stride) {
			if !in(r) {
				return r, true
			}
		}
	}
	for i := len(tab.R16) - 1; i >= 0; i-- {
		rg := tab.R16[i]
		for r := rune(rg.Hi); r >= rune(rg.Lo); r -= rune(rg.Stride) {
			if !in(r) {
				return r, true
			}
		}
	}
	return 0, false
}

// gc16 returns the Unicode 16.0.0 category of r if it differs from Go's.
func gc16(r rune) (string, bool) {
	if r < 0x0897 {
		return "", false
	}
	i, ok := slices.BinarySearchFunc(gc16Changes, r, func(c gcChange, r rune) int {
		switch {
		case c.hi < r:
			return -1
		case c.lo > r:
			return 1
		}
		return 0
	})
	if !ok {
		return "", false
	}
	return gc16Changes[i].gc, true
}

// find calls emit for each match in s, in order, as Oniguruma's find_iter
// (through HuggingFace's SysRegex) yields them: leftmost-first, non
// overlapping, and an empty match right where the previous match ended is
// skipped by advancing one character.
func (p *regexPattern) find(s string, emit func(start, end int)) {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1) // rune index -> byte offset
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if gc, ok := gc16(r); ok {
			r = p.proxy[gc]
		}
		runes = append(runes, r)
		offs = append(offs, i)
		i += w
	}
	offs = append(offs, len(s))
	last, lastMatchEnd := 0, -1
	for last <= len(runes) {
		m, err := p.re.FindRunesMatchStartingAt(runes, last)
		if err != nil || m == nil {
			// err: only a timeout, and none is set.
			return
		}
		st, en := m.Index, m.Index+m.Length
		if st == en && en == lastMatchEnd {
			last++
			continue
		}
		last, lastMatchEnd = en, en
		emit(offs[st], offs[en])
		if st == en {
			// regexp2 would find the same empty match again; the
			// check above then advances.
			continue
		}
	}
}

// translateRegex rewrites an Oniguruma pattern into regexp2 syntax, or
// says why it cannot. lits returns the literal code points and ranges the
// pattern names (for pickProxy).
func translateRegex(src string) (string, [][2]rune, error) {
	var b strings.Builder
	var lits [][2]rune
	rs := []rune(src)
	inClass := false
	classStart := 0
	lastLit := false   // the class item just written is a literal (a range may follow)
	lastQuant := false // the token just written is a quantifier
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		wasLit, wasQuant := lastLit, lastQuant
		lastLit, lastQuant = false, false
		switch {
		case r == '\\':
			if i+1 >= len(rs) {
				return "", nil, fmt.Errorf("trailing backslash")
			}
			e := rs[i+1]
			switch {
			case e == 'p' || e == 'P':
				j := i + 2
				if j >= len(rs) || rs[j] != '{' {
					return "", nil, fmt.Errorf("\\%c without {name}", e)
				}
				k := j
				for k < len(rs) && rs[k] != '}' {
					k++
				}
				if k == len(rs) {
					return "", nil, fmt.Errorf("unterminated \\%c{", e)
				}
				name := string(rs[j+1 : k])
				if _, ok := unicode.Categories[name]; !ok || name == "C" {
					// C: Go's lacks the unassigned code points (Cn),
					// which Oniguruma's holds.
					return "", nil, fmt.Errorf("unsupported property \\%c{%s} (only General_Category names but C are)", e, name)
				}
				b.WriteString(string(rs[i : k+1]))
				i = k
			case e == 's' || e == 'S':
				// White_Space in both (regexp2: unicode.IsSpace, which
				// did not change in 15.1-16.0).
				b.WriteRune('\\')
				b.WriteRune(e)
				i++
			case e == 'd':
				b.WriteString(`\p{Nd}`)
				i++
			case e == 'D':
				b.WriteString(`\P{Nd}`)
				i++
			default:
				c, n, err := literalAt(rs, i)
				if err != nil {
					return "", nil, err
				}
				lits = append(lits, [2]rune{c, c})
				writeLiteral(&b, c)
				i += n - 1
				lastLit = inClass
				continue
			}
		case inClass:
			switch r {
			case '[':
				if i+1 < len(rs) && rs[i+1] == ':' {
					return "", nil, fmt.Errorf("unsupported POSIX bracket in a class")
				}
				return "", nil, fmt.Errorf("unsupported nested class (set operations)")
			case ']':
				if i == classStart {
					return "", nil, fmt.Errorf("unsupported ']' first in a class")
				}
				inClass = false
				b.WriteRune(r)
			case '&':
				if i+1 < len(rs) && rs[i+1] == '&' {
					return "", nil, fmt.Errorf("unsupported class intersection &&")
				}
				lits = append(lits, [2]rune{r, r})
				b.WriteRune(r)
			case '-':
				// A range a-b of two literals: widen the last literal.
				if wasLit && i+1 < len(rs) && rs[i+1] != ']' {
					hi, n, err := literalAt(rs, i+1)
					if err != nil {
						return "", nil, fmt.Errorf("class range: %w", err)
					}
					lits[len(lits)-1][1] = hi
					b.WriteRune('-')
					writeLiteral(&b, hi)
					i += n
					lastLit = false
					continue
				}
				b.WriteString(`\-`)
			default:
				lits = append(lits, [2]rune{r, r})
				writeLiteral(&b, r)
				lastLit = true
				continue
			}
		case r == '[':
			inClass = true
			b.WriteRune(r)
			if i+1 < len(rs) && rs[i+1] == '^' {
				b.WriteRune('^')
				i++
			}
			classStart = i + 1
		case r == '(' && i+1 < len(rs) && rs[i+1] == '?':
			rest := string(rs[i:])
			switch {
			case strings.HasPrefix(rest, "(?:"), strings.HasPrefix(rest, "(?="), strings.HasPrefix(rest, "(?!"),
				strings.HasPrefix(rest, "(?<="), strings.HasPrefix(rest, "(?<!"):
				b.WriteString("(?")
				i++
			case strings.HasPrefix(rest, "(?i:"):
				k := i + 4
				for k < len(rs) && rs[k] != ')' {
					k++
				}
				if k == len(rs) {
					return "", nil, errors.New("unterminated group (?i:...)")
				}
				body, err := foldGroup(rs[i+4 : k])
				if err != nil {
					return "", nil, err
				}
				for _, c := range rs[i+4 : k] {
					lits = append(lits, [2]rune{c, c})
				}
				b.WriteString("(?:" + body + ")")
				i = k
			default:
				return "", nil, fmt.Errorf("unsupported group %.6q", rest)
			}
		case r == '^' || r == '$':
			return "", nil, fmt.Errorf("unsupported anchor %c (a line anchor in Oniguruma)", r)
		case r == '{' && i+1 < len(rs) && rs[i+1] == ',':
			return "", nil, fmt.Errorf("unsupported quantifier {,n}")
		case r == '+' && wasQuant:
			return "", nil, fmt.Errorf("unsupported possessive quantifier")
		case r == '*' || r == '+' || r == '?':
			// A ? right after a quantifier makes it lazy, in both.
			lastQuant = !(r == '?' && wasQuant)
			b.WriteRune(r)
		case r == '{':
			k := i + 1
			for k < len(rs) && (rs[k] >= '0' && rs[k] <= '9' || rs[k] == ',') {
				k++
			}
			if k == len(rs) || rs[k] != '}' || k == i+1 {
				return "", nil, fmt.Errorf("unsupported literal { (escape it)")
			}
			b.WriteString(string(rs[i : k+1]))
			i = k
			lastQuant = true
		case r == '(' || r == ')' || r == '|' || r == '.':
			b.WriteRune(r)
		case r == ' ' || r == '#':
			// regexp2 without IgnorePatternWhitespace takes them as
			// literals, as Oniguruma does.
			lits = append(lits, [2]rune{r, r})
			b.WriteRune(r)
		default:
			lits = append(lits, [2]rune{r, r})
			b.WriteRune(r)
		}
	}
	if inClass {
		return "", nil, fmt.Errorf("unterminated class")
	}
	return b.String(), lits, nil
}

// literalAt parses the literal at rs[i] (a character, or an escape that
// stands for one: \t \n \r \f \v, \uHHHH, \xHH, \x{H...}, an escaped
// ASCII punctuation or symbol) and returns it and its length in runes.
func literalAt(rs []rune, i int) (rune, int, error) {
	if rs[i] != '\\' {
		if rs[i] == '[' || rs[i] == ']' {
			return 0, 0, fmt.Errorf("unsupported %c here", rs[i])
		}
		return rs[i], 1, nil
	}
	if i+1 >= len(rs) {
		return 0, 0, fmt.Errorf("trailing backslash")
	}
	e := rs[i+1]
	hex := func(from, n int) (rune, bool) {
		if from+n > len(rs) || n == 0 {
			return 0, false
		}
		v, err := strconv.ParseUint(string(rs[from:from+n]), 16, 32)
		if err != nil || v > unicode.MaxRune {
			return 0, false
		}
		return rune(v), true
	}
	switch {
	case e == 't':
		return '\t', 2, nil
	case e == 'n':
		return '\n', 2, nil
	case e == 'r':
		return '\r', 2, nil
	case e == 'f':
		return '\f', 2, nil
	case e == 'v':
		return '\v', 2, nil
	case e == 'u':
		if c, ok := hex(i+2, 4); ok {
			return c, 6, nil
		}
	case e == 'x' && i+2 < len(rs) && rs[i+2] == '{':
		k := i + 3
		for k < len(rs) && rs[k] != '}' {
			k++
		}
		if c, ok := hex(i+3, k-i-3); ok && k < len(rs) {
			return c, k - i + 1, nil
		}
	case e == 'x':
		if c, ok := hex(i+2, 2); ok {
			return c, 4, nil
		}
	case e < utf8.RuneSelf && !isAlnumASCII(byte(e)):
		return e, 2, nil
	}
	return 0, 0, fmt.Errorf("unsupported escape \\%c", e)
}

// writeLiteral writes c for regexp2: its metacharacters escaped, the rest
// (control characters too) as themselves.
func writeLiteral(b *strings.Builder, c rune) {
	if strings.ContainsRune(`\.*+?()[]{}|^$-#`, c) {
		b.WriteRune('\\')
	}
	b.WriteRune(c)
}

func isAlnumASCII(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// foldGroup rewrites the body of a (?i:...) group of plain literals and
// alternations into classes with Oniguruma's simple case folds. Letter
// pairs that Unicode folds to one character (ss -> ß, st, ff, fi, fl
// ligatures) are refused: Oniguruma matches those too.
func foldGroup(body []rune) (string, error) {
	var b strings.Builder
	for i, c := range body {
		switch {
		case c == '|' || c == '\'' || c == '-' || c == ' ' || c == '"':
			b.WriteRune(c)
		case c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'):
			l := unicode.ToLower(c)
			if i+1 < len(body) {
				pair := string([]rune{l, unicode.ToLower(body[i+1])})
				switch pair {
				case "ss", "st", "ff", "fi", "fl":
					return "", fmt.Errorf("unsupported (?i:...) with %q, which folds to one character", pair)
				}
			}
			b.WriteRune('[')
			b.WriteRune(l)
			b.WriteRune(unicode.ToUpper(l))
			switch l {
			case 's':
				b.WriteRune('ſ')
			case 'k':
				b.WriteRune('\u212a')
			}
			b.WriteRune(']')
		default:
			return "", fmt.Errorf("unsupported (?i:...) holding %q (only letters, ' and | are)", c)
		}
	}
	return b.String(), nil
}
