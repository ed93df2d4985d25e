package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// Reading a checked body: the functions below read values out of a body
// that passed a grammar check (openai's body scan, which also bounds its
// depth), by offsets, without a parse tree: what openai and
// tokenpool/chat decode a request with (issue 33: a tree of fastjson
// Values cost ~400-450 bytes per JSON value; these keep nothing per value
// they skip). On other input they return nonsense, never panic, and
// always move forward: a loop over their offsets ends.
//
// They read as fastjson read before, so that a request decodes to what it
// decoded to then (openai's differential fuzz test holds them to it):
// the same type names, the last of repeated keys (chat.Field's rule,
// Python's json), and strings unescaped the way fastjson unescapes them.

// TypeName is the type of the value at b[i] as fastjson names it
// ("object", "array", "string", "number", "true", "false", "null"): the
// words of the decoders' errors.
func TypeName(b []byte, i int) string {
	if i < 0 || i >= len(b) {
		return "null"
	}
	switch b[i] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return "null"
	}
	return "number"
}

// Is reports whether the value at b[i] starts with c: '{', '[', '"', 't',
// 'f' or 'n' (a number starts with anything else). False for i < 0 (an
// absent member).
func Is(b []byte, i int, c byte) bool { return i >= 0 && i < len(b) && b[i] == c }

// IsNumber reports whether the value at b[i] is a number.
func IsNumber(b []byte, i int) bool { return i >= 0 && TypeName(b, i) == "number" }

// Present reports whether a member was found and is not null.
func Present(b []byte, i int) bool { return i >= 0 && !Is(b, i, 'n') }

// Members sets at[k] to the offset of the value of the last member named
// keys[k] of the object opening at b[open] ('{'), or to -1 when it has
// none, and ends[k] (when ends is not nil) to the offset past that value;
// at and ends must be as long as keys. Keys are compared unescaped
// (`{"mod\u0065l":1}` has a "model"), as fastjson compares them. It
// returns the offset past the object (-1 when it is not one), so that a
// reader of an array of objects skips each once.
func Members(b []byte, open int, keys []string, at, ends []int) int {
	for k := range at {
		at[k] = -1
	}
	if !Is(b, open, '{') {
		return -1
	}
	i := SkipWS(b, open+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for i < len(b) && b[i] == '"' {
		ke := SkipString(b, i)
		if ke < 0 {
			return -1
		}
		raw := b[i+1 : ke-1]
		i = SkipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		vs := SkipWS(b, i+1)
		ve := SkipValue(b, vs)
		if ve < 0 {
			return -1
		}
		if k := KeyIndex(raw, keys); k >= 0 {
			at[k] = vs
			if ends != nil {
				ends[k] = ve
			}
		}
		i = SkipWS(b, ve)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '}':
			return i + 1
		case ',':
			i = SkipWS(b, i+1)
		default:
			return -1
		}
	}
	return -1
}

// maxKeyRaw is the longest escaped key unescaped on the stack: the
// decoders' keys are at most 21 bytes, and an escape is at most 6 bytes
// for one byte of text.
const maxKeyRaw = 6 * 24

// KeyIndex is the index in keys (none of which has a backslash) of the
// key whose raw text (between its quotes, maybe escaped) is raw, or -1.
// It allocates nothing but for an escaped key of over 144 bytes that may
// unescape to one of keys.
func KeyIndex(raw []byte, keys []string) int {
	if k := rawIndex(raw, keys); k >= 0 {
		return k // a raw text equal to a key has no escape: it is that key
	}
	escaped := false
	for _, c := range raw { // keys are short: no IndexByte call
		if c == '\\' {
			escaped = true
			break
		}
	}
	if !escaped {
		return -1
	}
	longest := 0
	for _, k := range keys {
		longest = max(longest, len(k))
	}
	if len(raw) > 6*longest {
		return -1 // an escape gives at least one byte per 6: too long for any key
	}
	var buf [maxKeyRaw]byte // unescaping never lengthens: it stays here up to maxKeyRaw
	return rawIndex(AppendUnescaped(buf[:0], raw), keys)
}

// rawIndex is the index in keys of raw as it is.
func rawIndex(raw []byte, keys []string) int {
	for k, key := range keys {
		// The first byte before the call to compare: many keys share
		// a length ("text", "type", "name").
		if len(raw) == len(key) && (len(key) == 0 || raw[0] == key[0]) && string(raw) == key {
			return k
		}
	}
	return -1
}

