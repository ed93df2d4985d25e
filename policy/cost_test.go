package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// costPolicy is prefix's, with the defaults' knobs.
var costPolicy = Config{Kind: Prefix, LoadFactor: 2, LoadFloor: 4, MaxCandidates: 3,
	BlockSize: 16, Concurrency: 256, QueueWait: 0.2, LoadTokens: 500, LoadSlack: 0.5}

func newScratch() Scratch { return Scratch{Pin: -1, Home: -1} }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// rowOf is id's row of d.Table.
func rowOf(t *testing.T, d Decision, id int) Candidate {
	t.Helper()
	for _, c := range d.Table {
		if c.Backend == id {
			return c
		}
	}
	t.Fatalf("no row for %d in %+v", id, d.Table)
	return Candidate{}
}

// Each term of the estimate, through Explain's table.
func TestCostEstimateTerms(t *testing.T) {
	t.Parallel()
	bs := viewFleet(3)
	for i := range bs {
		bs[i].Base, bs[i].Rate = 0.010, 1000
	}
	bs[0].Pending = 500 // 0.5 s of prefill ahead
	bs[1].InFlight = 4  // 2 above concurrency 2
	bs[2].Engine, bs[2].Waiting, bs[2].KVUsage = true, 3, 0.5
	p := costPolicy
	p.Concurrency = 2
	keys := randKeys(rand.New(rand.NewPCG(1, 1)), 10)
	hits := []tree.Hit{{Backend: 0, Blocks: 4}, {Backend: 1, Blocks: 20}} // 20 is capped at 10
	s := newScratch()
	s.Explain = true
	d := Decide(p, bs, hits, keys, true, &s)
	full := 10 * 16 / 1000.0 // a fully uncached request: 0.16 s
	r0, r1, r2 := rowOf(t, d, 0), rowOf(t, d, 1), rowOf(t, d, 2)
	if r0.Held != 4 || !near(r0.PrefillMS, 96) || !near(r0.QueueMS, 500) || !near(r0.EstMS, 606) || !r0.Queueing {
		t.Errorf("pending: %+v", r0)
	}
	if r1.Held != 10 || !near(r1.PrefillMS, 0) || !near(r1.QueueMS, 2*(10+full*1e3)) || !r1.Queueing {
		t.Errorf("in flight over concurrency: %+v", r1)
	}
	if r2.Held != 0 || !near(r2.PrefillMS, full*1e3) || !near(r2.QueueMS, 3*(10+full*1e3)) || !r2.Queueing || !near(r2.BaseMS, 10) {
		t.Errorf("engine waiting: %+v", r2)
	}
	// An engine that prefills side by side (queue factor 0) keeps none of
	// this request waiting for the prefill of those waiting there.
	bs[2].QueueOff = 1
	if r := rowOf(t, Decide(p, bs, hits, keys, true, &s), 2); !near(r.QueueMS, 0) {
		t.Errorf("waiting, queue factor 0: %+v", r)
	}
	bs[2].QueueOff = 0
	// All holders queue: the holders and one newcomer (2, the only one)
	// compete on cost = est + load + evict. 1's four requests in flight
	// cost 4 × (500 tokens / 1000 tokens/s) = 2 s of load: 0 wins on its
	// 606 ms, though 1's estimate (350 ms) is the least.
	if !near(r1.LoadMS, 2000) || !near(r1.CostMS, 2350) || !near(r0.CostMS, 606) || !near(r2.CostMS, r2.EstMS) {
		t.Errorf("load terms: %+v %+v %+v", r0, r1, r2)
	}
	if d.Backend != 0 || d.Reason != ReasonTree || d.MatchedBlocks != 4 || !near(d.EstMS, r0.EstMS) || !d.Diverted || d.Preferred != 1 {
		t.Errorf("decision %+v", d)
	}
	if d.RunnerUp != 1 || !near(d.RunnerUpMS, r1.EstMS) {
		t.Errorf("runner-up %d %v", d.RunnerUp, d.RunnerUpMS)
	}
	// The KV cache nearly full, one request waiting (170 ms, under
	// QueueWait): priced, but an engine kept waiting for KV room does not
	// queue by itself (slotBound)...
	bs[2].Waiting, bs[2].KVUsage = 1, 0.99
	if r := rowOf(t, Decide(p, bs, hits, keys, true, &s), 2); r.Queueing || !near(r.QueueMS, 10+full*1e3) {
		t.Errorf("kv full: %+v", r)
	}
	// ...while one whose slot limit is learned does: that request waits
	// for a slot.
	bs[2].Slots = 4
	if r := rowOf(t, Decide(p, bs, hits, keys, true, &s), 2); !r.Queueing || r.Slots != 4 {
		t.Errorf("waiting for a slot: %+v", r)
	}
	bs[2].Slots = 0
	// No learned model: the defaults, kept within 2× of the fleet's
	// median model (base 10 ms, 1000 tokens/s): 20 ms and 2000 tokens/s.
	bs[2] = viewFleet(3)[2]
	d = Decide(p, bs, hits, keys, true, &s)
	if r := rowOf(t, d, 2); !near(r.BaseMS, 20) || !near(r.PrefillMS, 80) || r.Queueing {
		t.Errorf("defaults against a learned fleet: %+v", r)
	}
	// A whole fleet without a model: the defaults as they are.
	fresh := viewFleet(3)
	d = Decide(p, fresh, nil, keys, true, &s)
	want := backend.DefaultPrefillBase.Seconds()*1e3 + 160/float64(backend.DefaultPrefillTokensPerSec)*1e3
	if r := rowOf(t, d, 2); !near(r.EstMS, want) || r.Queueing {
		t.Errorf("defaults: %+v, want est %v", r, want)
	}
}

