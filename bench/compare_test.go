package bench

import (
	"strings"
	"testing"
)

func TestCompareTable(t *testing.T) {
	t.Parallel()
	run := func(policy string, hit, p99, rps float64) Summary {
		return Summary{Policy: policy, TokenHitRatio: hit, TTFT: Percentiles{P99: p99}, RPS: rps}
	}
	f := func(runs []Summary, want ...string) {
		t.Helper()
		got := CompareTable(runs, "prefix")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("table lacks %q:\n%s", w, got)
			}
		}
		if n := strings.Count(got, "**"); n != 6 && len(runs) > 1 {
			t.Errorf("%d bold markers, want 3 values marked:\n%s", n/2, got)
		}
	}
	f([]Summary{run("round_robin", 0.433, 3462, 5.25), run("consistent_hash", 0.758, 3528, 5.58), run("prefix", 0.937, 946, 6.05)},
		"| consistent_hash | **0.758** | 3528 | **5.58** | 0 |",
		"| round_robin | 0.433 | **3462** | 5.25 | 0 |",
		"| prefix | 0.937 | 946 | 6.05 | 0 |",
		"token hit ratio 0.937 vs 0.758 (consistent_hash, wins;",
		"TTFT p99 946 vs 3462 ms (round_robin, wins)",
		"req/s 6.05 vs 5.58 (consistent_hash)")
	// A hit ratio within 0.005 of the best baseline's is a tie (wins);
	// an equal P99 is not a win.
	f([]Summary{run("prefix", 0.896, 300, 6), run("body_hash", 0.900, 300, 6)},
		"0.896 vs 0.900 (body_hash, wins;", "TTFT p99 300 vs 300 ms (body_hash, loses)")
	f([]Summary{run("prefix", 0.890, 300, 6), run("body_hash", 0.900, 310, 6)},
		"0.890 vs 0.900 (body_hash, loses;", "(body_hash, wins)")
	if got := CompareTable([]Summary{run("round_robin", 0.4, 1, 1)}, "prefix"); strings.Contains(got, "against") {
		t.Errorf("no candidate run, yet a verdict:\n%s", got)
	}
}
