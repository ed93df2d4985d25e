package backend

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// Learning from usage (--learn-from-usage): a streamed chat or completion
// whose client did not ask for stream_options.include_usage gets it asked
// for on its way to the engine (InjectIncludeUsage), and what that option
// adds to the SSE answer is removed before the client sees it
// (Hooks.DropUsage), so the client's stream is the one it would have got
// while the usage (cached_tokens) reaches Outcome.Usage.
//
// What include_usage changes in vLLM's stream (serving_chat.py,
// serving_completion.py):
//   - one more event before `data: [DONE]`: the usage chunk, `choices`
//     empty and a `usage` object (dumped with exclude_none);
//   - chat, vLLM before 0.6: every other chunk gains a top-level
//     `"usage":null` (the chunk's usage was set to None, and chunks are
//     dumped with exclude_unset). Later versions set it only with
//     continuous_usage_stats, which the client asked for itself (and then
//     include_usage too, since vLLM ignores one without the other);
//   - completions: nothing else; its chunks are dumped with
//     exclude_unset=False and carry `"usage":null` either way, so it is
//     kept there (Hooks.DropUsageNull is for chat only).

// includeUsageMember is the member InjectIncludeUsage adds when the body
// has no stream_options; the body grows by at most its length plus one.
const includeUsageMember = `"stream_options":{"include_usage":true}`

// MaxInjectGrowth bounds how many bytes InjectIncludeUsage adds to a body.
const MaxInjectGrowth = len(includeUsageMember) + 1

// InjectIncludeUsage returns body with stream_options.include_usage set to
// true, read as Python's json reads it (the last occurrence of a key
// wins, as chat.Field): the other keys of stream_options the client sent
// are kept, a null stream_options or a false/null include_usage replaced.
// The rest of the body is not re-encoded: the result is body with one
// splice (at most MaxInjectGrowth bytes longer). It returns body and false
// when include_usage is already true, or body is not a JSON object with
// an object or null stream_options (nothing to do, or the engine will
// refuse it anyway). It does not validate the rest of body: call it on a
// body that parsed. The result is written into dst's buffer (a new one if
// it is too small; dst may be nil); body is not modified.
func InjectIncludeUsage(dst, body []byte) ([]byte, bool) {
	open := skipWS(body, 0)
	if open >= len(body) || body[open] != '{' {
		return body, false
	}
	m, ok := lastMember(body, open, "stream_options")
	if !ok {
		return body, false
	}
	if m.val < 0 { // absent: first member of the object
		ins := includeUsageMember
		if !emptyObject(body, open) {
			ins += ","
		}
		return splice(dst, body, open+1, open+1, ins), true
	}
	switch body[m.val] {
	case 'n': // null: as absent
		return splice(dst, body, m.val, m.end, `{"include_usage":true}`), true
	case '{':
	default:
		return body, false
	}
	iu, ok := lastMember(body, m.val, "include_usage")
	if !ok {
		return body, false
	}
	if iu.val < 0 {
		ins := `"include_usage":true`
		if !emptyObject(body, m.val) {
			ins += ","
		}
		return splice(dst, body, m.val+1, m.val+1, ins), true
	}
	if string(body[iu.val:iu.end]) == "true" {
		return body, false
	}
	return splice(dst, body, iu.val, iu.end, "true"), true
}

// splice returns b[:i] + s + b[j:], appended to dst[:0] (a new slice if
// dst is too small).
func splice(dst, b []byte, i, j int, s string) []byte {
	out := dst[:0]
	if n := len(b) - (j - i) + len(s); cap(out) < n {
		out = make([]byte, 0, n)
	}
	out = append(out, b[:i]...)
	out = append(out, s...)
	return append(out, b[j:]...)
}

// member is one object member's byte offsets: start (its key's opening
// quote), val (its value's first byte; -1: no such member) and end (just
// past its value).
type member struct{ start, val, end int }

