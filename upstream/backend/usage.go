package backend

// Reading an answer's usage object (Hooks.Usage): from a JSON body, or
// from the last SSE event that has one.

import (
	"bytes"

	"github.com/valyala/fastjson"
)

var usageKey = []byte(`"usage"`)

// parsers reuse fastjson's values across answers (a fresh Parser costs ~20
// allocations per body: BenchmarkForward4K).
var parsers fastjson.ParserPool

// usageOf returns a copy of a JSON body's non-null "usage" object, or nil.
// A body over maxUsageParse is not parsed whole: only the object after
// its last "usage" key is.
func usageOf(body []byte) []byte {
	i := bytes.LastIndex(body, usageKey)
	if i < 0 {
		return nil
	}
	if len(body) > maxUsageParse {
		// A large answer is not parsed whole (a pooled parser would keep
		// its values at the body's size): the object after the last
		// "usage" key (where vLLM puts it, after the choices) is cut out
		// by a bracket scan and parsed alone.
		if i > 0 && body[i-1] == '\\' {
			return nil // the key's quote is escaped: inside a string
		}
		body = usageObject(body[i+len(usageKey):])
		if body == nil {
			return nil
		}
		var p fastjson.Parser // not pooled: rare, and at most maxUsageParse
		u, err := p.ParseBytes(body)
		if err != nil || u.Type() != fastjson.TypeObject {
			return nil
		}
		return u.MarshalTo(make([]byte, 0, 256))
	}
	ps := parsers.Get()
	defer parsers.Put(ps)
	v, err := ps.ParseBytes(body)
	if err != nil {
		return nil // not JSON: no usage to learn from
	}
	u := v.Get("usage")
	if u == nil || u.Type() != fastjson.TypeObject {
		return nil
	}
	return u.MarshalTo(make([]byte, 0, 256))
}

// maxUsageParse bounds what usageOf hands a JSON parser: bodies up to it
// are parsed whole with a pooled parser (whose memory then stays at most
// this large), larger ones only in their usage object, itself at most this.
const maxUsageParse = 64 << 10

// usageObject returns the JSON object that follows a key's closing quote
// in rest (`: {...}`), found by a scan that skips strings, or nil when
// none follows or it is longer than maxUsageParse.
func usageObject(rest []byte) []byte {
	j := 0
	for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
		j++
	}
	if j == len(rest) || rest[j] != ':' {
		return nil
	}
	j++
	for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
		j++
	}
	if j == len(rest) || rest[j] != '{' {
		return nil
	}
	start, depth, inStr := j, 0, false
	for ; j < len(rest) && j-start < maxUsageParse; j++ {
		c := rest[j]
		switch {
		case inStr && c == '\\':
			j++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return rest[start : j+1]
			}
		}
	}
	return nil
}

// sseUsage returns the "usage" object of an SSE event's data, or nil.
func sseUsage(ev []byte) []byte {
	if ev == nil {
		return nil
	}
	var data []byte
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(rest, []byte(" "))...)
		}
	}
	return usageOf(data)
}
