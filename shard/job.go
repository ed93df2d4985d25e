package shard

// A request's way through the router: the job and its stages (decode,
// tokenize, lookup, decide, forward, learn), each on the loop that owns
// what it touches (see the package doc).

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/internal/jsonscan"
	"github.com/saltus-lb/saltus/keys"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tokenpool"
	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tracing"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/fleet"
	"github.com/saltus-lb/saltus/upstream/queue"
)

// Stages a job is posted for (job.post): one method value per job runs
// them all, instead of a closure per hop.
const (
	stageLookup  uint8 = iota + 1 // j.lookup on the owner loop
	stageForward                  // the loop path's Forward on the client's loop
	stageByID                     // j.lookupByID on the response id's shard
)

// post is postTo for the job's next stage: it runs j.run on loop i. The
// job is on one loop at a time, so one stage is posted at a time. Any
// goroutine (a loop).
func (j *job) post(i int, stage uint8) bool {
	if j.runFn == nil {
		j.runFn = j.run
	}
	j.stage = stage
	return j.r.postTo(i, j.runFn)
}

// run runs the stage j was posted for. On the loop it was posted to.
func (j *job) run() {
	switch j.stage {
	case stageLookup:
		j.lookup()
	case stageForward:
		f := &j.fwd
		f.cands[0].AddDecided(-1) // finish's: now it counts in flight
		j.r.shards[j.loop].up.ForwardOnLoop(j.req, f.body, f.cands, j.x, f.hdr, f.hooks)
	case stageByID:
		j.lookupByID()
	default:
		panic(fmt.Sprintf("BUG: shard: job posted for stage %d", j.stage))
	}
}

// job is one request on its way through stages 2 to 9. It belongs to one
// loop at a time: the connection's (decode, render, tokenize, keys), then
// the owner's (lookup, decision), then the connection's again (forward),
// whose hooks read keys and bounds, which no one writes any more.
type job struct {
	r       *Router
	x       exchange // nil for Explain
	req     *reactor.Request
	route   routeID
	loop    int // the loop that decodes and tokenizes: the connection's (x's), Explain's any
	d       openai.Request
	texts   []string // the segments to tokenize
	msgEnd  []bool   // msgEnd[i]: a message ends with texts[i]
	keys    []uint64 // the request's own (never a loop's scratch)
	owned   bool     // texts and msgEnd are the job's own already (decoded off the loop): own has nothing to copy
	bounds  []int    // message ends, in blocks
	exact   int      // leading keys keyed by token ids, the only ones an engine's KV events can confirm (policy/truth.go); byte-block keys follow
	owner   int
	idOwner int                  // the shard of the response id named (respids.go)
	explain chan policy.Decision // Explain's answer; nil for a served request
	// session is the request's Config.SessionHeader value ("" none);
	// rawBody Explain's body (j.req is nil there); prefill the prefill
	// accounting (decide.go).
	session string
	rawBody []byte
	prefill pendingPrefill
	dec     decodeTrack // its place among its backend's decoding requests (decoding.go)
	learn   bool        // its forward's 2xx head teaches the route table (finish, jobEvents)
	// askedUsage: askUsage asked the engine for the stream's usage, which
	// the forward's end counts as seen or not.
	askedUsage bool
	pin        pinned // the KV tokens it pins on its backend (footprint.go)
	// fresh: the tree already holds the whole chain for freshID, refreshed
	// less than learnRefresh ago, so a 2xx from freshID has nothing to
	// teach (see lookup).
	fresh   bool
	freshID int
	fb      routeFeedback // the tree decision, for pending routes and feedback (pending.go)
	// pool is the backends that serve the request's model (pools.go);
	// nil: every backend.
	pool *fleet.Pool
	// waitFull: its pool is saturated and it waits in the pool's gateway
	// queue (gate.go), to resume there; tenant is its fair-share key.
	waitFull bool
	// hint is the backend (its ID + 1; 0: none) that held more of its
	// prefix than any other at its last lookup: its gate sends it ahead
	// of earlier requests when that backend has a slot free (gate.go:
	// dispatch). hintFirst: it is to wait, and is keyed and looked up
	// first for its hint (lookup).
	hint      int32
	hintFirst bool
	resume    func()
	tenant    string
	requeues  int    // times every candidate refused as full and it waited again
	queueID   uint64 // its entry in its gate (gate.go); the gate's loop's
	queuedAt  int64  // when it was pushed there (the router's clock); the gate's loop's
	// ticket is its place in its gate when it was dispatched from there
	// (the gate's loop's): a requeue takes it back to that place. sentAt
	// (the router's clock; 0: none) is when one that every engine refused
	// before it ever waited was sent (gate.go: requeue), or when one keyed
	// before it waits was admitted (waitSaturated): it waits from there.
	ticket queue.Ticket
	sentAt int64
	// firstQueued is when it first waited in its gate (the router's
	// clock; 0: never): its requeues end at MaxWait from it.
	firstQueued int64
	waited      time.Duration // time spent in its gate, over its requeues (the request log's)
	start       int64         // when served (the router's clock), only with a sink (reqlog.go)
	// transit is its pool's count while it is dispatched from its gate
	// and not decided yet (gate.go: arrived); nil otherwise.
	transit *atomic.Int64
	// key is the request's API key (keys.go; nil: keys off), ks its
	// accounting, weight its fair-share weight in its gate.
	key    *keys.Key
	ks     keyState
	weight float64

	// Room for the common case, so that a request is one allocation
	// rather than several: the keys of a prompt up to 64 blocks, its
	// message bounds, its candidates, its X-Saltus-Route header.
	keyArr   [64]uint64
	boundArr [8]int
	candArr  [4]*backend.Backend
	hdrArr   [1]reactor.Header
	// tc is its place in its trace (package tracing), chosen on the loop
	// that forwards it; tcHdr the traceparent and tracestate that go
	// with it to the engine (Hooks.ReqHeader).
	tc    tracing.Context
	tcHdr [2]reactor.Header

	// Posting (job.post): the stage, j.run as a func made once, and what
	// the forward stage forwards.
	stage uint8
	runFn func()
	fwd   struct { // stageForward's
		cands []*backend.Backend
		hdr   []reactor.Header
		body  []byte // j.req.Body, or askUsage's copy
		hooks backend.Hooks
	}
}

