package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAudit: the audit lists every rule and each exception with its place
// and reason, and fails on an exception without a reason or a known rule.
func TestAudit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package a\n\nimport \"time\"\n\nfunc f() {\n\t//saltus:allow R2 not a loop: no event to wait for\n\ttime.Sleep(1)\n}\n")
	var out bytes.Buffer
	if code := audit(&out, dir); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	for _, want := range []string{"R1  Every goroutine", "R15  Metrics", "exceptions: 1", "a.go:6: not a loop: no event to wait for"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("audit lacks %q:\n%s", want, out.String())
		}
	}
	write("b.go", "package a\n\n//saltus:allow R2\nvar x = 1\n\n//saltus:allow R99 a rule that does not exist\nvar y = 2\n")
	out.Reset()
	if code := audit(&out, dir); code != 1 || !strings.Contains(out.String(), `unknown rule "R99"`) || !strings.Contains(out.String(), "2 exceptions without a known rule or a reason") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}
