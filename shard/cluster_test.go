package shard

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/policy"
)

// peerLog is a Peers that keeps what the router shares.
type peerLog struct {
	mu sync.Mutex
	rs []wire.Route
}

func (p *peerLog) Share(r wire.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rs = append(p.rs, r)
}

func (p *peerLog) take() []wire.Route {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := p.rs
	p.rs = nil
	return rs
}

// TestClusterShareApply: router a's pending route reaches router b as a
// remote route on the same backend (by its key), counts in b's
// footprints, and a's failure takes it back on b too.
func TestClusterShareApply(t *testing.T) {
	t.Parallel()
	a, b := newHoldEnv(t, 2, 4), newHoldEnv(t, 2, 4)
	peers := &peerLog{}
	a.r.SetPeers(peers)
	body := chatBody("system", systemA, "user", "When should the lamp be lit?")
	c := a.send(t, 0, body)
	_, total, _ := c.route(t)
	a.loops.settle(t)
	rs := peers.take()
	if len(rs) != 1 || rs[0].Op != wire.OpInsert || rs[0].Backend != c.cands[0].Key || len(rs[0].Keys) != total || len(rs[0].Bounds) == 0 {
		t.Fatalf("shared %+v, want one insert of the %d-block chain on %s with its boundaries", rs, total, c.cands[0].URL)
	}
	unknown, dropped := b.r.ApplyRemote(append(rs, wire.Route{Op: wire.OpInsert, Backend: 12345, Keys: rs[0].Keys}))
	if unknown != 1 || dropped != 0 {
		t.Fatalf("ApplyRemote: unknown %d dropped %d, want 1 and 0", unknown, dropped)
	}
	if d := b.explain(t, body); d.Backend != c.cands[0].ID || d.MatchedBlocks != total {
		t.Fatalf("b after the peer's route: backend %d %d/%d, want %d, all blocks", d.Backend, d.MatchedBlocks, total, c.cands[0].ID)
	}
	// The peer's request counts in b's footprints: in flight there.
	owner := b.r.shards[int(rs[0].Keys[0]%2)]
	done := make(chan bool, 1)
	b.loops.run(t, owner.id, func() {
		views := make([]policy.View, 4)
		for i := range views {
			views[i].ID = i
		}
		owner.foot.scan(rs[0].Keys, views, b.r.now())
		done <- views[c.cands[0].ID].Shared
	})
	if !<-done {
		t.Error("b does not count the peer's request of the group as in flight on its backend")
	}
	// a's attempt fails: the pending route is taken back, on b too.
	c.answer(nil, 0, "", time.Millisecond)
	a.loops.settle(t)
	rs = peers.take()
	if !slices.ContainsFunc(rs, func(r wire.Route) bool { return r.Op == wire.OpDemote && r.Keep == 0 }) {
		t.Fatalf("after the failure a shared %+v, want a demotion to 0 blocks", rs)
	}
	b.r.ApplyRemote(rs)
	if d := b.explain(t, body); d.MatchedBlocks != 0 {
		t.Fatalf("b after the peer's demotion: %d/%d blocks matched, want 0", d.MatchedBlocks, total)
	}
	if got := b.metric(t, "saltus_route_remote_inserted_total"); got != "2" {
		t.Errorf("remote_inserted_total %s, want 2", got)
	}
}