// prepare runs stages 2 and 3: check the body's structure
// (Config.Body), decode it, render a chat. With ds (on the loop that
// serves the request) the messages, texts and msgEnd are views into ds
// until keyed or own; without (Explain, a decode worker) they are the
// job's own.
func (j *job) prepare(body []byte, ds *decodeScratch) *openai.Error {
	if pooled(j.route) {
		j.preparePooled(body)
		return nil
	}
	k := openai.KindChat
	switch j.route {
	case routeCompletions:
		k = openai.KindCompletion
	case routeResponses:
		k = openai.KindResponses
	case routeMessages:
		k = openai.KindMessages
	}
	lim := j.r.cfg.Body
	// On the loop, a body (at most OffloopBytes) too short to hold more
	// than MaxValues values is decoded first: Decode checks its grammar
	// and depth as it reads, and the scan (~400 ns for a 4 KB chat) runs
	// only when it fails, for a refusal's words and counter.
	lazy := ds != nil && (len(body)+1)/2 <= lim.MaxValues
	if !lazy {
		values, e, why := lim.Check(body)
		if e != nil {
			j.r.m.refused[why].Inc()
			return e
		}
		if ds == nil {
			// Off the loop (decode worker, Explain): bodies up to the
			// limit decode at most MaxValues values at once between them.
			//saltus:allow R2 only without a loop's scratch (ds == nil): decode workers and Explain, never a loop
			j.r.budget.acquire(values)
			defer j.r.budget.release(values) //saltus:allow R2 as acquire: off the loops only
		}
	}
	var e *openai.Error
	if ds != nil {
		defer ds.trim(len(body)) // after the views are taken: they keep what they view
		e = openai.DecodeWith(&j.d, k, body, lim.MaxDepth, &ds.sc, j.r.tmpl.Wants())
		if lazy && e != nil {
			if _, ce, why := lim.Check(body); ce != nil {
				j.r.m.refused[why].Inc()
				return ce
			}
		}
	} else {
		e = openai.DecodeWith(&j.d, k, body, lim.MaxDepth, nil, j.r.tmpl.Wants())
	}
	if e != nil {
		return e
	}
	switch {
	case j.d.Kind == openai.KindChat || j.d.Kind == openai.KindResponses || j.d.Kind == openai.KindMessages:
		var (
			segs []chat.Segment
			err  error
		)
		if ds != nil {
			segs, err = ds.sc.Chat.Render(j.r.tmpl, j.d.Messages, j.d.Options)
		} else {
			segs, err = j.r.tmpl.Render(nil, j.d.Messages, j.d.Options)
		}
		if err != nil {
			// harmony refuses a reasoning_effort or tools vLLM refuses:
			// the error names that field.
			param := "messages"
			if fe := (*chat.FieldError)(nil); errors.As(err, &fe) {
				param = fe.Field
			}
			return openai.BadRequest(param, "%v", err)
		}
		if ds != nil {
			j.texts, j.msgEnd = ds.texts[:0], ds.msgEnd[:0]
		}
		for _, s := range segs {
			j.texts = append(j.texts, s.Text)
			j.msgEnd = append(j.msgEnd, s.MsgEnd >= 0)
		}
		if ds != nil {
			ds.texts, ds.msgEnd = j.texts, j.msgEnd
		}
	case !j.d.HasTokenIDs:
		j.texts = []string{j.d.Prompt}
		j.msgEnd = []bool{false} // the whole prompt is the chain's end anyway
	}
	return nil
}

