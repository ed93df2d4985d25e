package httplex

import "errors"

// Errors of NormalizePath, each a sentence for the client (the reactor
// answers them with 400). Sentinels: refusing a path allocates nothing.
var (
	ErrPathChar        = errors.New("invalid character in request path")
	ErrPathEscape      = errors.New("malformed percent-encoding in request path")
	ErrPathSlash       = errors.New("encoded slash (%2F) in request path")
	ErrPathBackslash   = errors.New("backslash (raw or %5C) in request path")
	ErrPathControl     = errors.New("encoded control character in request path")
	ErrPathDotSegment  = errors.New("percent-encoded dot segment (%2E) in request path")
	ErrPathAboveRoot   = errors.New("request path climbs above the root (..)")
	ErrPathNotAbsolute = errors.New("request path does not start with /")
)

// NormalizePath returns the normal form of an origin-form request path
// (no query): the form every routing and allow-list decision, and the
// forwarded request, use, so that a check of the path's prefix cannot be
// walked around (/v1/../tokenize, /v1/%2e%2e/tokenize, /v1/..%2ftokenize).
//
//   - Percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) are
//     decoded; every other encoding is kept, in uppercase hex
//     (RFC 3986 §6.2.2.1-2).
//   - Dot segments are removed (RFC 3986 §5.2.4); a ".." above the root
//     is refused, not dropped.
//   - Refused: a raw byte outside pchar and "/" (RFC 3986 §3.3), a raw or
//     encoded backslash (some servers take it for "/"), an encoded "/"
//     (the backend would see another path than the one routed), an
//     encoded control character or NUL, a segment that only decoding
//     makes a dot segment (%2E%2E), a malformed escape.
//
// A path already in normal form (the usual case) is returned as is,
// without allocating; otherwise the result is a new string. It never
// panics (FuzzNormalizePath), and NormalizePath(NormalizePath(p)) is
// NormalizePath(p). Any goroutine.
func NormalizePath(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", ErrPathNotAbsolute
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if plainPathChar[c] {
			continue
		}
		switch {
		case c == '%':
			return normalizeSlow(p)
		case c == '.' && p[i-1] == '/': // i > 0: p[0] is '/'
			if isDotSegment(p[i:]) {
				return normalizeSlow(p)
			}
		case c == '\\':
			return "", ErrPathBackslash
		case !pathChar[c]:
			return "", ErrPathChar
		}
	}
	return p, nil
}

// isDotSegment reports whether rest (a segment's start, up to the end of
// the path) begins with a "." or ".." segment.
func isDotSegment(rest string) bool {
	n := 0
	for n < len(rest) && n < 3 && rest[n] == '.' {
		n++
	}
	return (n == 1 || n == 2) && (n == len(rest) || rest[n] == '/')
}

// normalizeSlow builds the normal form of p, which starts with '/'.
func normalizeSlow(p string) (string, error) {
	out := make([]byte, 0, len(p))
	for i := 1; i <= len(p); {
		// The segment p[i:j]; p[i-1] is '/'.
		j := i
		for j < len(p) && p[j] != '/' {
			j++
		}
		last := j == len(p)
		segStart := len(out)
		out = append(out, '/')
		encodedDot := false
		for k := i; k < j; k++ {
			c := p[k]
			switch {
			case c == '%':
				if k+2 >= len(p) { // a '/' in the escape fails unhex below
					return "", ErrPathEscape
				}
				hi, ok1 := unhex(p[k+1])
				lo, ok2 := unhex(p[k+2])
				if !ok1 || !ok2 {
					return "", ErrPathEscape
				}
				d := hi<<4 | lo
				switch {
				case d == '/':
					return "", ErrPathSlash
				case d == '\\':
					return "", ErrPathBackslash
				case d < ' ' || d == 0x7f:
					return "", ErrPathControl
				case unreserved[d]:
					encodedDot = encodedDot || d == '.'
					out = append(out, d)
				default:
					out = append(out, '%', upperHex[d>>4], upperHex[d&15])
				}
				k += 2
			case c == '\\':
				return "", ErrPathBackslash
			case !pathChar[c]:
				return "", ErrPathChar
			default:
				out = append(out, c)
			}
		}
		seg := out[segStart+1:]
		dot := len(seg) == 1 && seg[0] == '.'
		dotdot := len(seg) == 2 && seg[0] == '.' && seg[1] == '.'
		if (dot || dotdot) && encodedDot {
			return "", ErrPathDotSegment
		}
		if dot || dotdot {
			out = out[:segStart]
			if dotdot {
				if len(out) == 0 {
					return "", ErrPathAboveRoot
				}
				for len(out) > 0 && out[len(out)-1] != '/' {
					out = out[:len(out)-1]
				}
				out = out[:len(out)-1] // the '/' that began the removed segment
			}
			if last {
				out = append(out, '/') // "/a/." and "/a/b/.." end in "/"
			}
		}
		i = j + 1
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const upperHex = "0123456789ABCDEF"

// unreserved is RFC 3986's ALPHA / DIGIT / "-" / "." / "_" / "~".
var unreserved = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~" {
		t[c] = true
	}
	return t
}()

// pathChar is what a path may hold raw: RFC 3986's pchar (unreserved,
// sub-delims, ":" and "@"; "%" escapes are handled apart) and "/".
var pathChar = func() (t [256]bool) {
	t = unreserved
	for _, c := range "!$&'()*+,;=:@/" {
		t[c] = true
	}
	return t
}()

// ValidHost reports whether v is a valid Host header value (RFC 9112
// §3.2, RFC 3986 §3.2.2): uri-host [ ":" port ], where uri-host is an
// IP-literal in brackets or a reg-name (which covers IPv4), empty
// included. Any goroutine.
func ValidHost(v string) bool {
	host, port := v, ""
	if len(v) > 0 && v[0] == '[' {
		end := -1
		for i := 1; i < len(v); i++ {
			if v[i] == ']' {
				end = i
				break
			}
		}
		if end < 2 {
			return false
		}
		for i := 1; i < end; i++ {
			if c := v[i]; !unreserved[c] && !subDelim(c) && c != ':' {
				return false
			}
		}
		host, port = "", v[end+1:]
		if port != "" {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else {
		for i := 0; i < len(v); i++ {
			if v[i] == ':' {
				host, port = v[:i], v[i+1:]
				break
			}
		}
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c == '%':
			if i+2 >= len(host) {
				return false
			}
			if _, ok := unhex(host[i+1]); !ok {
				return false
			}
			if _, ok := unhex(host[i+2]); !ok {
				return false
			}
			i += 2
		case !unreserved[c] && !subDelim(c):
			return false
		}
	}
	if len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

func subDelim(c byte) bool {
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=':
		return true
	}
	return false
}

// plainPathChar is pathChar minus what NormalizePath's fast path must
// look at: '%' and '.'.
var plainPathChar = func() (t [256]bool) {
	t = pathChar
	t['.'] = false
	return t
}()
