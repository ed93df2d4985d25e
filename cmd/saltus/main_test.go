package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"version"}, 0, "saltus dev " + runtime.Version(), ""},
		{[]string{"help"}, 0, "Commands:", ""},
		{nil, 2, "", "Usage:"},
		{[]string{"bogus"}, 2, "", `unknown command "bogus"`},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code {
			t.Errorf("run(%q) = %d, want %d", tc.args, code, tc.code)
		}
		if !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("run(%q): stdout %q, stderr %q; want them to contain %q and %q", tc.args, out.String(), errb.String(), tc.out, tc.err)
		}
	}
}
