package shard

import (
	"encoding/json"
	"strings"
	"testing"
)

// anthropicBody is a Messages request with systemA and one user turn.
func anthropicBody(user string) string {
	b, err := json.Marshal(map[string]any{"model": model, "max_tokens": 64, "stream": true,
		"system":   []map[string]string{{"type": "text", "text": systemA}},
		"messages": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": user}}}}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestRouterMessages: an Anthropic Messages request is keyed as its chat
// request (the tree a Messages request taught matches the chat request
// whole, on the same backend, under the built-in and a Jinja template),
// counted under route messages, and saltus's own refusals there are in
// Anthropic's error shape.
func TestRouterMessages(t *testing.T) {
	t.Parallel()
	for _, jinja := range []bool{false, true} {
		e := newEnv(t, envOpts{loops: 3, backends: 4, tokenizer: true, jinja: jinja})
		msg := anthropicBody("Which lamp oil burns cleanest?")
		chat := chatBody("system", systemA, "user", "Which lamp oil burns cleanest?")
		dm, err := e.r.Explain([]byte(msg), "/v1/messages")
		if err != nil {
			t.Fatal(err)
		}
		dc, err := e.r.Explain([]byte(chat), "/v1/chat/completions")
		if err != nil || dc.TotalBlocks != dm.TotalBlocks || dm.TotalBlocks < 4 {
			t.Fatalf("jinja %v: messages %+v, chat %+v %v", jinja, dm, dc, err)
		}
		c, _, total, _ := routed(t, e, 0, "/v1/messages", msg)
		c2, matched, total2, reason := routed(t, e, 1, "/v1/chat/completions", chat)
		if c2.candidates[0] != c.candidates[0] || matched != total || total2 != total || reason != "tree" {
			t.Fatalf("jinja %v: chat after messages: backend %d then %d, %d/%d %s", jinja, c.candidates[0], c2.candidates[0], matched, total2, reason)
		}
		e.loops.settle(t)
		if n := e.r.m.requests[routeMessages][200].Load(); n != 1 {
			t.Fatalf("messages 200s counted: %d", n)
		}
		// Over OffloopBytes: decoded by a decode worker, routed the same.
		big := anthropicBody(strings.Repeat("Which lamp oil burns cleanest? ", 3000))
		before := e.r.m.offloop.Get()
		if c, _, total, _ := routed(t, e, 2, "/v1/messages", big); total < 1000 || e.r.m.offloop.Get() != before+1 {
			t.Fatalf("jinja %v: a large body: %+v, %d blocks, offloop %d then %d", jinja, c, total, before, e.r.m.offloop.Get())
		}
	}

	e := newEnv(t, envOpts{loops: 2, backends: 2})
	f := func(method, body string, status int, typ, msg string) {
		t.Helper()
		x := newExchange(0, method, "/v1/messages", body)
		if c := e.serve(t, x); c != nil {
			t.Fatalf("%s: forwarded", body)
		}
		var got struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(x.body, &got); err != nil || x.status != status || got.Type != "error" || got.Error.Type != typ ||
			!strings.Contains(got.Error.Message, msg) || x.header("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %s", method, body, x.status, x.body)
		}
	}
	f("POST", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "max_tokens: missing")
	f("POST", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"x"}]}]}`, 400, "invalid_request_error", "messages[0].content[0].type")
	f("POST", `{"model":`, 400, "invalid_request_error", "")
	f("GET", ``, 405, "invalid_request_error", "not allowed")
	mixedFleet(e)
	f("POST", `{"model":"org/gamma","max_tokens":1,"messages":[{"role":"user","content":"hi there"}]}`, 404, "not_found_error", "org/gamma")
}
