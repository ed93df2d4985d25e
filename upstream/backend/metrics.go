package backend

import "github.com/saltus-lb/saltus/internal/promtext"

// latencyBuckets are the upper bounds, in seconds, of
// saltus_backend_ttfb_seconds and saltus_backend_request_duration_seconds
// (Prometheus le buckets, so histogram_quantile reads them). LLM latencies
// span five orders of magnitude: a cached prompt's first token in
// milliseconds, a 4K-token miss in ~0.5 s, a long generation in minutes.
// Roughly 1-2.5-5 per decade from 1 ms to 10 s, then 30 s, 1, 2, 5 and
// 10 min; above that only +Inf. 18 buckets per histogram per backend.
var latencyBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

func init() {
	promtext.Describe(map[string]string{
		"saltus_backend_in_flight":                  "Requests in flight to each backend (sent, not finished).",
		"saltus_backend_pending_prefill_tokens":     "Predicted uncached prompt tokens of the streamed requests sent to each backend that have had no first event yet (policy prefix's queue term).",
		"saltus_backend_footprint_tokens":           "Prompt tokens of the prefixes in use on each backend, as the router counts them (policy prefix's eviction term).",
		"saltus_backend_kv_pinned_tokens":           "KV tokens the router's requests in flight pin on each backend's engine, as the router counts them (policy prefix's wait for KV room).",
		"saltus_backend_requests_total":             "Answers relayed for each backend, by the HTTP status code the client got (504 included; other: outside 100..599).",
		"saltus_upstream_errors_total":              "Failed sends to each backend, by kind (connect, timeout, reset, midstream).",
		"saltus_backend_breaker_trips_total":        "Times each backend's passive circuit breaker tripped (consecutive connect errors and 5xx).",
		"saltus_backend_ttfb_seconds":               "Time from sending a request to each backend to its response head, in seconds.",
		"saltus_backend_request_duration_seconds":   "Time from a request's first send to each backend to the end of its answer (retries included), in seconds.",
		"saltus_retries_total":                      "Sends to a further candidate backend after a failure before the first byte.",
		"saltus_engine_refusals_total":              "Engines' 429 and 503 answers before any answer byte (full, not broken): the request went to the next candidate, or saltus answered its own 429/503 with Retry-After when every candidate was full; the engine counts as full for its Retry-After (else 1 s).",
		"saltus_engine_error_retries_total":         "Engines' 500, 502 and 504 answer heads, before any answer byte, that saltus sent to the next candidate engine instead of the client (--retry-server-errors; the last candidate's answer goes to the client as it is).",
		"saltus_engine_refusal_outcomes_total":      "What followed each engine refusal (saltus_engine_refusals_total), by outcome: retried (sent to the next candidate engine), requeued (every candidate refused: back to its pool's gateway queue until a slot frees), refused (every candidate refused and its requeues were spent: saltus's own 429/503 with Retry-After).",
		"saltus_backend_overload_total":             "Requests refused (503) because the backend set had its maximum of requests in flight.",
		"saltus_proxy_in_flight":                    "Requests in flight through the backend set (bounded by its MaxInFlight).",
		"saltus_upstream_body_spilled_total":        "Non-streamed answers over --max-response-body, relayed as they came instead of buffered whole.",
		"saltus_stream_overflow_total":              "Streamed answers ended because the client did not read them (over 4 MiB owed); the upstream connection is closed.",
		"saltus_backend_loop_samples_dropped_total": "Latency and status samples of the loop path dropped because the metrics flusher's queue was full.",
	})
}

// What followed an engine's refusal, the outcome label of
// saltus_engine_refusal_outcomes_total.
const (
	refusalRetried  = iota // the next candidate was tried
	refusalRequeued        // Hooks.Requeue took it back
	refusalRefused         // saltus's own 429/503
	numRefusalOutcomes
)

var refusalOutcomeNames = [numRefusalOutcomes]string{"retried", "requeued", "refused"}
