//go:build !race

package tracing

import "testing"

func TestBeginAllocs(t *testing.T) {
	l := Loop{rng: newPCG(), sampler: RatioSampler(0.01)}
	if n := testing.AllocsPerRun(100, func() {
		var c Context
		l.Begin(&c, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	}); n != 0 {
		t.Fatalf("Begin allocates %v times", n)
	}
}
