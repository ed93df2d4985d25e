// Package jsonscan reads a few things out of a JSON body without parsing
// it: the offsets of an object's member, of a string, of a value, by one
// pass over the bytes, no allocation. The router uses it where a full
// parse would cost more than the answer is worth: a body's "model" on
// endpoints it does not decode (shard), the stream options it edits and
// the usage chunk it removes (upstream/backend). The input is not validated
// beyond what each function says; what it cannot read it reports.
//
// # Concurrency
//
// Pure functions: safe for concurrent use.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Member is one object member's byte offsets: Start (its key's opening
// quote), Val (its value's first byte; -1: no such member) and End (just
// past its value).
type Member struct{ Start, Val, End int }

// LastMember finds the last member named key of the object opening at
// b[open] ('{'). ok is false when the object is malformed.
func LastMember(b []byte, open int, key string) (m Member, ok bool) {
	m = Member{Start: -1, Val: -1, End: -1}
	i := SkipWS(b, open+1)
	if i < len(b) && b[i] == '}' {
		return m, true
	}
	for i < len(b) {
		if b[i] != '"' {
			return m, false
		}
		ks := i
		ke := SkipString(b, i)
		if ke < 0 {
			return m, false
		}
		i = SkipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return m, false
		}
		vs := SkipWS(b, i+1)
		ve := SkipValue(b, vs)
		if ve < 0 {
			return m, false
		}
		if KeyIs(b[ks:ke], key) {
			m = Member{Start: ks, Val: vs, End: ve}
		}
		i = SkipWS(b, ve)
		if i >= len(b) {
			return m, false
		}
		switch b[i] {
		case '}':
			return m, true
		case ',':
			i = SkipWS(b, i+1)
		default:
			return m, false
		}
	}
	return m, false
}

// EmptyObject reports whether the object opening at b[open] has no member.
func EmptyObject(b []byte, open int) bool {
	i := SkipWS(b, open+1)
	return i < len(b) && b[i] == '}'
}

// KeyIs reports whether the quoted JSON string q decodes to key.
func KeyIs(q []byte, key string) bool {
	if bytes.IndexByte(q, '\\') < 0 {
		return len(q) == len(key)+2 && string(q[1:len(q)-1]) == key
	}
	return len(q) >= 2 && KeyIndex(q[1:len(q)-1], []string{key}) == 0 // rare: an escaped key
}

// SkipWS returns the offset of the first byte at or after i that is not
// JSON white space.
func SkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the offset past the string opening at b[i], or -1.
func SkipString(b []byte, i int) int {
	// Keys, roles and short texts end within 64 bytes: 8 bytes at a time
	// (Special) end them sooner than IndexByte's setup would (the
	// decoders skip a few per message: BenchmarkDecode in openai).
	j := i + 1
	for n := min(len(b), j+64); j < n; j += 2 { // past the escape and its byte
		if j = Special(b[:n], j); j < 0 {
			j = n
			break
		}
		if b[j] == '"' {
			return j + 1
		}
	}
	// The closing quote is the first one after i not escaped, that is not
	// preceded by an odd run of backslashes; IndexByte jumps the text
	// between quotes (a prompt is mostly such text).
	for ; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
	}
	return -1
}

// Special returns the offset of the first '"' or '\\' in b at or after
// i, or -1: 8 bytes at a time (a word's zero-byte test), for the short
// strings of a request's keys and roles, where IndexByte's setup costs
// more than the search.
func Special(b []byte, i int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^(lo*'"'), x^(lo*'\\')
		// The lowest byte flagged is the first match; higher flags may
		// be false (a borrow), and are not looked at.
		if m := ((q-lo)&^q | (bs-lo)&^bs) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if b[i] == '"' || b[i] == '\\' {
			return i
		}
	}
	return -1
}

// SkipValue returns the offset past the value starting at b[i], or -1.
// Containers are skipped by counting brackets outside strings (the body
// parsed before: their contents are not checked).
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := SkipString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A scalar ends at a delimiter (a switch, not a search of the
	// delimiter set: a body may hold a million numbers).
	j := i
scalar:
	for ; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			break scalar
		}
	}
	if j == i {
		return -1
	}
	return j
}

// DeleteMember appends to dst the object b without its top-level members
// named key (every one: an engine reads the last, and none is left for
// it to read) and reports true; when b is not an object this scanner
// reads, it appends b unchanged and reports false. The members kept are
// copied as they are; the white space between them is not.
func DeleteMember(dst, b []byte, key string) ([]byte, bool) {
	orig := len(dst)
	fail := func() ([]byte, bool) { return append(dst[:orig], b...), false }
	open := SkipWS(b, 0)
	if open >= len(b) || b[open] != '{' {
		return fail()
	}
	dst = append(dst, b[:open+1]...)
	i := SkipWS(b, open+1)
	if i < len(b) && b[i] == '}' {
		return append(dst, b[i:]...), true
	}
	first := true
	for i < len(b) {
		if b[i] != '"' {
			return fail()
		}
		ks := i
		ke := SkipString(b, i)
		if ke < 0 {
			return fail()
		}
		i = SkipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return fail()
		}
		ve := SkipValue(b, SkipWS(b, i+1))
		if ve < 0 {
			return fail()
		}
		if !KeyIs(b[ks:ke], key) {
			if !first {
				dst = append(dst, ',')
			}
			dst = append(dst, b[ks:ve]...)
			first = false
		}
		i = SkipWS(b, ve)
		if i >= len(b) {
			return fail()
		}
		switch b[i] {
		case '}':
			return append(dst, b[i:]...), true
		case ',':
			i = SkipWS(b, i+1)
		default:
			return fail()
		}
	}
	return fail()
}
