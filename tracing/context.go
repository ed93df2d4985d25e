package tracing

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"

	"github.com/saltus-lb/saltus/reqlog"
)

// W3C Trace Context: the headers a
// request's trace travels in.
const (
	HeaderParent = "traceparent"
	HeaderState  = "tracestate"
)

// traceparentLen is a version-00 traceparent's length:
// 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>.
const traceparentLen = 55

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
	tr, _ := reqlog.ParseTraceparent(traceparent) // invalid: a new trace
	begin(c, tr, tracestate, l.sampler, l.rng)
}

// begin fills c for the client's trace tr (zero: none) and tracestate,
// with IDs from rng.
func begin(c *Context, tr reqlog.Trace, tracestate string, s Sampler, rng uint64Source) {
	c.began = true
	if tr.Valid() {
		c.TraceID, c.Parent, c.State = tr.ID, tr.Parent, LimitState(tracestate)
	} else {
		for c.TraceID == [16]byte{} {
			binary.BigEndian.PutUint64(c.TraceID[:8], rng.Uint64())
			binary.BigEndian.PutUint64(c.TraceID[8:], rng.Uint64())
		}
	}
	for c.SpanID == [8]byte{} {
		binary.BigEndian.PutUint64(c.SpanID[:], rng.Uint64())
	}
	c.Sampled = s.Sample(c.TraceID, tr.Valid(), tr.Sampled())
}

type uint64Source interface{ Uint64() uint64 }

// globalRand is math/rand/v2's global source: per thread in the
// runtime, no lock.
type globalRand struct{}

func (globalRand) Uint64() uint64 { return rand.Uint64() }

// newPCG is a loop's random source, seeded from the global one.
func newPCG() *rand.PCG { return rand.NewPCG(rand.Uint64(), rand.Uint64()) }

// maxState is the longest tracestate passed on: W3C asks every vendor to
// propagate at least 512 characters, and lets one cut a longer value
// from its end.
const maxState = 512

// LimitState is tracestate cut to at most maxState bytes at a list
// member's end (W3C: members are removed from the end); "" if its first
// member is already longer. A view of tracestate: no allocation.
func LimitState(tracestate string) string {
	if len(tracestate) <= maxState {
		return tracestate
	}
	cut := strings.LastIndexByte(tracestate[:maxState+1], ',')
	if cut < 0 {
		return ""
	}
	return strings.TrimRight(tracestate[:cut], " \t")
}
