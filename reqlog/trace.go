package reqlog

import "encoding/hex"

// Trace is a W3C trace context: the
// trace's id, the client's span (the parent of saltus's) and the flags.
// The zero Trace is none.
type Trace struct {
	ID     [16]byte
	Parent [8]byte // the span id the client sent (its parent-id)
	Flags  byte    // trace-flags; bit 0: sampled
}

// TraceparentHeader names the header ParseTraceparent reads.
const TraceparentHeader = "traceparent"

// Valid reports whether t holds a trace (a non-zero id).
func (t Trace) Valid() bool { return t.ID != [16]byte{} }

// HasParent reports whether t names a client's span.
func (t Trace) HasParent() bool { return t.Parent != [8]byte{} }

// Sampled reports the sampled flag.
func (t Trace) Sampled() bool { return t.Flags&1 != 0 }

// AppendID appends the trace id in lowercase hex (32 digits), nothing
// for none.
func (t Trace) AppendID(dst []byte) []byte {
	if !t.Valid() {
		return dst
	}
	return hex.AppendEncode(dst, t.ID[:])
}

// AppendParent appends the parent span id in lowercase hex (16 digits),
// nothing for none.
func (t Trace) AppendParent(dst []byte) []byte {
	if !t.HasParent() {
		return dst
	}
	return hex.AppendEncode(dst, t.Parent[:])
}

// traceparentLen is a version-00 traceparent's length:
// 2 + 1 + 32 + 1 + 16 + 1 + 2.
const traceparentLen = 55

// ParseTraceparent parses a traceparent header value strictly, as the
// spec's receivers must: version 00 is exactly
// "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", lowercase hex,
// neither id all zeros; version ff is invalid; a later version is parsed
// as 00 on its first 55 characters, which a "-" must follow if there is
// more. ok false for anything else (the request then has no trace; a
// tracer starts a new one). Pure; never allocates.
func ParseTraceparent(s string) (t Trace, ok bool) {
	if len(s) < traceparentLen {
		return Trace{}, false
	}
	ver, okv := hexByte(s[0], s[1])
	if !okv || ver == 0xff {
		return Trace{}, false
	}
	if ver == 0 && len(s) != traceparentLen {
		return Trace{}, false
	}
	if len(s) > traceparentLen && s[traceparentLen] != '-' {
		return Trace{}, false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return Trace{}, false
	}
	for i := range t.ID {
		b, okb := hexByte(s[3+2*i], s[4+2*i])
		if !okb {
			return Trace{}, false
		}
		t.ID[i] = b
	}
	for i := range t.Parent {
		b, okb := hexByte(s[36+2*i], s[37+2*i])
		if !okb {
			return Trace{}, false
		}
		t.Parent[i] = b
	}
	f, okf := hexByte(s[53], s[54])
	if !okf || !t.Valid() || !t.HasParent() {
		return Trace{}, false
	}
	t.Flags = f
	return t, true
}

// hexByte decodes two lowercase hex digits.
func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
