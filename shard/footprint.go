package shard

import (
	"github.com/saltus-lb/saltus/shard/backend"
)

// Footprints (issue 11): which prefixes each backend's KV cache is busy
// with. An engine's KV cache holds a few prompts (a100-13b: 16k tokens,
// two 8k-token system prompts); a router that sends a second hot long
// prefix to an engine already busy with one makes both evict each other,
// and every request behind them then misses and waits for KV room. The
// prefix policy therefore prices a miss on a backend by how full of
// prefixes in use its cache is (cost.go: the eviction term), and puts a
// new or replicated prefix where the least in use would be evicted.
//
// A prefix is its group: the key of its first rendezvousBlocks blocks
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
// # Concurrency
//
// A footprints table is owned by its shard's loop (touch from lookup,
// sweep from maintenance); the sums are atomics on the backends.

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
}

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
// rendezvousBlocks blocks (fewer if it has fewer).
func group(keys []uint64) uint64 {
	return keys[min(len(keys), rendezvousBlocks)-1]
}

// touch records that a prompt of tokens tokens in keys' group was sent to
// b at now. It reports false when the table is full and the group new.
// Loop only (the owner's).
func (f *footprints) touch(keys []uint64, b *backend.Backend, tokens int64, now int64) bool {
	k := footKey{group: group(keys), backend: b.ID}
	e := f.m[k]
	if e == nil {
		if len(f.m) >= f.max {
			return false
		}
		e = &footEntry{b: b}
		f.m[k] = e
	}
	if e.b != b { // the ID was reused by a new backend
		f.uncount(e)
		*e = footEntry{b: b}
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
	return true
}

func (f *footprints) uncount(e *footEntry) {
	if e.counted {
		e.b.AddFootprint(-e.tokens)
		e.counted = false
	}
}

// sweep drops the entries unused for a window, at most budget of them
// examined. Loop only.
func (f *footprints) sweep(now int64, budget int) {
	for k, e := range f.m {
		if budget <= 0 {
			return
		}
		budget--
		if now-e.last > f.window {
			f.uncount(e)
			delete(f.m, k)
		}
	}
}

// touchFootprint records d in the owner shard's footprints (prefix policy,
// a routed request). On the owner loop, in lookup.
func (j *job) touchFootprint(sh *Shard, d Decision, snap []*backend.Backend, now int64) {
	if j.explain != nil || d.Backend < 0 || j.r.pol.kind != kindPrefix || len(j.keys) == 0 {
		return
	}
	i := indexOfBackend(snap, d.Backend)
	if i < 0 {
		return
	}
	if !sh.foot.touch(j.keys, snap[i], int64(len(j.keys)*j.r.cfg.BlockSize), now) {
		j.r.m.footFull.Inc()
	}
}

// home is the index in bs of the backend keys' group was last sent to
// within the window, or -1. Loop only (the owner's).
func (f *footprints) home(keys []uint64, bs []view, now int64) int {
	if len(keys) == 0 || len(f.m) == 0 {
		return -1
	}
	g, h, last := group(keys), -1, int64(0)
	for i := range bs {
		if e := f.m[footKey{group: g, backend: bs[i].id}]; e != nil && now-e.last <= f.window && (h < 0 || e.last > last) {
			h, last = i, e.last
		}
	}
	return h
}
