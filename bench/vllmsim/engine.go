package vllmsim

import (
	"context"
	"errors"
	"sync"
	"time"
)

// seq is one request in the engine.
type seq struct {
	keys      []uint64 // full prompt blocks
	prompt    int      // prompt tokens
	maxTokens int
	cached    int // prompt tokens found cached at admission
	anon      int // blocks reserved beyond keys (partial block, output)

	// scheduler-owned
	prefilled int // prompt tokens computed (cached ones count at admission)
	generated int
	admitted  bool

	// tokens gets the index of each output token as it is produced; it is
	// closed when the request ends (finished or cancelled). Buffered for
	// the whole output: the scheduler never blocks on it.
	tokens chan int
	// first and last are when the first and the last token were produced
	// (each set before its token is sent).
	first, last time.Time
	// gone is closed by the handler when the client left.
	gone chan struct{}
}

// errQueueFull is returned by submit when the waiting queue is full.
var errQueueFull = errors.New("the waiting queue is full")

// engine is the scheduler: one goroutine runs steps.
type engine struct {
	cfg  Config
	kv   *kvCache
	wake chan struct{} // a submit happened
	// clock sleeps a step's simulated d (real d/Speedup), false if stop
	// closed first; now reads the time first tokens are stamped with.
	// Tests replace both with a virtual clock.
	clock func(d time.Duration, stop <-chan struct{}) bool
	now   func() time.Time

	mu      sync.Mutex // guards waiting and the counters read by metrics
	waiting []*seq
	running int
	queries uint64 // prompt tokens looked up
	hits    uint64 // of them, cached
	usage   float64
	closed  bool
}

func newEngine(cfg Config) *engine {
	return &engine{
		cfg:  cfg,
		kv:   newKVCache(cfg.KVTokens / cfg.BlockSize),
		wake: make(chan struct{}, 1),
		now:  time.Now,
		clock: func(d time.Duration, stop <-chan struct{}) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-stop:
				return false
			}
		},
	}
}

// submit queues s; errQueueFull when MaxWaiting are waiting. Any goroutine.
func (e *engine) submit(s *seq) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errClosed
	}
	if len(e.waiting) >= e.cfg.MaxWaiting {
		e.mu.Unlock()
		return errQueueFull
	}
	e.waiting = append(e.waiting, s)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

var errClosed = errors.New("the engine is shutting down")

// stats returns the metrics' view. Any goroutine.
func (e *engine) stats() (running, waiting int, usage float64, queries, hits uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running, len(e.waiting), e.usage, e.queries, e.hits
}

// run is the scheduler loop, until ctx ends; then every request left is
// ended (its tokens channel closed without output).
func (e *engine) run(ctx context.Context) {
	var running []*seq
	defer func() {
		e.mu.Lock()
		e.closed = true
		left := e.waiting
		e.waiting = nil
		e.mu.Unlock()
		for _, s := range append(running, left...) {
			close(s.tokens)
		}
	}()
	bs := e.cfg.BlockSize
	for {
		// Drop requests whose client left.
		running = e.dropGone(running)
		// Admit waiting requests, FIFO, while they fit.
		e.mu.Lock()
		for len(e.waiting) > 0 && len(running) < e.cfg.MaxNumSeqs {
			s := e.waiting[0]
			if isGone(s) {
				e.waiting = e.waiting[1:]
				close(s.tokens)
				continue
			}
			cachedBlocks := e.kv.prefix(s.keys)
			// vLLM recomputes at least the last prompt token.
			cached := min(cachedBlocks*bs, s.prompt-1)
			total := (s.prompt + s.maxTokens + bs - 1) / bs
			s.anon = max(total-len(s.keys), 0)
			if !e.kv.reserve(s.keys, s.anon) {
				break // waits for room; FIFO: nothing jumps it
			}
			e.waiting = e.waiting[1:]
			s.cached, s.prefilled, s.admitted = cached, cached, true
			e.queries += uint64(s.prompt)
			e.hits += uint64(cached)
			running = append(running, s)
		}
		e.running = len(running)
		e.usage = e.kv.usage()
		idle := len(running) == 0
		e.mu.Unlock()
		if idle {
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
				continue
			}
		}

		// Plan the step: one token per decoding request, the rest of the
		// budget to prefills in admission order.
		budget := e.cfg.MaxBatchedTokens
		decoding, prefill := 0, 0
		chunk := make([]int, len(running))
		for _, s := range running {
			if s.prefilled >= s.prompt {
				decoding++
				budget--
			}
		}
		for i, s := range running {
			if s.prefilled < s.prompt && budget > 0 {
				n := min(s.prompt-s.prefilled, budget)
				chunk[i] = n
				budget -= n
				prefill += n
			}
		}
		d := e.cfg.StepBase + time.Duration(prefill)*e.cfg.PrefillPerToken + time.Duration(decoding)*e.cfg.DecodePerSeq
		if !e.clock(e.cfg.sim(d), ctx.Done()) {
			return
		}
		now := e.now()
		keep := running[:0]
		for i, s := range running {
			switch {
			case chunk[i] > 0:
				s.prefilled += chunk[i]
				if s.prefilled >= s.prompt {
					e.kv.computed(s.keys)
					s.first, s.last = now, now
					s.generated = 1
					s.tokens <- 0
				}
			case s.prefilled >= s.prompt:
				s.last = now
				s.tokens <- s.generated
				s.generated++
			}
			if s.generated >= s.maxTokens {
				e.kv.release(s.keys, s.anon)
				close(s.tokens)
				continue
			}
			keep = append(keep, s)
		}
		clear(running[len(keep):])
		running = keep
	}
}

// dropGone ends the running requests whose client left.
func (e *engine) dropGone(running []*seq) []*seq {
	keep := running[:0]
	for _, s := range running {
		if isGone(s) {
			if s.prefilled >= s.prompt {
				e.kv.computed(s.keys) // computed before the client left
			}
			e.kv.release(s.keys, s.anon)
			close(s.tokens)
			continue
		}
		keep = append(keep, s)
	}
	clear(running[len(keep):])
	return keep
}

func isGone(s *seq) bool {
	select {
	case <-s.gone:
		return true
	default:
		return false
	}
}