// KV room: a miss sent to an engine whose cache its running requests pin
// waits for enough of them to end; a hit, whose blocks are there, does
// not.
func TestCostKVWait(t *testing.T) {
	t.Parallel()
	bs := viewFleet(2)
	for i := range bs {
		bs[i].Base, bs[i].Rate, bs[i].Service = 0.010, 1000, 4
		bs[i].Engine, bs[i].KVCap, bs[i].Running = true, 16000, 4
	}
	bs[0].KVUsage = 0.95 // 15,200 pinned: 3,800 per running request
	bs[1].KVUsage = 0.25 // 4,000 pinned: room for 12,000
	p := costPolicy
	keys := randKeys(rand.New(rand.NewPCG(2, 2)), 250) // 4,000 tokens
	s := newScratch()
	s.Explain = true
	d := Decide(p, bs, nil, keys, true, &s)
	// 0: 15,200 + 4,000 − 16,000 = 3,200 over, one request's 3,800 frees
	// it: one end, 4 s / 4 = 1 s.
	if r := rowOf(t, d, 0); !near(r.KVWait, 1000) || !r.Queueing {
		t.Errorf("kv full: %+v", r)
	}
	if r := rowOf(t, d, 1); r.KVWait != 0 || r.Queueing {
		t.Errorf("kv room: %+v", r)
	}
	if d.Backend != 1 {
		t.Errorf("a cold prefix went to %d, whose cache is pinned full", d.Backend)
	}
	// More over than the running requests pin: at most one whole service.
	bs[0].KVUsage = 1
	if r := rowOf(t, Decide(p, bs, nil, randKeys(rand.New(rand.NewPCG(3, 3)), 2000), true, &s), 0); !near(r.KVWait, 4000) {
		t.Errorf("kv over capacity: %+v", r)
	}
	// A holder of the whole prompt needs room for all of it when none of
	// its group's requests runs there (its blocks are cached, not pinned)...
	bs[0].KVUsage = 0.95
	hits := []tree.Hit{{Backend: 0, Blocks: 250}}
	if r := rowOf(t, Decide(p, bs, hits, keys, true, &s), 0); !near(r.KVWait, 1000) {
		t.Errorf("hit, nothing of its group running: %+v", r)
	}
	// A newcomer with room takes it, though the holder's priced wait (1 s)
	// is less than the newcomer's miss (4 s): the wait is not trusted.
	if d := Decide(p, bs, hits, keys, true, &s); d.Backend != 1 || !d.Diverted {
		t.Errorf("holder waiting for room kept the request: %+v", d)
	}
	// ...and none when one does, which pins them.
	bs[0].Shared = true
	if r := rowOf(t, Decide(p, bs, hits, keys, true, &s), 0); r.KVWait != 0 {
		t.Errorf("hit beside its group: %+v", r)
	}
	// ...unless a request waits there (priced as this one, uncached):
	// first come, first served, the hit waits behind it for its room.
	bs[0].Waiting = 1
	if r := rowOf(t, Decide(p, bs, hits, keys, true, &s), 0); !near(r.KVWait, 1000) {
		t.Errorf("hit behind a waiting request: %+v", r)
	}
	bs[0].Waiting, bs[0].Shared = 0, false
	// Not scraped, capacity unknown: nothing known, nothing priced.
	bs[0].Engine, bs[0].KVCap = false, 0
	bs[0].Pinned, bs[0].InFlight = 15200, 4
	if r := rowOf(t, Decide(p, bs, nil, keys, true, &s), 0); r.KVWait != 0 {
		t.Errorf("capacity unknown: %+v", r)
	}
	// Not scraped, capacity configured: the router's own account of what
	// its requests in flight pin prices it as the scrape did.
	p.KVTokens = 16000
	if r := rowOf(t, Decide(p, bs, nil, keys, true, &s), 0); !near(r.KVWait, 1000) || !r.Queueing {
		t.Errorf("own account: %+v", r)
	}
	// Scraped, the own account wins when larger (sent since the scrape).
	bs[0].Engine, bs[0].KVCap, bs[0].KVUsage = true, 16000, 0.25
	if r := rowOf(t, Decide(p, bs, nil, keys, true, &s), 0); !near(r.KVWait, 1000) {
		t.Errorf("own account over a stale scrape: %+v", r)
	}
}

// The wait for KV room is not trusted against a miss, but it is not
// worth any wait either: a candidate that would wait for room stays
// eligible when the candidates with room are estimated slower than its
// estimate with that wait at its bound (one whole service). Engines that
// never lack room, all slots taken with a long queue, do not take every
// request while the others wait a little for room.
func TestCostRoomOnlyBounded(t *testing.T) {
	t.Parallel()
	bs := viewFleet(2)
	for i := range bs {
		bs[i].Base, bs[i].Rate, bs[i].Service = 0.010, 1000, 2
		bs[i].Engine, bs[i].KVCap, bs[i].Running, bs[i].Slots = true, 16000, 5, 5
	}
	bs[0].KVUsage, bs[0].InFlight = 0.95, 5                    // slots full, no queue; a wait for room of 0.8 s
	bs[1].KVUsage, bs[1].InFlight, bs[1].Waiting = 0.1, 30, 25 // room, but 25 queued for its slots
	keys := randKeys(rand.New(rand.NewPCG(4, 4)), 250)         // 4,000 tokens
	hits := []tree.Hit{{Backend: 0, Blocks: 10}, {Backend: 1, Blocks: 10}}
	s := newScratch()
	s.Explain = true
	d := Decide(costPolicy, bs, hits, keys, true, &s)
	if r := rowOf(t, d, 0); !near(r.KVWait, 800) {
		t.Fatalf("setup: backend 0 should wait 0.8 s for room: %+v", r)
	}
	if d.Backend != 0 {
		t.Errorf("went to %d (est %v ms), behind its 25 queued, over a wait for room (est %v ms)", d.Backend, rowOf(t, d, 1).EstMS, rowOf(t, d, 0).EstMS)
	}
	// With the queue gone, room wins again, though its miss costs more
	// than the priced wait.
	bs[1].InFlight, bs[1].Waiting = 2, 0
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 1 {
		t.Errorf("went to %d, which waits for room, over a backend with room and a free slot", d.Backend)
	}
}

