package shard

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_requests_total":                   "Answers to client requests, by route (chat, completions, responses, response_id, messages: Anthropic's POST /v1/messages, embeddings, pooling: /pooling and /classify, score: /score, /v1/score, /rerank, /v1/rerank, /v2/rerank, audio: /v1/audio/transcriptions and /v1/audio/translations, other: other POST /v1/* and vLLM's /tokenize and /detokenize; models, adapters: /v1/load_lora_adapter and /v1/unload_lora_adapter; unknown, none: the reactor's own answers) and HTTP status code (0: outside 100..599).",
		"saltus_route_decisions_total":            "Routing decisions of forwarded requests, by reason (tree, hash, override, fallback, or the policy's name).",
		"saltus_route_diverted_total":             "Prefix-policy decisions that left the backend holding the most of the prompt for a less loaded one.",
		"saltus_router_prefix_match_ratio":        "Blocks of the prompt the chosen backend was believed to hold over the prompt's full blocks, per request routed by the prefix policy (ratio, 0 to 1).",
		"saltus_route_learned_total":              "Routes learned: a backend's answer inserted the request's prefix into the route table.",
		"saltus_route_learn_skipped_total":        "2xx answers with nothing to teach, so no message to the owner shard: the route table already held the whole prefix for the answering backend, refreshed within 1 s, or the decision had recorded it (a pending route, now confirmed).",
		"saltus_route_learn_dropped_total":        "Learns lost because the owner shard's mailbox was full.",
		"saltus_route_footprint_full_total":       "Decisions not recorded in the footprint table (the prefixes each backend is busy with) because the shard's table was full.",
		"saltus_route_learn_errors_total":         "Learns the route table refused (a backend id beyond its MaxBackends).",
		"saltus_route_client_gone_total":          "Requests whose client left before they were routed (nothing forwarded).",
		"saltus_route_unkeyed_total":              "Embeddings, pooling and score requests in a shape saltus does not key (chat messages, multimodal inputs, not JSON): routed to the least loaded backend of their model's pool, for the engine to answer.",
		"saltus_shard_mailbox_overflow_total":     "Messages to an owner shard refused over its mailbox bound (the request is routed without the tree).",
		"saltus_request_body_refused_total":       "Chat and completion bodies refused before they were decoded, by reason: too_many_values (over --max-body-values, 413), too_deep (over --max-body-depth, 413), invalid_json (400).",
		"saltus_shard_decode_offloop_total":       "Bodies over 64 KiB decoded and rendered on a decode worker instead of their event loop.",
		"saltus_shard_decode_queue_full_total":    "Large bodies refused with 503 because the decode workers' queue was full.",
		"saltus_shard_decode_queue_depth":         "Large bodies waiting for a decode worker.",
		"saltus_responses_ids":                    "Response ids the router remembers (id to the backend that made it), summed over shards.",
		"saltus_responses_ids_evictions_total":    "Response ids forgotten because their shard's part of the table was full (oldest first).",
		"saltus_responses_ids_expired_total":      "Response ids forgotten after their TTL.",
		"saltus_responses_ids_dropped_total":      "Response ids not remembered because their owner shard's mailbox was full.",
		"saltus_responses_id_lookups_total":       "Requests naming a response id (previous_response_id, /v1/responses/{id}), by result: hit (sent to its backend), unknown, unroutable (its backend is gone or not routable).",
		"saltus_pool_refused_total":               "Requests saltus answered itself for their model, by model (a pool of the fleet, or (other): a name no pool serves, pools past the 100th) and reason: model_not_found (404: no backend serves the model; nothing forwarded), no_backend (503: every backend serving it is down or draining), queue_busy (429: every backend serving it is full and its gateway queue's loop was too busy to take it), queue_full (429: the queue held --queue-max-entries), queue_expired (429: it waited --queue-max-wait), engines_full (429 or 503: every engine tried refused it as full and its requeues were spent), shutting_down (503: it waited in a gateway queue when saltus stopped). Every one has Retry-After but model_not_found.",
		"saltus_adapter_operations_total":         "LoRA adapter loads and unloads forwarded to engines, by op (load, unload) and result (ok, error: the engine refused or did not answer).",
		"saltus_queue_depth":                      "Requests waiting in a model pool's gateway queue (every engine of the pool full), by model (as saltus_pool_refused_total) and class: the request's priority band, high (priority < 0), normal (0 or none), low (> 0).",
		"saltus_queue_dispatched_to_holder_total": "Requests a gateway queue dispatched while the backend holding more of their prefix than any other had a slot free (they go ahead of up to 4 × --queue-affinity earlier ones of their tenant; the policy then decides), by model.",
		"saltus_queue_requests_total":             "Requests of the gateway queues, by model (as saltus_pool_refused_total) and result: queued (every engine of the pool full), dispatched (a slot freed), full (the queue held --queue-max-entries: 429), expired (waited --queue-max-wait: 429), gone (the client left while queued: nothing sent), shutdown (waiting when saltus stopped: 503 shutting_down).",
		"saltus_queue_wait_seconds":               "How long requests waited in a model pool's gateway queue before a slot freed (dispatched) or their --queue-max-wait passed (expired), by model (as saltus_pool_refused_total) and class (as saltus_queue_depth), in seconds.",
		"saltus_queue_pools_folded_total":         "Requests counted under model \"(other)\" in the per-pool queue and refusal metrics because 100 pools had series of their own already (the bound on their series).",
		"saltus_tree_nodes":                       "Nodes of the route table, summed over shards.",
		"saltus_tree_blocks":                      "Blocks (16-token edges, or 64-byte blocks without a tokenizer) the route table holds, summed over shards.",
		"saltus_tree_evictions_total":             "Route table nodes removed (LRU under its block bound, TTL expiry, backend removal), summed over shards.",
	})
}