// preparePooled is prepare for a pooling or scoring route: its input to
// key, or, when saltus cannot read the body, its model alone (then it is
// routed unkeyed: pooled). Nothing is refused here; the engine answers
// what it refuses. The body's grammar and depth are checked as it is read
// (bounded work, nothing kept per value).
func (j *job) preparePooled(body []byte) {
	k := openai.KindPooling
	if j.route == routeScore {
		k = openai.KindScore
	}
	if e := openai.DecodePooling(&j.d, k, body, j.r.cfg.Body.MaxDepth); e != nil {
		j.r.m.unkeyed.Inc()
		j.d = openai.Request{Kind: k, Model: openai.BodyModel(body)}
		return
	}
	if !j.d.HasTokenIDs {
		j.texts, j.msgEnd = []string{j.d.Prompt}, []bool{false}
	}
}

func (j *job) seedModel() string {
	if j.r.cfg.Model != "" {
		return j.r.cfg.Model
	}
	return j.d.Model
}

// seed is the seed of the request's token key chains: its model's,
// salted by its cache_salt (vLLM keeps a salted prompt's prefix cache
// apart, and its engines' KV events key it so: kvview's seed).
func (j *job) seed() uint64 { return j.salted(tree.ModelSeed(j.seedModel())) }

// byteSeed is seed for byte-block chains.
func (j *job) byteSeed() uint64 { return j.salted(tree.ByteBlockSeed(j.seedModel())) }

func (j *job) salted(seed uint64) uint64 {
	if j.d.CacheSalt != "" {
		return tree.SaltSeed(seed, j.d.CacheSalt)
	}
	return seed
}

// tokenize runs stage 4 on j.loop, then the keys (stage 5). Loop only.
func (j *job) tokenize() {
	if len(j.texts) == 0 && !j.d.HasTokenIDs {
		j.dispatch() // a pooled route's body saltus could not key: no keys
		return
	}
	if j.route == routeScore && !j.d.HasTokenIDs {
		// A reranker's engine tokenizes the query with each document
		// (its pair template, its separator): byte-block keys of the
		// query send the same query to one engine, and claim no blocks
		// the engine's KV events could confirm (exact 0).
		j.keys = tree.ByteBlockKeys(j.keyArr[:0], j.byteSeed(), j.texts...)
		j.texts, j.msgEnd = nil, nil
		j.dispatch()
		return
	}
	if j.d.HasTokenIDs {
		j.keys = tree.BlockKeys(j.keyArr[:0], j.seed(), j.d.TokenIDs, j.r.cfg.BlockSize)
		j.exact = len(j.keys)
		j.dispatch()
		return
	}
	sh := j.r.shards[j.loop]
	var done tokenpool.Completion // byte-block mode: never called
	if sh.tok.HasEncoder() {
		done = (*jobTokens)(j) // no method value to allocate
	}
	if sh.tok.TokenizeFor(&sh.res, j.texts, done) {
		j.keyed(&sh.res)
		return
	}
	j.own() // the loop serves other requests before the completion
}

