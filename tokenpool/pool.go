package tokenpool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// Encoder turns text into token ids; *tokenizer.Tokenizer is one. Every
// worker and the local fallback call it at once, so it must be safe for
// concurrent use.
type Encoder interface {
	Encode(dst []int32, text string) []int32
}

// Result is the outcome of tokenizing one request's segments.
type Result struct {
	// IDs holds every segment's ids, in order, if Reason is ReasonNone.
	IDs []int32
	// Ends[i] is len(IDs) after segment i: the message boundaries in token
	// space (stage 9 learns a key at each).
	Ends []int
	// Reason is ReasonNone, or why there are no ids: then the caller keys
	// the request with tree.ByteBlockKeys over its rendered text.
	Reason Reason
	// Path says where the misses were tokenized (for X-Saltus-Route and
	// tests).
	Path Path
	// Cut, if Cut.On, says where the request crossed Config.TokenBudget:
	// IDs and Ends cover the segments up to Cut.Seg, the last of them
	// segs[Cut.Seg][:Cut.Off] (possibly empty), and the caller keys the
	// rest as byte blocks (TailKeys).
	Cut Cut
}

func (r *Result) reset() {
	r.IDs, r.Ends, r.Reason, r.Path, r.Cut = r.IDs[:0], r.Ends[:0], ReasonNone, PathNone, Cut{}
}

// Pool is the tokenizer pool of all shards: per shard a segment cache and a
// worker. Build it with New; each event loop uses its own Shard.
type Pool struct {
	cfg     Config
	enc     Encoder // nil: byte-block mode
	whole   bool    // enc runs BPE over its whole text (see wholeText)
	shards  []*Shard
	workers []*worker // nil in byte-block mode
	group   *rules.Group

	// closed is set once by Close; a Tokenize that sees it bails out.
	closed atomic.Bool
	// localBusy is the 1-permit semaphore of the local fallback, shared
	// by all loops: at most one loop at a time tokenizes on itself. Loops
	// only try to acquire it (CompareAndSwap), never wait.
	localBusy atomic.Bool
	stopOnce  sync.Once
}

// Shard is one event loop's view of the pool. Its methods are loop only
// unless they say otherwise.
type Shard struct {
	p    *Pool
	id   int
	post func(func())

	cache    *SegmentCache // owned by the loop
	cutSegs  []string      // owned by the loop: the segments up to a budget cut
	rr       int           // owned by the loop: round-robin cursor over the other workers
	inFlight int           // owned by the loop: jobs submitted whose completion has not run

	// submitting is true while the loop is between its check of
	// Pool.closed and its push; Close waits for it to drop, so that no job
	// enters a ring after the workers were told to stop.
	submitting atomic.Bool

	stats shardStats
}

// New builds a pool with one shard per post function and starts a worker
// per shard. posts[i] runs a function on shard i's event loop (gnet's
// EventLoop.Execute): it must not block, must run each function exactly
// once, after the functions posted before it, serialized with the loop's
// other calls into the Shard; the pool posts at most MaxInFlight
// completions per shard at a time. A loop that has stopped may drop what
// is posted to it: its requests are gone with it.
//
// enc nil selects byte-block mode: no workers, every Tokenize returns
// ReasonNoTokenizer at once. If set is not nil, the pool's metrics
// (saltus_tokenizer_*, summed over shards) are written with it; a metrics
// writer cannot be unregistered, so give each pool a Set of its own (on a
// reload, metrics.RegisterSet the new pool's and UnregisterSet the old).
// Any goroutine.
func New(cfg Config, enc Encoder, posts []func(func()), set *metrics.Set) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(posts) == 0 {
		return nil, errors.New("tokenpool: no shards: posts is empty")
	}
	for i, post := range posts {
		if post == nil {
			return nil, fmt.Errorf("tokenpool: posts[%d] is nil", i)
		}
	}
	if t, ok := enc.(*tokenizer.Tokenizer); ok && t == nil {
		enc = nil // a typed nil would pass the check below and panic later
	}
	p := &Pool{cfg: cfg, enc: enc, group: rules.NewGroup(context.Background())}
	if w, ok := enc.(wholeText); ok {
		p.whole = w.WholeTextBPE()
	}
	// The group's parent is Background on purpose: only Close may stop the
	// workers, because only Close makes sure no job is pushed after they
	// stopped.
	n := len(posts)
	for i, post := range posts {
		p.shards = append(p.shards, &Shard{
			p: p, id: i, post: post,
			cache: NewSegmentCache(cfg.CacheBytes, cfg.MaxSegmentBytes),
		})
	}
	if enc != nil {
		for i := range n {
			w := &worker{enc: enc, stats: &p.shards[i].stats, bell: make(chan struct{}, 1)}
			for range n {
				w.rings = append(w.rings, newRing(cfg.RingSize))
			}
			p.workers = append(p.workers, w)
		}
		for i, w := range p.workers {
			p.group.Go(fmt.Sprintf("tokenpool.worker/%d", i), w.run)
		}
	}
	if set != nil {
		set.RegisterMetricsWriter(p.writeMetrics)
	}
	return p, nil
}

