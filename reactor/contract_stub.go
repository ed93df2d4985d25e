// Package reactor: contract stand-in (replaced at merge). Only what package
// shard uses, shaped as /work/contract.md says.
package reactor

import "strings"

// Header is one header line.
type Header struct{ Name, Value string }

// Request is one parsed request (stand-in).
type Request struct {
	Method, Path, Query string
	Proto10             bool
	Header              []Header
	Body                []byte
	RemoteAddr          string
}

// HeaderValue returns the first header named name, case-insensitively.
func (r *Request) HeaderValue(name string) string {
	for _, h := range r.Header {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

// Exchange is one request and its response (stand-in: does nothing).
type Exchange struct{ req *Request }

func (x *Exchange) Request() *Request                             { return x.req }
func (x *Exchange) Loop() int                                     { return 0 }
func (x *Exchange) Respond(status int, hdr []Header, body []byte) {}
func (x *Exchange) WriteHeader(status int, hdr []Header) error    { return nil }
func (x *Exchange) Write(p []byte) error                          { return nil }
func (x *Exchange) Flush() error                                  { return nil }
func (x *Exchange) End() error                                    { return nil }
func (x *Exchange) Abort()                                        {}
func (x *Exchange) Gone() <-chan struct{}                         { return nil }