// own replaces the job's views into the loop's decodeScratch by copies;
// a job decoded off the loop holds no views (owned). Loop only.
func (j *job) own() {
	if j.owned {
		return
	}
	texts := make([]string, len(j.texts))
	for i, t := range j.texts {
		texts[i] = strings.Clone(t)
	}
	j.texts, j.msgEnd, j.d.Messages = texts, slices.Clone(j.msgEnd), nil
}

// jobTokens is a job as its tokenization's tokenpool.Completion.
type jobTokens job

// Tokenized is the pool's completion, on j.loop. Loop only.
func (t *jobTokens) Tokenized(res tokenpool.Result) { (*job)(t).keyed(&res) }

// keyed computes the block keys and message boundaries, then dispatches.
// Loop only.
func (j *job) keyed(res *tokenpool.Result) {
	bs := j.r.cfg.BlockSize
	j.bounds = j.boundArr[:0]
	switch {
	case res.Reason == tokenpool.ReasonNone && !res.Cut.On:
		j.keys = tree.BlockKeys(j.keyArr[:0], j.seed(), res.IDs, bs)
		j.exact = len(j.keys)
		j.keyTokenized(len(res.IDs)) // an API key's reservation, to the exact count (keys.go)
		for i, e := range res.Ends {
			if j.msgEnd[i] && e/bs > 0 {
				j.bounds = append(j.bounds, e/bs)
			}
		}
	case res.Reason == tokenpool.ReasonNone:
		// Over the token budget: token blocks up to the cut, byte
		// blocks from there; boundaries of the messages that end
		// before the cut in tokens, of the others in bytes after it.
		c := res.Cut
		var nTok int
		j.keys, nTok = tokenpool.TailKeys(j.keyArr[:0], j.seed(), res, j.texts, bs)
		j.exact = nTok
		for i, e := range res.Ends[:c.Seg] {
			if j.msgEnd[i] && e/bs > 0 {
				j.bounds = append(j.bounds, e/bs)
			}
		}
		n := -c.Off
		for i := c.Seg; i < len(j.texts); i++ {
			n += len(j.texts[i])
			if j.msgEnd[i] && n/tree.ByteBlockBytes > 0 {
				j.bounds = append(j.bounds, nTok+n/tree.ByteBlockBytes)
			}
		}
	default:
		// No tokenizer, or this request bailed out: keys of 64-byte
		// blocks of the rendered text, boundaries where messages end.
		j.keys = tree.ByteBlockKeys(j.keyArr[:0], j.byteSeed(), j.texts...)
		n := 0
		for i, t := range j.texts {
			n += len(t)
			if j.msgEnd[i] && n/tree.ByteBlockBytes > 0 {
				j.bounds = append(j.bounds, n/tree.ByteBlockBytes)
			}
		}
	}
	// The keys are the job's own; the texts (views, see prepare) are
	// needed no more.
	j.texts, j.msgEnd, j.d.Messages = nil, nil, nil
	j.dispatch()
}

// dispatch sends the lookup to the owner shard (stage 6). Loop only.
func (j *job) dispatch() {
	if j.x != nil && gone(j.x) {
		j.arrived()
		j.r.m.clientGone.Inc()
		j.logGone(j.loop)
		return
	}
	if j.hintFirst && (j.d.PreviousResponseID != "" || len(j.keys) == 0 || !j.r.pol.Kind.UsesTree()) {
		j.queueKeyed() // no lookup gives it a hint
		return
	}
	if j.d.PreviousResponseID != "" {
		j.routeByID() // under every policy: only that backend has it
		return
	}
	if len(j.keys) == 0 {
		j.decideHere() // shorter than a block
		return
	}
	if !j.r.pol.Kind.UsesTree() {
		// The other policies never use the tree: no owner lookup, no
		// message to another loop; they decide here.
		j.decideHere()
		return
	}
	j.owner = int(j.keys[0] % uint64(len(j.r.shards)))
	if j.owner == j.loop {
		j.lookup()
		return
	}
	if !j.post(j.owner, stageLookup) {
		if j.hintFirst {
			j.queueKeyed()
			return
		}
		j.decideHere()
	}
}

