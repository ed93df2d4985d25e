package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/shard/backend"
	"github.com/saltus-lb/saltus/upstream/fleet"
	"github.com/saltus-lb/saltus/upstream/queue"
)

// The gateway queue (issue 30): when every engine of a request's pool is
// up but full (it refused as full lately, or holds what it held when it
// last refused: backend.Backend.Free), the request waits in saltus, in
// its pool's queue, instead of being refused or retried in a loop. A
// pool's queue lives on one loop (the model's hash mod loops) and is
// reached by its mailbox; it orders by the request's `priority` (vLLM's
// field, lower first), then fair share between tenants (Router.tenantOf:
// the API key's name, weighted, else the bearer token's hash), then
// arrival (upstream/queue). A slot freed by an
// answer on one of the pool's engines posts a dispatch to that loop (an
// event, no polling); the loop's tick dispatches what became free when a
// full engine's Retry-After passed, and refuses what waited past
// Config.Queue.MaxWait. The routing policy still decides where a
// dispatched request goes.

// gate is one pool's queue, owned by its loop.
type gate struct {
	q    *queue.Queue[*job]
	pool *fleet.Pool // the pool as its last request saw it
}

// gateMetrics are the queue's counters (atomics: the loops update them).
type gateMetrics struct {
	queued, dispatched, full, expired, gone *metrics.Counter
}

func newGateMetrics(set *metrics.Set, depth func() float64) gateMetrics {
	set.NewGauge("saltus_queue_depth", depth)
	return gateMetrics{
		queued:     set.NewCounter(`saltus_queue_requests_total{result="queued"}`),
		dispatched: set.NewCounter(`saltus_queue_requests_total{result="dispatched"}`),
		full:       set.NewCounter(`saltus_queue_requests_total{result="full"}`),
		expired:    set.NewCounter(`saltus_queue_requests_total{result="expired"}`),
		gone:       set.NewCounter(`saltus_queue_requests_total{result="gone"}`),
	}
}

// gateLoop is the loop that owns model's queue.
func (r *Router) gateLoop(model string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(model)) // a hash.Hash never fails
	return int(h.Sum32() % uint32(len(r.shards)))
}

// saturated reports whether p has a backend that is up (healthy, not
// draining) while none is free: the request waits. Any goroutine.
func (r *Router) saturated(p *fleet.Pool) bool {
	for _, b := range r.up.Snapshot() {
		if p.Has(b.ID) && b.Routable() {
			return true
		}
	}
	return false
}

// tenantOf is the request's tenant for fair share, and its weight: its
// API key's name and weight when keys are on; else the hash of its
// Authorization header, else of its x-api-key; else the value of
// Config.TenantHeader (cut to maxTenantLen); else "" (the anonymous
// clients share one share), each of weight 1.
func (r *Router) tenantOf(j *job) (string, float64) {
	if j.key != nil {
		return j.key.Name, j.key.Weight
	}
	if j.x == nil {
		return "", 1
	}
	req := j.x.Request()
	a := req.HeaderValue("Authorization")
	if a == "" {
		a = req.HeaderValue("X-Api-Key") // Anthropic's clients send their key so
	}
	if a == "" {
		if r.cfg.TenantHeader != "" {
			if v := req.HeaderValue(r.cfg.TenantHeader); v != "" {
				// "h:" keeps it apart from the hashes (base 36, no ':').
				return "h:" + v[:min(len(v), maxTenantLen)], 1
			}
		}
		return "", 1
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(a)) // a hash.Hash never fails
	return strconv.FormatUint(h.Sum64(), 36), 1
}

// maxTenantLen bounds a tenant named by Config.TenantHeader: the queue
// keeps it as a map key while the tenant has requests queued.
const maxTenantLen = 256

// enqueue queues j in its pool's gate; resume continues it once
// dispatched (on its own loop). On j's connection loop (its gone hook is
// that loop's); j's texts are its own.
func (j *job) enqueue(resume func()) {
	r := j.r
	if j.firstQueued == 0 {
		j.firstQueued = r.now()
	} else if r.now()-j.firstQueued > int64(r.cfg.Queue.MaxWait) {
		// Waited its whole MaxWait over its requeues: refused, not
		// queued once more.
		r.gm.expired.Inc()
		r.fail(j.x, j.route, &apiError{status: 429, typ: "server_error", code: "overloaded", retryAfter: 1,
			msg: fmt.Sprintf("no backend serving the model `%.200s` had room within %v; retry later", j.d.model, r.cfg.Queue.MaxWait)})
		return
	}
	j.resume = resume
	j.tenant, j.weight = r.tenantOf(j)
	owner := r.gateLoop(j.d.model)
	// A client that leaves while queued is taken out at once: nothing is
	// sent upstream for it. (The forward sets its own hook when it goes.)
	j.x.SetGoneHook(func() { r.postTo(owner, func() { r.gateRemove(owner, j) }) })
	if !r.postTo(owner, func() { r.gatePush(owner, j) }) {
		r.m.poolRefused[refusedFull].Inc()
		r.fail(j.x, j.route, &apiError{status: 429, typ: "server_error", code: "overloaded", retryAfter: 1,
			msg: "every backend serving the model is full and the router is too busy to queue the request; retry later"})
	}
}

