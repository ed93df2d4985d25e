package shard

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/upstream/backend"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_usage_requested_total": "Streamed chat and completion requests whose client did not ask for usage and that saltus asked stream_options.include_usage for (--learn-from-usage), " +
			"by result: usage (the engine's usage chunk was read, and removed from the client's stream), none (the stream ended without one).",
	})
}

// usageMetrics count the requests askUsage changed, by what came back.
type usageMetrics struct{ seen, none *metrics.Counter }

func newUsageMetrics(set *metrics.Set) usageMetrics {
	c := func(result string) *metrics.Counter {
		return set.NewCounter(fmt.Sprintf("saltus_usage_requested_total{result=%q}", result))
	}
	return usageMetrics{seen: c("usage"), none: c("none")}
}

// askUsage sets h for j (Config.LearnFromUsage): for a streamed chat or
// completion whose client did not ask for usage, the edit that sets
// stream_options.include_usage in its body as the request is written
// (backend.IncludeUsageSplice: no copy of the body; no scan of it either
// when the decoder saw no stream_options), and the removal of what that
// adds to the answer (Hooks.DropUsage) so the client's stream is the one
// it would have got, and the outcome counted; else h unchanged. Only for
// a request whose usage is read (wantsUsage: policy prefix learns from
// it): under the others it would cost an edit and an event scan, and the
// engine's usage chunk, for nothing (1-3 µs of CPU per streamed request,
// round_robin against nginx in bench/nginx-compare.sh's setup). body is
// the body to be forwarded. On the deciding loop.
func (r *Router) askUsage(j *job, h *backend.Hooks, body []byte) {
	// A keyed request's tokens are charged from its usage (keys.go),
	// under every policy and whether or not saltus learns from it.
	// So are a request log's (reqlog.go), when its sink wants tokens,
	// and a sampled span's (tracing).
	keyed := (j.key != nil || j.wantsTokens()) && (j.route == routeChat || j.route == routeCompletions)
	if !j.d.Stream || j.d.IncludeUsage || !(keyed || r.learn.Load() && j.wantsUsage()) {
		return
	}
	e, ok := backend.IncludeUsageSplice(body, !j.d.HasStreamOptions)
	if !ok {
		return
	}
	h.Edit = e // made as the request is written: no copy of the body
	// vLLM's chat chunks gained "usage":null with include_usage before
	// 0.6; its completion chunks have it either way (usageopt.go).
	h.DropUsage, h.DropUsageNull = true, j.route == routeChat
	j.askedUsage = true // counted at the end (jobEvents.Done)
}
