package vllmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// respJSON is what the tests read of a response object.
type respJSON struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Status             string  `json:"status"`
	Model              string  `json:"model"`
	PreviousResponseID *string `json:"previous_response_id"`
	Tools              []map[string]any
	Output             []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

func (r respJSON) text() string {
	if len(r.Output) != 1 || len(r.Output[0].Content) != 1 {
		return ""
	}
	return r.Output[0].Content[0].Text
}

func respond(t *testing.T, s *Sim, body map[string]any) respJSON {
	t.Helper()
	b, _ := json.Marshal(body)
	code, out := post(t, s, "/v1/responses", string(b))
	if code != 200 {
		t.Fatalf("POST /v1/responses: %d %s", code, out)
	}
	var r respJSON
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Object != "response" || r.Status != "incomplete" || r.Usage == nil || !strings.HasPrefix(r.ID, "resp_") ||
		len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" || !strings.HasPrefix(r.Output[0].ID, "msg_") {
		t.Fatalf("response: %s", out)
	}
	return r
}

// TestResponsesConversation: previous_response_id continues the stored
// conversation (instructions, earlier input, earlier output, new input),
// so turn 2 on the engine that made turn 1 finds turn 1's prompt cached,
// and the same conversation sent as items to an engine that never saw it
// has the same prompt and no cache.
func TestResponsesConversation(t *testing.T) {
	t.Parallel()
	a, b := startSim(t, nil), startSim(t, nil)
	instr := "You are a harbor master. " + text("rules", 600)
	q1 := "Tide tables for the north pier? " + text("q1", 900)
	r1 := respond(t, a, map[string]any{"model": "m", "instructions": instr, "input": q1, "max_output_tokens": 12})
	if r1.Usage.OutputTokens != 12 || len(strings.Fields(r1.text())) != 12 || r1.Usage.InputTokensDetails.CachedTokens != 0 {
		t.Fatalf("turn 1: %+v %q", r1.Usage, r1.text())
	}
	q2 := "And for the south pier?"
	r2 := respond(t, a, map[string]any{"model": "m", "instructions": instr, "input": q2, "previous_response_id": r1.ID, "max_output_tokens": 12})
	if r2.PreviousResponseID == nil || *r2.PreviousResponseID != r1.ID {
		t.Errorf("turn 2 previous_response_id: %v", r2.PreviousResponseID)
	}
	if c := r2.Usage.InputTokensDetails.CachedTokens; r2.Usage.InputTokens <= r1.Usage.InputTokens || c < r1.Usage.InputTokens-2*16 {
		t.Errorf("turn 2 on the same engine: input %d cached %d, want more than turn 1's %d input, nearly all of it cached",
			r2.Usage.InputTokens, c, r1.Usage.InputTokens)
	}
	// The same conversation, as items, to an engine that never saw turn 1.
	items := []any{
		map[string]any{"role": "user", "content": q1},
		map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": r1.text()}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": q2}}},
	}
	rb := respond(t, b, map[string]any{"model": "m", "instructions": instr, "input": items, "max_output_tokens": 12})
	if rb.Usage.InputTokens != r2.Usage.InputTokens || rb.Usage.InputTokensDetails.CachedTokens != 0 {
		t.Errorf("turn 2 as items on another engine: input %d cached %d, want input %d (the same prompt), none cached",
			rb.Usage.InputTokens, rb.Usage.InputTokensDetails.CachedTokens, r2.Usage.InputTokens)
	}
	if rb.text() != r2.text() {
		t.Errorf("equal prompts, different answers: %q vs %q", rb.text(), r2.text())
	}
	// Turn 3 continues turn 2, which continued turn 1.
	r3 := respond(t, a, map[string]any{"model": "m", "instructions": instr, "input": "Thanks.", "previous_response_id": r2.ID, "max_output_tokens": 5})
	if c := r3.Usage.InputTokensDetails.CachedTokens; c < r2.Usage.InputTokens-2*16 {
		t.Errorf("turn 3: input %d cached %d, want turn 2's %d nearly all cached", r3.Usage.InputTokens, c, r2.Usage.InputTokens)
	}

	// The other engine does not know turn 1: vLLM's not-found error.
	code, out := post(t, b, "/v1/responses", fmt.Sprintf(`{"model":"m","input":"x","previous_response_id":%q}`, r1.ID))
	wantErr(t, code, out, 404, "response_id", "Response with id '"+r1.ID+"' not found.")

	// GET returns the stored object; cancel refuses a finished one;
	// DELETE is not vLLM's.
	code, out = get(t, a, "/v1/responses/"+r2.ID)
	var g respJSON
	if err := json.Unmarshal(out, &g); code != 200 || err != nil || g.ID != r2.ID || g.text() != r2.text() || g.Usage.InputTokens != r2.Usage.InputTokens {
		t.Errorf("GET: %d %v %s", code, err, out)
	}
	code, out = get(t, b, "/v1/responses/"+r2.ID)
	wantErr(t, code, out, 404, "response_id", "Response with id '"+r2.ID+"' not found.")
	code, out = post(t, a, "/v1/responses/"+r2.ID+"/cancel", "")
	wantErr(t, code, out, 400, "response_id", "Cannot cancel a synchronous response.")
	req, _ := http.NewRequest(http.MethodDelete, a.URL()+"/v1/responses/"+r2.ID, nil)
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("DELETE: %d, want 405", resp.StatusCode)
	}
	// store false: answered, not stored.
	rs := respond(t, a, map[string]any{"model": "m", "input": "x", "store": false, "max_output_tokens": 2})
	if code, _ := get(t, a, "/v1/responses/"+rs.ID); code != 404 {
		t.Errorf("GET of a store:false response: %d, want 404", code)
	}
}

