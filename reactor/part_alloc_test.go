//go:build !race

package reactor

import "testing"

// TestPartGetAllocs: reading a part on the hot path (each request's
// Serve) allocates nothing.
func TestPartGetAllocs(t *testing.T) {
	l := &Loop{}
	a := &partA{1}
	testPartA.Set(l, a)
	if n := testing.AllocsPerRun(100, func() {
		if testPartA.Get(l) != a {
			t.Fatal("wrong part")
		}
	}); n != 0 {
		t.Fatalf("Part.Get: %v allocations, want 0", n)
	}
}