// A holder that is not queueing is never skipped for one that holds
// less, however much cheaper that one looks, unless what the other lacks
// is worth a near-tie of the estimate (TestCostNearTieHoldSpreads).
func TestCostNotQueueingNeverSkipped(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(2, 2)), 32) // 512 tokens: a miss costs 64 ms
	bs[3].Pending = 1500                              // 187 ms queued: not queueing (QueueWait 200 ms)
	hits := []tree.Hit{{Backend: 3, Blocks: 30}, {Backend: 1, Blocks: 20}}
	s := newScratch()
	d := Decide(costPolicy, bs, hits, keys, true, &s)
	if d.Backend != 3 || d.Reason != ReasonTree || d.MatchedBlocks != 30 || d.Diverted {
		t.Fatalf("decision %+v", d)
	}
	// Over QueueWait, 3 queues; 1 holds the next most and does not:
	// 1 is the least holder that may serve, and it does.
	bs[3].Pending = 1700
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 1 || d.MatchedBlocks != 20 || !d.Diverted || d.Preferred != 3 {
		t.Fatalf("queueing deep holder: %+v", d)
	}
}

// A hold that saves less than a near-tie of the estimate does not confine
// the choice to its holders: two of eight backends hold a request's first
// 2 blocks of 64 (4 ms of a ~150 ms estimate) and run 3 requests each,
// and an idle backend serves; holding 40 blocks (76 ms more), a holder
// serves.
func TestCostNearTieHoldSpreads(t *testing.T) {
	t.Parallel()
	bs := viewFleet(8)
	keys := randKeys(rand.New(rand.NewPCG(23, 23)), 64)
	bs[0].InFlight, bs[1].InFlight = 3, 3 // under the bounded-load capacity (LoadFloor 4)
	s := newScratch()
	s.Explain = true
	hits := []tree.Hit{{Backend: 0, Blocks: 2}, {Backend: 1, Blocks: 2}}
	d := Decide(costPolicy, bs, hits, keys, true, &s)
	if d.Backend == 0 || d.Backend == 1 {
		t.Fatalf("a 2-block hold kept the request on a busy holder: %+v", d)
	}
	if r := rowOf(t, d, 0); r.Queueing || !r.Eligible {
		t.Fatalf("holder 0: %+v", r)
	}
	hits[0].Blocks = 40
	d = Decide(costPolicy, bs, hits, keys, true, &s)
	if d.Backend != 0 || d.MatchedBlocks != 40 {
		t.Fatalf("a 40-block hold: %+v", d)
	}
	if r := rowOf(t, d, 5); r.Eligible {
		t.Fatalf("a backend 76 ms short of the holder's hold is eligible: %+v", r)
	}
}

// Near-ties go by rendezvous order, so replicas that see slightly
// different loads agree.
func TestCostNearTieRendezvous(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 3))
	for range 200 {
		bs := viewFleet(6)
		keys := randKeys(r, 8)
		var hits []tree.Hit
		for i := range bs {
			hits = append(hits, tree.Hit{Backend: i, Blocks: 8})
		}
		s := newScratch()
		first := Decide(costPolicy, bs, hits, keys, true, &s).Backend
		// Replica B sees up to 1 ms more pending on each backend (within
		// the 2 ms tolerance), different per backend.
		for i := range bs {
			bs[i].Pending = int64(r.IntN(8))
		}
		if got := Decide(costPolicy, bs, hits, keys, true, &s).Backend; got != first {
			t.Fatalf("replicas disagree: %d and %d", first, got)
		}
		// The tie's winner is the first in rendezvous order; every
		// backend holds the whole request, so the order comes from its
		// last RendezvousBlocks blocks (sharedDepth).
		if sc := rendezvous(nil, bs, keys[len(keys)-RendezvousBlocks:]); bs[sc[0].i].ID != first {
			t.Fatalf("tie went to %d, rendezvous first is %d", first, bs[sc[0].i].ID)
		}
	}
}

// Cold prefixes follow rendezvous order: adding a backend moves about 1/N
// of them, all to the new one; removing one moves only its own.
func TestCostReplicationOrderStable(t *testing.T) {
	t.Parallel()
	const n = 10000
	r := rand.New(rand.NewPCG(4, 4))
	bs := viewFleet(9)
	s := newScratch()
	added, removed := 0, 0
	for range n {
		keys := randKeys(r, 6)
		before := Decide(costPolicy, bs[:8], nil, keys, true, &s).Backend
		after := Decide(costPolicy, bs, nil, keys, true, &s).Backend
		if before != after {
			added++
			if after != 8 {
				t.Fatalf("moved from %d to %d, not to the new backend", before, after)
			}
		}
		less := slices.Clone(bs[:8])
		less[2].Routable = false
		if got := Decide(costPolicy, less, nil, keys, true, &s).Backend; got != before {
			removed++
			if before != 2 {
				t.Fatalf("removing 2 moved a prefix of %d", before)
			}
		}
	}
	if added < n/9*8/10 || added > n/9*12/10 {
		t.Fatalf("adding a 9th backend moved %d of %d, want ~%d", added, n, n/9)
	}
	if removed < n/8*8/10 || removed > n/8*12/10 {
		t.Fatalf("removing one of 8 moved %d of %d, want ~%d", removed, n, n/8)
	}
}

