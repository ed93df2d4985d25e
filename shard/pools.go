package shard

import (
	"context"
	"fmt"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/upstream/fleet"
)

// Model pools (issue 29): a request goes only to an engine that serves
// its model. The fleet (upstream/fleet) publishes which backends serve
// which model name; admit resolves the request's model to its pool before
// the decision, and the decision sees only the pool's backends (views),
// so every policy, the cost model's fleet-wide terms (mean load, median
// prefill rate, fullest cache), sessions and the cold-prefix home work
// inside the pool. Route keys are seeded by the served name
// (job.seedModel), so an adapter's prefixes are never its base model's.

// Fleet is what the Router reads of the model pools (*fleet.Fleet).
type Fleet interface {
	Index() *fleet.Index
	// Refresh fetches the given backends' models and waits for it.
	Refresh(ctx context.Context, ids ...int) error
	// Suspect asks for a backend's models to be fetched soon: it
	// answered 404 to a request of its pool (rate-limited; never blocks).
	Suspect(id int)
}

// UseFleet makes the Router route by model pools. Call it before the
// loops start; without it every backend serves every model (tests, and
// the benchmark's single-model fleets).
func (r *Router) UseFleet(f Fleet) { r.fleet = f }

// admit resolves the request's model to its pool (j.pool), or answers
// why not: 404 model_not_found when no backend serves the model (nothing
// is forwarded), 503 when the backends that serve it are all down or
// draining. A model no known backend lists, or one whose backends are
// all down, goes to the backends whose models are not known yet
// (fleet.Index.Wild: just added, or without GET /v1/models), if any is
// routable. No backend at all: 503. No
// fleet, or no model named (an endpoint whose body has none): every
// backend. Any goroutine (it reads atomics only).
func (j *job) admit() *openai.Error {
	r := j.r
	if j.key != nil {
		if e := j.admitKey(); e != nil { // the key's models and limits (keys.go)
			return e
		}
	}
	if r.fleet == nil || j.d.Model == "" {
		return nil
	}
	ix := r.fleet.Index()
	p, wild := ix.Lookup(j.d.Model), ix.Unknown(r.up.Snapshot())
	switch {
	case p != nil && !r.anyRoutable(p) && wild != nil && r.anyRoutable(wild):
		// Its backends are all down, but some whose models are not
		// known yet (just added, say) may serve it.
		p = wild
	case p == nil && wild == nil:
		if len(r.up.Snapshot()) == 0 {
			j.refused(refusedNoBackend)
			return &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
				Message: "no backend is available to serve the request"}
		}
		j.refused(refusedNotFound)
		return modelNotFound(j.d.Model)
	case p == nil:
		p = wild
	}
	if !r.anyRoutable(p) || (j.explain == nil && r.queuedAhead(j.d.Model)) {
		if r.saturated(p) {
			// Up, but none has room, or requests wait for room already
			// (first come: a slot an answer frees goes to the queue's
			// next, not to whoever arrives while its dispatch is on its
			// way): it waits in the pool's queue.
			j.waitFull, j.pool = true, p
			if j.explain == nil {
				p.Admitted()
			}
			return nil
		}
		j.refused(refusedNoBackend)
		return &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
			Message: fmt.Sprintf("no backend serving the model `%.200s` is available (%d down or draining); retry later", j.d.Model, p.Size())}
	}
	j.pool = p
	if j.explain == nil { // Explain is not traffic
		p.Admitted()
	}
	return nil
}

// queuedAhead reports whether requests for model wait in its pool's
// queue, or (while any request waits anywhere) were dispatched from it
// and are not decided yet: a new arrival then waits behind them. Any
// goroutine (atomics).
func (r *Router) queuedAhead(model string) bool {
	if r.queued.Load() == 0 { // nothing queued anywhere: the common case, one load
		return false
	}
	s := r.statsFor(model)
	for b := range s.depth {
		if s.depth[b].Load() > 0 {
			return true
		}
	}
	return s.transit.Load() > 0
}

// refused counts a refusal of admit, unless j is an Explain (not
// traffic).
func (j *job) refused(why int) {
	if j.explain == nil {
		j.r.refusedFor(j.d.Model, why)
	}
}

// modelNotFound is the answer for a model no backend serves, in vLLM's
// words with OpenAI's code.
func modelNotFound(model string) *openai.Error {
	return &openai.Error{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("The model `%.200s` does not exist.", model)}
}

// anyRoutable reports whether a backend of p is routable now. Any
// goroutine.
func (r *Router) anyRoutable(p *fleet.Pool) bool {
	for _, b := range r.up.Snapshot() {
		if p.Has(b.ID) {
			if _, ok := r.state(b); ok {
				return true
			}
		}
	}
	return false
}

// Pool refusals, the reason label of saltus_pool_refused_total: the
// answers saltus gives itself for a request's model.
const (
	refusedNotFound    = iota // 404: no backend serves the model
	refusedNoBackend          // 503: every backend serving it is down or draining
	refusedBusy               // 429: its queue's loop was too busy to take it
	refusedQueueFull          // 429: its queue held Queue.MaxEntries
	refusedExpired            // 429: it waited Queue.MaxWait
	refusedEnginesFull        // 429/503: every engine tried refused it as full, its requeues spent
	refusedShutdown           // 503: saltus stops (StopQueues)
	numRefused
)

var refusedNames = [numRefused]string{"model_not_found", "no_backend", "queue_busy", "queue_full", "queue_expired", "engines_full", "shutting_down"}

// listModels is GET /v1/models from the pools: every pool with a
// routable backend, each as its first backend (by ID) listed it. nil when
// the fleet knows no pool (every backend's models unknown: the caller
// asks the backends). Any goroutine.
func (r *Router) listModels() []byte {
	ix := r.fleet.Index()
	pools := ix.Pools()
	if len(pools) == 0 {
		return nil
	}
	out := []byte(`{"object":"list","data":[`)
	n := 0
	for _, p := range pools {
		if !r.anyRoutable(p) {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, p.Model.Card...)
		n++
	}
	return append(out, "]}"...)
}

// retrievePooled answers GET /v1/models/{id} from the pools; false when
// the fleet knows no pool (the caller asks the backends). On a models
// worker.
func (r *Router) retrievePooled(x exchange, id string) bool {
	ix := r.fleet.Index()
	if len(ix.Pools()) == 0 {
		return false
	}
	p := ix.Lookup(id)
	switch {
	case p == nil:
		r.refusedFor(id, refusedNotFound)
		r.fail(x, routeModels, modelNotFound(id))
	case !r.anyRoutable(p):
		r.fail(x, routeModels, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
			Message: fmt.Sprintf("no backend serving the model `%.200s` is available; retry later", id)}) // fail adds Retry-After to a 503
	default:
		r.m.request(routeModels, 200) // counted first, as fail does
		hdr := []reactor.Header{{Name: "Content-Type", Value: "application/json"},
			{Name: reactor.RequestIDHeader, Value: x.Request().RequestID()}}
		x.Respond(200, hdr, p.Model.Card)
		r.logOwn(x, 200, hdr, p.Model.Card)
	}
	return true
}

// routableAny reports whether any backend is routable. Any goroutine.
func (r *Router) routableAny() bool {
	for _, b := range r.up.Snapshot() {
		if _, ok := r.state(b); ok {
			return true
		}
	}
	return false
}
