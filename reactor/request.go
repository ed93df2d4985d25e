package reactor

import "github.com/saltus-lb/saltus/internal/httplex"

// Header is one header field, name as sent.
type Header struct{ Name, Value string }

// Request is one parsed request. Every field is a copy owned by the Request
// (not a view into gnet's buffer), so it may be handed to another goroutine.
// The head's strings share one copy of the head, and Body is its own copy.
type Request struct {
	Method, Path, Query string // Path without "?query"; Query without "?"
	Proto10             bool   // HTTP/1.0
	Header              []Header
	Body                []byte // de-chunked, ≤ MaxBodyBytes
	RemoteAddr          string

	keepAlive bool      // the connection stays open after this request's answer
	expect100 bool      // "Expect: 100-continue"
	pooled    *[]byte   // Body's pooled buffer (body.go); nil if not pooled
	hdrArr    [8]Header // Header's backing array when it fits: one allocation per request, not two
}

// HeaderValue returns the value of the first header named name (ASCII
// case-insensitive), or "" if there is none. Any goroutine.
func (r *Request) HeaderValue(name string) string {
	for i := range r.Header {
		if equalFold(r.Header[i].Name, name) {
			return r.Header[i].Value
		}
	}
	return ""
}

// equalFold is httplex.EqualFold: ASCII case folding.
func equalFold(a, b string) bool { return httplex.EqualFold(a, b) }
