package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// msgsString writes messages as role:content[|reasoning] lines.
func msgsString(msgs []chat.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s:%s", m.Role, m.Content)
		if m.HasReasoning {
			fmt.Fprintf(&b, "|%s", m.Reasoning)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestDecodeResponses(t *testing.T) {
	t.Parallel()
	f := func(body, want string) {
		t.Helper()
		var d Request
		if e := Decode(&d, KindResponses, []byte(body), MaxScanDepth, nil); e != nil {
			t.Fatalf("%s: %v", body, e)
		}
		if got := msgsString(d.Messages); got != want {
			t.Fatalf("%s:\ngot\n%swant\n%s", body, got, want)
		}
		if !d.Options.AddGenerationPrompt {
			t.Fatalf("%s: no generation prompt", body)
		}
	}
	// A string input is one user message; instructions a system one
	// before it (empty instructions add nothing).
	f(`{"model":"m","input":"hi"}`, "user:hi\n")
	f(`{"model":"m","instructions":"be brief","input":"hi"}`, "system:be brief\nuser:hi\n")
	f(`{"model":"m","instructions":"","input":"hi"}`, "user:hi\n")
	f(`{"model":"m","instructions":null,"input":"hi"}`, "user:hi\n")
	// Last occurrence wins, as in Python.
	f(`{"model":"m","input":"first","input":"second"}`, "user:second\n")
	// Message items: string content, parts joined with "\n", non-text
	// parts as placeholders, type "message" or absent.
	f(`{"model":"m","input":[{"role":"user","content":"a"},{"type":"message","role":"developer","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"u"},{"type":"output_text","text":"y"}]}]}`,
		"user:a\ndeveloper:x\n<input_image>\ny\n")
	// Assistant items take their first part's text only, as vLLM does.
	f(`{"model":"m","input":[{"role":"user","content":"q"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"one"},{"type":"output_text","text":"two"}]},{"role":"user","content":"q2"}]}`,
		"user:q\nassistant:one\nuser:q2\n")
	// A tool round: reasoning, a call and the assistant text merge into
	// one assistant message; the output is a tool message.
	f(`{"model":"m","input":[{"role":"user","content":"weather?"},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},
		{"type":"function_call","call_id":"c1","name":"get","arguments":"{}"},
		{"type":"function_call","call_id":"c2","name":"get","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"sunny"},
		{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}]}`,
		"user:weather?\nassistant:|think\ntool:sunny\ntool:rain\n")
	// A call with no assistant message before it opens one; the text
	// that follows fills its content; a second text is a new message.
	f(`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"n","arguments":""},{"role":"assistant","content":"done"},{"role":"assistant","content":"more"}]}`,
		"assistant:done\nassistant:more\n")
	// Reasoning from the summary when there is no content; a second
	// reasoning item is a new message.
	f(`{"model":"m","input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},{"type":"reasoning","content":[{"text":"r2"}]}]}`,
		"assistant:|s\nassistant:|r2\n")
	// Unknown item types add nothing.
	f(`{"model":"m","input":[{"type":"item_reference","id":"x"},{"role":"user","content":"u"}]}`, "user:u\n")
	f(`{"model":"m","input":[]}`, "")

	var d Request
	if e := Decode(&d, KindResponses, []byte(`{"model":"m","input":"x","previous_response_id":"resp_1","stream":true}`), MaxScanDepth, nil); e != nil || d.PreviousResponseID != "resp_1" || !d.Stream {
		t.Fatalf("previous_response_id: %+v %v", d, e)
	}
}

func TestDecodeResponsesErrors(t *testing.T) {
	t.Parallel()
	f := func(body, param, msg string) {
		t.Helper()
		var d Request
		e := Decode(&d, KindResponses, []byte(body), MaxScanDepth, nil)
		if e == nil {
			t.Fatalf("%s: decoded", body)
		}
		if e.Status != 400 || e.Param != param || !strings.Contains(e.Message, msg) {
			t.Fatalf("%s: got %d %q %q, want param %q, message with %q", body, e.Status, e.Param, e.Message, param, msg)
		}
	}
	f(`{"input":"x"}`, "model", "model: missing")
	f(`{"model":"m"}`, "input", "input: missing")
	f(`{"model":"m","input":null}`, "input", "input: missing")
	f(`{"model":"m","input":3}`, "input", "want a string or an array")
	f(`{"model":"m","input":"x","instructions":1}`, "instructions", "want a string")
	f(`{"model":"m","input":"x","previous_response_id":1}`, "previous_response_id", "want a string")
	f(`{"model":"m","input":["x"]}`, "input[0]", "want an object")
	f(`{"model":"m","input":[{"role":1,"content":"x"}]}`, "input[0].role", "non-empty string")
	f(`{"model":"m","input":[{"role":"user","content":"x"},{"role":"user","content":[{"type":"input_text"}]}]}`, "input[1].content[0].text", "missing")
	f(`{"model":"m","input":[{"role":"user","content":[{"text":"x"}]}]}`, "input[0].content[0].type", "missing")
	f(`{"model":"m","input":[{"role":"user","content":5}]}`, "input[0].content", "want a string or an array")
	f(`{"model":"m","input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output", "missing")
	f(`{"model":"m","input":[{"type":"reasoning","encrypted_content":"xyz","summary":[]}]}`, "input[0].encrypted_content", "not supported")
	f(`{"model":"m","input":[{"type":7}]}`, "input[0].type", "want a string")
	f(`{"model":"m","input":"x","stream":"yes"}`, "stream", "want true or false")
}

// TestResponsesRenderAsChat: a Responses request renders exactly as the
// chat request vLLM turns it into, so both share keys.
func TestResponsesRenderAsChat(t *testing.T) {
	t.Parallel()
	r, err := chat.New(chat.ChatML, nil, chat.Config{})
	if err != nil {
		t.Fatal(err)
	}
	render := func(k Kind, body string) string {
		t.Helper()
		var d Request
		if e := Decode(&d, k, []byte(body), MaxScanDepth, nil); e != nil {
			t.Fatal(e)
		}
		segs, err := r.Render(nil, d.Messages, d.Options)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, s := range segs {
			b.WriteString(s.Text)
		}
		return b.String()
	}
	resp := render(KindResponses, `{"model":"m","instructions":"sys","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`)
	ch := render(KindChat, `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}]}`)
	if resp != ch || resp == "" {
		t.Fatalf("responses %q, chat %q", resp, ch)
	}
}

func FuzzDecodeResponses(f *testing.F) {
	f.Add(`{"model":"m","input":"hi"}`)
	f.Add(`{"model":"m","instructions":"s","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call"},{"type":"reasoning","content":[{"text":"r"}]}]}`)
	f.Add(`{"model":"m","input":[{"type":"function_call_output","output":[{"type":"refusal","refusal":"no"}]}],"previous_response_id":"r"}`)
	f.Add(`{"model":"m","input":` + strings.Repeat("[", MaxScanDepth+1) + `]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var d Request
		if e := Decode(&d, KindResponses, []byte(body), MaxScanDepth, nil); e != nil {
			if (e.Status != 400 && (e.Status != 413 || e.Code != "json_too_deep")) || e.Message == "" || !json.Valid(e.Body()) {
				t.Fatalf("bad error %+v", e)
			}
			return
		}
		for _, m := range d.Messages {
			if m.Role == "" {
				t.Fatalf("empty role in %+v", d.Messages)
			}
		}
	})
}
