package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

const (
	llama3  = "../../tokenpool/testdata/models/llama3/tokenizer.json.gz"
	qwen3   = "../../tokenpool/testdata/models/qwen3/tokenizer.json.gz"
	mistral = "../../tokenpool/testdata/models/mistral7b/tokenizer.json.gz"
)

func TestRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		in       string
		code     int
		out, err string
	}{
		{[]string{"version"}, "", 0, "saltus dev " + runtime.Version(), ""},
		{[]string{"help"}, "", 0, "Commands:", ""},
		{nil, "", 2, "", "Usage:"},
		{[]string{"bogus"}, "", 2, "", `unknown command "bogus"`},
		{[]string{"tokenize", "--tokenizer", llama3}, "Hello world", 0, "[9906,1917]\n", ""},
		{[]string{"tokenize", "--tokenizer", llama3, "--special"}, "Hello world", 0, "[128000,9906,1917]\n", ""},
		{[]string{"tokenize", "--tokenizer", llama3, "--json"}, `["Hello world", "", "<|eot_id|>"]`, 0, "[[9906,1917],[],[128009]]\n", ""},
		{[]string{"tokenize", "--tokenizer", llama3, "--json"}, `{"not": "an array"}`, 1, "", "JSON array of strings"},
		{[]string{"tokenize", "--tokenizer", llama3}, "\xff", 1, "", "not valid UTF-8"},
		{[]string{"tokenize", "--tokenizer", "/nonexistent"}, "", 1, "", "cannot read tokenizer"},
		{[]string{"tokenize"}, "", 2, "", "saltus tokenize: missing --tokenizer (saltus tokenize --help lists the flags)\n"},
		{[]string{"tokenize", "--tokenizer", llama3, "extra"}, "", 2, "", "saltus tokenize: unexpected argument \"extra\""},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat"}, `[{"role":"system","content":" Be brief. "},{"role":"user","content":"Hi"}]`, 0,
			`{"template":"llama3","segments":[{"text":"<|begin_of_text|>","special":true,"ids":[128000]},{"text":"<|start_header_id|>","special":true,"ids":[128006]},{"text":"system","special":false,"ids":[9125]},{"text":"<|end_header_id|>","special":true,"ids":[128007]},{"text":"\n\nBe brief.","special":false,"ids":[271,3513,10015,13]},{"text":"<|eot_id|>","special":true,"ids":[128009]},`, ""},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat"}, `{"model":"m","messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}`, 0,
			`"ids":[128000,128006,882,128007,271,13347,128009],"message_ends":[{"message":0,"segment":5,"token":7}]}`, ""},
		{[]string{"tokenize", "--tokenizer", qwen3, "--chat"}, `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`, 0,
			`{"template":"qwen3",`, ""},
		{[]string{"tokenize", "--tokenizer", qwen3, "--chat"}, `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`, 0,
			`{"text":"<think>","special":true,"ids":[151667]},{"text":"\n\n","special":false,"ids":[271]},{"text":"</think>"`, ""},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat"}, `[{"role":"user","content":"Hi"}]`, 0, `"template":"none"`, "warning: chat template not recognized: the tokenizer config has no chat_template"},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat", "--chat-template", "mistral"}, `[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"}]`, 0,
			`"ids":[1,733,16289,28793,15359,733,28748,16289,28793,28802,28709,2],"message_ends":[{"message":1,"segment":2,"token":12}]}`, ""},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat", "--chat-template", "llama2"}, `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`, 1, "", "messages[1] (role \"user\"): roles must alternate"},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat", "--chat-template", "llama4"}, `[]`, 1, "", `unknown chat template "llama4"`},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat"}, `[{"content":"x"}]`, 1, "", "messages[0].role: missing"},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat"}, `{"model":"m"}`, 1, "", `has no "messages"`},
		{[]string{"tokenize", "--tokenizer", mistral, "--chat"}, `[`, 1, "", "--chat wants a JSON messages array"},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat-template", "llama3"}, `[]`, 2, "", "--chat-template needs --chat"},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat", "--special"}, `[]`, 2, "", "does not combine"},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat", "--json"}, `{"messages":[]}`, 1, "", "--chat --json wants a JSON array of conversations"},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat", "--json"}, `[]`, 0, "[]\n", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			if code := run(tc.args, strings.NewReader(tc.in), &out, &errb); code != tc.code {
				t.Errorf("run(%q) = %d, want %d", tc.args, code, tc.code)
			}
			if !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
				t.Errorf("run(%q): stdout %q, stderr %q; want them to contain %q and %q", tc.args, out.String(), errb.String(), tc.out, tc.err)
			}
		})
	}
}
