package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// anthropicJSON is a Messages request of sysA (as a text block) and one
// user turn.
func anthropicJSON(stream bool, user string) string {
	b, _ := json.Marshal(map[string]any{"model": "llama3", "max_tokens": 4, "stream": stream,
		"system":   []map[string]any{{"type": "text", "text": sysA}},
		"messages": []map[string]any{{"role": "user", "content": user}}})
	return string(b)
}

// TestServeMessages: Anthropic's POST /v1/messages through saltus to
// simulated vLLM engines (llama3 tokenizer and template on both sides):
// routed by prefix like its chat request (the same keys: a chat request
// after it matches it whole, on its engine), its usage learned from (the
// engines' cached tokens are the route table's prediction), streamed
// events passed through as they come, and saltus's own refusals and API
// key checks (x-api-key) in Anthropic's error shape.
func TestServeMessages(t *testing.T) {
	t.Parallel()
	_, urls := startSims(t, 3, 100)
	file := keyFile(t, "", keyEntry("alpha", "sk-alpha-secret-1", ""))
	s := startServeWith(t, nil, func(c *serveConfig) { c.Keys.File = file }, urls...)
	key := []string{"x-api-key", "sk-alpha-secret-1", "anthropic-version", "2023-06-01"}
	send := func(body string) answer {
		t.Helper()
		a := post(t, s.addr, "/v1/messages", body, key...)
		if a.status != 200 {
			t.Fatalf("POST /v1/messages: %d %s", a.status, a.body)
		}
		return a
	}
	type message struct {
		Type       string
		StopReason string `json:"stop_reason"`
		Content    []struct{ Type, Text string }
		Usage      struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			CacheRead    int `json:"cache_read_input_tokens"`
		}
	}
	first := send(anthropicJSON(false, "Where is the Maersk Alabama?"))
	if _, total, reason := parseRoute(t, first.route); reason != "hash" || total < 8 {
		t.Fatalf("first: route %q", first.route)
	}
	again := send(anthropicJSON(false, "Which port code is Rotterdam?"))
	var m message
	if err := json.Unmarshal([]byte(again.body), &m); err != nil || m.Type != "message" || len(m.Content) != 1 || m.Usage.OutputTokens != 4 {
		t.Fatalf("again: %s", again.body)
	}
	matched, _, reason := parseRoute(t, again.route)
	if reason != "tree" || matched < 8 || again.backend != first.backend || m.Usage.CacheRead < matched*16 {
		t.Fatalf("again: route %q on %s (first on %s), usage %+v", again.route, again.backend, first.backend, m.Usage)
	}
	// The chat request the first one converts to has the same keys.
	chat := post(t, s.addr, "/v1/chat/completions", `{"model":"llama3","max_tokens":4,"messages":[{"role":"system","content":`+
		mustJSON(t, sysA)+`},{"role":"user","content":"Where is the Maersk Alabama?"}]}`, key...)
	if cm, ct, cr := parseRoute(t, chat.route); chat.status != 200 || cr != "tree" || cm != ct || chat.backend != first.backend {
		t.Fatalf("its chat request: %d route %q on %s, first on %s", chat.status, chat.route, chat.backend, first.backend)
	}

	// Streamed: the engine's events, untouched (no [DONE], no usage
	// chunk asked for), usage in message_delta learned from.
	st := send(anthropicJSON(true, "How deep is the Elbe at Hamburg?"))
	if !strings.HasPrefix(st.header.Get("Content-Type"), "text/event-stream") || !strings.HasPrefix(st.body, "event: message_start\n") ||
		!strings.HasSuffix(st.body, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") || strings.Contains(st.body, "[DONE]") ||
		!strings.Contains(st.body, `"stop_reason":"max_tokens"`) || st.backend != first.backend {
		t.Fatalf("stream: %v %s", st.header, st.body)
	}
	mt := s.metrics(t)
	if got := mt[`saltus_requests_total{route="messages",code="200"}`]; got != 3 {
		t.Errorf("messages 200s counted: %v", got)
	}
	if mt["saltus_route_usage_absent_total"] != 0 || mt["saltus_route_actual_cached_tokens_total"] < float64(matched*16) {
		t.Errorf("usage feedback: absent %v, actual cached %v", mt["saltus_route_usage_absent_total"], mt["saltus_route_actual_cached_tokens_total"])
	}

	// Anthropic's error shape for saltus's own answers.
	f := func(body string, hdr []string, status int, typ, msg string) {
		t.Helper()
		a := post(t, s.addr, "/v1/messages", body, hdr...)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal([]byte(a.body), &e); err != nil || a.status != status || e.Type != "error" || e.Error.Type != typ || !strings.Contains(e.Error.Message, msg) {
			t.Fatalf("%s: %d %s", body, a.status, a.body)
		}
	}
	f(anthropicJSON(false, "x"), nil, 401, "authentication_error", "You didn't provide an API key")
	f(anthropicJSON(false, "x"), []string{"x-api-key", "sk-wrong-secret-00"}, 401, "authentication_error", "Incorrect API key")
	f(`{"model":"llama3","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, key, 400, "invalid_request_error", "max_tokens: must be positive")
	f(`{"model":"nope","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, key, 404, "not_found_error", "nope")
	a := post(t, s.addr, "/v1/messages/count_tokens", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, key...)
	if a.status != 404 || !strings.HasPrefix(a.body, `{"type":"error","error":{"type":"not_found_error"`) {
		t.Fatalf("count_tokens of an unknown model: %d %s", a.status, a.body)
	}
}

// TestServeMessagesPassThrough: the engine gets the Messages request as
// sent (a stream is not asked for usage: vLLM sends it in message_delta
// anyway) with Anthropic's headers, and its events reach the client as
// they came.
func TestServeMessagesPassThrough(t *testing.T) {
	t.Parallel()
	events := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"llama3\",\"usage\":{\"input_tokens\":9,\"output_tokens\":0}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	got := make(chan [3]string, 1)
	up := newUpstreamFunc(t, "a", func(u *upstream, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- [3]string{string(body), r.Header.Get("anthropic-version"), r.Header.Get("x-api-key")}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events)
	})
	s := startServeWith(t, []*upstream{up}, func(c *serveConfig) { c.Router.LearnFromUsage = true })
	body := anthropicJSON(true, "Where is the Maersk Alabama?")
	a := post(t, s.addr, "/v1/messages", body, "anthropic-version", "2023-06-01", "x-api-key", "sk-engine")
	g := <-got
	if a.status != 200 || a.body != events || g[0] != body || g[1] != "2023-06-01" || g[2] != "sk-engine" {
		t.Fatalf("%d %q; the engine got %q", a.status, a.body, g)
	}
}

// TestServeMessagesBackendErrors: the answers saltus's transport gives
// itself on /v1/messages (nothing answering: 502; a stream cut
// mid-way: its SSE error event) are in Anthropic's error shape.
func TestServeMessagesBackendErrors(t *testing.T) {
	t.Parallel()
	up := newUpstreamFunc(t, "a", func(u *upstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\"}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection dies mid-stream
	})
	s := startServeWith(t, []*upstream{up}, nil, "http://127.0.0.1:1") // a second backend where nothing listens
	cut := post(t, s.addr, "/v1/messages", anthropicJSON(true, "Where is the Maersk Alabama?"))
	if !strings.Contains(cut.body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"upstream connection lost mid-stream\"}}") {
		t.Fatalf("cut stream: %d %q", cut.status, cut.body)
	}
	up.srv.Close()
	a := post(t, s.addr, "/v1/messages", anthropicJSON(false, "Which port code is Rotterdam?"))
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || a.status/100 != 5 || e.Type != "error" ||
		(e.Error.Type != "api_error" && e.Error.Type != "overloaded_error") || e.Error.Message == "" {
		t.Fatalf("nothing answering: %d %s", a.status, a.body)
	}
}
