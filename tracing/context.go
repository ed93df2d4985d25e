package tracing

import (
	"encoding/binary"
	"math/rand/v2"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/): the headers a
// request's trace travels in.
const (
	HeaderParent = "traceparent"
	HeaderState  = "tracestate"
)

// traceparentLen is a version-00 traceparent's length:
// 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>.
const traceparentLen = 55

// flagSampled is the sampled bit of the trace flags.
const flagSampled = 0x01

// Context is one request's place in its trace, chosen on the loop by
// Loop.Begin: the trace, saltus's span in it, the client's span (its
// parent) if the client sent one, and the sampling decision.
type Context struct {
	TraceID [16]byte
	SpanID  [8]byte // saltus's span
	// Parent is the client's span, from its traceparent; zero: none
	// (saltus's span starts the trace).
	Parent  [8]byte
	Sampled bool
	// State is the client's tracestate, as sent, when its traceparent
	// was valid (W3C: a tracestate without one is not read); the SDK
	// parses it off the loop.
	State string
	began bool
}

// Began reports whether Begin has filled c.
func (c *Context) Began() bool { return c.began }

// HasParent reports whether the client's traceparent named a parent.
func (c *Context) HasParent() bool { return c.Parent != [8]byte{} }

// AppendTraceparent appends the traceparent that makes saltus's span the
// parent: version 00, the trace, saltus's span ID, the sampled flag.
func (c *Context) AppendTraceparent(dst []byte) []byte {
	dst = append(dst, "00-"...)
	dst = appendHex(dst, c.TraceID[:])
	dst = append(dst, '-')
	dst = appendHex(dst, c.SpanID[:])
	if c.Sampled {
		return append(dst, "-01"...)
	}
	return append(dst, "-00"...)
}

const hexDigits = "0123456789abcdef"

func appendHex(dst, b []byte) []byte {
	for _, x := range b {
		dst = append(dst, hexDigits[x>>4], hexDigits[x&15])
	}
	return dst
}

// ParseTraceparent reads a traceparent header's value: its trace ID,
// parent span ID and flags. ok is false for a value W3C says to ignore
// (the receiver then starts a new trace): a wrong length or separator,
// upper-case or non-hex digits, version ff, an all-zero trace or span ID,
// a version-00 value with anything after the flags. A later version is
// read by its first four fields, as the spec asks.
func ParseTraceparent(s string) (traceID [16]byte, spanID [8]byte, flags byte, ok bool) {
	if len(s) < traceparentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return traceID, spanID, 0, false
	}
	var ver [1]byte
	if !decodeHex(ver[:], s[0:2]) || ver[0] == 0xff {
		return traceID, spanID, 0, false
	}
	if len(s) > traceparentLen && (ver[0] == 0 || s[traceparentLen] != '-') {
		return traceID, spanID, 0, false
	}
	var f [1]byte
	if !decodeHex(traceID[:], s[3:35]) || !decodeHex(spanID[:], s[36:52]) || !decodeHex(f[:], s[53:55]) {
		return traceID, spanID, 0, false
	}
	if traceID == [16]byte{} || spanID == [8]byte{} {
		return [16]byte{}, [8]byte{}, 0, false
	}
	return traceID, spanID, f[0], true
}

// decodeHex decodes len(dst)*2 lower-case hex digits of s into dst.
func decodeHex(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := unhex(s[2*i]), unhex(s[2*i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return 255 // upper case too: W3C's digits are lower case
}

// Loop is one event loop's part of tracing: its random source for IDs
// and the sampler. The zero Loop is off (Begin does nothing). Owned by
// its loop: no lock, no atomic.
type Loop struct {
	rng     *rand.PCG // nil: tracing off
	sampler Sampler
}

// On reports whether tracing is on.
func (l *Loop) On() bool { return l.rng != nil }

// Begin fills c for a request whose client sent traceparent and
// tracestate (either may be ""): the client's trace and parent when its
// traceparent is valid, else a new trace; saltus's span ID; the sampling
// decision. Done once per request (c.Began), before the forwarded
// request's head is written. Loop only.
func (l *Loop) Begin(c *Context, traceparent, tracestate string) {
	if l.rng == nil || c.began {
		return
	}
	c.began = true
	tid, parent, flags, ok := ParseTraceparent(traceparent)
	if ok {
		c.TraceID, c.Parent, c.State = tid, parent, tracestate
	} else {
		for c.TraceID == [16]byte{} {
			binary.BigEndian.PutUint64(c.TraceID[:8], l.rng.Uint64())
			binary.BigEndian.PutUint64(c.TraceID[8:], l.rng.Uint64())
		}
	}
	for c.SpanID == [8]byte{} {
		binary.BigEndian.PutUint64(c.SpanID[:], l.rng.Uint64())
	}
	c.Sampled = l.sampler.Sample(c.TraceID, ok, flags&flagSampled != 0)
}

// newPCG is a loop's random source, seeded from the global one.
func newPCG() *rand.PCG { return rand.NewPCG(rand.Uint64(), rand.Uint64()) }
