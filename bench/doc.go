// Package bench measures saltus against the alternatives a user could run
// instead, on the same engines: `saltus bench` (Run: workloads from
// bench/workload driven against every policy, each on cold engines of
// bench/vllmsim, summarized per policy: token hit ratio, TTFT
// percentiles, requests/s, load spread), and the serving-path
// measurements (Load, a closed-loop HTTP/1.1 load; StartUpstream, an
// instant OpenAI-compatible engine; MeasureOverhead, the router's added
// TTFT; BenchmarkAddedLatency and BenchmarkRelay; bench/nginx-compare.sh
// against nginx).
//
// # Goroutines
//
// Every goroutine runs in a rules.Group and ends with its call: Load's
// connections (one goroutine each, owning its connection and its own
// latency samples, merged under a mutex as it stops; the answer count is
// shared under that mutex), Drive's simulated users (one each, owning its
// user's conversation state; each sample appended under a mutex), and
// StartUpstream's server (until Close). The caller owns every result
// value; nothing here is shared after a call returns.
package bench