// Shards returns the number of shards. Any goroutine.
func (p *Pool) Shards() int { return len(p.shards) }

// Shard returns shard i, for loop i. Any goroutine; its methods are loop
// only.
func (p *Pool) Shard(i int) *Shard { return p.shards[i] }

// Stats returns the counters summed over shards. Any goroutine.
func (p *Pool) Stats() Stats {
	var o Stats
	for _, s := range p.shards {
		o.add(s.Stats())
	}
	return o
}

// Stats returns a snapshot of the shard's counters. Any goroutine.
func (s *Shard) Stats() Stats { return s.stats.snapshot() }

// Close shuts the pool down, deterministically: from now on Tokenize
// returns ReasonShutdown at once; a job a worker is encoding completes
// normally; every job still queued completes with ReasonShutdown; so every
// submitted job's completion is posted exactly once. Close returns when
// every worker has exited, or with ctx.Err() when ctx is done first (a
// stalled Encode); the workers then go on, and a later Close joins them.
// Any goroutine but an event loop: it waits.
func (p *Pool) Close(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.closed.Store(true)
		for _, s := range p.shards {
			// A loop inside its push is a few instructions from done.
			for s.submitting.Load() {
				runtime.Gosched()
			}
		}
		p.group.Stop()
	})
	if err := p.group.Wait(ctx); err != nil {
		return fmt.Errorf("tokenpool: workers still running (%s): %w",
			strings.Join(p.group.Running(), ", "), err)
	}
	return nil
}

// HasEncoder reports whether the pool tokenizes at all: without an
// encoder Tokenize bails out at once (ReasonNoTokenizer) and never calls
// done, so a caller may pass nil. Any goroutine.
func (s *Shard) HasEncoder() bool { return s.p.enc != nil }

// Tokenize tokenizes a request's segments (for a chat request, the text
// runs and special tokens stage 3 rendered, in order). Loop only.
//
// If it returns true, dst holds the outcome and done is not called: every
// segment was in the cache (Path PathCache), or the loop tokenized the
// misses itself (PathLocal), or the request bailed out (Reason set). The
// cache-hit path does not allocate once dst's slices have grown.
//
// If it returns false, the missing segments went to a worker as one job
// (copies of their text, and of the cached segments' ids), dst is left
// empty, and done will be called exactly once, later, on this loop, with a
// Result of its own (IDs and Ends are the callee's to keep), possibly with
// ReasonShutdown. done runs even if the client has gone: it then ignores
// the result, and nothing else refers to the request. done may be nil only
// where no segment can miss (a benchmark of hits); a miss with a nil done
// panics.
func (s *Shard) Tokenize(dst *Result, segs []string, done func(Result)) bool {
	if done == nil {
		return s.TokenizeFor(dst, segs, nil)
	}
	return s.TokenizeFor(dst, segs, CompletionFunc(done))
}

// Completion is what Tokenize's done is as a value: the caller's
// per-request value, whose method costs no allocation where a method
// value or closure costs one per request (TokenizeFor).
type Completion interface {
	Tokenized(Result)
}

// CompletionFunc is a func as a Completion.
type CompletionFunc func(Result)

// Tokenized calls f.
func (f CompletionFunc) Tokenized(r Result) { f(r) }

// TokenizeFor is Tokenize with done a Completion (nil: as a nil done).
// Loop only.
func (s *Shard) TokenizeFor(dst *Result, segs []string, done Completion) bool {
	dst.reset()
	s.stats.requests.Add(1)
	if s.p.closed.Load() {
		return s.bail(dst, ReasonShutdown)
	}
	if s.p.enc == nil {
		return s.bail(dst, ReasonNoTokenizer)
	}
	cut := cutAt(segs, s.p.cfg.TokenBudget, s.p.whole, s.cache)
	if cut.On {
		s.stats.budgetCuts.Add(1)
		s.cutSegs = append(append(s.cutSegs[:0], segs[:cut.Seg]...), segs[cut.Seg][:cut.Off])
		segs = s.cutSegs
		defer clear(s.cutSegs) // do not keep the caller's texts alive
	}
	for i, seg := range segs {
		ids, ok := s.cache.Get(seg)
		if !ok {
			return s.miss(dst, segs, i, cut, done)
		}
		dst.IDs = append(dst.IDs, ids...)
		dst.Ends = append(dst.Ends, len(dst.IDs))
	}
	dst.Path = PathCache
	dst.Cut = cut
	s.publishCache()
	return true
}

