package accesslog

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/saltus-lb/saltus/reqlog"
)

// maxField bounds each string field of a line, in bytes (a path may be up
// to the reactor's head limit, 64 KiB): longer ones are cut there.
const maxField = 1024

// appendLine appends r's line (newline included) in format.
func appendLine(dst []byte, r *reqlog.Record, format string) []byte {
	w := lineWriter{dst: dst, json: format == FormatJSON}
	if w.json {
		w.dst = append(w.dst, '{')
	}
	t := r.Start
	if t.IsZero() {
		t = r.End
	}
	w.raw("time", t.UTC().AppendFormat(w.scratch[:0], time.RFC3339Nano), true)
	w.str("request_id", r.RequestID)
	if r.Trace.Valid() {
		w.raw("trace_id", r.Trace.AppendID(w.scratch[:0]), true)
	}
	if r.Trace.HasParent() {
		w.raw("parent_span_id", r.Trace.AppendParent(w.scratch[:0]), true)
	}
	w.str("client", r.Client)
	w.str("key", r.Key)
	w.str("model", r.Model)
	w.str("method", r.Method)
	w.str("path", r.Path)
	w.int("status", int64(r.Status))
	w.str("backend", r.Backend)
	w.str("route_reason", r.RouteReason)
	if r.HasPrediction {
		w.int("cached_tokens_predicted", int64(r.CachedPredicted))
	}
	if r.HasCached {
		w.int("cached_tokens", int64(r.Cached))
	}
	if r.HasUsage {
		w.int("prompt_tokens", int64(r.PromptTokens))
		w.int("completion_tokens", int64(r.CompletionTokens))
	}
	if r.Retries > 0 {
		w.int("retries", int64(r.Retries))
	}
	if r.Requeues > 0 {
		w.int("requeues", int64(r.Requeues))
	}
	if r.QueueWait > 0 {
		w.ms("queue_ms", r.QueueWait)
	}
	if r.TTFT > 0 {
		w.ms("ttft_ms", r.TTFT)
	}
	w.ms("duration_ms", r.Duration)
	w.int("bytes_in", r.BytesIn)
	w.int("bytes_out", r.BytesOut)
	if r.ClientGone {
		w.raw("client_gone", []byte("true"), false)
	}
	if r.Own {
		w.raw("own", []byte("true"), false)
	}
	if w.json {
		w.dst = append(w.dst, '}')
	}
	return append(w.dst, '\n')
}

// lineWriter appends one line's fields.
type lineWriter struct {
	dst     []byte
	json    bool
	n       int // fields written
	scratch [64]byte
}

func (w *lineWriter) key(k string) {
	if w.n > 0 {
		if w.json {
			w.dst = append(w.dst, ',')
		} else {
			w.dst = append(w.dst, ' ')
		}
	}
	w.n++
	if w.json {
		w.dst = append(append(append(w.dst, '"'), k...), '"', ':')
	} else {
		w.dst = append(append(w.dst, k...), '=')
	}
}

// str writes a string field, unless empty.
func (w *lineWriter) str(k, v string) {
	if v == "" {
		return
	}
	if len(v) > maxField {
		v = v[:maxField]
	}
	w.key(k)
	if w.json {
		w.dst = appendJSONString(w.dst, v)
	} else {
		w.dst = appendLogfmtValue(w.dst, v)
	}
}

// raw writes v as it is (quoted in JSON when quote): v needs no escaping.
func (w *lineWriter) raw(k string, v []byte, quote bool) {
	w.key(k)
	if w.json && quote {
		w.dst = append(append(append(w.dst, '"'), v...), '"')
		return
	}
	w.dst = append(w.dst, v...)
}

func (w *lineWriter) int(k string, v int64) {
	w.key(k)
	w.dst = strconv.AppendInt(w.dst, v, 10)
}

// ms writes d in milliseconds, to the microsecond.
func (w *lineWriter) ms(k string, d time.Duration) {
	w.key(k)
	w.dst = strconv.AppendFloat(w.dst, float64(d.Microseconds())/1000, 'f', -1, 64)
}

// appendJSONString appends s as a JSON string: invalid UTF-8 becomes
// U+FFFD, control characters, U+2028 and U+2029 are escaped, so that the
// line stays one line of valid JSON whatever a client sent.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}

// appendLogfmtValue appends s bare when it is printable ASCII without
// space, quote, equals sign or backslash, else Go-quoted (strconv: one
// line; invalid UTF-8 as \x escapes, so the bytes round-trip).
func appendLogfmtValue(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '=' || c == '\\' {
			return strconv.AppendQuote(dst, s)
		}
	}
	return append(dst, s...)
}
