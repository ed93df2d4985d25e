package shard

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"time"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/upstream/backend"
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
// dispatched request goes. Inside a tenant's turn, a request whose
// prefix a backend with a slot free holds more of than any other engine
// (its hint, from its lookup before it was queued) goes ahead of earlier
// ones (queue.PopPrefer, Config.QueueAffinity): late binding, one queue
// for the pool, without sending a conversation's next turn to whichever
// engine frees first.

// gate is one pool's queue, owned by its loop.
type gate struct {
	q    *queue.Queue[*job]
	pool *fleet.Pool // the pool as its last request saw it
	m    *poolStats  // its model's counts (queuemetrics.go), resolved when the gate is made
	// free is each backend's free slots (by ID) in the dispatch under
	// way; prefer is wants, made once.
	free   map[int]int64
	prefer func(*job) bool
}

// maxQueueAffinity bounds Config.QueueAffinity: a dispatch looks at
// 4 × QueueAffinity requests at most.
const maxQueueAffinity = 256

// wants reports whether j's hint has a free slot in the dispatch under
// way. On the gate's loop.
func (g *gate) wants(j *job) bool { return j.hint > 0 && g.free[int(j.hint-1)] > 0 }

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
	if r.draining.Load() {
		r.refusedFor(j.d.Model, refusedShutdown)
		r.fail(j.x, j.route, shuttingDown())
		return
	}
	if j.firstQueued == 0 {
		j.firstQueued = r.now()
	} else if r.now()-j.firstQueued > int64(r.cfg.Queue.MaxWait) {
		// Waited its whole MaxWait over its requeues: refused, not
		// queued once more.
		s := r.statsFor(j.d.Model)
		s.results[resExpired].Add(1)
		s.refused[refusedExpired].Add(1)
		r.fail(j.x, j.route, expiredError(j.d.Model, r.cfg.Queue.MaxWait))
		return
	}
	j.resume = resume
	j.tenant, j.weight = r.tenantOf(j)
	owner := r.gateLoop(j.d.Model)
	// A client that leaves while queued is taken out at once: nothing is
	// sent upstream for it. (The forward sets its own hook when it goes.)
	j.x.SetGoneHook(func() { r.postTo(owner, func() { r.gateRemove(owner, j) }) })
	if owner == j.loop {
		// The gate's own loop: pushed now, so nothing runs before it (a
		// requeued request is back at its place before the loop's next
		// dispatch, which a post left room for: TestRequeueKeepsPlace).
		r.gatePush(owner, j)
		return
	}
	if !r.postTo(owner, func() { r.gatePush(owner, j) }) {
		r.refusedFor(j.d.Model, refusedBusy)
		r.fail(j.x, j.route, &openai.Error{Status: 429, Type: "server_error", Code: "overloaded", RetryAfter: 1,
			Message: "every backend serving the model is full and the router is too busy to queue the request; retry later"})
	}
}

// gatePush is enqueue on the gate's loop.
func (r *Router) gatePush(owner int, j *job) {
	if r.draining.Load() {
		r.refusedFor(j.d.Model, refusedShutdown)
		r.fail(j.x, j.route, shuttingDown())
		return
	}
	sh := r.shards[owner]
	g := sh.gates[j.d.Model]
	if g == nil {
		q, err := queue.New[*job](r.cfg.Queue)
		if err != nil {
			panic("BUG: shard: the queue config was validated: " + err.Error())
		}
		q.StartSeq(sh.gateSeq) // past every Ticket its model's gates gave
		g = &gate{q: q, m: r.statsFor(j.d.Model), free: map[int]int64{}}
		g.prefer = g.wants
		sh.gates[j.d.Model] = g
	}
	g.pool = j.pool
	now := r.now()
	var id uint64
	var ok bool
	if j.ticket.Valid() {
		// Dispatched from this queue, and every engine refused it as
		// full: back to its place, ahead of later arrivals.
		id, ok = g.q.Requeue(j, j.d.Priority, j.tenant, j.ticket, now)
		j.ticket = queue.Ticket{}
	} else {
		// A new arrival, or one every engine refused before it ever
		// waited: from when it was sent, or admitted (sentAt).
		arrival := int64(math.MaxInt64)
		if j.sentAt != 0 {
			arrival = j.sentAt
		}
		id, ok = g.q.PushAt(j, j.d.Priority, j.tenant, j.weight, 1, arrival, now)
	}
	if !ok {
		g.m.results[resFull].Add(1)
		g.m.refused[refusedQueueFull].Add(1)
		r.fail(j.x, j.route, &openai.Error{Status: 429, Type: "server_error", Code: "overloaded", RetryAfter: 1,
			Message: fmt.Sprintf("every backend serving the model `%.200s` is full and its queue holds %d requests already; retry later", j.d.Model, r.cfg.Queue.MaxEntries)})
		return
	}
	j.queueID, j.queuedAt = id, now
	r.queued.Add(1)
	g.m.depth[queue.BandOf(j.d.Priority)].Add(1)
	g.m.results[resQueued].Add(1)
	r.dispatch(sh, g)
}

