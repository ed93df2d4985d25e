package bench

import (
	"fmt"
	"strings"
)

// TieHitRatio is how close a token hit ratio may come to the best
// baseline's and still count as a tie (issue 11: within 0.005).
const TieHitRatio = 0.005

// CompareTable renders one workload's runs as the policy comparison of
// issue 11: token hit ratio, P99 TTFT and requests/s per policy, the best
// baseline's value of each column in bold (every policy but candidate is
// a baseline), then one line saying whether candidate beats it. With no
// run of candidate, or no baseline, only the table.
func CompareTable(runs []Summary, candidate string) string {
	var b strings.Builder
	b.WriteString("| policy | token hit ratio | TTFT p99 ms | req/s | errors |\n|---|--:|--:|--:|--:|\n")
	var cand *Summary
	bestHit, bestP99, bestRPS := -1, -1, -1 // indices into runs of the best baselines
	for i := range runs {
		s := &runs[i]
		if s.Policy == candidate {
			cand = s
			continue
		}
		if bestHit < 0 || s.TokenHitRatio > runs[bestHit].TokenHitRatio {
			bestHit = i
		}
		if bestP99 < 0 || s.TTFT.P99 < runs[bestP99].TTFT.P99 {
			bestP99 = i
		}
		if bestRPS < 0 || s.RPS > runs[bestRPS].RPS {
			bestRPS = i
		}
	}
	mark := func(best bool, v string) string {
		if best {
			return "**" + v + "**"
		}
		return v
	}
	for i, s := range runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", s.Policy,
			mark(i == bestHit, fmt.Sprintf("%.3f", s.TokenHitRatio)),
			mark(i == bestP99, fmt.Sprintf("%.0f", s.TTFT.P99)),
			mark(i == bestRPS, fmt.Sprintf("%.2f", s.RPS)), s.Errors)
	}
	if cand == nil || bestHit < 0 {
		return b.String()
	}
	verdict := func(win bool) string {
		if win {
			return "wins"
		}
		return "loses"
	}
	h, p, r := runs[bestHit], runs[bestP99], runs[bestRPS]
	fmt.Fprintf(&b, "\n%s against the best baseline: token hit ratio %.3f vs %.3f (%s, %s; a tie within %.3f counts), "+
		"TTFT p99 %.0f vs %.0f ms (%s, %s), req/s %.2f vs %.2f (%s)\n",
		candidate, cand.TokenHitRatio, h.TokenHitRatio, h.Policy, verdict(cand.TokenHitRatio >= h.TokenHitRatio-TieHitRatio), TieHitRatio,
		cand.TTFT.P99, p.TTFT.P99, p.Policy, verdict(cand.TTFT.P99 < p.TTFT.P99), cand.RPS, r.RPS, r.Policy)
	return b.String()
}