// lastMember finds the last member named key of the object opening at
// b[open] ('{'). ok is false when the object is malformed.
func lastMember(b []byte, open int, key string) (m member, ok bool) {
	m = member{start: -1, val: -1, end: -1}
	i := skipWS(b, open+1)
	if i < len(b) && b[i] == '}' {
		return m, true
	}
	for i < len(b) {
		if b[i] != '"' {
			return m, false
		}
		ks := i
		ke := skipString(b, i)
		if ke < 0 {
			return m, false
		}
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return m, false
		}
		vs := skipWS(b, i+1)
		ve := skipValue(b, vs)
		if ve < 0 {
			return m, false
		}
		if keyIs(b[ks:ke], key) {
			m = member{start: ks, val: vs, end: ve}
		}
		i = skipWS(b, ve)
		if i >= len(b) {
			return m, false
		}
		switch b[i] {
		case '}':
			return m, true
		case ',':
			i = skipWS(b, i+1)
		default:
			return m, false
		}
	}
	return m, false
}

// emptyObject reports whether the object opening at b[open] has no member.
func emptyObject(b []byte, open int) bool {
	i := skipWS(b, open+1)
	return i < len(b) && b[i] == '}'
}

// keyIs reports whether the quoted JSON string q decodes to key.
func keyIs(q []byte, key string) bool {
	if bytes.IndexByte(q, '\\') < 0 {
		return len(q) == len(key)+2 && string(q[1:len(q)-1]) == key
	}
	var p fastjson.Parser // rare: an escaped key
	v, err := p.ParseBytes(q)
	return err == nil && string(v.GetStringBytes()) == key
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset past the string opening at b[i], or -1.
func skipString(b []byte, i int) int {
	// The closing quote is the first one after i not escaped, that is not
	// preceded by an odd run of backslashes; IndexByte jumps the text
	// between quotes (a prompt is mostly such text).
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
	}
	return -1
}

// skipValue returns the offset past the value starting at b[i], or -1.
// Containers are skipped by counting brackets outside strings (the body
// parsed before: their contents are not checked).
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := skipString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(b[j])) {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// usageEvent classifies an SSE event of an answer whose request saltus
// asked usage for: drop (it is the usage chunk: one data line of a JSON
// object whose last "choices" is an empty array and whose last "usage" an
// object), or, when stripNull, the offsets of a top-level "usage":null
// member to cut (cut[0] < cut[1]; commas included so the rest stays valid
// JSON). An event it cannot read is left alone.
func usageEvent(ev []byte, stripNull bool) (drop bool, cut [2]int) {
	if !bytes.Contains(ev, usageKey) {
		return false, cut
	}
	d, ok := bytes.CutPrefix(ev, []byte("data:"))
	if !ok {
		return false, cut
	}
	start := len(ev) - len(d)
	start = skipWS(ev, start) // the space after "data:"; an object opens here
	if start >= len(ev) || ev[start] != '{' {
		return false, cut
	}
	end := skipValue(ev, start)
	if end < 0 || len(bytes.TrimLeft(ev[end:], "\r\n")) != 0 {
		return false, cut // more than one line, or not one object
	}
	u, ok := lastMember(ev, start, "usage")
	if !ok || u.val < 0 {
		return false, cut
	}
	switch ev[u.val] {
	case '{':
		c, ok := lastMember(ev, start, "choices")
		if ok && c.val >= 0 && ev[c.val] == '[' && ev[skipWS(ev, c.val+1)] == ']' {
			return true, cut
		}
	case 'n':
		if !stripNull || string(ev[u.val:u.end]) != "null" {
			return false, cut
		}
		// Cut the member and the comma before it, or after it when it
		// is the first.
		i := u.start
		for k := i - 1; k > start; k-- {
			if ev[k] == ',' {
				return false, [2]int{k, u.end}
			}
			if ev[k] != ' ' && ev[k] != '\t' && ev[k] != '\n' && ev[k] != '\r' {
				break
			}
		}
		j := skipWS(ev, u.end)
		if j < len(ev) && ev[j] == ',' {
			return false, [2]int{i, skipWS(ev, j+1)}
		}
		return false, [2]int{i, u.end} // the only member
	}
	return false, cut
}