// left accounts for j leaving g's queue (popped, removed, expired or
// flushed): the depths go down. On the gate's loop.
func (r *Router) left(g *gate, j *job) queue.Band {
	b := queue.BandOf(j.d.Priority)
	r.queued.Add(-1)
	g.m.depth[b].Add(-1)
	return b
}

// gateRemove takes j out of its gate: its client left. On the gate's loop
// (queueID is that loop's).
func (r *Router) gateRemove(owner int, j *job) {
	if g := r.shards[owner].gates[j.d.Model]; g != nil && g.q.Remove(j.queueID) {
		r.left(g, j)
		g.gone(j)
	}
}

// gone counts j, taken out of g's queue, as left by its client: nothing
// answers it, so its API key's reservation is given back here (keyDone;
// a refund, counted as an error). On the gate's loop, which owns j then.
func (g *gate) gone(j *job) {
	g.m.results[resGone].Add(1)
	j.keyDone(0, openai.UsageCounts{})
	j.logGone(-1)
}

// dispatch sends on as many queued requests as g's pool has free slots:
// for each free backend its limit less what it runs and what was decided
// for it, or one when not known (each answer dispatches again), less the
// requests dispatched before and not decided yet (transit: each answer
// and each tick dispatches, and a request takes a hop to its loop before
// it is decided; counted twice, the extra ones found no room, went back
// to the queue behind what came after them, and requests of priority 10
// were answered before those of -10). On the gate's loop.
func (r *Router) dispatch(sh *Shard, g *gate) {
	if g.q.Len() == 0 || g.pool == nil || r.draining.Load() { // draining: flushGates answers them
		return
	}
	now := time.Now()
	slots := int64(0)
	clear(g.free)
	for _, b := range r.up.Snapshot() {
		if !g.pool.Has(b.ID) || !b.Routable() || !b.Free(now) {
			continue
		}
		n := int64(1)
		if l := b.Limit(now); l > 0 {
			n = l - b.InFlight() - b.Decided()
		}
		slots += n
		if n > 0 {
			g.free[b.ID] = n
		}
	}
	slots -= g.m.transit.Load()
	window, passes := 4*r.cfg.QueueAffinity, r.cfg.QueueAffinity
	for ; slots > 0 && g.q.Len() > 0; slots-- {
		j, waited, ticket, _ := g.q.PopPrefer(r.now(), window, passes, g.prefer)
		b := r.left(g, j)
		j.ticket = ticket
		if gone(j.x) {
			g.gone(j)
			slots++
			continue
		}
		if g.wants(j) {
			g.free[int(j.hint-1)]--
			g.m.toHolder.Add(1)
		}
		g.m.results[resDispatched].Add(1)
		g.m.observeWait(b, waited)
		j.waited += waited
		j.transit = &g.m.transit
		j.transit.Add(1)
		r.shards[j.loop].poster(j.resume)
	}
}

