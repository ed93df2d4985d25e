package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
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

// TestTokenizeChatTemplateFile: --chat-template-file renders with a Jinja
// file; a model directory whose chat_template no built-in renders uses
// that template as Jinja; a file that does not parse is an error naming
// its line.
func TestTokenizeChatTemplateFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "t.jinja")
	src := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"tokenize", "--tokenizer", qwen3, "--chat", "--chat-template-file", file}, strings.NewReader(`[{"role":"user","content":" Hi "}]`), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := `"ids":[151644,872,198,13048,151645,198],"message_ends":[{"message":0,"segment":3,"token":6}]}`; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), `"template":"jinja (`+file+`)"`) {
		t.Errorf("got %s, want the ids %s from template jinja (%s)", out.String(), want, file)
	}

	// A model directory: the tokenizer and a config whose template is
	// the file's (recognized by no built-in).
	model := filepath.Join(dir, "model")
	if err := os.Mkdir(model, 0o755); err != nil {
		t.Fatal(err)
	}
	tj, err := os.ReadFile(qwen3)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(map[string]any{"chat_template": src, "eos_token": "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tokenizer.json.gz": tj, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(model, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"tokenize", "--tokenizer", filepath.Join(model, "tokenizer.json.gz"), "--chat"}, strings.NewReader(`[{"role":"user","content":" Hi "}]`), &out, &errb); code != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), `"ids":[151644,872,198,13048,151645,198]`) || !strings.Contains(out.String(), `"template":"jinja (`) {
		t.Errorf("model directory: %s", out.String())
	}

	if err := os.WriteFile(file, []byte("a\n{{ x | }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"tokenize", "--tokenizer", qwen3, "--chat", "--chat-template-file", file}, strings.NewReader(`[]`), io.Discard, &errb); code != 1 || !strings.Contains(errb.String(), file+": chat template: line 2") {
		t.Errorf("bad template: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"tokenize", "--tokenizer", qwen3, "--chat", "--chat-template", "qwen3", "--chat-template-file", file}, strings.NewReader(`[]`), io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "exclude each other") {
		t.Errorf("both: exit %d, stderr %q", code, errb.String())
	}
}
