package backend

import (
	"bytes"

	"github.com/saltus-lb/saltus/internal/jsonscan"
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

// Splice is one edit of a request body as it is forwarded
// (Hooks.Edit): Text in place of body[From:To]. The zero Splice edits
// nothing.
type Splice struct {
	From, To int
	Text     string
}

// IncludeUsageSplice is the edit that sets stream_options.include_usage to
// true in body, read as Python's json reads it (the last occurrence of a
// key wins, as chat.Field): the other keys of stream_options the client
// sent are kept, a null stream_options or a false/null include_usage
// replaced; the body grows by at most MaxInjectGrowth bytes. noOptions
// says body has no stream_options member at all (the decoder knows:
// openai.Request.HasStreamOptions), which spares the scan of the body.
// ok is false when include_usage is already true, or body is not a JSON
// object with an object or null stream_options (nothing to do, or the
// engine will refuse it anyway). It does not validate the rest of body:
// call it on a body that parsed.
func IncludeUsageSplice(body []byte, noOptions bool) (e Splice, ok bool) {
	open := jsonscan.SkipWS(body, 0)
	if open >= len(body) || body[open] != '{' {
		return e, false
	}
	m := jsonscan.Member{Val: -1}
	if !noOptions {
		if m, ok = jsonscan.LastMember(body, open, "stream_options"); !ok {
			return e, false
		}
	}
	if m.Val < 0 { // absent: first member of the object
		ins := includeUsageMember + "," // constants: no allocation
		if jsonscan.EmptyObject(body, open) {
			ins = includeUsageMember
		}
		return Splice{open + 1, open + 1, ins}, true
	}
	switch body[m.Val] {
	case 'n': // null: as absent
		return Splice{m.Val, m.End, `{"include_usage":true}`}, true
	case '{':
	default:
		return e, false
	}
	iu, ok := jsonscan.LastMember(body, m.Val, "include_usage")
	if !ok {
		return e, false
	}
	if iu.Val < 0 {
		ins := `"include_usage":true,`
		if jsonscan.EmptyObject(body, m.Val) {
			ins = `"include_usage":true`
		}
		return Splice{m.Val + 1, m.Val + 1, ins}, true
	}
	if string(body[iu.Val:iu.End]) == "true" {
		return e, false
	}
	return Splice{iu.Val, iu.End, "true"}, true
}

// InjectIncludeUsage returns body with IncludeUsageSplice's edit made:
// the rest of the body is not re-encoded. It returns body and false where
// IncludeUsageSplice has nothing to do. The result is written into dst's
// buffer (a new one if it is too small; dst may be nil); body is not
// modified.
func InjectIncludeUsage(dst, body []byte) ([]byte, bool) {
	e, ok := IncludeUsageSplice(body, false)
	if !ok {
		return body, false
	}
	return splice(dst, body, e.From, e.To, e.Text), true
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

// usageEvent classifies an SSE event of an answer whose request saltus
// asked usage for: drop (it is the usage chunk: one data line of a JSON
// object whose last "choices" is an empty array and whose last "usage" an
// object), or, when stripNull, the offsets of a top-level "usage":null
// member to cut (cut[0] < cut[1]; commas included so the rest stays valid
// JSON). usage is the usage object of a dropped chunk (a view into ev).
// An event it cannot read is left alone.
func usageEvent(ev []byte, stripNull bool) (drop bool, cut [2]int, usage []byte) {
	if !bytes.Contains(ev, usageKey) {
		return false, cut, nil
	}
	d, ok := bytes.CutPrefix(ev, []byte("data:"))
	if !ok {
		return false, cut, nil
	}
	start := len(ev) - len(d)
	start = jsonscan.SkipWS(ev, start) // the space after "data:"; an object opens here
	// One pass over the object: its last "usage" and "choices", and its
	// end.
	var at, end [2]int
	e := jsonscan.Members(ev, start, usageChoices[:], at[:], end[:])
	if e < 0 || len(bytes.TrimLeft(ev[e:], "\r\n")) != 0 {
		return false, cut, nil // more than one line, or not one object
	}
	u, c := at[0], at[1]
	if u < 0 {
		return false, cut, nil
	}
	switch ev[u] {
	case '{':
		if c >= 0 && ev[c] == '[' && ev[jsonscan.SkipWS(ev, c+1)] == ']' {
			return true, cut, ev[u:end[0]]
		}
	case 'n':
		if !stripNull || string(ev[u:end[0]]) != "null" {
			return false, cut, nil
		}
		m, _ := jsonscan.LastMember(ev, start, "usage") // its key's offset (rare: vLLM before 0.6)
		// Cut the member and the comma before it, or after it when it
		// is the first.
		i := m.Start
		for k := i - 1; k > start; k-- {
			if ev[k] == ',' {
				return false, [2]int{k, m.End}, nil
			}
			if ev[k] != ' ' && ev[k] != '\t' && ev[k] != '\n' && ev[k] != '\r' {
				break
			}
		}
		j := jsonscan.SkipWS(ev, m.End)
		if j < len(ev) && ev[j] == ',' {
			return false, [2]int{i, jsonscan.SkipWS(ev, j+1)}, nil
		}
		return false, [2]int{i, m.End}, nil // the only member
	}
	return false, cut, nil
}

// usageChoices is what usageEvent looks for among an event's members.
var usageChoices = [2]string{"usage", "choices"}
