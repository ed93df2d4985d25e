package shard

import (
	"context"
	"fmt"
	"sync"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
)

// Large bodies off the loop (DESIGN.md § Decoding untrusted bodies): a
// chat or completion body over Config.OffloopBytes is checked, decoded and
// rendered on one of Config.DecodeWorkers goroutines, so that its loop
// serves its other connections meanwhile (a 28 MB body of 1 M messages
// held a loop for 11.7 s before). The job then goes back to its loop as a
// tokenizer completion does (through NewRouter's poster) and carries on from stage 4;
// what it decoded is its own (openai.Decode without a Scratch copies what
// it keeps), so nothing it holds views a loop's scratch.

// interpretedQueue is the decode queue's least bound with a Jinja chat
// template, when every chat goes through it: a burst of that many
// requests arriving at once waits for the workers instead of a 503.
const interpretedQueue = 1024

// offload queues j for a decode worker, or answers 503 when
// Config.DecodeQueue is full. Loop only (j.loop's).
func (r *Router) offload(j *job) {
	select {
	case r.decodes <- j:
		r.m.offloop.Inc()
	default:
		r.m.decodeQueueFull.Inc()
		r.fail(j.x, j.route, &openai.Error{Status: 503, Type: "server_error", Code: "overloaded",
			Message: fmt.Sprintf("too many request bodies are waiting to be decoded off the event loops (decode queue of %d full); retry later", cap(r.decodes))},
			reactor.Header{Name: "Retry-After", Value: "1"})
	}
}

// decodeWorker decodes queued large bodies until the Router closes; then
// it answers what is still queued with 503.
func (r *Router) decodeWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case j := <-r.decodes:
					r.fail(j.x, j.route, &openai.Error{Status: 503, Type: "server_error", Code: "shutting_down",
						Message: "the router is shutting down"})
				default:
					return
				}
			}
		case j := <-r.decodes:
			r.decodeOff(j)
		}
	}
}

// decodeOff runs stages 2 and 3 for j on a decode worker, then posts
// stage 4 to j.loop. Errors are answered from here (fail: any goroutine).
func (r *Router) decodeOff(j *job) {
	if h := r.decodeHook.Load(); h != nil {
		(*h)(j)
	}
	if gone(j.x) {
		r.m.clientGone.Inc()
		return
	}
	if !routedByPrefix(j.route) {
		// Only its model is read, for its pool (pools.go).
		j.d.Model = unkeyedModel(j.route, j.req)
		if e := j.admit(); e != nil {
			r.fail(j.x, j.route, e)
			return
		}
		if j.waitFull {
			r.shards[j.loop].poster(func() { j.enqueue(j.decideHere) }) // its gone hook is its loop's
			return
		}
		r.shards[j.loop].poster(j.decideHere)
		return
	}
	if e := j.prepare(j.req.Body, nil); e != nil {
		r.fail(j.x, j.route, e)
		return
	}
	if e := j.admit(); e != nil {
		r.fail(j.x, j.route, e)
		return
	}
	j.owned = true
	if j.waitFull {
		r.shards[j.loop].poster(j.waitSaturated) // its gone hook is its loop's
		return
	}
	r.shards[j.loop].poster(j.tokenize)
}

// valueBudget bounds the JSON values being decoded off the loops at once
// (decode workers and Explain) to Config.Body.MaxValues, so two bodies at
// the limit decode one after the other, not together. It dates from the
// fastjson parse, which held ~400-450 bytes per value; openai.Decode
// keeps nothing per value and allocates at most ~5.3 bytes per body byte
// (openai's TestDecodeMemory), so the budget now only serializes the
// largest decodes. A body never needs more than the whole budget (check
// refused it), so every wait ends when the decodes ahead of it end. Any
// goroutine but a loop.
type valueBudget struct {
	mu   sync.Mutex
	cond sync.Cond
	free int // mu guards it
}

func (b *valueBudget) init(n int) {
	b.free = n
	b.cond.L = &b.mu
}

func (b *valueBudget) acquire(n int) {
	b.mu.Lock()
	for b.free < n {
		b.cond.Wait()
	}
	b.free -= n
	b.mu.Unlock()
}

func (b *valueBudget) release(n int) {
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// SetDecodeHook makes fn run on the decode worker before it decodes each
// large body (nil: nothing): tests gate the off-loop decode with it to
// assert what the loop does meanwhile. Any goroutine.
func (r *Router) SetDecodeHook(fn func()) {
	if fn == nil {
		r.decodeHook.Store(nil)
		return
	}
	h := func(*job) { fn() }
	r.decodeHook.Store(&h)
}

// trim drops what a loop's decodeScratch grew to for a body over
// openai.KeepDecodeBytes: the next request starts from fresh memory instead of
// this one's high-water mark. Views the current request holds keep the
// old memory alive until it is done with them. Loop only.
func (ds *decodeScratch) trim(bodyLen int) {
	if bodyLen <= openai.KeepDecodeBytes {
		return
	}
	ds.sc = openai.Scratch{}
	ds.texts, ds.msgEnd = nil, nil
}
