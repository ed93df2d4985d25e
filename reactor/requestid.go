package reactor

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/saltus-lb/saltus/internal/httplex"
)

// RequestIDHeader names the header that ties a client's request to
// saltus's answer and logs, and to the backend's: every answer carries
// the client's, or one saltus made up.
const RequestIDHeader = "X-Request-ID"

// maxEchoedID bounds a client's X-Request-ID the reactor echoes from a
// request it could not parse (a parsed one's is bounded by MaxHeaderBytes
// like any header).
const maxEchoedID = 256

var (
	idPrefix = func() string {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:]) // crypto/rand.Read never returns an error (Go ≥ 1.24)
		return hex.EncodeToString(rnd[:]) + "-r"
	}()
	idSeq atomic.Uint64
)

// NewRequestID returns a generated X-Request-ID, <random>-r<seq>: unique
// in the process, apart from the backend Set's (<random>-<seq>). Rare
// paths only (saltus's own answers): one shared atomic. Any goroutine.
func NewRequestID() string {
	var buf [40]byte
	b := append(buf[:0], idPrefix...)
	return string(strconv.AppendUint(b, idSeq.Add(1), 10))
}

// RequestID returns the request's X-Request-ID, or a new generated one if
// it has none. Any goroutine.
func (r *Request) RequestID() string {
	if id := r.HeaderValue(RequestIDHeader); id != "" {
		return id
	}
	return NewRequestID()
}

// headRequestID finds the X-Request-ID of a request the parser refused:
// buf holds its head, or the start of one. Only complete header lines
// count; a value too long or with control characters is not echoed.
// "" if none.
func headRequestID(buf []byte) string {
	first := true
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return ""
		}
		line := buf[:i]
		buf = buf[i+1:]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if first {
			if len(line) == 0 {
				continue // empty lines before the request line (RFC 9112 §2.2)
			}
			first = false
			continue // the request line
		}
		if len(line) == 0 {
			return ""
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || !httplex.EqualFold(string(name), RequestIDHeader) {
			continue
		}
		v := httplex.TrimOWS(string(value))
		if v == "" || len(v) > maxEchoedID || !httplex.ValidValue(v) {
			return ""
		}
		return v
	}
	return ""
}
