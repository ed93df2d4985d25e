package openai

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// hostileBodies are the bodies of issue 33: each under 8 MB, each cheap
// to send and, parsed into a fastjson tree, dear to hold.
func hostileBodies() []struct {
	name string
	kind Kind
	body string
} {
	n := 1_000_000
	if raceBuild {
		// A quarter: the ratios are the same, and the race detector makes
		// each decode several times slower (this test took over a minute
		// of CI's race run at full size).
		n = 250_000
	}
	rep := func(elem string) string { return strings.TrimSuffix(strings.Repeat(elem+",", n), ",") }
	// The Anthropic bodies (six, each converted and then decoded as
	// chat) at a quarter again under the race detector: the ratios hold.
	repA := rep
	if raceBuild {
		repA = func(elem string) string { return strings.TrimSuffix(strings.Repeat(elem+",", n/4), ",") }
	}
	msg := `"messages":[{"role":"user","content":"x"}]`
	nested := strings.Repeat("[", 63) + strings.Repeat("]", 63) // 64 levels under the body's object: DefaultBodyLimits' MaxDepth
	var ids strings.Builder
	for i := range n {
		if i > 0 {
			ids.WriteByte(',')
		}
		ids.WriteString(strconv.Itoa(i % 150_000)) // token ids of a real vocabulary's size
	}
	return []struct {
		name string
		kind Kind
		body string
	}{
		{"ones in an unknown member", KindChat, `{"model":"m","junk":[` + rep("1") + `],` + msg + `}`},
		{"empty objects in an unknown member", KindChat, `{"model":"m","junk":[` + rep("{}") + `],` + msg + `}`},
		{"one-character strings in an unknown member", KindChat, `{"model":"m","junk":[` + rep(`"a"`) + `],` + msg + `}`},
		{"nested arrays in an unknown member", KindChat, `{"model":"m","junk":[` + strings.TrimSuffix(strings.Repeat(nested+",", 2<<20/len(nested)), ",") + `],` + msg + `}`},
		{"one-character content parts", KindChat, `{"model":"m","messages":[{"role":"user","content":[` + rep(`"a"`) + `]}]}`},
		{"one-character text parts", KindChat, `{"model":"m","messages":[{"role":"user","content":[` + rep(`{"type":"text","text":"a"}`) + `]}]}`},
		{"empty objects as messages", KindChat, `{"model":"m","messages":[` + rep("{}") + `]}`},
		{"smallest messages", KindChat, `{"model":"m","messages":[` + rep(`{"role":"x"}`) + `]}`},
		{"smallest named messages", KindChat, `{"model":"m","messages":[` + rep(`{"role":"x","name":""}`) + `]}`},
		{"smallest tool calls", KindChat, `{"model":"m","messages":[` + rep(`{"role":"assistant","tool_calls":[0]}`) + `]}`},
		{"prompt_token_ids", KindCompletion, `{"model":"m","prompt_token_ids":[` + ids.String() + `]}`},
		{"ones as a prompt", KindCompletion, `{"model":"m","prompt":[` + rep("1") + `]}`},
		{"empty objects as prompt_token_ids", KindCompletion, `{"model":"m","prompt_token_ids":[` + rep("{}") + `]}`},
		{"empty objects as Responses input", KindResponses, `{"model":"m","input":[` + rep("{}") + `]}`},
		{"smallest Responses items", KindResponses, `{"model":"m","input":[` + rep(`{"role":"x"}`) + `]}`},
		{"smallest Anthropic messages", KindMessages, `{"model":"m","max_tokens":1,"messages":[` + repA(`{"role":"user","content":""}`) + `]}`},
		{"one-character text blocks", KindMessages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` + repA(`{"type":"text","text":"a"}`) + `]}]}`},
		{"smallest tool_use blocks", KindMessages, `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[` + repA(`{"type":"tool_use"}`) + `]}]}`},
		{"smallest tool results", KindMessages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` + repA(`{"type":"tool_result"}`) + `]}]}`},
		{"ones in a tool input", KindMessages, `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","input":{"a":[` + repA("1") + `]}}]}]}`},
		{"smallest images", KindMessages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` + repA(`{"type":"image","source":{}}`) + `]}]}`},
	}
}

// allocated is the bytes fn allocates (runtime.MemStats.TotalAlloc: every
// allocation counts, however soon the GC frees it, so it bounds the
// peak's growth).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeMemory: decoding any of the hostile bodies allocates at most
// 8 times the body's size (issue 33), copying or through a Scratch.
// Measured (2026-12-06, 2-core Xeon; bytes allocated per body byte,
// copying / through a Scratch / the fastjson decoder, which this replaced):
// a million 1s, {}s, "a"s or nested arrays in an unknown member 0.00 /
// 0.00 / 117-232; a million one-character content parts 1.00 / 1.00 /
// 119, text parts 1.00 / 1.00 / 53; a million {} as messages 0.00 / 0.00
// / 174; a million smallest messages ({"role":"x"}) 6.54 / 5.54 / 75 (the
// most: a 72-byte chat.Message, content parts included, per 13 bytes),
// named ones ({"role":"x","name":""}, whose Extra the Message's parts
// encode) 4.13 / 4.13 / 66, smallest tool calls 2.90 / 2.90 / 51; 1 M prompt_token_ids 0.64 /
// 0.64 / 76; a million 1s as a prompt 2.00 / 2.00 / 234 (4 bytes per
// id); a million {} as prompt_token_ids 1.34 / 1.34 / 156; a million {}
// as Responses input 0.00 / 0.00 / 155, smallest items 4.31 / 4.31 / 99;
// Anthropic Messages bodies below (their own bound).
// -v logs this machine's numbers. Not parallel: TotalAlloc counts every
// goroutine's allocations.
func TestDecodeMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ~40 MB of bodies")
	}
	for _, c := range hostileBodies() {
		body := []byte(c.body)
		var d Request
		var sc Scratch
		newCopy := allocated(func() { _ = Decode(&d, c.kind, body, 64, nil) })
		d = Request{}
		newView := allocated(func() { _ = Decode(&d, c.kind, body, 64, &sc) })
		d = Request{}
		joined := allocated(func() { _ = DecodeWith(&d, c.kind, body, 64, nil, 0) })
		d = Request{}
		var old uint64
		if !raceBuild && c.kind != KindMessages { // the fastjson decoder's figure is for the log only
			old = allocated(func() { _ = oldDecode(&d, c.kind, body) })
		}
		n := float64(len(body))
		t.Logf("%-45s %8d bytes: copying %5.2fx, through a Scratch %5.2fx, joined parts %5.2fx, fastjson %6.1fx",
			c.name, len(body), float64(newCopy)/n, float64(newView)/n, float64(joined)/n, float64(old)/n)
		limit := 8.0
		if raceBuild {
			// The race detector's instrumentation allocates more: the
			// smallest messages measured 12.1x copying (6.5x without it).
			// The bound still catches a tree per value (50-230x).
			limit = 14
		}
		all := []uint64{newCopy, newView, joined}
		if c.kind == KindMessages {
			// An Anthropic body is decoded as the chat JSON it converts
			// to (messages.go), which for the smallest blocks is a few
			// times its bytes (a 20-byte tool_use block is a 67-byte tool
			// call: the converted JSON, grown once, then the canonical
			// tool calls and their copy in the message). Measured
			// (copying; 2026-12-06, 2-core Xeon): smallest messages 5.5x,
			// text blocks 3.0x, tool_use blocks 18.3x (2.0x joined: no
			// tool calls without a template that reads them), tool
			// results 9.7x, a tool input of ones 6.5x, images 6.9x.
			limit *= 2.5
		}
		for _, got := range all {
			if float64(got) > limit*n {
				t.Errorf("%s: decoding %d bytes allocated %d (%.1fx), want at most %gx", c.name, len(body), got, float64(got)/n, limit)
			}
		}
	}
}