// A hot prefix: only when every holder queues is the next backend in
// the prefix's rendezvous order added, and it is that one, not the
// globally least loaded.
func TestCostHotPrefixSpreadsInOrder(t *testing.T) {
	t.Parallel()
	bs := viewFleet(6)
	keys := randKeys(rand.New(rand.NewPCG(5, 5)), 40) // 640 tokens: a miss 80 ms
	order := rendezvous(nil, bs, keys)
	h1 := order[0].i
	next := order[1].i
	hits := []tree.Hit{{Backend: bs[h1].ID, Blocks: 40}}
	// next carries some load, not enough to queue; the others are idle.
	bs[next].Pending = 200 // 25 ms
	s := newScratch()
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != bs[h1].ID {
		t.Fatalf("an idle holder lost: %+v", d)
	}
	bs[h1].Pending = 4000 // 500 ms: queueing
	d := Decide(costPolicy, bs, hits, keys, true, &s)
	if d.Backend != bs[next].ID || d.Reason != ReasonHash || !d.Diverted || d.Preferred != bs[h1].ID {
		t.Fatalf("hot prefix went to %+v, want the next in order %d", d, bs[next].ID)
	}
	// Now two holders, one not queueing: no third is added.
	hits = append(hits, tree.Hit{Backend: bs[next].ID, Blocks: 40})
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != bs[next].ID || d.Reason != ReasonTree {
		t.Fatalf("second holder: %+v", d)
	}
	// Both queue: the third in order joins, and requests go by cost.
	bs[next].Pending = 4000
	third := order[2].i
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != bs[third].ID {
		t.Fatalf("both holders queue: %+v, want %d", d, bs[third].ID)
	}
	// A queueing holder cheaper than the newcomer's queue and miss keeps
	// the request: 212 ms against 187 + 80 ms.
	bs[h1].Pending = 1700
	bs[third].Pending = 1500
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != bs[h1].ID {
		t.Fatalf("cheaper queueing holder: %+v", d)
	}
}

// A cold prefix skips the queueing backends of its order when one that
// is not exists; when all queue, the least estimate.
func TestCostColdSkipsQueueing(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(6, 6)), 4)
	order := rendezvous(nil, bs, keys)
	s := newScratch()
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != bs[order[0].i].ID || d.Reason != ReasonHash {
		t.Fatalf("cold: %+v", d)
	}
	bs[order[0].i].Pending = 4000
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != bs[order[1].i].ID {
		t.Fatalf("cold, first queueing: %+v", d)
	}
	for i := range bs {
		bs[i].Pending = int64(4000 + 1000*i)
	}
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != 0 {
		t.Fatalf("all queueing: %+v, want the least (0)", d)
	}
	// Without the tree: the same choice, reason fallback.
	if d := Decide(costPolicy, bs, nil, keys, false, &s); d.Backend != 0 || d.Reason != ReasonFallback {
		t.Fatalf("no tree: %+v", d)
	}
	// No keys: the least loaded.
	bs[1].InFlight = -1
	if d := Decide(costPolicy, bs, nil, nil, false, &s); d.Backend != 1 || d.Reason != ReasonFallback {
		t.Fatalf("no keys: %+v", d)
	}
	// None routable.
	for i := range bs {
		bs[i].Routable = false
	}
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != -1 || d.Candidates != nil {
		t.Fatalf("none routable: %+v", d)
	}
}

// The slack that keeps a cold prefix home (or in its rendezvous order)
// buys cache partitioning, never a wait: a backend whose queue is more
// than QueueWait longer than the least cost's is passed over, though its
// cost is within the slack.
func TestCostSlackBuysNoWait(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(7, 7)), 4) // 64 tokens
	order := rendezvous(nil, bs, keys)
	for i := range bs {
		bs[i].Base, bs[i].Rate = 0.010, 10000
		bs[i].Pending, bs[i].InFlight = 2000, 3 // queue 0.2 s: every one queues
	}
	first := &bs[order[0].i]
	first.InFlight = 0
	s := newScratch()
	s.Explain = true
	// first: queue 0.3 s, no load; cost 0.316 s, the others' 0.385
	// (0.2 s of queue, 3 × 56.4 ms of load): first is the least.
	first.Pending = 3000
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != first.ID {
		t.Fatalf("first in order, least cost: %+v", d.Table)
	}
	// first: queue 0.5 s, cost 0.516 s, within the slack (4 × 564
	// tokens = 0.226 s) of the others' 0.385, but 0.3 s more wait.
	first.Pending = 5000
	d := Decide(costPolicy, bs, nil, keys, true, &s)
	if d.Backend != bs[order[1].i].ID {
		t.Fatalf("a wait bought by the slack: chose %d, want %d: %+v", d.Backend, bs[order[1].i].ID, d.Table)
	}
	// Home is held to the same rule.
	s.Home = order[0].i
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != bs[order[1].i].ID {
		t.Fatalf("home bought a wait: %+v", d)
	}
	// 0.15 s more wait, and one request in flight: cost 0.422 s, within
	// the slack of the others' 0.385, home wins.
	first.Pending, first.InFlight = 3500, 1
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != first.ID {
		t.Fatalf("home within the wait: %+v", d)
	}
}