func gone(x exchange) bool {
	select {
	case <-x.Gone():
		return true
	default:
		return false
	}
}

// lookup matches the keys in the owner's tree and decides (stage 7). On
// the owner loop.
func (j *job) lookup() {
	sh := j.r.shards[j.owner]
	now := j.r.now()
	sh.hits, _ = sh.tree.Match(sh.hits[:0], j.keys, now)
	snap := j.r.up.Snapshot()
	sh.views = j.r.views(sh.views[:0], snap, j.pool)
	ignored := j.r.tuned.Load().Truth(sh.views, sh.hits, j.exact, now)
	j.hint = holderHint(sh.hits)
	if j.hintFirst {
		// It waits in its gate (waitSaturated): queued with its hint, to
		// be looked up again and decided when dispatched.
		if j.owner == j.loop {
			j.queueKeyed()
		} else {
			j.r.shards[j.loop].poster(j.queueKeyed) // its gone hook is its loop's
		}
		return
	}
	if ignored > 0 && j.explain == nil {
		j.r.m.guessesIgnored.Add(ignored)
	}
	d := j.decideWith(sh, sh.hits, true)
	j.markFresh(d, sh.hits, now)
	j.pend(d, now)
	j.touchFootprint(sh, d, snap, now)
	j.finish(d, snap, j.owner)
}

// holderHint is the backend (ID + 1) whose hit in hits is deeper than
// every other's, 0 if none is (no hit, or a tie at the deepest).
func holderHint(hits []tree.Hit) int32 {
	best, second, id := 0, 0, -1
	for _, h := range hits {
		switch {
		case h.Blocks > best:
			best, second, id = h.Blocks, best, h.Backend
		case h.Blocks > second:
			second = h.Blocks
		}
	}
	if id < 0 || best == second {
		return 0
	}
	return int32(id + 1)
}

// waitSaturated queues j, which waits for its saturated pool (admit
// set waitFull): a policy that uses the tree keys it and looks it up
// first, for the hint its gate dispatches by (lookup); the others queue
// it as it is. On j's loop.
func (j *job) waitSaturated() {
	if !j.r.pol.Kind.UsesTree() {
		j.own() // the loop serves others while it waits
		j.enqueue(j.tokenize)
		return
	}
	j.hintFirst = true
	j.sentAt = max(j.r.now(), 1) // queued in its arrival's place, not behind those its keying let pass
	j.tokenize()
}

// queueKeyed queues j, keyed (and looked up for its hint, if it could
// be), to resume at its lookup when dispatched (waitSaturated). On j's
// loop.
func (j *job) queueKeyed() {
	j.hintFirst = false
	j.enqueue(j.dispatch)
}

// learnRefresh bounds how stale a route may be and still skip its learn:
// a hot prefix is re-inserted (its holder's TTL clock refreshed) about
// once per learnRefresh instead of once per request, which on another
// loop than the owner's saves a cross-loop message per request.
const learnRefresh = time.Second

// markFresh records whether d's backend holds all of j's blocks in the
// tree, refreshed within learnRefresh (and within half the route TTL).
// On the owner loop, with the hits Match returned at now.
func (j *job) markFresh(d policy.Decision, hits []tree.Hit, now int64) {
	refresh := min(int64(learnRefresh), int64(j.r.cfg.Tree.TTL/2))
	for _, h := range hits {
		if h.Backend == d.Backend && h.Blocks == len(j.keys) && h.Origin == tree.Local && now-h.Used < refresh {
			j.fresh, j.freshID = true, d.Backend
			return
		}
	}
}

// decideHere decides without the tree, on j.loop: the prefix policy's
// fallback, and every decision of the other policies.
func (j *job) decideHere() { j.decideAt(j.loop) }