// Str returns the text between the quotes of the string at b[i] (as it
// is in the body: escapes not undone), whether it has an escape (then
// AppendUnescaped undoes them), and the offset past the string. A
// non-string gives nil, false, i.
func Str(b []byte, i int) (raw []byte, escaped bool, end int) {
	if !Is(b, i, '"') {
		return nil, false, i
	}
	end = SkipString(b, i)
	if end < 0 {
		return nil, false, len(b)
	}
	raw = b[i+1 : end-1]
	return raw, bytes.IndexByte(raw, '\\') >= 0, end
}

// StrTo is Str for a string whose end (the offset past it: Members'
// ends) is known: one pass fewer over a long text.
func StrTo(b []byte, i, end int) (raw []byte, escaped bool) {
	if !Is(b, i, '"') || end < i+2 || end > len(b) {
		raw, escaped, _ = Str(b, i)
		return raw, escaped
	}
	raw = b[i+1 : end-1]
	return raw, bytes.IndexByte(raw, '\\') >= 0
}

// AppendUnescaped appends the text of a string's raw bytes to dst as
// fastjson's unescapeStringBestEffort does: the JSON escapes undone; a
// \u escape of a UTF-16 surrogate followed by another \u escape decoded
// as the pair (utf16.DecodeRune: U+FFFD for a bad pair, both consumed);
// anything it cannot read (a lone surrogate, a short or non-hex \u, an
// unknown escape) kept as written, and a final lone backslash dropped.
// The text is never longer than raw.
func AppendUnescaped(dst, raw []byte) []byte {
	for {
		n := bytes.IndexByte(raw, '\\')
		if n < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:n]...)
		raw = raw[n+1:]
		if len(raw) == 0 {
			return dst
		}
		ch := raw[0]
		raw = raw[1:]
		switch ch {
		case '"', '\\', '/':
			dst = append(dst, ch)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			x, ok := hex4(raw)
			if !ok {
				dst = append(dst, `\u`...)
				continue
			}
			xs := raw[:4]
			raw = raw[4:]
			if !utf16.IsSurrogate(x) {
				dst = utf8.AppendRune(dst, x)
				continue
			}
			if len(raw) < 6 || raw[0] != '\\' || raw[1] != 'u' {
				dst = append(append(dst, `\u`...), xs...)
				continue
			}
			x1, ok := hex4(raw[2:])
			if !ok {
				dst = append(append(dst, `\u`...), xs...)
				continue
			}
			dst = utf8.AppendRune(dst, utf16.DecodeRune(x, x1))
			raw = raw[6:]
		default:
			dst = append(dst, '\\', ch)
		}
	}
}

// hex4 reads 4 hex digits (strconv.ParseUint(s[:4], 16, 16), as fastjson
// reads a \u escape).
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var x rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		x = x<<4 | rune(c)
	}
	return x, true
}

// Elem returns the offset of the first element of the array opening at
// b[open] ('['), or -1 for an empty one (or a non-array).
func Elem(b []byte, open int) int {
	if !Is(b, open, '[') {
		return -1
	}
	i := SkipWS(b, open+1)
	if i >= len(b) || b[i] == ']' {
		return -1
	}
	return i
}

// Next returns the offset of the element after the one at b[i], or -1
// after the last. Loop: for i := Elem(b, open); i >= 0; i = Next(b, i).
func Next(b []byte, i int) int { return After(b, SkipValue(b, i)) }

// After is Next for an element whose end (the offset past it) is known.
func After(b []byte, end int) int {
	if end < 0 {
		return -1
	}
	end = SkipWS(b, end)
	if end >= len(b) || b[end] != ',' {
		return -1
	}
	return SkipWS(b, end+1)
}

// Count returns the number of elements of the array opening at b[open]
// (one pass, nothing kept: the decoders size their results by it).
func Count(b []byte, open int) int {
	n := 0
	for i := Elem(b, open); i >= 0; i = Next(b, i) {
		n++
	}
	return n
}

// Int64 reads the number at b[i] as an integer as fastjson's Int64 does
// (strconv.ParseInt of its text): an optional '-' and digits only, in
// int64's range; anything else (a fraction, an exponent) is not ok.
// Num returns the number's text.
func Int64(b []byte, i int) (n int64, ok bool) {
	s := Num(b, i)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		if u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
		if u > 1<<63 {
			return 0, false
		}
	}
	if !neg && u > 1<<63-1 {
		return 0, false
	}
	if neg {
		return -int64(u), true // u == 1<<63 wraps to MinInt64, as wanted
	}
	return int64(u), true
}

// Num returns the text of the number (or other scalar) at b[i].
func Num(b []byte, i int) []byte {
	if i < 0 || i >= len(b) {
		return nil
	}
	end := SkipValue(b, i)
	if end < 0 {
		return nil
	}
	return b[i:end]
}
