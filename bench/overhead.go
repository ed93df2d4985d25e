package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MeasureOverhead estimates the router's added latency: n pairs of the
// same short streamed request, one through routerURL and one straight to
// the backend the router chose for it, alternating; the result is the
// p50 and p99 of the per-pair TTFT differences (through − direct). The
// prompt is cached on that backend after the first request, so both legs
// cost the engine the same; what remains is the router's work and its
// extra hop. It needs X-Saltus-Backend on the routed answers.
func MeasureOverhead(ctx context.Context, routerURL string, n int, model string) (Percentiles, error) {
	c := NewClient(2)
	defer c.Close()
	path, body := requestBody(Request{
		Messages:  []Message{{Role: "system", Content: "saltus overhead probe"}, {Role: "user", Content: "Say one word."}},
		MaxTokens: 1,
	}, model)
	first := c.Do(ctx, routerURL+path, body)
	if first.Err != nil {
		return Percentiles{}, fmt.Errorf("overhead probe: %w", first.Err)
	}
	if first.Backend == "" {
		return Percentiles{}, errors.New("overhead probe: the router sent no X-Saltus-Backend")
	}
	diffs := make([]time.Duration, 0, n)
	for range n {
		if ctx.Err() != nil {
			break
		}
		via := c.Do(ctx, routerURL+path, body)
		direct := c.Do(ctx, first.Backend+path, body)
		if via.Err != nil || direct.Err != nil || via.Backend != first.Backend {
			continue // a pair that did not compare like with like
		}
		diffs = append(diffs, via.TTFT-direct.TTFT)
	}
	if len(diffs) == 0 {
		return Percentiles{}, errors.New("overhead probe: no comparable pair")
	}
	return percentiles(diffs), nil
}
