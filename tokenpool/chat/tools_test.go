package chat

import (
	"slices"
	"testing"
)

// TestBuiltinWithTools: the qwen3 built-in, recognized from Qwen3's own
// template, renders a request with tools or tool calls with that
// template (Renderer.withTools), and every other request itself.
func TestBuiltinWithTools(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "qwen3")
	r, used, warn, err := LoadTemplate(tok, testdata+"models/qwen3/tokenizer.json.gz", "", "")
	if err != nil || warn != nil || used != Qwen3 {
		t.Fatalf("LoadTemplate: %v, %q, %v", err, used, warn)
	}
	if !r.ToolsInterpreted() || r.Interpreted() || r.Wants()&WantExtras == 0 {
		t.Fatalf("qwen3 from its own template: tools interpreted %v, interpreted %v, wants %b", r.ToolsInterpreted(), r.Interpreted(), r.Wants())
	}
	plain, _, _, err := LoadTemplate(tok, testdata+"models/qwen3/tokenizer.json.gz", Qwen3, "")
	if err != nil || plain.ToolsInterpreted() || plain.Wants() != 0 {
		t.Fatalf("qwen3 by name: %v, tools interpreted %v, wants %b", err, plain.ToolsInterpreted(), plain.Wants())
	}
	render := func(r *Renderer, body string) []Segment {
		t.Helper()
		msgs, err := MessagesFromBodyFor([]byte(body), WantParts|WantExtras)
		if err != nil {
			t.Fatal(err)
		}
		segs, err := r.Render(nil, msgs, Options{AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		return segs
	}
	for _, c := range []struct {
		body  string
		tools bool
	}{
		{`[{"role":"user","content":"hi","name":"a"}]`, false},
		{`[{"role":"user","content":"hi"},{"role":"assistant","content":"x","tool_calls":[]},{"role":"tool","content":"r"}]`, false},
		{`[{"role":"user","content":"hi"},{"role":"assistant","content":"x","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}]`, true},
		{`[{"role":"user","content":"hi"},{"role":"tool","content":"r","tool_call_id":"1"}]`, true},
	} {
		got, builtin, own := render(r, c.body), render(plain, c.body), render(r.withTools, c.body)
		if want := map[bool][]Segment{false: builtin, true: own}[c.tools]; !slices.Equal(got, want) {
			t.Errorf("%s: %q, want the %s rendering %q", c.body, got, map[bool]string{false: "built-in", true: "template's"}[c.tools], want)
		}
	}
	if !MayNeedTools([]byte(`{"tools":[]}`)) || !MayNeedTools([]byte(`{"messages":[{"tool_calls":1}]}`)) || MayNeedTools([]byte(`{"messages":[{"content":"no tool here"}]}`)) {
		t.Error("MayNeedTools")
	}
}
