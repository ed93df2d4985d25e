package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimBenchDemoFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"sim", "--help"}, 0, "\n  --kv-tokens tokens\n"},
		{[]string{"sim", "--profile", "tpu"}, 2, `profile: unknown "tpu", want one of a100-13b, h100-8b`},
		{[]string{"sim", "--speedup", "0.5"}, 2, "speedup: must be at least 1"},
		{[]string{"sim", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"bench", "--help"}, 0, "\n  --policies policies\n"},
		{[]string{"bench", "--policies", "random"}, 2, `unknown policy "random"`},
		{[]string{"bench", "--workloads", "nope"}, 2, `unknown workload "nope"`},
		{[]string{"bench", "--users", "0"}, 2, "users must be positive"},
		{[]string{"demo", "--help"}, 0, "Usage: saltus demo"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.err)
		}
	}
}

// TestBenchRun: a tiny real benchmark (2 engines, 2 policies, 1 s each,
// speedup 50) writes its report, results and plots.
func TestBenchRun(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--backends", "2", "--users", "4", "--duration", "1500ms", "--speedup", "50",
		"--policies", "round_robin,prefix", "--workloads", "multiturn", "--overhead-pairs", "5", "--out", dir},
		strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("code %d: %s\n%s", code, out.String(), errb.String())
	}
	for _, f := range []string{"report.md", "results.json", "multiturn_ttft_cdf.png", "multiturn_hit_ratio.png", "multiturn_ttft_p99.png", "multiturn_load.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, s := range []string{"| round_robin |", "| prefix |", "saltus bench --backends 2"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
	if !strings.Contains(out.String(), "wrote ") {
		t.Errorf("stdout: %s", out.String())
	}
}