func (s *Shard) bail(dst *Result, r Reason) bool {
	dst.reset()
	dst.Reason = r
	s.stats.bailouts[r].Add(1)
	return true
}

// job is one request's misses on their way to a worker and back. The loop
// fills it before the push and does not touch it until the completion; the
// worker writes res, then posts the completion.
type job struct {
	from      *Shard
	done      Completion
	start     time.Time
	segs      []jobSeg
	known     []int32 // the cached segments' ids, concatenated
	missBytes int
	cut       Cut  // the request's budget cut, handed to its Result
	owned     bool // the miss texts are clones (see own)
	path      Path
	res       Result
}

type jobSeg struct {
	text string // a miss: the segment's text, cloned by own before a push
	end  int    // a hit: the end of its ids in job.known
	miss bool
}

// own replaces the miss texts by clones: the caller's segments may point
// into the connection's buffer, which the loop reuses while the worker
// reads the text. Deferred to the push, so that bail-outs and the local
// path copy nothing.
func (j *job) own() {
	if j.owned {
		return
	}
	for i := range j.segs {
		if j.segs[i].miss {
			j.segs[i].text = strings.Clone(j.segs[i].text)
		}
	}
	j.owned = true
}

// miss handles a request whose segment m is the first not in the cache.
func (s *Shard) miss(dst *Result, segs []string, m int, cut Cut, done Completion) bool {
	if done == nil {
		panic("BUG: tokenpool.Shard.Tokenize with a nil done")
	}
	j := &job{from: s, done: done, start: time.Now(), segs: make([]jobSeg, len(segs)), cut: cut}
	j.known = append(make([]int32, 0, len(dst.IDs)+64), dst.IDs...)
	for i := range m {
		j.segs[i].end = dst.Ends[i]
	}
	for i := m; i < len(segs); i++ {
		if i > m {
			if ids, ok := s.cache.Get(segs[i]); ok {
				j.known = append(j.known, ids...)
				j.segs[i].end = len(j.known)
				continue
			}
		}
		j.segs[i] = jobSeg{text: segs[i], miss: true}
		j.missBytes += len(segs[i])
	}
	s.publishCache()
	dst.reset()

	if j.missBytes > s.p.cfg.MaxJobBytes {
		return s.bail(dst, ReasonTooLarge)
	}
	if s.inFlight >= s.p.cfg.MaxInFlight {
		s.stats.inFlightFull.Add(1)
	} else {
		switch s.push(j) {
		case pushed:
			s.inFlight++
			return false
		case pushClosed:
			return s.bail(dst, ReasonShutdown)
		}
	}
	// Every ring is full: tokenize here, once, if the text is short and no
	// other loop is doing the same; else give up.
	if !j.fitsLocal(s.p.cfg.LocalMaxBytes, s.p.whole) {
		return s.bail(dst, ReasonTooLong)
	}
	if !s.p.localBusy.CompareAndSwap(false, true) {
		return s.bail(dst, ReasonBusy)
	}
	dst.IDs, dst.Ends = j.encode(s.p.enc, dst.IDs, dst.Ends)
	s.p.localBusy.Store(false)
	s.putMisses(j, dst)
	dst.Path = PathLocal
	dst.Cut = cut
	s.stats.local.Add(1)
	s.stats.localBytes.Add(uint64(j.missBytes))
	s.stats.lat.observe(time.Since(j.start))
	return true
}

type pushResult uint8

const (
	pushed pushResult = iota
	pushFull
	pushClosed
)

// push offers j to this shard's worker, then to the others round-robin.
func (s *Shard) push(j *job) pushResult {
	p := s.p
	j.own()
	s.submitting.Store(true)
	if p.closed.Load() {
		s.submitting.Store(false)
		return pushClosed
	}
	j.path = PathOwn
	if p.workers[s.id].offer(s.id, j) {
		s.submitting.Store(false)
		s.stats.ownJobs.Add(1)
		return pushed
	}
	s.stats.ringFull.Add(1)
	n := len(p.workers)
	for k := range n - 1 {
		c := (s.rr + k) % (n - 1)
		j.path = PathCross
		if p.workers[(s.id+1+c)%n].offer(s.id, j) {
			s.submitting.Store(false)
			s.rr = c + 1
			s.stats.crossJobs.Add(1)
			return pushed
		}
		s.stats.ringFull.Add(1)
	}
	s.submitting.Store(false)
	return pushFull
}

