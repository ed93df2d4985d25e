package reactor

import "strings"

// This file is a stand-in for the reactor package's contract (see
// /work/contract.md), so that shard/backend builds on its own; the real
// package replaces it at merge.

// Header is one header line.
type Header struct{ Name, Value string }

// Request is one parsed request. Every field is a copy owned by the Request.
type Request struct {
	Method, Path, Query string // Path without "?query"; Query without "?"
	Proto10             bool   // HTTP/1.0
	Header              []Header
	Body                []byte
	RemoteAddr          string
}

// HeaderValue returns the first header named name (case-insensitive), ""
// if absent.
func (r *Request) HeaderValue(name string) string {
	for _, h := range r.Header {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}
