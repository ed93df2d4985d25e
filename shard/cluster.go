package shard

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// The cluster (issue 13, stage 10). Every change the prefix policy makes
// to a tree on an owner loop (a pending route at decision time, a route
// learned from another backend's answer, a demotion) goes to the Peers
// as it is made, so that peer routers insert it with origin Remote; what
// peers learned comes back through ApplyRemote to the same owner shard
// (first key mod loops) that local learning uses, since every router
// computes the same keys. A joining peer gets Recent's routes.

func init() {
	promtext.Describe(map[string]string{
		"saltus_route_remote_inserted_total": "Route changes from cluster peers applied to the route table (inserts with origin remote, and demotions).",
	})
}

// Peers receives the route changes this router makes, for its cluster
// peers (gossip.Node). Share is called on owner loops: it must not block.
type Peers interface {
	Share(r wire.Route)
}

// SetPeers shares the route table's changes with p from now on. Call it
// before the data plane starts (the loops read it without a lock). Any
// goroutine.
func (r *Router) SetPeers(p Peers) {
	r.peers = p
}

// share sends one change of the owner's tree to the peers: keys and
// bounds as inserted (keys are the job's, never written after dispatch;
// bounds are copied). On the owner loop.
func (r *Router) share(op wire.Op, keys []uint64, bounds []int, backendID, keep int) {
	if r.peers == nil || len(keys) == 0 {
		return
	}
	snap := r.up.Snapshot()
	i := indexOfBackend(snap, backendID)
	if i < 0 {
		return // removed meanwhile
	}
	rt := wire.Route{Op: op, Backend: snap[i].Key, Keys: keys}
	if op == wire.OpDemote {
		rt.Keep = uint32(max(keep, 0))
	}
	if len(bounds) > 0 {
		bs := make([]uint32, 0, len(bounds))
		for _, b := range bounds {
			if b > 0 && b < len(keys) {
				bs = append(bs, uint32(b))
			}
		}
		slices.Sort(bs)
		rt.Bounds = slices.Compact(bs)
	}
	r.peers.Share(rt)
}

// remoteRoute is a peer's route change resolved to this router's backend.
type remoteRoute struct {
	wire.Route
	b *backend.Backend
}

// freshRemote is the age below which a peer's insert is one of its
// requests being sent (a pending route, or a learn at its first byte),
// not a route it knew for long (a snapshot's): its footprint is recorded
// here too.
const freshRemote = time.Second

// ApplyRemote applies peers' route changes (gossip.Table): inserts with
// origin Remote, last used Age ago, and demotions, each on its owner
// shard, in the order given, at most applyChunk per message. unknown counts routes
// naming a backend this router does not have (by identity key), dropped
// those whose owner's mailbox was full. Any goroutine but a loop.
func (r *Router) ApplyRemote(routes []wire.Route) (unknown, dropped int) {
	return r.applyAll(routes, tree.Remote)
}

// Restore inserts routes saved by this router before a restart (Saved,
// shard/state) with origin Local, last used Age ago, on their owner
// shards, as ApplyRemote does; routes of backends it no longer has are
// skipped (unknown). Any goroutine but a loop.
func (r *Router) Restore(routes []wire.Route) (unknown, dropped int) {
	return r.applyAll(routes, tree.Local)
}

func (r *Router) applyAll(routes []wire.Route, o tree.Origin) (unknown, dropped int) {
	snap := r.up.Snapshot()
	byKey := make(map[uint64]*backend.Backend, len(snap))
	for _, b := range snap {
		byKey[b.Key] = b
	}
	per := make([][]remoteRoute, len(r.shards))
	for _, rt := range routes {
		b, ok := byKey[rt.Backend]
		if !ok || len(rt.Keys) == 0 {
			unknown++
			continue
		}
		own := int(rt.Keys[0] % uint64(len(r.shards)))
		per[own] = append(per[own], remoteRoute{rt, b})
	}
	for i, rs := range per {
		sh := r.shards[i]
		for len(rs) > 0 {
			chunk := rs[:min(len(rs), applyChunk)]
			rs = rs[len(chunk):]
			if !r.postTo(i, func() { r.applyRemote(sh, chunk, o) }) {
				dropped += len(chunk)
			}
		}
	}
	return unknown, dropped
}

// applyChunk bounds the peers' routes one message inserts on a loop: a
// snapshot of thousands of routes is applied in steps between requests,
// not in one stall of the loop (a stress run's periodic push-pull, 20,000
// routes in one message, coincided with its slowest first tokens).
const applyChunk = 256

// applyRemote runs a batch of peers' changes on sh's loop.
func (r *Router) applyRemote(sh *Shard, rs []remoteRoute, o tree.Origin) {
	now := r.now()
	var bounds []int
	for _, rt := range rs {
		switch rt.Op {
		case wire.OpInsert:
			bounds = bounds[:0]
			for _, b := range rt.Bounds {
				bounds = append(bounds, int(b))
			}
			age := time.Duration(rt.Age) * time.Millisecond
			used := max(now-int64(age), 0)
			if o == tree.Local && now-used >= int64(r.cfg.Tree.TTL) {
				continue // expired while the router was down
			}
			if err := sh.tree.Insert(rt.Keys, bounds, rt.b.ID, o, used); err != nil {
				r.m.learnErrors.Inc() // beyond tree.Config.MaxBackends, as a local learn
				continue
			}
			sh.known[rt.b.ID] = true
			if o == tree.Remote && age < freshRemote && r.pol.Kind == policy.Prefix {
				r.touchRemote(sh, rt, used)
			}
		case wire.OpDemote:
			sh.tree.Demote(rt.Keys, rt.b.ID, int(rt.Keep), now)
		}
		r.m.remoteInserted.Inc()
	}
	sh.publish()
}

