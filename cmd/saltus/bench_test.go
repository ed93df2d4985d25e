package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/shard"
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

// TestBenchPolicies: --policies takes every policy saltus serve takes,
// from shard.Policies (not a copy), and "all" names them all in order.
func TestBenchPolicies(t *testing.T) {
	t.Parallel()
	all := shard.Policies()
	if got := benchPolicies("all"); !slices.Equal(got, all) {
		t.Errorf("all = %q, want %q", got, all)
	}
	if got := benchPolicies(" prefix , round_robin"); !slices.Equal(got, []string{"prefix", "round_robin"}) {
		t.Errorf("split = %q", got)
	}
	for _, p := range append(all, "all") {
		var o benchOptions
		if code := parseBench("saltus bench", []string{"--policies", p, "--backends", "1"}, io.Discard, &o); code >= 0 {
			t.Fatalf("--policies %s: parse exit %d", p, code)
		}
		rc, _, err := o.runConfig(nil, io.Discard, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Errorf("--policies %s: %v", p, err)
			continue
		}
		if want := benchPolicies(p); !slices.Equal(rc.Policies, want) {
			t.Errorf("--policies %s: runs %q, want %q", p, rc.Policies, want)
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