// arrived ends j's transit (dispatch): it is decided (finish), or its
// client left before (job.dispatch). On j's loop of the moment.
func (j *job) arrived() {
	if j.transit != nil {
		j.transit.Add(-1)
		j.transit = nil
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
// gate is dropped (made again by its next request). Once saltus stops
// (StopQueues), it answers what is queued instead. It then publishes
// each gate's oldest wait for the admin API (QueueStatus).
func (r *Router) tickGates(sh *Shard) {
	if r.draining.Load() {
		r.flushGates(sh)
	}
	now := r.now()
	for model, g := range sh.gates {
		sh.expired = g.q.Expire(now, sh.expired[:0])
		for _, j := range sh.expired {
			b := r.left(g, j)
			if gone(j.x) {
				g.gone(j)
				continue
			}
			g.m.results[resExpired].Add(1)
			g.m.refused[refusedExpired].Add(1)
			g.m.observeWait(b, time.Duration(now-j.queuedAt))
			j.waited += time.Duration(now - j.queuedAt)
			r.fail(j.x, j.route, expiredError(model, r.cfg.Queue.MaxWait))
		}
		clear(sh.expired)
		r.dispatch(sh, g)
		if g.q.Len() == 0 {
			sh.gateSeq = max(sh.gateSeq, g.q.Seq())
			delete(sh.gates, model)
		}
	}
	r.publishGates(sh)
}

// publishGates publishes sh's gates' oldest waits (gateSnaps). On sh's
// loop.
func (r *Router) publishGates(sh *Shard) {
	if len(sh.gates) == 0 {
		if sh.queues.Load() != nil {
			sh.queues.Store(nil)
		}
		return
	}
	snaps := make([]gateSnap, 0, len(sh.gates))
	now := r.now()
	for _, g := range sh.gates {
		snaps = append(snaps, gateSnap{stats: g.m, oldest: g.q.Oldest(now)})
	}
	sh.queues.Store(&snaps)
}

// StopQueues answers every request waiting in a gateway queue, and every
// one that would wait from now on, with saltus's 503 shutting_down and
// Retry-After: saltus stops (the drain's first step), and a queued
// request is better sent to another replica at once than held until the
// drain times out. Requests already forwarded finish. Each loop answers
// its queued requests when it gets the message (or at its next tick if
// its mailbox is full), at most Queue.MaxExpirePerCall a call, the rest
// at the following ticks. Any goroutine.
func (r *Router) StopQueues() {
	if r.draining.Swap(true) {
		return
	}
	for i, sh := range r.shards {
		_ = r.postTo(i, func() { r.flushGates(sh) }) // refused: its tick flushes
	}
}

// flushGates answers up to MaxExpirePerCall of sh's queued requests with
// 503 shutting_down (StopQueues); the tick answers the rest. On sh's loop.
func (r *Router) flushGates(sh *Shard) {
	budget := r.cfg.Queue.MaxExpirePerCall
	for model, g := range sh.gates {
		for ; budget > 0; budget-- {
			j, _, ok := g.q.Pop(r.now())
			if !ok {
				break
			}
			r.left(g, j)
			if gone(j.x) {
				g.gone(j)
				continue
			}
			g.m.results[resShutdown].Add(1)
			g.m.refused[refusedShutdown].Add(1)
			r.fail(j.x, j.route, shuttingDown())
		}
		if g.q.Len() == 0 {
			sh.gateSeq = max(sh.gateSeq, g.q.Seq())
			delete(sh.gates, model)
		}
	}
	r.publishGates(sh)
}

// expiredError is the 429 of a request that waited its pool's MaxWait.
func expiredError(model string, wait time.Duration) *openai.Error {
	return &openai.Error{Status: 429, Type: "server_error", Code: "overloaded", RetryAfter: 1,
		Message: fmt.Sprintf("no backend serving the model `%.200s` had room within %v; retry later", model, wait)}
}

// shuttingDown is the 503 of a request that waited (or would wait) in a
// gateway queue when saltus stops: fail adds Retry-After.
func shuttingDown() *openai.Error {
	return &openai.Error{Status: 503, Type: "server_error", Code: "shutting_down",
		Message: "the router is shutting down; retry on another replica"}
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
	j.settle(o, openai.UsageCounts{})
	j.fb, j.fresh, j.prefill, j.pin = routeFeedback{}, false, pendingPrefill{}, pinned{}
	if !j.ticket.Valid() && j.sentAt == 0 && !o.Sent.IsZero() {
		// Never queued: it waits from when it was sent (the engines'
		// refusals come within milliseconds of it), ahead of what was
		// queued after.
		j.sentAt = max(int64(o.Sent.Sub(j.r.epoch)), 1)
	}
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

// Bounds of Config.PriorityModels: each is looked up in the fleet's
// index for a request with a "priority" field.
const (
	maxPriorityModels   = 256
	maxPriorityModelLen = 512
)

// allPriority reports whether every candidate's engine runs priority
// scheduling: set on the backend (backend.Backend.PriorityScheduling), or
// it serves a model of Config.PriorityModels (an engine runs one
// scheduling policy for all it serves). Any goroutine.
func (r *Router) allPriority(cands []*backend.Backend) bool {
	var ix *fleet.Index
	if r.fleet != nil {
		ix = r.fleet.Index()
	}
	models := *r.prioModels.Load()
	for _, b := range cands {
		if !b.PriorityScheduling() && !servesAny(ix, models, b.ID) {
			return false
		}
	}
	return len(cands) > 0
}

// servesAny reports whether backend id is in the pool of one of models.
func servesAny(ix *fleet.Index, models []string, id int) bool {
	for _, m := range models {
		if p := ix.Lookup(m); p != nil && p.Has(id) {
			return true
		}
	}
	return false
}