// decideAt is decideHere on loop cur, with its shard's scratch.
func (j *job) decideAt(cur int) {
	sh := j.r.shards[cur]
	snap := j.r.up.Snapshot()
	sh.views = j.r.views(sh.views[:0], snap, j.pool)
	rr := sh.sc.Turn
	d := j.decideWith(sh, nil, false)
	if j.explain != nil {
		// Explain shows the turn the loop's next request would get, and
		// leaves it to that request. (least_request's draw is not undone:
		// Explain shows one draw, the next request draws afresh.)
		sh.sc.Turn = rr
	}
	j.finish(d, snap, cur)
}

// views reads the state of every backend of pool (nil: every backend)
// once.
func (r *Router) views(dst []policy.View, snap []*backend.Backend, pool *fleet.Pool) []policy.View {
	for _, b := range snap {
		if pool != nil && !pool.Has(b.ID) {
			continue
		}
		inFlight, routable := r.state(b)
		v := policy.View{ID: b.ID, URL: b.URL, Name: b.Name, URLHash: policy.URLHash(b.URL), InFlight: inFlight, Routable: routable, Evented: b.Evented()}
		if r.pol.Kind == policy.Prefix {
			costInputs(&v, b)
		}
		dst = append(dst, v)
	}
	return dst
}

// finish forwards the request as decided (stage 8), or hands the decision
// to Explain. On the loop that decided (cur).
func (j *job) finish(d policy.Decision, snap []*backend.Backend, cur int) {
	r := j.r
	j.arrived()
	if j.explain != nil {
		d.Candidates = slices.Clone(d.Candidates) // the loop's scratch
		d.Model = j.d.Model
		if j.pool != nil {
			d.Pool = slices.Clone(j.pool.IDs)
		}
		//saltus:allow R2 buffered (1) and sent once per job: it never waits
		j.explain <- d
		return
	}
	r.m.decided(d, r.pol.Kind.UsesTree())
	if d.Backend < 0 && j.pool != nil && j.requeues < maxRequeues && r.saturated(j.pool) {
		// Its pool filled up since its admission: it waits after all.
		j.requeues++
		r.shards[j.loop].poster(j.waitAgain)
		return
	}
	if d.Backend < 0 {
		r.refusedFor(j.d.Model, refusedNoBackend)
		r.fail(j.x, j.route, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
			Message: "no backend is available to serve the request"}) // fail adds Retry-After to a 503
		return
	}
	var traceHdr []reactor.Header
	if sh := r.shards[cur]; sh.trace.On() {
		traceHdr = j.traceHeaders(&sh.trace) // before the hooks: a sampled span asks for tokens
	}
	cands := j.candArr[:0]
	for _, id := range d.Candidates {
		cands = append(cands, snap[indexOfBackend(snap, id)]) // decided from snap
	}
	var buf [96]byte
	route := strconv.AppendInt(buf[:0], int64(d.MatchedBlocks), 10)
	route = append(route, '/')
	route = strconv.AppendInt(route, int64(d.TotalBlocks), 10)
	route = append(append(route, ' '), d.Reason...)
	route = appendReceipt(route, d, snap)
	// X-Saltus-Backend is set by ForwardOnLoop: the backend that answered, which
	// is not the first candidate after a retry.
	j.hdrArr[0] = reactor.Header{Name: HeaderRoute, Value: string(route)}
	hdr := j.hdrArr[:]
	// Only prefix and ranvier read the tree, so only they teach it.
	routed := r.pol.Kind.UsesTree() && routedByPrefix(j.route)
	// A prompt shorter than a block teaches nothing; nor does one that
	// names a previous response: the engine prepends history saltus does
	// not see, so its keys are not the prefix the backend now holds.
	learn := routed && len(j.keys) > 0 && j.d.PreviousResponseID == ""
	if j.d.Stream { // a non-streamed answer's first byte comes when it ends (decide.go: pendingPrefill)
		j.prefill.add(d, snap, r.cfg.BlockSize)
	}
	j.dec.start(j)
	loop := j.loop // the forward's (the connection's), whose hooks run there
	// Its head, first event and end: jobEvents, no closure to allocate.
	j.learn, j.askedUsage = learn, false
	h := backend.Hooks{Events: (*jobEvents)(j), Usage: j.wantsUsage() || j.key != nil || j.wantsTokens(), ReqHeader: traceHdr}
	if j.pool != nil && j.requeues < maxRequeues {
		h.Requeue = func() bool { return true }
	}
	// A refused ForwardOnLoop (MaxInFlight) answers 503 itself and
	// reports it through Hooks.Events.Done like any other outcome, so it is
	// counted there. The upstream I/O runs on the client connection's
	// loop, whatever the route and the policy, streamed (event by event)
	// or not.
	// FirstByte runs on that loop: a learn for a prefix that loop owns is
	// applied at once. Posted, it could run after the client's next
	// request, whose lookup runs inline on the same loop (gnet runs
	// posted tasks after the batch's socket events); a learn posted to
	// another owner is queued there before the client even has its
	// answer, so the next lookup finds it.
	if j.route == routeResponses {
		h.Answer = r.answerHook(loop)
	}
	if anthropicShape(j.route, j.req.Path) {
		h.ErrorBody = anthropicErrorBody // the backend's own 502, 503, 504 too
	}
	body := j.req.Body
	if j.d.HasPriority && !r.allPriority(cands) {
		// vLLM refuses a non-zero priority unless it runs priority
		// scheduling: the field ordered saltus's queue; it is not passed
		// on (issue 30).
		body, _ = jsonscan.DeleteMember(make([]byte, 0, len(body)), body, "priority") // rare
	}
	r.askUsage(j, &h, body)
	if loop == cur {
		r.shards[loop].up.ForwardOnLoop(j.req, body, cands, j.x, hdr, h)
		return
	}
	// Decided on another loop (the owner shard's): the second and last
	// hop, back to the client's loop. Its post is unrefused (Poster): the
	// request was admitted and bounded where it came in (the reactor's
	// connections and their pipelines; MaxInFlight is checked on arrival),
	// and its forward must run exactly once.
	j.fwd.cands, j.fwd.hdr, j.fwd.hooks, j.fwd.body = cands, hdr, h, body
	cands[0].AddDecided(1) // counted as in flight until run sends it (Backend.Decided)
	j.stage = stageForward
	if j.runFn == nil {
		j.runFn = j.run
	}
	r.shards[loop].poster(j.runFn)
}