// routeID is the endpoint a request came to: the route label of
// saltus_requests_total.
type routeID uint8

const (
	routeUnknown     routeID = iota // no such path: 404
	routeChat                       // /v1/chat/completions
	routeCompletions                // /v1/completions
	routeEmbeddings                 // /v1/embeddings
	routeOther                      // any other /v1/* path
	routeModels                     // /v1/models
	routeResponses                  // POST /v1/responses
	routeResponseID                 // /v1/responses/{id}[/cancel|/input_items]
	routeNone                       // no route: the reactor's own answers (framing errors, max-conns), OPTIONS *
	routeAdapters                   // POST /v1/load_lora_adapter, /v1/unload_lora_adapter (adapters.go)
	routePooling                    // POST /pooling, /classify
	routeScore                      // POST /score, /v1/score, /rerank, /v1/rerank, /v2/rerank
	routeAudio                      // POST /v1/audio/transcriptions, /v1/audio/translations
	routeMessages                   // POST /v1/messages (Anthropic's Messages API)
	numRoutes
)

var routeNames = [numRoutes]string{"unknown", "chat", "completions", "embeddings", "other", "models", "responses", "response_id", "none", "adapters",
	"pooling", "score", "audio", "messages"}

// classify maps a request line to its route, and to the Allow header of a
// 405 ("" when the method is allowed). path is the reactor's normal form
// (httplex.NormalizePath): no dot segment or encoded slash can walk a
// path out of /v1/.
func classify(method, path string) (routeID, string) {
	switch path {
	case "*": // the reactor lets only OPTIONS have it
		return routeNone, allowOnly(method, "OPTIONS")
	case "/v1/chat/completions":
		return routeChat, allowOnly(method, "POST")
	case "/v1/completions":
		return routeCompletions, allowOnly(method, "POST")
	case "/v1/embeddings":
		return routeEmbeddings, allowOnly(method, "POST")
	case "/v1/models":
		if method == "GET" || method == "HEAD" {
			return routeModels, ""
		}
		return routeModels, "GET, HEAD"
	case "/v1/responses":
		return routeResponses, allowOnly(method, "POST")
	case "/v1/messages":
		return routeMessages, allowOnly(method, "POST")
	case "/v1/load_lora_adapter", "/v1/unload_lora_adapter":
		return routeAdapters, allowOnly(method, "POST")
	case "/pooling", "/classify":
		return routePooling, allowOnly(method, "POST")
	case "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank":
		return routeScore, allowOnly(method, "POST")
	case "/v1/audio/transcriptions", "/v1/audio/translations":
		return routeAudio, allowOnly(method, "POST")
	case "/tokenize", "/detokenize":
		// vLLM's endpoints outside /v1 that name a model: routed to the
		// model's pool, unkeyed.
		return routeOther, allowOnly(method, "POST")
	}
	if _, allow, ok := openai.ResponsePathID(path); ok {
		if slices.Contains(strings.Split(allow, ", "), method) {
			return routeResponseID, ""
		}
		return routeResponseID, allow
	}
	if openai.ModelPathID(path) != "" {
		if method == "GET" || method == "HEAD" {
			return routeModels, ""
		}
		return routeModels, "GET, HEAD"
	}
	if strings.HasPrefix(path, "/v1/") {
		return routeOther, allowOnly(method, "POST")
	}
	return routeUnknown, ""
}