// gatePush is enqueue on the gate's loop.
func (r *Router) gatePush(owner int, j *job) {
	sh := r.shards[owner]
	g := sh.gates[j.d.model]
	if g == nil {
		q, err := queue.New[*job](r.cfg.Queue)
		if err != nil {
			panic("BUG: shard: the queue config was validated: " + err.Error())
		}
		g = &gate{q: q}
		sh.gates[j.d.model] = g
	}
	g.pool = j.pool
	id, ok := g.q.Push(j, j.d.priority, j.tenant, j.weight, 1, r.now())
	if !ok {
		r.gm.full.Inc()
		r.fail(j.x, j.route, &apiError{status: 429, typ: "server_error", code: "overloaded", retryAfter: 1,
			msg: fmt.Sprintf("every backend serving the model `%.200s` is full and its queue holds %d requests already; retry later", j.d.model, r.cfg.Queue.MaxEntries)})
		return
	}
	j.queueID = id
	r.queued.Add(1)
	r.gm.queued.Inc()
	r.dispatch(sh, g)
}

// gateRemove takes j out of its gate: its client left. On the gate's loop
// (queueID is that loop's).
func (r *Router) gateRemove(owner int, j *job) {
	if g := r.shards[owner].gates[j.d.model]; g != nil && g.q.Remove(j.queueID) {
		r.queued.Add(-1)
		r.gm.gone.Inc()
	}
}

// dispatch sends on as many queued requests as g's pool has free slots:
// for each free backend its learned capacity left, or one when not known
// (each answer dispatches again). On the gate's loop.
func (r *Router) dispatch(sh *Shard, g *gate) {
	if g.q.Len() == 0 || g.pool == nil {
		return
	}
	now := time.Now()
	slots := int64(0)
	for _, b := range r.up.Snapshot() {
		if !g.pool.Has(b.ID) || !b.Routable() || !b.Free(now) {
			continue
		}
		if l := b.Limit(now); l > 0 {
			slots += l - b.InFlight()
		} else {
			slots++
		}
	}
	for ; slots > 0 && g.q.Len() > 0; slots-- {
		j, _, _ := g.q.Pop(r.now())
		r.queued.Add(-1)
		if gone(j.x) {
			r.gm.gone.Inc()
			slots++
			continue
		}
		r.gm.dispatched.Inc()
		r.shards[j.loop].poster(j.resume)
	}
}

// kickGate posts a dispatch of model's gate: an answer freed a slot on
// one of its engines. Only while something is queued anywhere. Any
// goroutine (a loop's Done hook).
func (r *Router) kickGate(model string) {
	if r.queued.Load() == 0 {
		return
	}
	owner := r.gateLoop(model)
	r.postTo(owner, func() { // refused: the tick dispatches it
		if g := r.shards[owner].gates[model]; g != nil {
			r.dispatch(r.shards[owner], g)
		}
	})
}

// tickGates refuses what waited past MaxWait and dispatches what became
// free (a full engine's Retry-After passed), on sh's loop tick; an empty
// gate is dropped (made again by its next request).
func (r *Router) tickGates(sh *Shard) {
	for model, g := range sh.gates {
		sh.expired = g.q.Expire(r.now(), sh.expired[:0])
		for _, j := range sh.expired {
			r.queued.Add(-1)
			if gone(j.x) {
				r.gm.gone.Inc()
				continue
			}
			r.gm.expired.Inc()
			r.fail(j.x, j.route, &apiError{status: 429, typ: "server_error", code: "overloaded", retryAfter: 1,
				msg: fmt.Sprintf("no backend serving the model `%.200s` had room within %v; retry later", model, r.cfg.Queue.MaxWait)})
		}
		clear(sh.expired)
		r.dispatch(sh, g)
		if g.q.Len() == 0 {
			delete(sh.gates, model)
		}
	}
}

// maxRequeues bounds how often one request goes back to its queue after
// every engine it was sent to refused it as full (or its pool filled
// between its admission and its decision): then saltus answers its own
// 429 or 503. Each time waits for a freed slot, so this bounds work, not
// time (MaxWait does).
const maxRequeues = 10

// requeue takes a forwarded request back into its pool's queue: every
// candidate refused it as full (backend.Hooks.Requeue). The attempt's
// accounting is undone as for a failure; it resumes at its decision. On
// the connection's loop (the Done hook's).
func (j *job) requeue(o backend.Outcome) {
	j.prefill.done(o)
	j.pin.release()
	j.settle(o)
	j.fb, j.fresh, j.prefill, j.pin = routeFeedback{}, false, pendingPrefill{}, pinned{}
	j.requeues++
	j.waitAgain()
}

// waitAgain queues j again, to resume at its decision. On its
// connection's loop.
func (j *job) waitAgain() {
	resume := j.decideHere
	if routedByPrefix(j.route) && len(j.keys) > 0 {
		resume = j.dispatch // keyed already: the lookup and decision again
	}
	j.enqueue(resume)
}

// allPriority reports whether every candidate's engine runs priority
// scheduling (backend.Backend.PriorityScheduling).
func allPriority(cands []*backend.Backend) bool {
	for _, b := range cands {
		if !b.PriorityScheduling() {
			return false
		}
	}
	return len(cands) > 0
}
