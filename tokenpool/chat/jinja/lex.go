package jinja

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tEOF tokKind = iota
	tData
	tVarBegin   // {{
	tVarEnd     // }}
	tBlockBegin // {%
	tBlockEnd   // %}
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string // data, name, operator, or a string literal's value
	num  int
	fnum float64
	pos  int // byte offset in the source
}

// lexer turns a template into tokens as jinja2's lexer does with
// transformers' settings: trim_blocks (the first newline after a block or
// comment tag is dropped), lstrip_blocks (spaces and tabs from a line's
// start to a block or comment tag are dropped), keep_trailing_newline off
// (one newline ending the template is dropped), "-" inside a tag's
// delimiter stripping all whitespace on its side and "+" turning
// lstrip_blocks off for its tag.
type lexer struct {
	src  string
	pos  int
	toks []token
	// lineStart: the last token ended a line (or none was read yet), which
	// lets lstrip_blocks strip a tag's indentation when the text before
	// it has no newline of its own.
	lineStart bool
}

func lex(src string) ([]token, error) {
	src = strings.TrimSuffix(src, "\n")
	lx := &lexer{src: src, lineStart: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tEOF, pos: len(src)})
	return lx.toks, nil
}

func (lx *lexer) fail(pos int, format string, args ...any) error {
	return newSyntaxError(lx.src, pos, format, args...)
}

// nextTag finds the next "{{", "{%" or "{#" from pos.
func nextTag(s string, pos int) int {
	for {
		i := strings.IndexByte(s[pos:], '{')
		if i < 0 || pos+i+1 >= len(s) {
			return -1
		}
		pos += i
		switch s[pos+1] {
		case '{', '%', '#':
			return pos
		}
		pos++
	}
}

// rawTag matches "{%[-+]? raw [-]?%}" (or endraw) at s[i:]: the length
// matched, the sign after "{%" and whether its end is "-%}".
func rawTag(s string, i int, word string) (n int, sign byte, minusEnd bool, ok bool) {
	if !strings.HasPrefix(s[i:], "{%") {
		return 0, 0, false, false
	}
	j := i + 2
	if j < len(s) && (s[j] == '-' || s[j] == '+') {
		sign = s[j]
		j++
	}
	j = skipSpace(s, j)
	if !strings.HasPrefix(s[j:], word) {
		return 0, 0, false, false
	}
	j += len(word)
	k := skipSpace(s, j)
	if k == j && k < len(s) && s[k] != '-' && s[k] != '%' && s[k] != '+' {
		return 0, 0, false, false
	}
	switch {
	case strings.HasPrefix(s[k:], "-%}"):
		return k + 3 - i, sign, true, true
	case strings.HasPrefix(s[k:], "+%}") && word == "endraw":
		return k + 3 - i, sign, false, true
	case strings.HasPrefix(s[k:], "%}"):
		return k + 2 - i, sign, false, true
	}
	return 0, 0, false, false
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !pySpace(r) {
			break
		}
		i += n
	}
	return i
}

// leading applies a tag's left whitespace control to the text before it.
func (lx *lexer) leading(text string, sign byte, lstrip bool) string {
	switch {
	case sign == '-':
		return strings.TrimRightFunc(text, pySpace)
	case sign != '+' && lstrip:
		l := strings.LastIndexByte(text, '\n') + 1
		if (l > 0 || lx.lineStart) && l < len(text) && strings.TrimLeftFunc(text[l:], pySpace) == "" {
			return text[:l]
		}
	}
	return text
}

func (lx *lexer) data(text string, pos int) {
	if text != "" {
		lx.toks = append(lx.toks, token{kind: tData, val: text, pos: pos})
	}
}

func (lx *lexer) run() error {
	s := lx.src
	for lx.pos < len(s) {
		at := nextTag(s, lx.pos)
		if at < 0 {
			lx.data(s[lx.pos:], lx.pos)
			return nil
		}
		text := s[lx.pos:at]
		var sign byte
		if at+2 < len(s) && (s[at+2] == '-' || s[at+2] == '+') {
			sign = s[at+2]
		}
		if n, rsign, minusEnd, ok := rawTag(s, at, "raw"); ok {
			lx.data(lx.leading(text, rsign, true), lx.pos)
			if err := lx.raw(at, at+n, minusEnd); err != nil {
				return err
			}
			continue
		}
		kind := s[at+1]
		lx.data(lx.leading(text, sign, kind != '{'), lx.pos)
		lx.pos = at + 2
		if sign != 0 {
			lx.pos++
		}
		switch kind {
		case '#':
			if err := lx.comment(at); err != nil {
				return err
			}
		case '{':
			lx.toks = append(lx.toks, token{kind: tVarBegin, pos: at})
			if err := lx.inside(at, '}'); err != nil {
				return err
			}
		case '%':
			lx.toks = append(lx.toks, token{kind: tBlockBegin, pos: at})
			if err := lx.inside(at, '%'); err != nil {
				return err
			}
		}
	}
	return nil
}

// tagEnd consumes what follows a tag's end at lx.pos as its right
// whitespace control says: "-" all whitespace, else trim (a block or
// comment) one newline, unless "+".
func (lx *lexer) tagEnd(minus, plus, trim bool) {
	s := lx.src
	start := lx.pos
	switch {
	case minus:
		lx.pos = skipSpace(s, lx.pos)
	case trim && !plus && lx.pos < len(s) && s[lx.pos] == '\n':
		lx.pos++
	}
	if lx.pos > start {
		lx.lineStart = s[lx.pos-1] == '\n'
	} else {
		lx.lineStart = false
	}
}