func allowOnly(method, allowed string) string {
	if method == allowed {
		return ""
	}
	return allowed
}

// reasonNames index the decision counters.
var reasonNames = [...]string{policy.ReasonTree, policy.ReasonHash, policy.ReasonOverride, policy.ReasonFallback,
	policy.ReasonRoundRobin, policy.ReasonLeastRequest, policy.ReasonConsistentHash, ReasonResponseID, policy.ReasonBodyHash}

// ratioBuckets are the upper bounds of saltus_router_prefix_match_ratio:
// matched blocks / total blocks of a routed request with keys, under the
// prefix policy (the others do not ask the tree, so they predict nothing
// and observe nothing).
var ratioBuckets = [...]float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1}

// routerMetrics are the Router's counters: atomics (an event loop never
// waits on a mutex, so no metrics.Histogram and no GetOrCreate on a loop),
// written out by writeMetrics; the plain counters are metrics.Counters,
// whose Inc is an atomic add.
type routerMetrics struct {
	// requests[route][status]; statuses outside [100, 600) count as 0.
	requests  [numRoutes][600]atomic.Uint64
	decisions [len(reasonNames)]*metrics.Counter
	ratio     [len(ratioBuckets) + 1]atomic.Uint64
	ratioSum  atomic.Uint64 // float64 bits are not addable: sum in millionths
	diverted  *metrics.Counter

	overflow, learned, learnSkipped, learnDropped, learnErrors, clientGone *metrics.Counter
	unkeyed                                                                *metrics.Counter
	footFull, remoteInserted                                               *metrics.Counter
	guessesIgnored                                                         *metrics.Counter // truth.go

	// adapterOps[op][result]: op 0 load, 1 unload; result 0 ok, 1 error
	// (adapters.go).
	adapterOps [2][2]*metrics.Counter

	// Bodies refused by Config.Body's check, by openai.ScanKind (reason label);
	// large bodies decoded off the loop, and refused with a full queue.
	refused                  [openai.NumScanKinds]*metrics.Counter
	offloop, decodeQueueFull *metrics.Counter

	usage usageMetrics // --learn-from-usage (usage.go)
}