func TestCostSessionPin(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(7, 7)), 4)
	hits := []tree.Hit{{Backend: 1, Blocks: 4}}
	s := newScratch()
	s.Pin = 3
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 3 || d.Reason != ReasonOverride || d.MatchedBlocks != 0 || d.Diverted {
		t.Fatalf("pinned: %+v", d)
	}
	bs[3].Pending = 4000 // queueing: the pin does not hold
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 1 || d.Reason != ReasonTree {
		t.Fatalf("pinned to a queueing backend: %+v", d)
	}
	bs[3].Pending, bs[3].Routable = 0, false
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 1 {
		t.Fatalf("pinned to an unroutable backend: %+v", d)
	}
	s.Pin = 17 // gone
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 1 {
		t.Fatalf("pinned to a removed backend: %+v", d)
	}
}

func TestBodyHash(t *testing.T) {
	t.Parallel()
	p := costPolicy
	p.Kind = BodyHash
	bs := viewFleet(8)
	long := strings.Repeat("x", 600)
	s := newScratch()
	d := DecideBodyHash(p, bs, []byte(long+"tail one"), 5, &s)
	if d.Reason != ReasonBodyHash || d.TotalBlocks != 5 || d.MatchedBlocks != 0 || len(d.Candidates) != 3 || d.Candidates[0] != d.Backend {
		t.Fatalf("%+v", d)
	}
	// Only the first 512 bytes count; load does not.
	bs[d.Backend].InFlight = 1000
	s2 := newScratch()
	if d2 := DecideBodyHash(p, bs, []byte(long+"another tail"), 5, &s2); !slices.Equal(d2.Candidates, d.Candidates) {
		t.Fatalf("same 512 bytes, different order: %v %v", d2.Candidates, d.Candidates)
	}
	spread := map[int]int{}
	for i := range 800 {
		body := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("y", i%400) + `z"}]}`)
		spread[DecideBodyHash(p, bs, body, 1, &s).Backend]++
	}
	for id, n := range spread {
		if n < 50 || n > 150 || n%2 != 0 { // each body twice, on one backend
			t.Fatalf("backend %d got %d of 800", id, n)
		}
	}
	bs[d.Backend].Routable = false
	if d3 := DecideBodyHash(p, bs, []byte(long), 5, &s); d3.Backend != d.Candidates[1] {
		t.Fatalf("unroutable first: %+v, want %d", d3, d.Candidates[1])
	}
}

// ranvier is exactly the prefix rule before issue 11 (oldDecidePrefix,
// frozen below) on random fleets, loads and hits.
func TestRanvierEqualsOldPrefix(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8, 8))
	for range 3000 {
		bs := viewFleet(1 + r.IntN(8))
		for i := range bs {
			bs[i].InFlight = int64(r.IntN(12))
			bs[i].Routable = r.IntN(6) != 0
		}
		keys := randKeys(r, r.IntN(6))
		var hits []tree.Hit
		for range r.IntN(4) {
			hits = append(hits, tree.Hit{Backend: r.IntN(10), Blocks: r.IntN(7)})
		}
		useTree := r.IntN(5) != 0
		var s1, s2 Scratch
		got := Decide(testPolicy, bs, hits, keys, useTree, &s1)
		got.Candidates = slices.Clone(got.Candidates)
		want := oldDecidePrefix(testPolicy, bs, hits, keys, useTree, &s2)
		if got.Backend != want.Backend || got.Reason != want.Reason || got.MatchedBlocks != want.MatchedBlocks ||
			got.TotalBlocks != want.TotalBlocks || got.Diverted != want.Diverted || got.Preferred != want.Preferred ||
			!slices.Equal(got.Candidates, want.Candidates) || got.URL != want.URL {
			t.Fatalf("ranvier %+v, old prefix %+v", got, want)
		}
	}
}

// oldDecidePrefix is shard/decide.go's decidePrefix as it was before
// issue 11, verbatim but for the name: ranvier must equal it.
func oldDecidePrefix(p Config, bs []View, hits []tree.Hit, keys []uint64, useTree bool, s *Scratch) Decision {
	d := Decision{Backend: -1, Preferred: -1, TotalBlocks: len(keys)}
	s.loads = s.loads[:0]
	least := -1
	for i := range bs {
		if !bs[i].Routable {
			continue
		}
		s.loads = append(s.loads, bs[i].InFlight)
		if least < 0 || bs[i].InFlight < bs[least].InFlight ||
			(bs[i].InFlight == bs[least].InFlight && bs[i].ID < bs[least].ID) {
			least = i
		}
	}
	if least < 0 {
		return d
	}
	target, matched := -1, 0
	if useTree {
		for _, h := range hits {
			i := indexOf(bs, h.Backend)
			if i < 0 || !bs[i].Routable || h.Blocks <= 0 {
				continue
			}
			if target < 0 || h.Blocks > matched ||
				(h.Blocks == matched && (bs[i].InFlight < bs[target].InFlight ||
					(bs[i].InFlight == bs[target].InFlight && bs[i].ID < bs[target].ID))) {
				target, matched = i, h.Blocks
			}
		}
	}
	s.scores = s.scores[:0]
	if len(keys) > 0 {
		s.scores = rendezvous(s.scores, bs, keys)
	}
	switch {
	case target >= 0:
		d.Reason = ReasonTree
	case len(s.scores) > 0:
		target = s.scores[0].i
		d.Reason = ReasonHash
	default:
		target = least
		d.Reason = ReasonFallback
	}
	if !useTree {
		d.Reason = ReasonFallback
	}
	if bs[target].InFlight > loadBound(p, s.loads) && target != least {
		d.Diverted, d.Preferred = true, bs[target].ID
		target = least
		matched = 0
		for _, h := range hits {
			if h.Backend == bs[target].ID && useTree {
				matched = h.Blocks
			}
		}
	}
	d.Backend, d.URL, d.MatchedBlocks = bs[target].ID, bs[target].URL, matched
	n := min(p.MaxCandidates, len(s.loads))
	d.Candidates = append(s.cands[:0], d.Backend)
	for _, sc := range s.scores {
		if len(d.Candidates) >= n {
			break
		}
		if sc.i != target {
			d.Candidates = append(d.Candidates, bs[sc.i].ID)
		}
	}
	d.Candidates = appendByLoad(d.Candidates, bs, n)
	s.cands = d.Candidates
	return d
}

