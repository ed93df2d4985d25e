//go:build !race

package httplex

import "testing"

func TestNormalizePathAllocs(t *testing.T) {
	for _, p := range []string{"/v1/chat/completions", "/v1/models", "/.well-known/x", "/v1/..x"} {
		if n := testing.AllocsPerRun(100, func() {
			if out, err := NormalizePath(p); err != nil || out != p {
				t.Fatalf("NormalizePath(%q) = %q, %v", p, out, err)
			}
		}); n != 0 {
			t.Errorf("NormalizePath(%q): %v allocations, want 0", p, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = NormalizePath("/v1/%2e%2e/x") }); n != 0 {
		t.Errorf("a refused path: %v allocations, want 0", n)
	}
}