func wantErr(t *testing.T, code int, body []byte, wantCode int, param, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || code != wantCode || e.Error.Type != "invalid_request_error" ||
		e.Error.Param == nil || *e.Error.Param != param || (msg != "" && e.Error.Message != msg) {
		t.Errorf("got %d %s, want %d with param %q message %q", code, body, wantCode, param, msg)
	}
}

// TestResponsesStream: vLLM's events, in its order, numbered from 0; the
// deltas make the done text; the completed response carries the usage;
// tools are echoed as given.
func TestResponsesStream(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	tools := `[{"type":"function","name":"tide","description":"tide at a pier","parameters":{"type":"object","properties":{"pier":{"type":"string"}}},"strict":true}]`
	body := `{"model":"m","input":"Hello there, how are the tides?","stream":true,"max_output_tokens":4,"tools":` + tools + `}`
	st := stream(t, s, "/v1/responses", body)
	if st.status != 200 || st.readErr != nil || st.done || !strings.HasPrefix(st.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v done=%v %v", st.status, st.readErr, st.done, st.header)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if len(st.events) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(st.events), len(want), strings.Join(st.events, "\n"))
	}
	var deltas, done string
	var final respJSON
	for i, d := range st.events {
		var ev struct {
			Type           string          `json:"type"`
			SequenceNumber int             `json:"sequence_number"`
			Delta          string          `json:"delta"`
			Text           string          `json:"text"`
			ItemID         string          `json:"item_id"`
			Response       json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil || ev.Type != want[i] || ev.SequenceNumber != i {
			t.Fatalf("event %d: %v %s, want type %s, sequence_number %d", i, err, d, want[i], i)
		}
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.output_text.done":
			done = ev.Text
		case "response.completed":
			if err := json.Unmarshal(ev.Response, &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	if deltas != done || len(strings.Fields(done)) != 4 || final.text() != done {
		t.Errorf("deltas %q, done %q, completed %q", deltas, done, final.text())
	}
	if final.Usage == nil || final.Usage.OutputTokens != 4 || final.Usage.InputTokens == 0 || final.Usage.TotalTokens != final.Usage.InputTokens+4 {
		t.Errorf("completed usage: %+v", final.Usage)
	}
	if len(final.Tools) != 1 || final.Tools[0]["name"] != "tide" || final.Tools[0]["strict"] != true {
		t.Errorf("tools echoed: %+v", final.Tools)
	}
	// A streamed response is stored at its end.
	if code, out := get(t, s, "/v1/responses/"+final.ID); code != 200 || !strings.Contains(string(out), done) {
		t.Errorf("GET after the stream: %d %s", code, out)
	}
}

// TestResponseStoreBounded: over ResponseStore responses the oldest is
// evicted, and counted.
func TestResponseStoreBounded(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.ResponseStore = 2 })
	var ids []string
	for i := range 3 {
		ids = append(ids, respond(t, s, map[string]any{"input": fmt.Sprintf("question %d", i), "max_output_tokens": 1}).ID)
	}
	for i, id := range ids {
		code, _ := get(t, s, "/v1/responses/"+id)
		if want := map[bool]int{true: 404, false: 200}[i == 0]; code != want {
			t.Errorf("GET response %d: %d, want %d", i, code, want)
		}
	}
	if n, e := metric(t, s, "vllmsim_responses_stored"), metric(t, s, "vllmsim_responses_evicted_total"); n != 2 || e != 1 {
		t.Errorf("stored %v evicted %v, want 2 and 1", n, e)
	}
}

func TestResponsesErrors(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.MaxModelLen = 64 })
	for _, c := range []struct{ body, param string }{
		{`{"model":"m"}`, "input"},
		{`{"input":3}`, "input"},
		{`{"input":[{"type":"item_reference","id":"x"}]}`, "input"},
		{`{"input":[{"content":"no role"}]}`, "input"},
		{`{"input":[{"role":"user","content":[{"type":"input_text","text":7}]}]}`, "input"},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens"},
		{`{"input":"x","background":true}`, "background"},
		{`{"input":"x","previous_response_id":5}`, "previous_response_id"},
		{`{"input":"x","tools":{}}`, "tools"},
		{`{"input":"x","stream":"yes"}`, "stream"},
		{`{"input":"` + text("long", 400) + `"}`, "input"}, // 100 tokens > max_model_len 64
	} {
		code, out := post(t, s, "/v1/responses", c.body)
		wantErr(t, code, out, 400, c.param, "")
	}
}