// Bounded load: a backend at (1 + LoadSlack) × the mean in-flight count
// (this request counted) queues, so a prefix it holds may gain another
// holder; below that it keeps its requests.
func TestCostBoundedLoad(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	for i := range bs {
		bs[i].InFlight = 2
	}
	keys := randKeys(rand.New(rand.NewPCG(9, 9)), 8) // 128 tokens: a miss 16 ms
	hits := []tree.Hit{{Backend: 3, Blocks: 8}}
	s := newScratch()
	s.Explain = true
	bs[3].InFlight = 4 // capacity ⌈1.5 × 11 / 4⌉ = 5: not queueing
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 3 || rowOf(t, d, 3).Queueing {
		t.Fatalf("below the capacity: %+v", d)
	}
	if got := loadCap(costPolicy, 10, 4); got != 5 {
		t.Fatalf("loadCap(10, 4) = %d, want 5", got)
	}
	if got := loadCap(costPolicy, 0, 8); got != 4 {
		t.Fatalf("loadCap(0, 8) = %d, want the floor 4", got)
	}
	bs[3].InFlight = 10 // capacity ⌈1.5 × 17 / 4⌉ = 7: queueing
	d := Decide(costPolicy, bs, hits, keys, true, &s)
	r := rowOf(t, d, 3)
	// 3: 20 ms + 10 × 62.5 ms of load; a newcomer: 36 ms + 2 × (62.5 + 16).
	if !r.Queueing || !near(r.LoadMS, 625) || d.Backend == 3 || d.Reason != ReasonHash {
		t.Fatalf("over the capacity: %+v, row %+v", d, r)
	}
	if order := rendezvous(nil, bs, keys); d.Backend != firstOther(bs, order, 3) {
		t.Fatalf("went to %d, not the next in order", d.Backend)
	}
}

func firstOther(bs []View, order []scored, not int) int {
	for _, sc := range order {
		if bs[sc.i].ID != not {
			return bs[sc.i].ID
		}
	}
	return -1
}

// A new holder's miss is priced with what it evicts: on engines whose
// caches are full of prefixes in use, a queue between one and two misses
// keeps the request on the holder; on empty ones, a queue over one miss
// moves it.
func TestCostNewHolderPricesEviction(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(10, 10)), 75) // 1,200 tokens: a miss 150 ms
	order := rendezvous(nil, bs, keys)
	h := order[0].i
	hits := []tree.Hit{{Backend: bs[h].ID, Blocks: 75}}
	s := newScratch()
	p := costPolicy
	p.KVTokens = 10000
	bs[h].Pending = 2000 // 250 ms: queueing; est 270 ms against a newcomer's 170
	if d := Decide(p, bs, hits, keys, true, &s); d.Backend != bs[order[1].i].ID || !near(d.EstMS, 170) {
		t.Fatalf("empty caches: %+v", d)
	}
	for i := range bs {
		if i != h {
			bs[i].Footprint = 10000 // full of prefixes in use: 170 + 150 ms
		}
	}
	if d := Decide(p, bs, hits, keys, true, &s); d.Backend != bs[h].ID || d.RunnerUp < 0 || !near(d.RunnerUpMS, 170) {
		t.Fatalf("full caches, 1–2 misses of queue: %+v", d)
	}
	// The engines' own capacity (scraped) stands for Config.KVTokens.
	p.KVTokens = 0
	for i := range bs {
		bs[i].KVCap = 10000
	}
	if d := Decide(p, bs, hits, keys, true, &s); d.Backend != bs[h].ID {
		t.Fatalf("full caches by the engines' capacity: %+v", d)
	}
	bs[h].Pending = 2800 // 350 ms: more than two misses
	if d := Decide(p, bs, hits, keys, true, &s); d.Backend != bs[order[1].i].ID {
		t.Fatalf("full caches, over two misses: %+v", d)
	}
	// The newcomer's requests in flight pay its miss too: 2 of them make
	// it 170 + 150 + 2 × (62.5 + 150) ms.
	bs[order[1].i].InFlight, bs[order[2].i].InFlight, bs[order[3].i].InFlight = 2, 2, 2
	if d := Decide(p, bs, hits, keys, true, &s); d.Backend != bs[h].ID {
		t.Fatalf("busy newcomers: %+v", d)
	}
}

