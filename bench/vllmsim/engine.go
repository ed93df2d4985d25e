package vllmsim

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// A seq's states; the scheduler publishes them in seq.state.
const (
	seqActive  int32 = iota // waiting or running
	seqDone                 // produced maxTokens tokens
	seqAborted              // ended early: the engine closed, or the client left
)

// seq is one request in the engine.
type seq struct {
	// Set by the handler before submit; read-only after.
	keys      []uint64 // the prompt's full blocks' chained hashes
	ids       []int32  // the prompt's token ids, when KV events are published
	adapter   string   // the LoRA adapter's name, "" for a base model (KV events)
	salt      string   // the request's cache_salt, "" for none (KV events)
	prompt    int      // prompt tokens
	maxTokens int      // output tokens to produce
	// lora counts the seq under its LoRA adapter while it waits and
	// runs (vllm:lora_requests_info); nil for a base model's request.
	lora *loraLoad
	// priority is the request's "priority" (vLLM's: lower is served
	// first); the waiting queue orders by it under the priority policy.
	priority int64

	// Set by submit under engine.mu, read by the scheduler after it
	// takes the seq off the queue (under the same lock).
	arrived time.Duration // simulated time of submit
	arrival uint64        // arrival number: the queue's order among equal priorities

	// Written by the scheduler before it publishes produced or state
	// (atomic stores); the handler reads them after loading those.
	cached int           // prompt tokens found in the prefix cache
	first  time.Duration // simulated time of the first token

	produced  atomic.Int32  // output tokens so far; the scheduler's
	state     atomic.Int32  // seqActive until the scheduler ends the seq
	notify    chan struct{} // one slot: something was published
	cancelled atomic.Bool   // set by the handler: the client left

	// Scheduler only.
	prefilled int  // prompt tokens computed (cached ones count)
	ready     int  // leading blocks marked computed in the cache
	anon      int  // blocks reserved past keys: partial block and output
	admitted  bool // taken off the waiting queue: running
}

func newSeq(keys []uint64, prompt, maxTokens int, lora *loraLoad) *seq {
	return &seq{keys: keys, prompt: prompt, maxTokens: maxTokens, lora: lora, notify: make(chan struct{}, 1)}
}

// wake tells the handler something was published; never blocks.
func (s *seq) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// admit moves s from waiting to running. Scheduler only, under
// engine.mu.
func (s *seq) admit() {
	s.admitted = true
	if s.lora != nil {
		s.lora.waiting.Add(-1)
		s.lora.running.Add(1)
	}
}

// end publishes the final state. Scheduler only, once per seq.
func (s *seq) end(state int32) {
	if s.lora != nil {
		if s.admitted {
			s.lora.running.Add(-1)
		} else {
			s.lora.waiting.Add(-1)
		}
	}
	s.state.Store(state)
	s.wake()
}

var (
	errQueueFull = errors.New("waiting requests queue is full") // llm-d-inference-sim's words
	errClosed    = errors.New("the engine is shutting down")
)

// engineMetrics are the counters the scheduler updates (vLLM's names;
// newSim registers them).
type engineMetrics struct {
	queries, hits       *metrics.Counter // prefix cache: prompt tokens looked up, found
	promptTokens        *metrics.Counter
	generationTokens    *metrics.Counter
	success, preemption *metrics.Counter
	ttft                *metrics.PrometheusHistogram // simulated seconds
}

func newEngineMetrics(set *metrics.Set, label string) engineMetrics {
	return engineMetrics{
		queries:          set.NewCounter("vllm:prefix_cache_queries_total" + label),
		hits:             set.NewCounter("vllm:prefix_cache_hits_total" + label),
		promptTokens:     set.NewCounter("vllm:prompt_tokens_total" + label),
		generationTokens: set.NewCounter("vllm:generation_tokens_total" + label),
		success:          set.NewCounter("vllm:request_success_total" + label),
		preemption:       set.NewCounter("vllm:num_preemptions_total" + label), // stays 0: nothing is preempted (doc.go)
		// vLLM's buckets for this histogram.
		ttft: set.NewPrometheusHistogramExt("vllm:time_to_first_token_seconds"+label,
			[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}),
	}
}

