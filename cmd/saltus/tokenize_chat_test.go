package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestTokenizeChatMany: --chat --json renders every conversation of the
// array with one tokenizer load and prints, in order, what --chat prints
// for each alone; one that fails is an error element and exit code 1.
func TestTokenizeChatMany(t *testing.T) {
	t.Parallel()
	convs := []string{
		`[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]`,
		`{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"}],"add_generation_prompt":false}`,
		`[{"role":"user","content":"a"},{"role":"user","content":"b"}]`, // not alternating: llama2 refuses
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]}`,
	}
	args := []string{"tokenize", "--tokenizer", mistral, "--chat", "--chat-template", "llama2"}
	var out, errb bytes.Buffer
	if code := run(append(args, "--json"), strings.NewReader("["+strings.Join(convs, ",")+"]"), &out, &errb); code != 1 {
		t.Fatalf("--json: exit %d, want 1 (one conversation fails); stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "conversation 2: chat template llama2: messages[1]") {
		t.Errorf("stderr %q does not name conversation 2", errb.String())
	}
	var got []json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out.String())
	}
	if len(got) != len(convs) || strings.Count(out.String(), "\n") != len(convs)+1 {
		t.Fatalf("%d elements on %d lines, want %d on %d:\n%s", len(got), strings.Count(out.String(), "\n"), len(convs), len(convs)+1, out.String())
	}
	for i, c := range convs {
		var one, e bytes.Buffer
		code := run(args, strings.NewReader(c), &one, &e)
		want := strings.TrimSpace(one.String())
		if code != 0 {
			want = `{"error":` + mustJSON(t, strings.TrimSpace(strings.TrimPrefix(e.String(), "saltus tokenize: "))) + `}`
		}
		if string(got[i]) != want {
			t.Errorf("conversation %d:\n got %s\nwant %s", i, got[i], want)
		}
	}
}

func mustJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
