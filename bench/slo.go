package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SLOSummary is a run judged as users feel it (issue 31): TTFT, goodput
// under a TTFT objective, failures, and the router's prediction of the
// engines' caches against what the engines reported.
type SLOSummary struct {
	// SLO is the TTFT objective (RunConfig.SLO), in simulated time as
	// the samples are.
	SLO time.Duration `json:"slo_ttft_ns"`
	// Requests counts the run's requests, the ones cut at its end too;
	// Failed those that did not end in a whole 200 stream (errors and
	// cut requests: an unanswered request missed the objective).
	Requests int `json:"requests"`
	Failed   int `json:"failed"`
	// TTFTMean and TTFT are of the whole 200 streams.
	TTFTMean float64     `json:"ttft_mean_ms"`
	TTFT     Percentiles `json:"ttft"`
	// Good counts whole 200 streams whose TTFT was within SLO; Goodput
	// is Good a second of the run (Summary.Duration).
	Good    int     `json:"good"`
	Goodput float64 `json:"goodput_per_s"`
	// PromptTokens and CachedTokens are the engines' usage of the whole
	// 200 streams (prompt_tokens, prompt_tokens_details.cached_tokens);
	// TokenHitRatio their ratio.
	PromptTokens  int64   `json:"prompt_tokens"`
	CachedTokens  int64   `json:"cached_tokens"`
	TokenHitRatio float64 `json:"token_hit_ratio"`
	// Predicted: the router read its route table (some X-Saltus-Route
	// of the run has reason "tree"), so each answer's route header says
	// how many leading blocks it expected the engine to hold.
	// PredictedTokens is Σ min(matched blocks × RunConfig.RouteBlock,
	// prompt tokens) over the whole 200 streams with a route header,
	// PredictedRatio that over their prompt tokens; Agree is the share of
	// them whose prediction was within one block of the engine's cached
	// tokens; Over the tokens predicted but not cached, Under those
	// cached but not predicted. Zero when not Predicted.
	Predicted       bool    `json:"predicted"`
	PredictedTokens int64   `json:"predicted_tokens"`
	PredictedRatio  float64 `json:"predicted_hit_ratio"`
	Agree           float64 `json:"agree"`
	Over            int64   `json:"over_tokens"`
	Under           int64   `json:"under_tokens"`
}

// SummarizeSLO judges samples against a TTFT objective slo; span is the
// run's (Summary.Duration), block the router's tokens per route block.
func SummarizeSLO(samples []Sample, slo, span time.Duration, block int) SLOSummary {
	s := SLOSummary{SLO: slo, Requests: len(samples)}
	var ttft []time.Duration
	var sum time.Duration
	for _, x := range samples {
		if x.Cut || x.Err != "" || x.Status != 200 {
			s.Failed++
			continue
		}
		ttft = append(ttft, x.TTFT)
		sum += x.TTFT
		if x.TTFT <= slo {
			s.Good++
		}
		s.PromptTokens += int64(x.Prompt)
		s.CachedTokens += int64(x.Cached)
		if _, reason, ok := parseRoute(x.Route); ok && reason == "tree" {
			s.Predicted = true
		}
	}
	if len(ttft) > 0 {
		s.TTFTMean = ms(sum) / float64(len(ttft))
	}
	s.TTFT = percentiles(ttft)
	if span > 0 {
		s.Goodput = float64(s.Good) / span.Seconds()
	}
	if s.PromptTokens > 0 {
		s.TokenHitRatio = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	if !s.Predicted || block <= 0 {
		s.Predicted = false
		return s
	}
	var prompt int64
	agree, n := 0, 0
	for _, x := range samples {
		matched, _, ok := parseRoute(x.Route)
		if !ok || x.Cut || x.Err != "" || x.Status != 200 {
			continue
		}
		pred := min(int64(matched)*int64(block), int64(x.Prompt))
		s.PredictedTokens += pred
		prompt += int64(x.Prompt)
		d := pred - int64(x.Cached)
		if d > 0 {
			s.Over += d
		} else {
			s.Under -= d
		}
		if d <= int64(block) && d >= -int64(block) { // vLLM keeps the last prompt token uncached: a whole-prompt hit reads one block short
			agree++
		}
		n++
	}
	if prompt > 0 {
		s.PredictedRatio = float64(s.PredictedTokens) / float64(prompt)
	}
	if n > 0 {
		s.Agree = float64(agree) / float64(n)
	}
	return s
}

// parseRoute reads an X-Saltus-Route value, "matched/total reason …":
// the matched blocks and the reason.
func parseRoute(v string) (matched int, reason string, ok bool) {
	head, rest, found := strings.Cut(v, " ")
	if !found {
		return 0, "", false
	}
	m, _, found := strings.Cut(head, "/")
	if !found {
		return 0, "", false
	}
	n, err := strconv.Atoi(m)
	if err != nil || n < 0 {
		return 0, "", false // not saltus's header: no prediction to read
	}
	reason, _, _ = strings.Cut(rest, " ")
	return n, reason, true
}

// SLOTable renders the runs' SLOSummary as one Markdown table, a row per
// run; "" if no run has one.
func SLOTable(runs []Summary) string {
	var b strings.Builder
	for _, s := range runs {
		x := s.SLO
		if x == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "| policy | requests | failed | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | goodput (TTFT ≤ %v) req/s | token hit ratio (engines) | predicted hit ratio (saltus) | predictions within a block | tokens predicted, not cached | cached, not predicted |\n", x.SLO)
			b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		}
		pred, agree, over, under := "—", "—", "—", "—"
		if x.Predicted {
			pred, agree = fmt.Sprintf("%.3f", x.PredictedRatio), fmt.Sprintf("%.1f %%", 100*x.Agree)
			over, under = fmt.Sprint(x.Over), fmt.Sprint(x.Under)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.0f | %.0f | %.2f | %.3f | %s | %s | %s | %s |\n",
			s.Label(), x.Requests, x.Failed, x.TTFTMean, x.TTFT.P50, x.TTFT.P99, x.Goodput, x.TokenHitRatio, pred, agree, over, under)
	}
	return b.String()
}