// jobEvents is a job as its forward's Hooks.Events, on the client
// connection's loop. Its methods are Loop only.
type jobEvents job

// FirstByte: the head came. A non-streamed answer's head comes when its
// generation ends, which ends its prefill pending there; a 2xx teaches
// the route (learnFrom) and starts the decode's tracking. Loop only.
func (e *jobEvents) FirstByte(b *backend.Backend, status int) {
	j := (*job)(e)
	if !j.d.Stream {
		j.prefill.release()
	}
	j.dec.head(b, status)
	if j.learn && status >= 200 && status < 300 {
		j.r.learnFrom(j.loop, j, b.ID)
	}
}

// FirstData: a stream's head comes at once, its first event after the
// prefill: that ends the prefill pending there, and its decode starts.
// Loop only.
func (e *jobEvents) FirstData() {
	j := (*job)(e)
	j.prefill.release()
	j.dec.first(j)
}

// Done: the forward's outcome, once. Loop only.
func (e *jobEvents) Done(o backend.Outcome) {
	j := (*job)(e)
	r := j.r
	if j.askedUsage { // askUsage
		if o.Usage != nil {
			r.m.usage.seen.Inc()
		} else {
			r.m.usage.none.Inc()
		}
	}
	if o.Requeued {
		j.requeue(o) // a refusal: no usage
		return
	}
	if o.Err == backend.ErrEnginesFull {
		r.refusedFor(j.d.Model, refusedEnginesFull) // saltus's own 429/503: its requeues are spent
	}
	u := openai.ReadUsage(o.Usage) // one parse for keys, feedback and the log (nil: none)
	j.keyDone(o.Status, u)         // an API key's tokens (keys.go)
	if j.pool != nil {
		r.kickGate(j.d.Model) // a slot freed: a queued request may go
	}
	if o.Status == 404 && j.pool != nil && o.Backend != nil && r.fleet != nil {
		// Its pool says it serves the model: it may have unloaded it
		// (an adapter) behind saltus's back. Fetch its models now
		// (never blocks; rate-limited).
		r.fleet.Suspect(o.Backend.ID)
	}
	j.prefill.done(o)
	j.dec.done()
	j.pin.release()
	r.m.request(j.route, o.Status)
	j.settle(o, u)
	if r.sink != nil {
		r.logEnd(j.loop, j.x, &o, u, o.Status, 0, "")
	}
}

