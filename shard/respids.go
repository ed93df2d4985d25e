package shard

import (
	"fmt"
	"hash/maphash"
	"io"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// Response ids: vLLM keeps a Responses answer (store, the default) in the
// memory of the engine that produced it, and a request naming it
// (previous_response_id, GET/DELETE /v1/responses/{id}, POST …/cancel)
// is answered 404 by any other engine. So the Router remembers, for each
// response id it saw in an answer, the backend that sent it, and sends
// those requests there.
//
// The table is partitioned by the id's hash across the shards, each
// partition (a respTable) owned by its shard's loop, like the trees: an
// insert or lookup on another loop is a message to the owner through the
// bounded mailbox (postTo, job.post), so no loop ever waits on a mutex,
// and a full mailbox costs a counted drop (an insert) or a prefix route
// (a lookup) instead of a stall. A lookup is always posted, even to its
// own loop: the insert of the answer that carried the id was posted before
// the client got that answer, and the mailbox is FIFO, so the lookup of a
// follow-up request runs after it; looked up inline, it could run before
// a posted insert that gnet has not run yet (it runs posted tasks after
// the batch's socket events).

// ReasonResponseID: the request names a response (previous_response_id,
// or /v1/responses/{id}) and goes to the backend that produced it.
const ReasonResponseID = "response_id"

// respTable is one shard's part of the id → backend table: at most cap
// ids, each for ttl after its insert, evicted oldest first over cap.
// Owned by its loop; pure (the clock is an argument) for tests.
type respTable struct {
	cap int
	ttl int64 // nanoseconds
	m   map[string]respEntry
	// ring is the insertion order (a circular queue of up to cap slots);
	// a slot whose seq is no longer its id's entry's is stale (the id was
	// inserted again) and is skipped when it comes out.
	ring       []respSlot
	head, n    int
	seq        uint64
	evicted    uint64 // dropped over cap
	expiredIDs uint64 // dropped after ttl
}

type respEntry struct {
	backend int
	at      int64
	seq     uint64
}

type respSlot struct {
	id  string
	seq uint64
}

func newRespTable(capacity int, ttl int64) *respTable {
	return &respTable{cap: capacity, ttl: ttl, m: make(map[string]respEntry)}
}

// insertBudget bounds the expired slots an insert drops.
const insertBudget = 8

// insert records that backend produced id at now.
func (t *respTable) insert(id string, backend int, now int64) {
	t.expire(now, insertBudget)
	if t.n == t.cap {
		t.pop(true)
	}
	t.seq++
	t.m[id] = respEntry{backend: backend, at: now, seq: t.seq}
	if t.n == len(t.ring) {
		// Full below cap: grow by doubling, so that a partition only
		// holds the memory its traffic uses.
		nr := make([]respSlot, min(t.cap, max(16, 2*len(t.ring))))
		k := copy(nr, t.ring[t.head:])
		copy(nr[k:], t.ring[:t.head])
		t.ring, t.head = nr, 0
	}
	t.ring[(t.head+t.n)%len(t.ring)] = respSlot{id: id, seq: t.seq}
	t.n++
}

// pop removes the oldest slot, and its id if the slot is current.
func (t *respTable) pop(evict bool) {
	s := t.ring[t.head]
	t.ring[t.head] = respSlot{}
	t.head = (t.head + 1) % len(t.ring)
	t.n--
	if e, ok := t.m[s.id]; ok && e.seq == s.seq {
		delete(t.m, s.id)
		if evict {
			t.evicted++
		} else {
			t.expiredIDs++
		}
	}
}

// lookup returns the backend that produced id, if it was inserted less
// than ttl ago.
func (t *respTable) lookup(id string, now int64) (int, bool) {
	e, ok := t.m[id]
	if !ok {
		return -1, false
	}
	if now-e.at > t.ttl {
		return -1, false // expire drops it in order
	}
	return e.backend, true
}

// expire drops up to budget slots from the oldest end that are stale or
// older than ttl.
func (t *respTable) expire(now int64, budget int) {
	for ; budget > 0 && t.n > 0; budget-- {
		s := t.ring[t.head]
		if e, ok := t.m[s.id]; ok && e.seq == s.seq && now-e.at <= t.ttl {
			return
		}
		t.pop(false)
	}
}

func (t *respTable) len() int { return len(t.m) }

// respState is the Router's side of the table: the partition hash, the
// counters, and each partition's gauges published by its loop.
type respState struct {
	seed                              maphash.Seed
	hit, unknown, unroutable, dropped *metrics.Counter
	ids, evictions, expired           []atomic.Int64 // per shard, published by its loop
}

func newRespState(set *metrics.Set, shards int) *respState {
	return &respState{
		seed:       maphash.MakeSeed(),
		hit:        set.NewCounter(`saltus_responses_id_lookups_total{result="hit"}`),
		unknown:    set.NewCounter(`saltus_responses_id_lookups_total{result="unknown"}`),
		unroutable: set.NewCounter(`saltus_responses_id_lookups_total{result="unroutable"}`),
		dropped:    set.NewCounter("saltus_responses_ids_dropped_total"),
		ids:        make([]atomic.Int64, shards),
		evictions:  make([]atomic.Int64, shards),
		expired:    make([]atomic.Int64, shards),
	}
}

func (rs *respState) writeMetrics(w io.Writer) {
	var ids, ev, ex int64
	for i := range rs.ids {
		ids += rs.ids[i].Load()
		ev += rs.evictions[i].Load()
		ex += rs.expired[i].Load()
	}
	metrics.WriteGaugeUint64(w, "saltus_responses_ids", uint64(ids))
	metrics.WriteCounterUint64(w, "saltus_responses_ids_evictions_total", uint64(ev))
	metrics.WriteCounterUint64(w, "saltus_responses_ids_expired_total", uint64(ex))
}

// publishResp copies shard i's table gauges to atomics. Loop only (i's).
func (r *Router) publishResp(i int) {
	t := r.shards[i].resp
	r.rs.ids[i].Store(int64(t.len()))
	r.rs.evictions[i].Store(int64(t.evicted))
	r.rs.expired[i].Store(int64(t.expiredIDs))
}

// respOwner is the shard whose partition holds id. Any goroutine.
func (r *Router) respOwner(id string) int {
	return int(maphash.String(r.rs.seed, id) % uint64(len(r.shards)))
}

// remember records that backend produced response id: at once on the
// owner's loop (on is the loop the caller runs on, -1 for none), else
// posted to it (dropped and counted when its mailbox is full). Any
// goroutine.
func (r *Router) remember(on int, id string, backendID int) {
	owner := r.respOwner(id)
	insert := func() {
		r.shards[owner].resp.insert(id, backendID, r.now())
		r.publishResp(owner)
	}
	if on == owner {
		insert()
		return
	}
	if !r.postTo(owner, insert) {
		r.rs.dropped.Inc()
	}
}

// answerHook captures the response id of a 2xx Responses answer: the
// top-level "id" of a JSON body, the response.id of the first SSE event
// (vLLM's response.created). on: as remember.
func (r *Router) answerHook(on int) backend.AnswerHook {
	return func(b *backend.Backend, status int, sse bool, data []byte) bool {
		if status < 200 || status >= 300 {
			return false
		}
		if !sse {
			if id := openai.JSONResponseID(data); id != "" {
				r.remember(on, id, b.ID)
			}
			return false
		}
		id, seen := openai.SSEResponseID(data)
		if id != "" {
			r.remember(on, id, b.ID)
		}
		return !seen // comments and blank events before the first data
	}
}

// routeByID sends j to the partition of the response id it names (see the
// file comment: always posted). Over the mailbox bound it is routed as if
// the id were unknown. On j.loop.
func (j *job) routeByID() {
	j.idOwner = j.r.respOwner(j.d.PreviousResponseID)
	if !j.post(j.idOwner, stageByID) {
		j.r.rs.unknown.Inc()
		j.routeWithoutID(j.loop)
	}
}

// lookupByID decides on the id's partition: the backend that produced the
// response if it is routable, else as any request. On j.idOwner's loop.
func (j *job) lookupByID() {
	r := j.r
	id, ok := r.shards[j.idOwner].resp.lookup(j.d.PreviousResponseID, r.now())
	if !ok {
		r.rs.unknown.Inc()
		j.routeWithoutID(j.idOwner)
		return
	}
	snap := r.up.Snapshot()
	i := indexOfBackend(snap, id)
	if i < 0 {
		r.rs.unroutable.Inc()
		j.routeWithoutID(j.idOwner)
		return
	}
	if _, routable := r.state(snap[i]); !routable || (j.pool != nil && !j.pool.Has(id)) {
		// Gone, down, or no longer serving the request's model (its
		// adapter unloaded; another model named): routed in its pool.
		r.rs.unroutable.Inc()
		j.routeWithoutID(j.idOwner)
		return
	}
	r.rs.hit.Inc()
	// One candidate: any other backend answers 404 for this id.
	d := policy.Decision{Backend: id, URL: snap[i].URL, Reason: ReasonResponseID, TotalBlocks: len(j.keys),
		Candidates: []int{id}, Preferred: -1, RunnerUp: -1}
	j.finish(d, snap, j.idOwner)
}

// routeWithoutID routes j as if it named no response: by its keys on
// their owner shard, or, without keys (GET/DELETE by id) or under another
// policy, on loop cur.
func (j *job) routeWithoutID(cur int) {
	if len(j.keys) == 0 || j.r.pol.Kind != policy.Prefix {
		j.decideAt(cur)
		return
	}
	j.owner = int(j.keys[0] % uint64(len(j.r.shards)))
	if j.owner == cur {
		j.lookup()
		return
	}
	if !j.post(j.owner, stageLookup) {
		j.decideAt(cur)
	}
}

// checkRespConfig validates the table's Config fields.
func checkRespConfig(c Config) []error {
	var errs []error
	if c.ResponseIDs <= 0 {
		errs = append(errs, fmt.Errorf("shard: ResponseIDs must be positive, got %d", c.ResponseIDs))
	}
	if c.ResponseIDTTL <= 0 {
		errs = append(errs, fmt.Errorf("shard: ResponseIDTTL must be positive, got %v", c.ResponseIDTTL))
	}
	return errs
}