func TestModelByID(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	code, out := get(t, s, "/v1/models/"+s.Config().Model)
	var m struct {
		ID, Object string
	}
	if err := json.Unmarshal(out, &m); code != 200 || err != nil || m.ID != s.Config().Model || m.Object != "model" {
		t.Errorf("GET /v1/models/{id}: %d %v %s", code, err, out)
	}
	code, out = get(t, s, "/v1/models/other")
	wantVLLMErr(t, code, out, 404, "NotFoundError", "model", "The model `other` does not exist.")
}

func FuzzDecodeResponsesRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","input":"hi","instructions":"be brief","stream":true,"max_output_tokens":3,"store":false}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}`,
		`{"input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x"},{"type":"refusal","refusal":"no"}]}]}`,
		`{"input":"x","previous_response_id":"resp_1","tools":[{"type":"function","name":"f"}],"tool_choice":"none","metadata":{"k":"v"},"temperature":0.5,"top_p":null}`,
		`{"input":null}`, `{"input":[]}`, `[]`, `{`, `{"input":[1]}`, `{"input":"x","temperature":"hot"}`,
		`{"input":"x","priority":-2}`, `{"input":"x","priority":"1"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, e := decodeResponsesRequest(body)
		if e != nil {
			if e.status != 400 || e.msg == "" {
				t.Fatalf("error %+v", e)
			}
			return
		}
		for _, raw := range [][]byte{r.tools, r.toolChoice, r.metadata} {
			if !json.Valid(raw) {
				t.Fatalf("echoed JSON is not valid: %q", raw)
			}
		}
		if r.input == nil {
			t.Fatal("decoded without input")
		}
		checkPriority(t, body, r.priority)
	})
}