// engine is the scheduler: continuous batching, one goroutine (run).
type engine struct {
	cfg  Config
	clk  clock
	kv   *kvCache // owned by the scheduler goroutine
	m    engineMetrics
	wake chan struct{} // one slot: a submit happened
	// resets carries POST /reset_prefix_cache to the scheduler; each
	// asks with a one-slot reply channel (true: cleared).
	resets chan chan bool

	mu      sync.Mutex // guards the fields below
	waiting waitQueue  // at most cfg.MaxWaiting; in the policy's order
	closed  bool       // run has returned: submit refuses

	// Published by the scheduler for metrics and Stats; any goroutine
	// reads them.
	nRunning, nWaiting atomic.Int64
	usage              atomic.Uint64 // math.Float64bits of the KV usage fraction
}

func newEngine(cfg Config, clk clock, m engineMetrics) *engine {
	return &engine{cfg: cfg, clk: clk, m: m, kv: newKVCache(cfg.KVTokens / cfg.BlockSize), wake: make(chan struct{}, 1),
		resets:  make(chan chan bool),
		waiting: waitQueue{byPriority: cfg.SchedulingPolicy == PolicyPriority}}
}

// submit queues s: errQueueFull when MaxWaiting requests wait, errClosed
// once the scheduler has stopped. Any goroutine.
func (e *engine) submit(s *seq) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errClosed
	}
	if e.waiting.Len() >= e.cfg.MaxWaiting {
		e.mu.Unlock()
		return errQueueFull
	}
	s.arrived = e.clk.now()
	if s.lora != nil {
		s.lora.waiting.Add(1) // before the scheduler can admit it
	}
	e.waiting.push(s)
	e.nWaiting.Store(int64(e.waiting.Len()))
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	return nil
}

// run is the scheduler loop, until ctx ends; then every request left,
// running or waiting, ends as seqAborted and submit refuses new ones.
func (e *engine) run(ctx context.Context) {
	var (
		running []*seq
		plan    []int         // tokens scheduled this step, per running seq
		end     time.Duration // simulated end of the last step
	)
	defer func() { e.abort(running) }()
	for {
		running = e.dropCancelled(running)
		var prefill, decodes int
		running, plan, prefill, decodes = e.schedule(running, plan[:0])
		if len(running) == 0 {
			e.kv.ev.flush()
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
				continue
			case reply := <-e.resets:
				e.kv.clear()
				e.kv.ev.flush()
				e.usage.Store(0)
				reply <- true // one slot: never blocks
				continue
			}
		}
		select {
		case reply := <-e.resets:
			reply <- false // requests run: vLLM refuses to reset then
		default:
		}
		// A step starts when the last one ended, or now if the engine
		// was idle or fell behind real time.
		end = max(end, e.clk.now()) + e.stepTime(prefill, decodes)
		if !e.clk.sleepUntil(end, ctx.Done()) {
			return
		}
		running = e.finishStep(running, plan, end)
		e.kv.ev.flush()
	}
}

// stepTime is the step formula (doc.go).
func (e *engine) stepTime(prefill, decodes int) time.Duration {
	return e.cfg.StepBase + time.Duration(prefill)*e.cfg.PrefillPerToken + time.Duration(decodes)*e.cfg.DecodePerSeq
}

