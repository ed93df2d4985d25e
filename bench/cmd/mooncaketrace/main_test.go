package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestRun: the default trace is the shipped one; -rows and -seed pick
// another; bad flags fail with a message.
func TestRun(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "t.jsonl")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("code %d: %s", code, stderr.String())
	}
	made, err := os.ReadFile(out)
	shipped, err2 := os.ReadFile("../../traces/mooncake-small.jsonl")
	if err != nil || err2 != nil || !bytes.Equal(made, shipped) {
		t.Fatalf("the default trace is not bench/traces/mooncake-small.jsonl (%v, %v)", err, err2)
	}
	if code := run([]string{"-rows", "5", "-seed", "3"}, &stdout, &stderr); code != 0 || strings.Count(stdout.String(), "\n") != 5 ||
		!strings.HasPrefix(stdout.String(), `{"timestamp": 0, "input_length": `) {
		t.Fatalf("code %d: %q", code, stdout.String())
	}
	stderr.Reset()
	if code := run([]string{"-rows", "0"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "rows: want 1 to") {
		t.Fatalf("code %d: %s", code, stderr.String())
	}
	if code := run([]string{"-out", filepath.Join(t.TempDir(), "no", "such", "dir")}, &stdout, &stderr); code != 1 {
		t.Fatalf("code %d for an unwritable path", code)
	}
}