// An engine that runs all it can (its learned slot limit) prices the wait
// for a slot, (waiting + 1) × service / running, not a prefill: a hot
// prefix's holders at their limit then lose the request to a newcomer's
// miss, as on engines of 4 slots they must (a fifth request waits most of
// a whole answer there). Unlearned, the same holder keeps it.
func TestCostSlotWait(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(11, 11)), 160) // 2,560 tokens: a miss 320 ms
	hits := []tree.Hit{{Backend: 2, Blocks: 160}}
	for i := range bs {
		bs[i].InFlight = 2
		bs[i].Service = 4 // seconds an answer holds a slot
	}
	bs[2].InFlight = 4
	s := newScratch()
	s.Explain = true
	// Unknown limit (256): the holder at 4 is below the bounded-load
	// capacity ⌈1.5 × 11 / 4⌉ = 5 and keeps its prefix.
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 2 || rowOf(t, d, 2).SlotWait != 0 {
		t.Fatalf("no limit known: %+v", d)
	}
	for i := range bs {
		bs[i].Slots = 4
	}
	d := Decide(costPolicy, bs, hits, keys, true, &s)
	r := rowOf(t, d, 2)
	// 2: 1,020 ms + 250 ms of load; a newcomer: 340 ms + 2 × (62.5 + 320).
	if !r.Queueing || !near(r.SlotWait, 1000) || r.Slots != 4 || d.Backend == 2 {
		t.Fatalf("holder at its limit of 4: %+v, row %+v", d, r)
	}
	// The engine's own count, while requests wait there: 2 waiting of 4
	// running, so 3 answers must end first: 3 s.
	bs[2].InFlight, bs[2].Engine, bs[2].Waiting, bs[2].Running = 6, true, 2, 4
	if r := rowOf(t, Decide(costPolicy, bs, hits, keys, true, &s), 2); !near(r.SlotWait, 3000) {
		t.Fatalf("2 waiting: slot wait %v ms, want 3000", r.SlotWait)
	}
	// Below its limit a backend waits for nothing.
	bs[2].InFlight, bs[2].Engine, bs[2].Waiting = 3, false, 0
	if d := Decide(costPolicy, bs, hits, keys, true, &s); d.Backend != 2 || rowOf(t, d, 2).SlotWait != 0 {
		t.Fatalf("below the limit: %+v", d)
	}
}

// The wait guard (noWait): a holder whose slots are all taken keeps a
// prefix only while its wait costs less than the prefill a backend with
// a free slot would do; the load term (cheap at a hit) does not keep it.
func TestCostNoWaitGuard(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	for i := range bs {
		bs[i].InFlight, bs[i].Slots, bs[i].Service = 3, 4, 2 // a free slot each; 2 s an answer
	}
	bs[2].InFlight = 4 // full: this request waits 500 ms for a slot there
	s := newScratch()
	s.Explain = true
	// A short prefix (1,280 tokens, a miss 160 ms) held by 2: waiting
	// there costs more than the miss anywhere else.
	short := randKeys(rand.New(rand.NewPCG(12, 12)), 80)
	d := Decide(costPolicy, bs, []tree.Hit{{Backend: 2, Blocks: 80}}, short, true, &s)
	if d.Backend == 2 || rowOf(t, d, d.Backend).SlotWait != 0 || !d.Diverted || d.Preferred != 2 {
		t.Fatalf("short prefix stayed at the full holder: %+v", d)
	}
	// A long one (16,384 tokens, a miss 2 s): the wait is worth it.
	long := randKeys(rand.New(rand.NewPCG(13, 13)), 1024)
	if d := Decide(costPolicy, bs, []tree.Hit{{Backend: 2, Blocks: 1024}}, long, true, &s); d.Backend != 2 {
		t.Fatalf("long prefix left its full holder: %+v", d)
	}
	// Every backend full: the guard has nowhere better; the holder keeps it.
	for i := range bs {
		bs[i].InFlight = 4
	}
	if d := Decide(costPolicy, bs, []tree.Hit{{Backend: 2, Blocks: 80}}, short, true, &s); d.Backend != 2 {
		t.Fatalf("all full: %+v", d)
	}
}

// A prefix most of the fleet holds (a system prompt) does not decide the
// rendezvous order: requests that share it and differ after it spread
// over the fleet on ties, and one conversation's turns keep one order.
func TestCostSharedPrefixSpreads(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 21))
	system := randKeys(r, 8)
	per := map[int]int{}
	for c := range 64 {
		bs := viewFleet(8)
		var hits []tree.Hit
		for i := range bs {
			hits = append(hits, tree.Hit{Backend: i, Blocks: 8}) // every backend holds the system prompt
		}
		conv := append(slices.Clone(system), randKeys(r, 24)...)
		s := newScratch()
		d := Decide(costPolicy, bs, hits, conv, true, &s)
		per[d.Backend]++
		// The conversation's next turn, the same fleet: the same backend.
		next := append(slices.Clone(conv), randKeys(r, 8)...)
		if d2 := Decide(costPolicy, bs, hits, next, true, &s); d2.Backend != d.Backend {
			t.Fatalf("conversation %d: turn 1 to %d, turn 2 to %d", c, d.Backend, d2.Backend)
		}
	}
	if len(per) < 6 {
		t.Fatalf("64 conversations behind one system prompt went to %d backends: %v", len(per), per)
	}
}

// A cold prefix goes home when home costs about the same as the
// cheapest, and to the cheapest when home is clearly busier.
func TestCostColdGoesHome(t *testing.T) {
	t.Parallel()
	bs := viewFleet(4)
	keys := randKeys(rand.New(rand.NewPCG(22, 22)), 20)
	order := rendezvous(nil, bs, keys)
	home := order[3].i // last in rendezvous order
	s := newScratch()
	s.Home = home
	bs[home].InFlight = 2 // 2 × 62.5 ms of load: within coldTie (4) requests
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != bs[home].ID {
		t.Fatalf("home within the slack: %+v", d)
	}
	bs[home].InFlight = 4 // 4 requests more than the idle ones, and its fair share
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != bs[order[0].i].ID {
		t.Fatalf("busy home: %+v, want the first in order %d", d, bs[order[0].i].ID)
	}
	s.Home = -1
	bs[home].InFlight = 0
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != bs[order[0].i].ID {
		t.Fatalf("no home: %+v", d)
	}
}

