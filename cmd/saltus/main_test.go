package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

const llama3 = "../../tokenpool/testdata/models/llama3/tokenizer.json.gz"

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
		{[]string{"tokenize"}, "", 2, "", "--tokenizer PATH"},
		{[]string{"tokenize", "--tokenizer", llama3, "--chat"}, "[]", 2, "", "not available yet"},
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