// schedule plans one step, as vLLM V1's scheduler does: running requests
// in admission order each take what they need of the token budget (one
// token when decoding, the rest of the prompt when prefilling), then
// waiting requests are admitted in the queue's order (arrival, or
// priority then arrival) while budget, a running slot and KV room
// remain; a waiting request that does not fit stops admission (nothing
// jumps the queue). It returns the running requests (admitted
// appended), the tokens planned for each, and the step's prefill tokens
// and decoding requests.
func (e *engine) schedule(running []*seq, plan []int) (_ []*seq, _ []int, prefill, decodes int) {
	bs := e.cfg.BlockSize
	budget := e.cfg.MaxBatchedTokens
	for _, s := range running {
		if s.prefilled >= s.prompt {
			n := min(1, budget)
			plan = append(plan, n)
			budget -= n
			decodes += n
			continue
		}
		n := min(s.prompt-s.prefilled, budget)
		plan = append(plan, n)
		budget -= n
		prefill += n
	}
	e.mu.Lock()
	for budget > 0 && len(running) < e.cfg.MaxNumSeqs && e.waiting.Len() > 0 {
		s := e.waiting.peek()
		if s.cancelled.Load() {
			e.waiting.pop()
			s.end(seqAborted)
			continue
		}
		// vLLM recomputes at least the last prompt token (it needs its
		// logits), in whole blocks: the hit is the leading cached blocks
		// within the first prompt-1 tokens (kv_cache_manager.py,
		// get_computed_blocks, max_cache_hit_length = num_tokens - 1).
		hit := min(e.kv.prefix(s.keys), (s.prompt-1)/bs)
		anon := max((s.prompt+s.maxTokens+bs-1)/bs-len(s.keys), 0)
		if !e.kv.reserve(s.keys, anon) {
			break // waits for room
		}
		e.waiting.pop()
		s.admit()
		s.anon, s.cached, s.prefilled, s.ready = anon, hit*bs, hit*bs, hit
		e.m.queries.Add(s.prompt)
		e.m.hits.Add(s.cached)
		e.m.promptTokens.Add(s.prompt)
		n := min(s.prompt-s.prefilled, budget)
		running = append(running, s)
		plan = append(plan, n)
		budget -= n
		prefill += n
	}
	e.nWaiting.Store(int64(e.waiting.Len()))
	e.mu.Unlock()
	e.nRunning.Store(int64(len(running)))
	e.usage.Store(math.Float64bits(e.kv.usage()))
	return running, plan, prefill, decodes
}

// finishStep applies a step that ended at simulated time end: prefill
// chunks advance (their full blocks become hits for later prompts), a
// completed prefill yields the first token, decoding requests one token
// each; finished requests release their blocks. It returns the requests
// still running.
func (e *engine) finishStep(running []*seq, plan []int, end time.Duration) []*seq {
	bs := e.cfg.BlockSize
	keep := running[:0]
	for i, s := range running {
		n := plan[i]
		if n == 0 {
			keep = append(keep, s)
			continue
		}
		if s.prefilled < s.prompt {
			s.prefilled += n
			if full := min(s.prefilled/bs, len(s.keys)); full > s.ready {
				e.kv.computed(s.keys, s.ready, full, s.ids, s.adapter, s.salt)
				s.ready = full
			}
			if s.prefilled < s.prompt {
				keep = append(keep, s)
				continue
			}
			// The step that completes the prefill samples the first token.
			s.first = end
			e.m.ttft.Update((end - s.arrived).Seconds())
		}
		p := int(s.produced.Add(1))
		e.m.generationTokens.Inc()
		if p >= s.maxTokens {
			e.kv.release(s.keys, s.anon)
			e.m.success.Inc()
			s.end(seqDone)
			continue
		}
		s.wake()
		keep = append(keep, s)
	}
	clear(running[len(keep):])
	return keep
}

// dropCancelled ends the running requests whose client left; their
// computed blocks stay cached.
func (e *engine) dropCancelled(running []*seq) []*seq {
	keep := running[:0]
	for _, s := range running {
		if s.cancelled.Load() {
			e.kv.release(s.keys, s.anon)
			s.end(seqAborted)
			continue
		}
		keep = append(keep, s)
	}
	clear(running[len(keep):])
	return keep
}

// abort ends every request left and closes the queue. Scheduler only, as
// it returns.
func (e *engine) abort(running []*seq) {
	for _, s := range running {
		s.end(seqAborted)
	}
	e.mu.Lock()
	e.closed = true
	left := e.waiting.drain()
	e.mu.Unlock()
	for _, s := range left {
		s.end(seqAborted)
	}
	e.nRunning.Store(0)
	e.nWaiting.Store(0)
}

// Stats is a snapshot of an engine's state, as its /metrics shows it.
type Stats struct {
	Running, Waiting int
	// KVUsage is the fraction of KV blocks in use by running requests
	// (vllm:kv_cache_usage_perc; cached blocks no one uses are free).
	KVUsage float64
	// PrefixQueries and PrefixHits are prompt tokens looked up in the
	// prefix cache and found there.
	PrefixQueries, PrefixHits uint64
	// Rejected counts requests refused (Config.OverloadStatus) because
	// the waiting queue was full; Injected those failed on purpose
	// (FailRate, X-Sim-Fail).
	Rejected, Injected uint64
}
