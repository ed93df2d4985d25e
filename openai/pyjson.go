package openai

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/saltus-lb/saltus/internal/jsonscan"
)

// vLLM writes a tool_use block's input as the tool call's arguments with
// Python's json.dumps (entrypoints/anthropic/serving.py): ", " and ": "
// between items, non-ASCII escaped (ensure_ascii), numbers as Python
// reads and writes them. A template that renders the arguments string as
// it is (harmony) sees that text; appendPyJSON writes it from the body's
// bytes. Not reproduced: an object with a repeated key is written with
// each occurrence (Python keeps one, the last value at the first place):
// finding them would cost a set of keys per object.

// appendPyJSON appends the value at b[at] (checked JSON) as json.dumps
// writes it.
func appendPyJSON(dst, b []byte, at int) []byte {
	switch {
	case jsonscan.Is(b, at, '{'):
		dst = append(dst, '{')
		i := jsonscan.SkipWS(b, at+1)
		first := true
		for i < len(b) && b[i] == '"' {
			if !first {
				dst = append(dst, ", "...)
			}
			first = false
			raw, _, end := jsonscan.Str(b, i)
			dst = appendPyString(dst, raw)
			dst = append(dst, ": "...)
			v := jsonscan.SkipWS(b, jsonscan.SkipWS(b, end)+1) // past the colon
			dst = appendPyJSON(dst, b, v)
			i = jsonscan.SkipWS(b, jsonscan.SkipValue(b, v))
			if i < len(b) && b[i] == ',' {
				i = jsonscan.SkipWS(b, i+1)
			}
		}
		return append(dst, '}')
	case jsonscan.Is(b, at, '['):
		dst = append(dst, '[')
		for e, k := jsonscan.Elem(b, at), 0; e >= 0; e, k = jsonscan.Next(b, e), k+1 {
			if k > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendPyJSON(dst, b, e)
		}
		return append(dst, ']')
	case jsonscan.Is(b, at, '"'):
		raw, _, _ := jsonscan.Str(b, at)
		return appendPyString(dst, raw)
	case jsonscan.IsNumber(b, at):
		return appendPyNumber(dst, jsonscan.Num(b, at))
	}
	return append(dst, jsonscan.Num(b, at)...) // true, false, null
}

// appendPyString appends the JSON string of raw's text (raw: a string's
// bytes as written, escapes kept) with ensure_ascii's escapes.
func appendPyString(dst, raw []byte) []byte {
	s := raw
	if bytes.IndexByte(raw, '\\') >= 0 {
		s = jsonscan.AppendUnescaped(nil, raw) // rare: unescaped text is never longer
	}
	dst = append(dst, '"')
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			// Not UTF-8 (a lone surrogate's escape is kept as written by
			// AppendUnescaped, so this is a raw byte): Python would have
			// refused the body; written as the replacement character.
			r = utf8.RuneError
		}
		s = s[n:]
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r == '\b':
			dst = append(dst, `\b`...)
		case r == '\f':
			dst = append(dst, `\f`...)
		case r < 0x20 || r >= 0x7f:
			if r > 0xffff {
				r -= 0x10000
				dst = appendU4(dst, 0xd800+(r>>10))
				dst = appendU4(dst, 0xdc00+(r&0x3ff))
			} else {
				dst = appendU4(dst, r)
			}
		default:
			dst = append(dst, byte(r))
		}
	}
	return append(dst, '"')
}

func appendU4(dst []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
}

// appendPyNumber appends the number n (JSON's text) as Python writes what
// it reads: an integer as its digits (-0 is 0), any other as float's
// repr.
func appendPyNumber(dst, n []byte) []byte {
	isInt := true
	for _, c := range n {
		if c == '.' || c == 'e' || c == 'E' {
			isInt = false
			break
		}
	}
	if isInt {
		if string(n) == "-0" {
			return append(dst, '0')
		}
		return append(dst, n...)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !math.IsInf(f, 0) {
		return append(dst, n...) // unreachable for checked JSON
	}
	return appendPyFloat(dst, f)
}

// appendPyFloat appends Python's repr of f: the shortest digits that read
// back, fixed-point for exponents -4 to 15 (with ".0" when whole), else
// d.ddde±XX.
func appendPyFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d.ddde±XX
	mant, exp := e, 0
	if i := bytes.IndexByte(e, 'e'); i >= 0 {
		mant = e[:i]
		// AppendFloat's own exponent: a sign, then digits.
		for _, c := range e[i+2:] {
			exp = exp*10 + int(c-'0')
		}
		if e[i+1] == '-' {
			exp = -exp
		}
	}
	neg := len(mant) > 0 && mant[0] == '-'
	if neg {
		mant = mant[1:]
		dst = append(dst, '-')
	}
	var dbuf [24]byte
	digits := dbuf[:0]
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	if exp < -4 || exp >= 16 {
		dst = append(dst, digits[0])
		if len(digits) > 1 {
			dst = append(append(dst, '.'), digits[1:]...)
		}
		dst = append(dst, 'e')
		if exp < 0 {
			dst = append(dst, '-')
			exp = -exp
		} else {
			dst = append(dst, '+')
		}
		if exp < 10 {
			dst = append(dst, '0')
		}
		return strconv.AppendInt(dst, int64(exp), 10)
	}
	if exp < 0 {
		dst = append(dst, "0."...)
		for range -exp - 1 {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	// exp+1 digits before the point.
	for i := 0; i <= exp; i++ {
		if i < len(digits) {
			dst = append(dst, digits[i])
		} else {
			dst = append(dst, '0')
		}
	}
	dst = append(dst, '.')
	if len(digits) > exp+1 {
		return append(dst, digits[exp+1:]...)
	}
	return append(dst, '0')
}
