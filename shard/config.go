package shard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/tokenpool"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/queue"
)

// Config configures a Router. It is immutable after NewRouter; a reload
// builds a new Router.
type Config struct {
	// BlockSize is the KV-cache block size in tokens: one tree key per
	// full block. Default 16 (vLLM's default, tree.DefaultBlockSize).
	BlockSize int
	// Model seeds the key chains (tree.ModelSeed). Default "": each
	// request's own "model" field, so two models never share keys.
	Model string
	// AdapterUpdates: POST /v1/load_lora_adapter and
	// /v1/unload_lora_adapter are served (adapters.go), behind the admin
	// token when one is set. Default true: vLLM serves them when run-time
	// updates are on; an operator who loads adapters otherwise turns it
	// off (404).
	AdapterUpdates bool
	// AdapterEngines is how many engines of the base model's pool an
	// adapter load goes to: 0 (default) every routable one, N the N
	// least loaded (those that list it already count).
	AdapterEngines int
	// Queue sizes each pool's gateway queue (gate.go, upstream/queue):
	// requests wait there while every engine of their pool is full.
	// Default queue.DefaultConfig().
	Queue queue.Config
	// QueueAffinity is how many times a request in a gateway queue may be
	// passed by later ones of its tenant (among its next 4 × QueueAffinity)
	// because the engine that has a slot free holds more of their prefix
	// than any other engine (gate.go: dispatch); it then goes at its
	// turn. 0: strictly first come. Default 32, at most 256.
	QueueAffinity int
	// PriorityModels names models whose pools' engines all run vLLM's
	// --scheduling-policy priority: a request for one of them (or for an
	// adapter an engine of its pool serves) keeps its "priority" field
	// when forwarded, as for a backend with priority scheduling set
	// (backend.Backend.PriorityScheduling). For fleets whose engines are
	// discovered (Kubernetes), where backends cannot be named in
	// configuration. Default none: the field is stripped (vLLM refuses a
	// non-zero priority otherwise). Retune may change it.
	PriorityModels []string
	// ChatTemplate names the template the caller built the renderer with
	// ("" = detected from the tokenizer config). The Router only reports
	// it: NewRouter takes the renderer itself.
	ChatTemplate string
	// ChatTemplateFile is the Jinja chat template file the caller built
	// the renderer from ("" = none), reported like ChatTemplate.
	ChatTemplateFile string
	// Tree sizes each shard's route table. Default tree.DefaultConfig().
	Tree tree.Config
	// Pool sizes the tokenizer pool. Default tokenpool.DefaultConfig().
	Pool tokenpool.Config
	// LoadFactor (ranvier policy): a target whose in-flight count exceeds
	// LoadFactor × the median in-flight count of the routable backends
	// (and LoadFloor) is skipped for the least loaded one. Default 2.0
	// (DESIGN.md § Numbers from the field: diverting above 2× the median cost ~5 points of hit
	// rate, bought 45 % P99).
	LoadFactor float64
	// LoadFloor (ranvier and prefix policies) is the in-flight count a target may
	// always have without being skipped, so that a nearly idle fleet
	// (median 0 or 1) does not flap between backends on every request.
	// Default 4.
	LoadFloor int
	// MaxCandidates is how many backends a request may be tried on: the
	// decision's target, then the next ones in rendezvous order (for a
	// connect error before the first byte). Set it to the backend Set's
	// MaxRetries + 1: the Set tries at most that many, and no more than
	// it is given. Default 3 (backend.DefaultConfig's MaxRetries is 2).
	MaxCandidates int
	// Policy is the routing policy, one of policy.Names(). Default "prefix"
	// (policy.Prefix): the least estimated time to first token (policy/cost.go).
	// "ranvier": the tree's deepest routable holder, else the rendezvous
	// hash of the first blocks, with LoadFactor's bound (prefix before
	// issue 11). The others are baselines for the benchmark and never use
	// the tree: "round_robin", "least_request" (power of two choices),
	// "consistent_hash" (rendezvous hash of the first blocks, bounded
	// load 1.25 × the average) and "body_hash" (rendezvous hash of the
	// body's first 512 bytes, policy/cost.go); policy/baselines.go states each rule.
	Policy string
	// MaintainInterval is how often each shard's tree is cleaned up
	// (tree.Maintain) and its gauges published. Default 1 s.
	MaintainInterval time.Duration
	// MaintainBudget is the work units (tree slots) one maintenance step
	// may do on a loop. Default 4096: tens of microseconds.
	MaintainBudget int
	// ExplainTimeout bounds how long Explain waits for the loops.
	// Default 5 s.
	ExplainTimeout time.Duration
	// ResponseIDs bounds the Responses API ids remembered (id → the
	// backend that produced it, respids.go), split evenly across the
	// shards; over it the oldest are evicted (counted). Default 100000:
	// about 10 MB at vLLM's 41-byte ids.
	ResponseIDs int
	// ResponseIDTTL is how long a response id is remembered. Default 1 h,
	// the routes' TTL (tree.DefaultConfig): a conversation idle longer has
	// likely lost its cache too, and vLLM's store is memory that an
	// engine restart loses.
	ResponseIDTTL time.Duration
	// Body caps the structure of a chat or completion body (and of
	// Explain's), checked in one pass before it is parsed (a body on the
	// loop too short to exceed MaxValues: after, job.prepare): over a
	// limit is a 413 naming it. Default openai.DefaultBodyLimits(): 1.1 M
	// values, depth 64.
	Body openai.BodyLimits
	// OffloopBytes: a chat or completion body larger than this is decoded
	// and rendered on a decode worker instead of its event loop, which
	// meanwhile serves its other connections. Default 64 KiB, the size
	// up to which a loop keeps its decode memory (openai.KeepDecodeBytes): a body of
	// short messages, the dearest shape per byte, takes 11 µs at 4 KiB,
	// 0.16 ms at 64 KiB, 1.3 ms at 256 KiB and 6.7 ms at 1 MiB to decode
	// and render (BenchmarkDecodeOnLoop, 2 shared cores, 2026-12-06; the
	// parse-tree decoder before took 85 µs, 1.3 ms, 23 ms and 114 ms). A
	// 4 KB chat of long strings costs ~5 µs with tokenization
	// (BenchmarkServeChat4K), so typical bodies stay on the loop. 0:
	// every body is decoded off the loop.
	OffloopBytes int
	// DecodeWorkers is how many goroutines decode large bodies. Default
	// 2: they compete with the loops for the cores, and a large body is
	// rare.
	DecodeWorkers int
	// DecodeQueue bounds the large bodies waiting for a decode worker;
	// over it a request gets 503 with Retry-After (counted in
	// saltus_shard_decode_queue_full_total). Default 32. With a Jinja
	// chat template (chat.Renderer.Interpreted) every chat and responses
	// request is rendered by a decode worker, off its loop (a rendering
	// takes 20 to 50 µs, up to 300 µs for a conversation's first
	// request: docs/BENCHMARKS.md), and the queue is at least
	// interpretedQueue.
	DecodeQueue int
	// LearnFromUsage asks the engine for a streamed chat or completion's
	// usage (stream_options.include_usage) when its client did not, and
	// removes that usage chunk from the client's stream (usage.go): the
	// engine's cached_tokens then reach Outcome.Usage for every streamed
	// request the prefix policy learns from (the other policies read no
	// usage, so nothing is asked for them). Default true.
	LearnFromUsage bool

	// Concurrency (prefix policy, policy/cost.go): the requests a backend runs
	// at once; in flight above it, the rest wait (the backend is
	// queueing). Default 256, vLLM's --max-num-seqs on an A100.
	Concurrency int
	// QueueWait (prefix policy, policy/cost.go): a backend whose estimated queue
	// (prefill sent to it and not answered, plus requests waiting beyond
	// Concurrency) is at least this is queueing. Default 200 ms.
	QueueWait time.Duration
	// LoadSlack (prefix policy, policy/cost.go): a backend with at least
	// (1 + LoadSlack) × the mean in-flight count of the routable backends
	// (this request counted, rounded up, at least LoadFloor) queues:
	// bounded-load hashing's capacity, so no backend runs far more than
	// its share while others idle (Mirrokni et al.'s consistent hashing
	// with bounded loads). Default 1.0, re-tuned on 30 s runs (8 a100-13b
	// engines, 30 users; token hit ratio / P99 TTFT ms, 1.0 then 0.5):
	// rag 0.778/3,737 and 0.776/3,739 vs 0.756/4,489 and 0.780/4,135;
	// manydocs 0.709/909 and 0.720/1,156 vs 0.701/1,324 and 0.694/939;
	// hotspot 0.951/272 vs 0.944/284; multiturn 0.820/211 vs 0.817/208;
	// stress 0.960/384 and 0.965/401 vs 0.965/342 and 0.960/503; unique
	// P99 4,850 vs 4,755. Within the noise of one run each, but the hit
	// ratio rose on every document workload: at 0.5 holders of a hot
	// document queued, and took a copy elsewhere, at 1.5× the mean load,
	// where the copies' misses cost more than the wait. (0.5 had been
	// chosen on manydocs before the prefill fit learned from first events.)
	LoadSlack float64
	// LoadTokens (prefix policy, policy/cost.go) prices one request in flight on
	// a backend as this many prompt tokens of prefill: what one more
	// request in the batch costs the requests there (decode steps grow
	// with the batch), weighed against a miss. Default 500; chosen on 30 s
	// runs on the simulator's a100-13b (hotspot hit 0.951 at 500, 0.943 at
	// 1000; multiturn 0.813 and 0.807) before the prefill fit learned from
	// first events, not re-tuned since.
	LoadTokens int
	// KVTokens (prefix policy, policy/cost.go) is the engines' KV cache capacity
	// in tokens (vLLM logs it at start: GPU blocks × block size). A miss
	// on a backend evicts prefixes in use in proportion to its Footprint
	// over KVTokens. 0 (the default): unknown, and the fullest
	// footprint of the fleet stands for a full cache.
	KVTokens int
	// FootprintWindow (prefix policy, footprint.go): a prefix sent to a
	// backend at least twice within it counts as in use there; unused for
	// it, it is forgotten. Default 30 s.
	FootprintWindow time.Duration
	// Footprints bounds the (prefix, backend) pairs remembered, split
	// evenly across the shards; over it a new pair is not recorded
	// (saltus_route_footprint_full_total). Default 16384.
	Footprints int
	// SessionHeader (prefix policy): a request header naming a
	// conversation (e.g. X-Session-ID); a session is pinned to the backend
	// its first request went to while that backend is routable and not
	// queueing (reason override). "" (the default): off.
	SessionHeader string
	// Sessions bounds the sessions remembered, split evenly across the
	// shards, oldest evicted first. Default 100000. SessionTTL is how long
	// an idle session stays pinned. Default 1 h.
	Sessions   int
	SessionTTL time.Duration
	// KVEventsBridge (prefix and ranvier policies, policy/truth.go): for a
	// backend whose engine's KV events feed the route table, how long a
	// learned holder deeper than what the engine confirmed still counts
	// after routing last refreshed it. It covers the time from routing a
	// request to the engine's BlockStored for it: the engine's queue wait
	// and the prefill step that computes its first blocks (vLLM publishes
	// once per scheduler step, and caches a chunked prefill's blocks as
	// each chunk is computed, so the first blocks come within a step of
	// admission), plus the event's trip to the loop (milliseconds).
	// Default 10 s: longer than a healthy engine's queue wait and a long
	// prompt's first prefill chunk (vLLM's default chunk, 2,048 to 8,192
	// tokens, is well under a second on a GPU that serves it), and far
	// shorter than the route TTL (1 h) during which a wrong guess
	// otherwise attracts its prefix. Too short, and requests that follow
	// a pending route while its engine still queues it take a copy
	// elsewhere; too long, and a guess the engine never stored (a request
	// cancelled before its prefill, a restored or peer's route) misleads
	// that much longer. 0: only confirmed blocks count. Reloadable.
	KVEventsBridge time.Duration
	// TenantHeader is a request header whose value names the request's
	// tenant for the gateway queue's fair share when it has neither an
	// API key nor a bearer token or x-api-key (whose hash is the tenant
	// then). "" (the default): such requests share one anonymous tenant.
	TenantHeader string
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		BlockSize:        tree.DefaultBlockSize,
		AdapterUpdates:   true,
		Queue:            queue.DefaultConfig(),
		QueueAffinity:    32,
		PriorityModels:   []string{},
		Tree:             tree.DefaultConfig(),
		Pool:             tokenpool.DefaultConfig(),
		LoadFactor:       2.0,
		LoadFloor:        4,
		MaxCandidates:    3,
		Policy:           policy.Prefix.String(),
		MaintainInterval: time.Second,
		MaintainBudget:   4096,
		ExplainTimeout:   5 * time.Second,
		ResponseIDs:      100_000,
		ResponseIDTTL:    tree.DefaultConfig().TTL,
		Body:             openai.DefaultBodyLimits(),
		OffloopBytes:     64 << 10,
		DecodeWorkers:    2,
		DecodeQueue:      32,
		LearnFromUsage:   true, // what is cached is learned from streams too; the client sees its own stream
		Concurrency:      256,
		QueueWait:        200 * time.Millisecond,
		LoadSlack:        1.0,
		LoadTokens:       500,
		KVTokens:         0, // unknown: relative to the fleet's fullest
		FootprintWindow:  30 * time.Second,
		Footprints:       16384,
		Sessions:         100_000,
		SessionTTL:       time.Hour,
		KVEventsBridge:   10 * time.Second,
	}
}