func (lx *lexer) comment(at int) error {
	s := lx.src
	i := strings.Index(s[lx.pos:], "#}")
	if i < 0 {
		return lx.fail(at, "missing end of comment tag")
	}
	end := lx.pos + i
	minus := end > lx.pos && s[end-1] == '-'
	plus := end > lx.pos && s[end-1] == '+'
	lx.pos = end + 2
	lx.tagEnd(minus, plus, true)
	return nil
}

func (lx *lexer) raw(at, bodyStart int, minusEnd bool) error {
	s := lx.src
	lx.pos = bodyStart
	lx.tagEnd(minusEnd, false, false)
	from := lx.pos
	for i := from; ; {
		j := strings.Index(s[i:], "{%")
		if j < 0 {
			return lx.fail(at, "missing end of raw directive")
		}
		i += j
		n, sign, minus, ok := rawTag(s, i, "endraw")
		if !ok {
			i += 2
			continue
		}
		lx.data(lx.leading(s[from:i], sign, true), from)
		lx.pos = i + n
		plus := s[i+n-3] == '+'
		lx.tagEnd(minus, plus, true)
		return nil
	}
}

// inside lexes a tag's expression tokens up to its end ("}}" for a
// variable, "%}" for a block); brackets open defer the end, as in jinja2.
func (lx *lexer) inside(at int, close byte) error {
	s := lx.src
	depth := 0
	for {
		lx.pos = skipSpace(s, lx.pos)
		if lx.pos >= len(s) {
			if close == '}' {
				return lx.fail(at, "unexpected end of template, expected end of print statement")
			}
			return lx.fail(at, "unexpected end of template, expected end of statement block")
		}
		p := lx.pos
		c := s[p]
		if depth == 0 {
			minus := c == '-' || c == '+'
			q := p
			if minus {
				q++
			}
			if q+1 < len(s) && s[q] == close && s[q+1] == '}' {
				if close == '}' {
					lx.toks = append(lx.toks, token{kind: tVarEnd, pos: p})
				} else {
					lx.toks = append(lx.toks, token{kind: tBlockEnd, pos: p})
				}
				lx.pos = q + 2
				lx.tagEnd(c == '-', c == '+', close == '%')
				return nil
			}
		}
		switch {
		case c == '\'' || c == '"':
			v, n, err := lexString(s[p:])
			if err != nil {
				return lx.fail(p, "%s", err.Error())
			}
			lx.toks = append(lx.toks, token{kind: tString, val: v, pos: p})
			lx.pos += n
		case c >= '0' && c <= '9':
			if err := lx.number(); err != nil {
				return err
			}
		case c == '_' || c < 0x80 && unicode.IsLetter(rune(c)):
			j := p + 1
			for j < len(s) && (s[j] == '_' || s[j] < 0x80 && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])))) {
				j++
			}
			lx.toks = append(lx.toks, token{kind: tName, val: s[p:j], pos: p})
			lx.pos = j
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(s[p:], o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(s[p:])
				return lx.fail(p, "unexpected char %q", r)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return lx.fail(p, "unexpected '%s'", op)
				}
				depth--
			}
			lx.toks = append(lx.toks, token{kind: tOp, val: op, pos: p})
			lx.pos += len(op)
		}
	}
}

// operators, longest first.
var operators = [...]string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

func (lx *lexer) number() error {
	s := lx.src
	p := lx.pos
	digits := func(j int) int {
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '_' && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9') {
			j++
		}
		return j
	}
	j := digits(p)
	isFloat := false
	if j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' && (p == 0 || s[p-1] != '.') {
		j = digits(j + 1)
		isFloat = true
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && s[k] >= '0' && s[k] <= '9' {
			j = digits(k)
			isFloat = true
		}
	}
	text := strings.ReplaceAll(s[p:j], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !isRange(err) {
			return lx.fail(p, "invalid number %q", s[p:j])
		}
		lx.toks = append(lx.toks, token{kind: tFloat, fnum: f, pos: p})
	} else {
		n, err := strconv.Atoi(text)
		if err != nil {
			return lx.fail(p, "integer %s out of range", s[p:j])
		}
		lx.toks = append(lx.toks, token{kind: tInt, num: n, pos: p})
	}
	lx.pos = j
	return nil
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// lexString reads a quoted string literal at the start of s with Python's
// escapes (jinja2 decodes them with "unicode-escape"; an unknown escape
// stays as written). It returns the value and the length read.
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); {
		c := s[i]
		switch {
		case c == q:
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s) {
			break
		}
		e := s[i+1]
		i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			n, j := int(e-'0'), i
			for j < len(s) && j < i+2 && s[j] >= '0' && s[j] <= '7' {
				n = n*8 + int(s[j]-'0')
				j++
			}
			i = j
			b.WriteRune(rune(n))
		case 'x', 'u', 'U':
			w := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+w > len(s) {
				return "", 0, errorf("truncated \\%cXX escape", e)
			}
			n, err := strconv.ParseUint(s[i:i+w], 16, 32)
			if err != nil || n > unicode.MaxRune {
				return "", 0, errorf("invalid \\%c escape", e)
			}
			b.WriteRune(rune(n))
			i += w
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, errorf("unterminated string")
}
