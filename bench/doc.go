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
// # Overload
//
// The saturation workload (bench/workload) sends open-loop Poisson
// arrivals at a rate (Options.Rate, in the client's time; `saltus bench
// --rate` is in simulated time and scaled by --speedup), each with vLLM's
// "priority" -10 or 10 and a tenant key (Authorization: Bearer "small"
// for 1 in 12, else "big"), against engines made saturated with the
// simulator's MaxNumSeqs, MaxWaiting and OverloadStatus (issue 30). Drive
// sends a request when its time comes and a user is free: each user holds
// one request in flight, so the users bound what is in flight, and a
// request sent late because every user was busy is counted
// (Sample.Late). Any run whose answers were not all 200, or whose
// requests named a priority or a key, gets Summary.Overload
// (SummarizeOverload): the requests by priority, by tenant and by class,
// each with its share of whole 200 streams, the other answers by status
// and how many carried Retry-After, TTFT and latency percentiles of the
// 200s, and goodput (200s a second of the run); OverloadTable renders it
// with the latency p50 ratios of the priorities and of the tenants.
//
// # Trace replay
//
// `saltus bench --workloads mooncake:FILE` replays a Mooncake-format
// trace (bench/workload: token-id prompts built from the rows' hash ids,
// exact input and output lengths) open loop at its own arrival times,
// once per load point (--trace-speeds: each its own workload,
// "mooncake-x4", so each policy runs it on cold engines), the same rows
// at the same times for every policy (workload.Replay). A run ends when
// its trace is sent and answered (Drive returns once every user is
// done). RunConfig.SLO judges each run (SummarizeSLO, SLOTable): TTFT
// mean, p50 and p99 of the 200s, goodput (200s within the TTFT
// objective a second of the run; a failed or unfinished request counts
// as missed), failed requests, the engines' token hit ratio from their
// usage.prompt_tokens_details.cached_tokens, and, for the policies that
// read the route table, saltus's own prediction: X-Saltus-Route's
// matched blocks × RunConfig.RouteBlock, against what each engine
// reported (the share within a block, the tokens predicted but not
// cached and cached but not predicted).
//
// # KV events
//
// A LocalFleet with KVEvents (`saltus bench --kv-events`, on by default
// when saltus keys prompts as the engines do) has each simulated engine
// publish its KV-cache events and each router of a run subscribe to
// every engine (the connect wiring, dataplane.Config.KVEvents), so
// policies prefix and ranvier route by what the engines confirm; a run
// starts once every router has heard every engine (WaitKVEvents), and
// Summary.KVEventsStored counts the BlockStored events the routers
// received. kvevents.go.
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
