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
// # Model pools
//
// A LocalFleet's Layout gives each engine its own models (issue 29):
// "mixed" is five engines, org/alpha on three (its adapter alpha-tuned on
// two of those) and org/beta on two, saltus given their URLs only;
// "alpha" and "beta" are its pools' engines alone. With the mixed
// workload, whose users each use one model and which sometimes names a
// model nobody serves, a run's Summary.Models counts per model where the
// answers came from (X-Saltus-Backend against what each engine serves:
// ModelFleet), the non-200 answers, and whether a 404 was saltus's own
// (no X-Saltus-Backend) or an engine's; PoolTable sets each model's
// token hit ratio in the mixed fleet beside the same users' on its
// pool's engines alone.
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