// Validate reports every invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	if c.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("shard: BlockSize must be positive, got %d", c.BlockSize))
	}
	for i, m := range c.PriorityModels {
		if m == "" || len(m) > maxPriorityModelLen {
			errs = append(errs, fmt.Errorf("shard: PriorityModels[%d]: want a model name of 1 to %d bytes, got %d", i, maxPriorityModelLen, len(m)))
		}
	}
	if len(c.PriorityModels) > maxPriorityModels {
		errs = append(errs, fmt.Errorf("shard: PriorityModels: at most %d models, got %d", maxPriorityModels, len(c.PriorityModels)))
	}
	if err := c.Tree.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("shard: Tree: %w", err))
	}
	if err := c.Pool.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("shard: Pool: %w", err))
	}
	if err := c.Queue.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("shard: Queue: %w", err))
	}
	if c.AdapterEngines < 0 {
		errs = append(errs, fmt.Errorf("shard: AdapterEngines must not be negative, got %d", c.AdapterEngines))
	}
	if _, ok := policy.Parse(c.Policy); !ok {
		errs = append(errs, fmt.Errorf("shard: Policy must be one of %s, got %q", strings.Join(policy.Names(), ", "), c.Policy))
	}
	if c.MaintainInterval <= 0 {
		errs = append(errs, fmt.Errorf("shard: MaintainInterval must be positive, got %v", c.MaintainInterval))
	}
	if c.MaintainBudget <= 0 {
		errs = append(errs, fmt.Errorf("shard: MaintainBudget must be positive, got %d", c.MaintainBudget))
	}
	if c.ExplainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shard: ExplainTimeout must be positive, got %v", c.ExplainTimeout))
	}
	errs = append(errs, checkRespConfig(c)...)
	errs = append(errs, checkCostConfig(c)...)
	if err := c.Body.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("shard: Body: %w", err))
	}
	if c.OffloopBytes < 0 {
		errs = append(errs, fmt.Errorf("shard: OffloopBytes must not be negative, got %d", c.OffloopBytes))
	}
	if c.DecodeWorkers < 1 {
		errs = append(errs, fmt.Errorf("shard: DecodeWorkers must be at least 1, got %d", c.DecodeWorkers))
	}
	if c.QueueAffinity < 0 || c.QueueAffinity > maxQueueAffinity {
		errs = append(errs, fmt.Errorf("shard: QueueAffinity must be in [0, %d], got %d", maxQueueAffinity, c.QueueAffinity))
	}
	if c.DecodeQueue < 1 {
		errs = append(errs, fmt.Errorf("shard: DecodeQueue must be at least 1, got %d", c.DecodeQueue))
	}
	if c.KVEventsBridge < 0 {
		errs = append(errs, fmt.Errorf("shard: KVEventsBridge must not be negative (0 = confirmed blocks only), got %v", c.KVEventsBridge))
	}
	if !headerToken(c.TenantHeader) {
		errs = append(errs, fmt.Errorf("shard: TenantHeader: want a header name (letters, digits, '-', '_'; at most 128), got %.40q", c.TenantHeader))
	}
	return errors.Join(errs...)
}

// headerToken reports whether s is "" or a plain header name: letters,
// digits, '-' and '_', at most 128 bytes.
func headerToken(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
