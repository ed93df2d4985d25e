package backend

import (
	"bytes"
	"strings"

	"github.com/saltus-lb/saltus/internal/httplex"
)

// hopByHop reports whether the header name belongs to one connection
// (RFC 9110 §7.6.1): the fixed list, or a name listed in the message's
// Connection header (conn).
func hopByHop(name, conn string) bool {
	switch {
	case equalFold(name, "Connection"), equalFold(name, "Keep-Alive"), equalFold(name, "TE"),
		equalFold(name, "Trailer"), equalFold(name, "Transfer-Encoding"), equalFold(name, "Upgrade"):
		return true
	case len(name) >= 6 && equalFold(name[:6], "Proxy-"):
		return true
	}
	for conn != "" {
		var tok string
		tok, conn, _ = strings.Cut(conn, ",")
		if equalFold(strings.TrimSpace(tok), name) {
			return true
		}
	}
	return false
}

// equalFold is httplex.EqualFold: header names are ASCII tokens (and
// strings.EqualFold, Unicode-aware, showed in profiles).
func equalFold(a, b string) bool { return httplex.EqualFold(a, b) }

// isSSE reports whether a Content-Type is text/event-stream.
func isSSE(ct []byte) bool {
	const want = "text/event-stream"
	return len(ct) >= len(want) && strings.EqualFold(string(ct[:len(want)]), want)
}

// sseEventEnd returns the length of the first complete SSE event in p,
// through the blank line that ends it, or -1 if p holds none. Lines end
// in CRLF, LF or CR; a CR at the very end of p waits for more input (it
// may be half of a CRLF).
func sseEventEnd(p []byte) int {
	// Line ends are found with vectorized scans (an event is mostly one
	// JSON line), not a loop over each byte: nl is the next LF at or
	// after i (len(p): none), found once per LF, and a CR is looked for
	// only before it, so each byte is scanned at most twice.
	nl := -1
	for i := 0; i < len(p); {
		if nl < i {
			nl = len(p)
			if n := bytes.IndexByte(p[i:], '\n'); n >= 0 {
				nl = i + n
			}
		}
		if r := bytes.IndexByte(p[i:nl], '\r'); r >= 0 {
			i += r
		} else if nl < len(p) {
			i = nl
		} else {
			return -1
		}
		j := i + 1 // start of the next line
		if p[i] == '\r' {
			if j == len(p) {
				return -1
			}
			if p[j] == '\n' {
				j++
			}
		}
		if j < len(p) {
			switch p[j] {
			case '\n':
				return j + 1
			case '\r':
				if j+1 == len(p) {
					return -1
				}
				if p[j+1] == '\n' {
					return j + 2
				}
				return j + 1
			}
		}
		i = j
	}
	return -1
}
