package vllmsim

import (
	"encoding/json"
	"strings"
	"testing"
)

// msgJSON is what the tests read of a message object.
type msgJSON struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string         `json:"type"`
		Text  string         `json:"text"`
		ID    string         `json:"id"`
		Name  string         `json:"name"`
		Input map[string]any `json:"input"`
	} `json:"content"`
	Usage msgUsage `json:"usage"`
}

type msgUsage struct {
	InputTokens  int  `json:"input_tokens"`
	OutputTokens int  `json:"output_tokens"`
	CacheRead    *int `json:"cache_read_input_tokens"`
}

func jsonBody(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestMessages: a Messages request is served as its chat request (the
// same prompt: the chat request's cached blocks are its cache hits), as
// a message object or vLLM's event stream; tools with tool_choice any
// get a tool_use block; errors are Anthropic's error object.
func TestMessages(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	system := text("lighthouse", 2000)
	chat := complete(t, s, "/v1/chat/completions", jsonBody(map[string]any{"model": "m", "max_tokens": 4,
		"messages": []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": "tides?"}}}))
	anth := map[string]any{"model": "m", "max_tokens": 4,
		"system":   []map[string]any{{"type": "text", "text": system}},
		"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "tides?"}}}}}
	code, b := post(t, s, "/v1/messages", jsonBody(anth), "anthropic-version", "2023-06-01")
	var m msgJSON
	if err := json.Unmarshal(b, &m); err != nil || code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	bs := DefaultConfig().BlockSize
	prompt := chat.Usage.PromptTokens
	if m.Type != "message" || m.Role != "assistant" || m.Model != "m" || m.StopReason != "max_tokens" || len(m.Content) != 1 ||
		m.Content[0].Type != "text" || m.Content[0].Text != chat.Choices[0].Message.Content ||
		m.Usage.CacheRead == nil || *m.Usage.CacheRead != prompt/bs*bs || m.Usage.InputTokens+*m.Usage.CacheRead != prompt || m.Usage.OutputTokens != 4 {
		t.Fatalf("message after its chat request (prompt %d): %s", prompt, b)
	}

	anth["stream"] = true
	st := stream(t, s, "/v1/messages", jsonBody(anth))
	var names []string
	var got strings.Builder
	var last msgUsage
	for _, ev := range st.events {
		var e struct {
			Type  string
			Delta struct{ Type, Text, StopReason string }
			Usage *msgUsage
		}
		if err := json.Unmarshal([]byte(ev), &e); err != nil {
			t.Fatalf("%v: %s", err, ev)
		}
		names = append(names, e.Type)
		if e.Delta.Type == "text_delta" {
			got.WriteString(e.Delta.Text)
		}
		if e.Usage != nil {
			last = *e.Usage
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if st.status != 200 || strings.Join(names, " ") != want || got.String() != m.Content[0].Text || last.OutputTokens != 4 || last.CacheRead == nil ||
		last.InputTokens+*last.CacheRead != prompt || st.done || st.header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("stream: %d %s %q %+v", st.status, names, got.String(), last)
	}

	tools := map[string]any{"model": "m", "max_tokens": 2, "tool_choice": map[string]any{"type": "any"},
		"tools":    []map[string]any{{"name": "get_weather", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}},
		"messages": []map[string]any{{"role": "user", "content": "weather in Paris?"}}}
	code, b = post(t, s, "/v1/messages", jsonBody(tools))
	m = msgJSON{}
	if err := json.Unmarshal(b, &m); err != nil || code != 200 || m.StopReason != "tool_use" || len(m.Content) != 1 ||
		m.Content[0].Type != "tool_use" || m.Content[0].Name != "get_weather" || m.Content[0].Input["city"] != "sim" || m.Content[0].ID == "" {
		t.Fatalf("tool use: %d %s", code, b)
	}
	tools["stream"] = true
	st = stream(t, s, "/v1/messages", jsonBody(tools))
	if len(st.events) != 7 || !strings.Contains(st.events[2], `"type":"tool_use"`) || !strings.Contains(st.events[3], `"partial_json":"{\"city\":\"sim\"}"`) {
		t.Fatalf("streamed tool use: %q", st.events)
	}

	f := func(body string, status int, typ, msg string) {
		t.Helper()
		code, b := post(t, s, "/v1/messages", body)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(b, &e); err != nil || code != status || e.Type != "error" || e.Error.Type != typ || !strings.Contains(e.Error.Message, msg) {
			t.Fatalf("%s: %d %s", body, code, b)
		}
	}
	f(`{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "BadRequestError", "max_tokens")
	f(`{"model":"nope","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, 404, "NotFoundError", "nope")
	f(`{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"x"}]}`, 400, "BadRequestError", "role")
}

// FuzzConvertMessages: a body converts to a chat request the simulator
// reads, or is refused with a 400; never a panic.
func FuzzConvertMessages(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"data":"x"}}]}]}`,
		`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"f","input":{"a":[1.5,"b"]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"i","content":[{"type":"text","text":"r"}]}]}]}`,
		`{"max_tokens":1,"messages":[]}`, `{`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		chat, _, e := convertMessages(body)
		if e != nil {
			if e.status != 400 {
				t.Fatalf("%s: %d", body, e.status)
			}
			return
		}
		if _, e := decodeRequest(chat, kindChat); e != nil && e.status != 400 {
			t.Fatalf("%s: its chat request %s: %d", body, chat, e.status)
		}
	})
}