// fitsLocal reports whether j's misses cost at most max, counted as the
// token budget counts (budget.go): a byte of one repeated letter costs 32
// bytes of prose, so one letter is encoded on the loop for 256 bytes at most.
func (j *job) fitsLocal(max int, whole bool) bool {
	if j.missBytes <= max/longRunCost {
		return true // fits whatever the text
	}
	c := newCoster(max, whole)
	for _, sg := range j.segs {
		if sg.miss {
			if _, over := c.add(sg.text); over {
				return false
			}
		}
	}
	return true
}

// encode appends the ids of every segment of j to ids, and each segment's
// end to ends: cached ids as they are, misses encoded. Any goroutine.
func (j *job) encode(enc Encoder, ids []int32, ends []int) ([]int32, []int) {
	prev := 0
	for _, sg := range j.segs {
		if sg.miss {
			ids = enc.Encode(ids, sg.text)
		} else {
			ids = append(ids, j.known[prev:sg.end]...)
			prev = sg.end
		}
		ends = append(ends, len(ids))
	}
	return ids, ends
}

// putMisses caches the ids r holds for j's missing segments. Loop only.
func (s *Shard) putMisses(j *job, r *Result) {
	start := 0
	for i, sg := range j.segs {
		if sg.miss {
			s.cache.put(sg.text, r.IDs[start:r.Ends[i]], !j.owned)
		}
		start = r.Ends[i]
	}
	s.publishCache()
}

// complete runs on the owning loop, posted by a worker.
func (j *job) complete() {
	s := j.from
	s.inFlight--
	if j.res.Reason == ReasonNone {
		s.putMisses(j, &j.res)
		s.stats.lat.observe(time.Since(j.start))
	} else {
		s.stats.bailouts[j.res.Reason].Add(1)
	}
	j.done.Tokenized(j.res)
}

// publishCache copies the cache's counters into the shard's atomics, so
// that Stats can read them from any goroutine. Loop only.
func (s *Shard) publishCache() {
	cs, st := &s.cache.stats, &s.stats
	publish(&st.cacheHits, cs.Hits)
	publish(&st.cacheMisses, cs.Misses)
	publish(&st.cacheEvictions, cs.Evictions)
	publish(&st.cacheTooLarge, cs.TooLarge)
	publish(&st.cacheEntries, uint64(len(s.cache.m)))
	publish(&st.cacheBytes, uint64(s.cache.bytes))
}

// publish stores v unless a already holds it: a load is cheaper than a
// store that must own the cache line.
func publish(a *atomic.Uint64, v uint64) {
	if a.Load() != v {
		a.Store(v)
	}
}

// worker encodes jobs from its rings, one ring per producer shard.
type worker struct {
	enc   Encoder
	rings []*ring // rings[i]: jobs from shard i (its only producer)
	// bell wakes the worker: a producer sends without blocking after a
	// push; one pending ring is enough, since the worker drains every ring
	// before it sleeps again.
	bell  chan struct{}
	next  int         // owned by the worker goroutine: the ring to look at first
	stats *shardStats // its shard's: workerJobs and, for any shard, shutdownDrops
}

// offer pushes j into the ring of producer shard from and rings the bell.
// Loop of shard from only.
func (w *worker) offer(from int, j *job) bool {
	if !w.rings[from].push(j) {
		return false
	}
	select {
	case w.bell <- struct{}{}:
	default: // a wake-up is already pending
	}
	return true
}

// pop takes the next job, visiting the rings round-robin so that no
// producer starves the others. Worker goroutine only.
func (w *worker) pop() *job {
	n := len(w.rings)
	for k := range n {
		i := (w.next + k) % n
		if j := w.rings[i].pop(); j != nil {
			w.next = (i + 1) % n
			return j
		}
	}
	return nil
}

func (w *worker) run(ctx context.Context) {
	for {
		j := w.pop()
		if j == nil {
			select {
			case <-w.bell:
				continue
			case <-ctx.Done():
			}
			// Close set Pool.closed and waited out every push before it
			// cancelled ctx: what is in the rings now is all there will be.
			for j := w.pop(); j != nil; j = w.pop() {
				w.drop(j)
			}
			return
		}
		if ctx.Err() != nil {
			w.drop(j)
			continue
		}
		j.res.IDs, j.res.Ends = j.encode(w.enc,
			make([]int32, 0, len(j.known)+j.missBytes/3+16), make([]int, 0, len(j.segs)))
		j.res.Path = j.path
		j.res.Cut = j.cut
		w.stats.workerJobs.Add(1)
		w.stats.workerBytes.Add(uint64(j.missBytes))
		j.from.post(j.complete)
	}
}

// drop completes a queued job with ReasonShutdown.
func (w *worker) drop(j *job) {
	j.res = Result{Reason: ReasonShutdown}
	j.from.stats.shutdownDrops.Add(1)
	j.from.post(j.complete)
}
