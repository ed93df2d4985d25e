package shard

import (
	"sync/atomic"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// Footprints (issue 11): which prefixes each backend's KV cache is busy
// with. An engine's KV cache holds a few prompts (a100-13b: 16k tokens,
// two 8k-token system prompts); a router that sends a second hot long
// prefix to an engine already busy with one makes both evict each other,
// and every request behind them then misses and waits for KV room. The
// prefix policy therefore prices a miss on a backend by how full of
// prefixes in use its cache is (policy/cost.go: the eviction term), and puts a
// new or replicated prefix where the least in use would be evicted.
//
// A prefix is its group: the key of its first policy.RendezvousBlocks blocks
// (what the cold-prefix hash reads), so every request of one system
// prompt or document is one group, whatever follows. The owner shard of
// the keys (the first block's) records each decision: (group, backend) →
// the longest prompt sent, the last time and the count of uses. A group
// sent to a backend at least twice within Config.FootprintWindow counts
// towards that backend's Footprint (backend.Backend, an atomic summed
// over shards); one-off prompts (unique questions, the first sight of a
// prefix) do not, as an engine evicts them first. Entries unused for a
// window are dropped by the shard's maintenance, their tokens subtracted.
//
// The same entries keep the account of what the router's requests in
// flight pin in each engine's KV cache (backend.Pinned): vLLM admits a
// request only when all its blocks, cached or not, fit beside the blocks
// of the requests it runs, and requests of one group on one engine share
// their leading blocks. The first request of a group in flight on a
// backend pins its whole prompt as the group's base, which stays counted
// until the group's last request there ends; each later one pins only its
// tail, the blocks past what the tree says the backend holds. The prefix
// policy prices the wait for KV room from it (policy/cost.go, kvWait): the
// scrape is a second old and misses what was sent since (manydocs, 60 s
// runs: the slowest first tokens waited 2-3 s for room on an engine to
// which a fifth document had been sent while four ran).
//
// # Concurrency
//
// A footprints table is owned by its shard's loop (touch from lookup,
// sweep from maintenance); the sums are atomics on the backends. An
// entry's pin state is an atomic: a request acquires it on the owner loop
// and releases it when it ends, on whatever goroutine ends it.

// footKey is one group on one backend.
type footKey struct {
	group   uint64
	backend int
}

type footEntry struct {
	b       *backend.Backend // whose Footprint counts tokens while counted
	tokens  int64            // the longest prompt of the group sent to b
	last    int64            // the router clock of the last use
	uses    uint32
	counted bool // tokens are in b's Footprint
	// remoteUntil: a peer router's request of the group is taken to be
	// in flight on b until then (router clock; cluster.go). Owner loop.
	remoteUntil int64
	// pin: the group's requests in flight on b (the bits from pinShift
	// up) and the base tokens they pin there while any is (below).
	pin atomic.Uint64
}

const (
	pinShift = 40
	pinMask  = 1<<pinShift - 1
)

// pinned is one request's share of its backend's Pinned: the entry of
// its group there and the tail tokens it added beside the group's base.
type pinned struct {
	e   *footEntry
	own int64
}

// acquire counts a request of e's group, of total tokens, tail of them
// past what e.b holds, in flight on e.b: the first of the group there
// pins total as the group's base, the others their tail. Owner loop.
func (p *pinned) acquire(e *footEntry, total, tail int64) {
	total = min(max(total, 0), pinMask)
	tail = min(max(tail, 0), total)
	for {
		old := e.pin.Load()
		nw, own, add := old+1<<pinShift, tail, tail
		if old>>pinShift == 0 {
			nw, own, add = 1<<pinShift|uint64(total), 0, total
		}
		if e.pin.CompareAndSwap(old, nw) {
			p.e, p.own = e, own
			e.b.AddPinned(add)
			return
		}
	}
}

// release ends what acquire counted; the group's base goes with its last
// request. Any goroutine, once per acquire (a second call does nothing).
func (p *pinned) release() {
	e := p.e
	if e == nil {
		return
	}
	p.e = nil
	for {
		old := e.pin.Load()
		nw, sub := old-1<<pinShift, p.own
		if old>>pinShift <= 1 {
			nw, sub = 0, p.own+int64(old&pinMask)
		}
		if e.pin.CompareAndSwap(old, nw) {
			e.b.AddPinned(-sub)
			return
		}
	}
}

// busy reports whether a request of e's group is in flight on e.b.
func (e *footEntry) busy() bool { return e.pin.Load()>>pinShift > 0 }

// footprints is one shard's table, bounded by max entries: over it a new
// group is not recorded (counted by the caller) until maintenance drops
// entries that aged out.
type footprints struct {
	m      map[footKey]*footEntry
	max    int
	window int64 // nanoseconds
}

func newFootprints(maxEntries int, window int64) *footprints {
	return &footprints{m: make(map[footKey]*footEntry), max: maxEntries, window: window}
}

// group is the footprint group of keys: the chained key of its first
// policy.RendezvousBlocks blocks (fewer if it has fewer).
func group(keys []uint64) uint64 {
	return keys[min(len(keys), policy.RendezvousBlocks)-1]
}

// touch records that a prompt of tokens tokens in keys' group was sent to
// b at now, and returns its entry; nil when the table is full and the
// group new. Loop only (the owner's).
func (f *footprints) touch(keys []uint64, b *backend.Backend, tokens int64, now int64) *footEntry {
	k := footKey{group: group(keys), backend: b.ID}
	e := f.m[k]
	if e != nil && e.b != b { // the ID was reused by a new backend
		f.uncount(e) // requests in flight release the old entry
		e = nil
		delete(f.m, k)
	}
	if e == nil {
		if len(f.m) >= f.max {
			return nil
		}
		e = &footEntry{b: b}
		f.m[k] = e
	}
	if e.uses > 0 && now-e.last > f.window {
		f.uncount(e) // a fresh start: the engine has likely evicted it
		e.uses, e.tokens = 0, 0
	}
	e.last = now
	e.uses++
	if tokens > e.tokens {
		if e.counted {
			b.AddFootprint(tokens - e.tokens)
		}
		e.tokens = tokens
	}
	if !e.counted && e.uses >= 2 {
		e.counted = true
		b.AddFootprint(e.tokens)
	}
	return e
}

func (f *footprints) uncount(e *footEntry) {
	if e.counted {
		e.b.AddFootprint(-e.tokens)
		e.counted = false
	}
}

// sweep drops the entries unused for a window with no request in flight
// (a request longer than the window keeps its group's entry, so that the
// group's next request there shares its base), at most budget of them
// examined. Loop only.
func (f *footprints) sweep(now int64, budget int) {
	for k, e := range f.m {
		if budget <= 0 {
			return
		}
		budget--
		if now-e.last > f.window && !e.busy() && now >= e.remoteUntil {
			f.uncount(e)
			delete(f.m, k)
		}
	}
}

// touchFootprint records d in the owner shard's footprints (prefix policy,
// a routed request). On the owner loop, in lookup.
func (j *job) touchFootprint(sh *Shard, d policy.Decision, snap []*backend.Backend, now int64) {
	if j.explain != nil || d.Backend < 0 || j.r.pol.Kind != policy.Prefix || len(j.keys) == 0 {
		return
	}
	i := indexOfBackend(snap, d.Backend)
	if i < 0 {
		return
	}
	bs := int64(j.r.cfg.BlockSize)
	e := sh.foot.touch(j.keys, snap[i], int64(len(j.keys))*bs, now)
	if e == nil {
		j.r.m.footFull.Inc()
		return
	}
	//saltus:allow R9 released in Hooks.Events.Done, which ForwardOnLoop runs exactly once on every exit (TestPinnedFollowsRequests)
	j.pin.acquire(e, int64(len(j.keys))*bs, int64(d.TotalBlocks-d.MatchedBlocks)*bs)
}

// scan reads keys' group on every view in one pass: it marks the views
// on which a request of the group is in flight (policy.View.Shared: a request
// there shares the blocks the tree says it holds) and returns the home,
// the index in bs of the backend the group was last sent to within the
// window, or -1. Loop only (the owner's).
func (f *footprints) scan(keys []uint64, bs []policy.View, now int64) int {
	if len(keys) == 0 || len(f.m) == 0 {
		return -1
	}
	g, h, last := group(keys), -1, int64(0)
	for i := range bs {
		e := f.m[footKey{group: g, backend: bs[i].ID}]
		if e == nil {
			continue
		}
		bs[i].Shared = e.busy() || now < e.remoteUntil
		if now-e.last <= f.window && (h < 0 || e.last > last) {
			h, last = i, e.last
		}
	}
	return h
}