// learnFrom records, on the owner loop, that backend now holds j's prefix
// (stage 9). It runs in FirstByte, on loop `on` (the client's): on the
// owner loop it inserts at once, elsewhere it posts to the owner.
//
// It learns the backend that actually answered, not the first pick: a
// diverted (or retried) request was prefilled on the backend that served
// it, so that is where its blocks now are. Ranvier learns the original
// target instead, to keep a prefix's home stable across a load spike; here
// the tree keeps several holders per node (tree.Config.MaxHolders), so the
// original holder stays where it was, the diverted one is added beside it,
// and the next decision picks among them by depth, then in-flight count:
// the hot prefix is replicated, not moved. Learning the first pick would
// record blocks that no backend holds.
func (r *Router) learnFrom(on int, j *job, backendID int) {
	j.confirm(backendID)
	// Nothing to teach, so no message to the owner: the tree holds the
	// whole chain for this backend, refreshed lately (fresh), or since
	// the decision (its pending route, inserted then, now confirmed; it
	// stays unless settle removes it). A remote request so makes two
	// cross-loop hops (lookup, forward), not three.
	if (j.fresh && backendID == j.freshID) || (j.fb.pending && backendID == j.fb.backend) {
		r.m.learnSkipped.Inc()
		return
	}
	sh := r.shards[j.owner]
	// A retry that another backend answered: the same message removes the
	// decided backend's pending holder (and settle does not post it again).
	fail := j.fb.pending && !j.fb.confirmed && backendID != j.fb.backend
	failed, keep := j.fb.backend, j.fb.matched
	insert := func() {
		defer sh.publish()
		if fail {
			r.fb.pendingRemoved.Add(sh.tree.Demote(j.keys, failed, keep, r.now()))
			r.share(wire.OpDemote, j.keys, nil, failed, keep)
		}
		if err := sh.tree.Insert(j.keys, j.bounds, backendID, tree.Local, r.now()); err != nil {
			// Only a backend ID beyond tree.Config.MaxBackends: not
			// learnable, the request was served all the same.
			r.m.learnErrors.Inc()
			return
		}
		sh.known[backendID] = true
		r.share(wire.OpInsert, j.keys, j.bounds, backendID, 0)
		r.m.learned.Inc()
	}
	switch {
	case on == j.owner:
		insert()
	case !r.postTo(j.owner, insert):
		r.m.learnDropped.Inc()
		return // settle still tries to remove the pending holder
	}
	if fail {
		j.fb.removed = true
		r.fb.pendingFailed.Inc()
	}
}

// wantsTokens: its record carries its token counts, for a sink that
// wants every request's (reqlog.Tokens), or for its sampled span
// (tracing): only those of 1 % of the requests then cost a usage parse.
func (j *job) wantsTokens() bool { return j.r.sinkTokens || j.tc.Sampled }

// traceHeaders chooses j's trace context on this loop (once: a requeued
// job keeps it) and returns the headers that carry it to the engine: a
// traceparent naming saltus's span, and the client's tracestate, which
// W3C drops with an invalid traceparent (an empty value removes it).
// Loop only (the one deciding, whose tl it is).
func (j *job) traceHeaders(tl *tracing.Loop) []reactor.Header {
	if !j.tc.Began() {
		tl.Begin(&j.tc, j.req.HeaderValue(tracing.HeaderParent), j.req.HeaderValue(tracing.HeaderState))
		var buf [64]byte
		j.tcHdr[0] = reactor.Header{Name: tracing.HeaderParent, Value: string(j.tc.AppendTraceparent(buf[:0]))}
		j.tcHdr[1] = reactor.Header{Name: tracing.HeaderState, Value: j.tc.State}
	}
	return j.tcHdr[:]
}