// Recent returns up to limit of the route tables' most recently used
// routes (tree.Recent on every shard, limit split evenly), most recent
// first, as OpInsert with their age. It waits for the loops until ctx
// ends; a loop that does not answer in time adds nothing. Any goroutine
// but a loop.
func (r *Router) Recent(ctx context.Context, limit int) []wire.Route {
	rs, _ := r.collect(ctx, limit, false) // a partial snapshot still helps a peer
	return rs
}

// Saved is Recent's routes of origin Local only: what this router
// learned itself, which a restart restores (shard/state); complete is
// false when a loop did not answer (stopped, or too busy within ctx). Any
// goroutine but a loop.
func (r *Router) Saved(ctx context.Context, limit int) (routes []wire.Route, complete bool) {
	return r.collect(ctx, limit, true)
}

func (r *Router) collect(ctx context.Context, limit int, localOnly bool) ([]wire.Route, bool) {
	snap := r.up.Snapshot()
	keyOf := make(map[int]uint64, len(snap))
	for _, b := range snap {
		keyOf[b.ID] = b.Key
	}
	per := max((limit+len(r.shards)-1)/len(r.shards), 1)
	got := make(chan []wire.Route, len(r.shards))
	asked := 0
	for i, sh := range r.shards {
		if r.postTo(i, func() {
			select {
			case got <- r.recent(sh, keyOf, per, localOnly):
			default: // cannot happen: one slot per shard, one send each
			}
		}) {
			asked++
		}
	}
	var out []wire.Route
	answered := 0
wait:
	for range asked {
		select {
		case rs := <-got:
			out = append(out, rs...)
			answered++
		case <-ctx.Done():
			break wait
		}
	}
	slices.SortStableFunc(out, func(a, b wire.Route) int { return cmp.Compare(a.Age, b.Age) })
	return out[:min(len(out), limit)], answered == len(r.shards)
}

// recent collects sh's most recent routes, copied. On sh's loop.
func (r *Router) recent(sh *Shard, keyOf map[int]uint64, limit int, localOnly bool) []wire.Route {
	now := r.now()
	var out []wire.Route
	sh.tree.Recent(now, limit, 8*limit, func(keys []uint64, bounds []int, b int, o tree.Origin, used int64) bool {
		key, ok := keyOf[b]
		if !ok || (localOnly && o != tree.Local) {
			return true // removed from the Set, not yet from the tree
		}
		bs := make([]uint32, len(bounds))
		for i, v := range bounds {
			bs[i] = uint32(v)
		}
		age := min((now-used)/int64(time.Millisecond), 1<<31)
		out = append(out, wire.Route{Op: wire.OpInsert, Backend: key, Age: uint32(max(age, 0)), Keys: slices.Clone(keys), Bounds: bs})
		return true
	})
	return out
}

// Load appends this router's own load per backend: requests in flight,
// pending prefill, footprint and pinned tokens (gossip.Table). Any
// goroutine.
func Load(set *backend.Set, dst []wire.Load) []wire.Load {
	for _, b := range set.Snapshot() {
		dst = append(dst, wire.Load{Backend: b.Key, InFlight: uint32(max(b.InFlight(), 0)), Prefill: uint64(max(b.PendingPrefill(), 0)),
			Footprint: uint64(max(b.Footprint(), 0)), Pinned: uint64(max(b.Pinned(), 0))})
	}
	return dst
}

// SetPeerLoad stores the peers' summed load on each backend of set
// (gossip.Table); a backend missing from sum gets zero. Any goroutine.
func SetPeerLoad(set *backend.Set, sum map[uint64]wire.Load) {
	for _, b := range set.Snapshot() {
		l := sum[b.Key]
		b.SetPeerLoad(backend.PeerLoad{InFlight: int64(l.InFlight), Prefill: int64(min(l.Prefill, 1<<62)),
			Footprint: int64(min(l.Footprint, 1<<62)), Pinned: int64(min(l.Pinned, 1<<62))})
	}
}

// touchRemote records a peer's request in sh's footprints as if this
// router had sent it (footprint.go): its group's home and its backend's
// footprint then follow the whole cluster's decisions, and the group
// counts as in flight there (view.shared: the next request of the group
// needs KV room only for its tail) for about one answer's time, since
// the peer's request is not pinned here. On sh's loop.
func (r *Router) touchRemote(sh *Shard, rt remoteRoute, used int64) {
	e := sh.foot.touch(rt.Keys, rt.b, int64(len(rt.Keys)*r.cfg.BlockSize), used)
	if e == nil {
		r.m.footFull.Inc()
		return
	}
	service := rt.b.Service()
	if service <= 0 {
		service = time.Second // not yet learned: one short answer
	}
	e.remoteUntil = max(e.remoteUntil, used+int64(service))
}
