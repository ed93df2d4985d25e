package backend

// Reading an answer's usage object (Hooks.Usage): from a JSON body, or
// from the last SSE event that has one.

import (
	"bytes"

	"github.com/saltus-lb/saltus/internal/jsonscan"
)

var usageKey = []byte(`"usage"`)

// usageKeys is what usageOf looks for among a body's members.
var usageKeys = []string{"usage"}

// usageOf returns a copy of a JSON body's non-null "usage" object, or nil.
// The body is not parsed: a scan (jsonscan.Members, no allocation, one
// pass) finds its top-level object's last "usage" member; an object of
// at most maxUsageParse bytes is copied as it is, not validated (its one
// reader, openai.ReadUsage, checks its grammar as it reads it). Scanning
// instead of parsing the whole answer cut a parse of every non-streamed
// answer (3.5 % of saltus's CPU under bench/nginx-compare.sh's load).
func usageOf(body []byte) []byte {
	var at, end [1]int
	open := jsonscan.SkipWS(body, 0)
	if jsonscan.Members(body, open, usageKeys, at[:], end[:]) < 0 || !jsonscan.Is(body, at[0], '{') {
		return nil // not an object (not JSON: no usage to learn from), or no usage object
	}
	u := body[at[0]:end[0]]
	if len(u) > maxUsageParse {
		return nil
	}
	return bytes.Clone(u)
}

// maxUsageParse bounds the usage object usageOf returns: what
// openai.ReadUsage reads (vLLM's is ~150 bytes).
const maxUsageParse = 4 << 10

// sseUsage returns the "usage" object of an SSE event's data, or nil. The
// data of an event of one data line (an engine's) is read in place;
// several are joined first.
func sseUsage(ev []byte) []byte {
	if ev == nil {
		return nil
	}
	var data []byte
	lines := 0
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			rest = bytes.TrimPrefix(rest, []byte(" "))
			if lines++; lines == 1 {
				data = rest // a view of ev until a second line comes
			} else {
				if lines == 2 {
					data = append([]byte(nil), data...)
				}
				data = append(data, rest...)
			}
		}
	}
	return usageOf(data)
}