func newRouterMetrics(set *metrics.Set) *routerMetrics {
	m := &routerMetrics{
		diverted:     set.NewCounter("saltus_route_diverted_total"),
		overflow:     set.NewCounter("saltus_shard_mailbox_overflow_total"),
		learned:      set.NewCounter("saltus_route_learned_total"),
		learnSkipped: set.NewCounter("saltus_route_learn_skipped_total"),
		learnDropped: set.NewCounter("saltus_route_learn_dropped_total"),
		learnErrors:  set.NewCounter("saltus_route_learn_errors_total"),
		clientGone:   set.NewCounter("saltus_route_client_gone_total"),
		footFull:     set.NewCounter("saltus_route_footprint_full_total"),
		unkeyed:      set.NewCounter("saltus_route_unkeyed_total"),
	}
	m.remoteInserted = set.NewCounter("saltus_route_remote_inserted_total")
	m.guessesIgnored = set.NewCounter("saltus_kvview_guesses_ignored_total")
	for op, on := range [2]string{"load", "unload"} {
		for res, rn := range [2]string{"ok", "error"} {
			m.adapterOps[op][res] = set.NewCounter(`saltus_adapter_operations_total{op="` + on + `",result="` + rn + `"}`)
		}
	}
	for i, r := range reasonNames {
		m.decisions[i] = set.NewCounter(fmt.Sprintf("saltus_route_decisions_total{reason=%q}", r))
	}
	for k := openai.ScanSyntax; k < openai.NumScanKinds; k++ {
		m.refused[k] = set.NewCounter(fmt.Sprintf("saltus_request_body_refused_total{reason=%q}", k.Reason()))
	}
	m.offloop = set.NewCounter("saltus_shard_decode_offloop_total")
	m.decodeQueueFull = set.NewCounter("saltus_shard_decode_queue_full_total")
	m.usage = newUsageMetrics(set)
	return m
}

// request counts one answer. Any goroutine.
func (m *routerMetrics) request(rt routeID, status int) {
	if status < 100 || status >= 600 {
		status = 0
	}
	m.requests[rt][status].Add(1)
}

// decided counts a decision of a forwarded request; matched: the decision
// asked the tree (prefix policy), so its match ratio is observed. Any
// goroutine.
func (m *routerMetrics) decided(d policy.Decision, matched bool) {
	for i, r := range reasonNames {
		if r == d.Reason {
			m.decisions[i].Inc()
		}
	}
	if d.Diverted {
		m.diverted.Inc()
	}
	if matched && d.TotalBlocks > 0 && d.Backend >= 0 {
		ratio := float64(d.MatchedBlocks) / float64(d.TotalBlocks)
		i := 0
		for i < len(ratioBuckets) && ratio > ratioBuckets[i] {
			i++
		}
		m.ratio[i].Add(1)
		m.ratioSum.Add(uint64(ratio * 1e6))
	}
}

// writeMetrics writes the atomics-backed metrics (Prometheus text).
func (r *Router) writeMetrics(w io.Writer) {
	m := r.m
	metrics.WriteMetadataIfNeeded(w, "saltus_requests_total", "counter")
	for rt := range numRoutes {
		for code := range m.requests[rt] {
			if n := m.requests[rt][code].Load(); n > 0 {
				fmt.Fprintf(w, "saltus_requests_total{route=%q,code=\"%d\"} %d\n", routeNames[rt], code, n)
			}
		}
	}
	var nodes, blocks, evictions int64
	for _, sh := range r.shards {
		nodes += sh.nodes.Load()
		blocks += sh.blocks.Load()
		evictions += sh.evictions.Load()
	}
	metrics.WriteGaugeUint64(w, "saltus_tree_nodes", uint64(nodes))
	metrics.WriteGaugeUint64(w, "saltus_tree_blocks", uint64(blocks))
	metrics.WriteCounterUint64(w, "saltus_tree_evictions_total", uint64(evictions))
	metrics.WriteGaugeUint64(w, "saltus_shard_decode_queue_depth", uint64(len(r.decodes)))
	writeHistogram(w, "saltus_router_prefix_match_ratio", ratioBuckets[:], m.ratio[:], float64(m.ratioSum.Load())/1e6)
}

// writeHistogram writes a Prometheus histogram from per-bucket counts:
// counts[i] observations at most upper[i] (and above upper[i-1]), the last
// count above every bound; sum is the observations' sum.
func writeHistogram(w io.Writer, name string, upper []float64, counts []atomic.Uint64, sum float64) {
	metrics.WriteMetadataIfNeeded(w, name, "histogram")
	var cum uint64
	for i, ub := range upper {
		cum += counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, ub, cum)
	}
	cum += counts[len(upper)].Load()
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", name, cum)
	fmt.Fprintf(w, "%s_sum %g\n", name, sum)
	fmt.Fprintf(w, "%s_count %d\n", name, cum)
}