// The waits a request sees at a busy engine overlap: the prefill ahead of
// it runs while it waits for a slot, and the slot comes as running
// requests end, as KV room does. Its queue is the longest of them, not
// their sum; and the engine's waiting requests, which the router's own
// pending prefill counts already, are not priced twice. Summed, the
// estimates of engines serving long prompts at saturation were 1.4 to 4
// times their requests' first tokens (Mooncake ×16, docs/BENCHMARKS.md,
// finding 10).
func TestCostWaitsOverlap(t *testing.T) {
	t.Parallel()
	bs := viewFleet(1)
	v := &bs[0]
	v.Base, v.Rate, v.Service = 0.010, 10000, 2
	v.Engine, v.Running, v.Slots, v.InFlight, v.Waiting = true, 5, 5, 15, 10
	v.Pending = 100000                                // 10 s of prefill sent there, not yet answered
	keys := randKeys(rand.New(rand.NewPCG(5, 5)), 25) // 400 tokens
	s := newScratch()
	s.Explain = true
	d := Decide(costPolicy, bs, nil, keys, true, &s)
	r := rowOf(t, d, 0)
	// The slot: (10 + 1) × 2 s / 5 = 4.4 s; the prefill ahead: 10 s from
	// the router's account, 10 × (10 + 40) ms = 0.5 s from the engine's.
	if !near(r.SlotWait, 4400) || !near(r.QueueMS, 10000) {
		t.Fatalf("queue %v ms (slot %v ms), want the longest wait, 10,000 ms", r.QueueMS, r.SlotWait)
	}
	// Less prefill ahead: the slot is the longest wait.
	v.Pending = 20000
	if r := rowOf(t, Decide(costPolicy, bs, nil, keys, true, &s), 0); !near(r.QueueMS, 4400) {
		t.Fatalf("queue %v ms, want the slot's 4,400 ms", r.QueueMS)
	}
}

// fakeDecoding is a backend's tracked decoding requests: their remaining
// seconds.
type fakeDecoding []float64

func (f fakeDecoding) Remaining(now int64, dst []float64) []float64 { return append(dst, f...) }

// TestCostSlotWaitDecoding: the wait for a slot is (waiting + 1) ×
// service / runs, or the k-th end of the requests running there when
// that is later: those tracked decoding (View.Decoding) end when
// expected, the untracked spread over a whole service. Of two full
// engines with the same average service, the one whose running requests
// end later loses.
func TestCostSlotWaitDecoding(t *testing.T) {
	t.Parallel()
	bs := viewFleet(2)
	keys := randKeys(rand.New(rand.NewPCG(13, 13)), 25) // 400 tokens
	for i := range bs {
		bs[i].Service, bs[i].Slots, bs[i].InFlight = 4, 4, 4
		bs[i].Engine, bs[i].Running, bs[i].Waiting = true, 4, 1
	}
	s := newScratch()
	s.Explain, s.Now = true, 1
	// Nothing tracked: 2 × 4 s / 4 = 2 s on both.
	d := Decide(costPolicy, bs, nil, keys, true, &s)
	if r0, r1 := rowOf(t, d, 0), rowOf(t, d, 1); !near(r0.SlotWait, 2000) || !near(r1.SlotWait, 2000) {
		t.Fatalf("untracked: slot waits %v and %v ms, want 2,000", r0.SlotWait, r1.SlotWait)
	}
	// 0's four requests all end within 0.5 s: the average spacing stands,
	// 2 s. 1's two tracked end in 3 and 5 s, its other two are spread over
	// 4 s (2 and 4 s): the second end, 3 s.
	bs[0].Decoding = fakeDecoding{0.5, 0.1, 0.4, 0.3}
	bs[1].Decoding = fakeDecoding{5, 3}
	d = Decide(costPolicy, bs, nil, keys, true, &s)
	if r0, r1 := rowOf(t, d, 0), rowOf(t, d, 1); !near(r0.SlotWait, 2000) || !near(r1.SlotWait, 3000) || d.Backend != 0 {
		t.Fatalf("tracked: slot waits %v and %v ms, want 2,000 and 3,000, backend 0; %+v", r0.SlotWait, r1.SlotWait, d)
	}
	bs[0].Decoding, bs[1].Decoding = bs[1].Decoding, bs[0].Decoding
	if d := Decide(costPolicy, bs, nil, keys, true, &s); d.Backend != 1 {
		t.Fatalf("swapped: %+v", d)
	}
	// Past every running request: the 6th end of 4 running is the 2nd
	// end plus a whole service, 7 s, over the spacing's 6 s.
	bs[0].Waiting, bs[0].InFlight = 5, 9
	if r := rowOf(t, Decide(costPolicy, bs, nil, keys, true, &s), 0); !near(r.SlotWait, 7000) {
		t.Fatalf("6th end: %v ms, want 7,000", r.SlotWait)
	}
	// No clock: the tracked requests are not read.
	s.Now = 0
	if r := rowOf(t, Decide(costPolicy, bs, nil, keys, true, &s), 0); !near(r.SlotWait, 6000) {
		t.Fatalf("no clock: %v ms, want 6 × 4 s / 4", r.SlotWait)
	}
}
