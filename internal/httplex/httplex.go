// Package httplex holds the HTTP/1.1 lexical checks that both of saltus's
// HTTP parsers use: the reactor's request parser and the backend's
// response parser on the event loops. Pure functions without state: any
// goroutine.
package httplex

// IsToken reports whether s is a non-empty RFC 9110 token (a header name,
// a method).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return true
}

// IsTokenByte reports whether c may appear in a token.
func IsTokenByte(c byte) bool { return tokenChar[c] }

// ValidValue rejects control characters other than HTAB in a header value.
func ValidValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// ParseDecimal parses a Content-Length value: 1 to 18 ASCII digits (no
// sign, no space, no overflow of int64).
func ParseDecimal(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// TrimOWS trims HTTP optional whitespace (spaces and horizontal tabs) from
// both ends of s: strings.Trim(s, " \t") without building a cutset per
// call, which showed in profiles of header parsing.
func TrimOWS(s string) string {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	return s[i:j]
}

// EqualFold reports whether a and b are equal under ASCII case folding:
// header names are ASCII tokens, and strings.EqualFold's Unicode folding
// would also match "K" (Kelvin sign) with "k".
func EqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
