//go:build !race

package openai

import "testing"

// TestScanJSONAllocs: the check every body passes allocates nothing when
// the body is fine.
func TestScanJSONAllocs(t *testing.T) {
	l := DefaultBodyLimits()
	for _, c := range scanBodies() {
		body := []byte(c.body)
		if n := testing.AllocsPerRun(3, func() { _, _, _ = scanJSON(body, l.MaxValues, l.MaxDepth) }); n != 0 {
			t.Errorf("%s: %v allocations", c.name, n)
		}
	}
}
