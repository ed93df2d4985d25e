package shard

import (
	"slices"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/tree"
)

// TestTruth: truth cuts an evented backend's guess to its confirmed
// depth once the guess is older than the bridge; a fresh guess, a
// non-evented backend, a fully confirmed holder and keys the engine
// cannot confirm (byte blocks past exact) are left alone.
func TestTruth(t *testing.T) {
	t.Parallel()
	const bridge = 100
	p := policy{bridge: bridge}
	bs := []view{{id: 0, evented: true}, {id: 1}, {id: 2, evented: true}}
	f := func(name string, h tree.Hit, exact int, now int64, want int) {
		t.Helper()
		hits := []tree.Hit{h}
		cut := p.truth(bs, hits, exact, now)
		if hits[0].Blocks != want || cut != min(h.Blocks-want, 1) {
			t.Errorf("%s: Blocks %d (cut %d), want %d", name, hits[0].Blocks, cut, want)
		}
	}
	f("stale guess, evented", tree.Hit{Backend: 0, Blocks: 8, Confirmed: 3, Used: 0}, 10, bridge, 3)
	f("stale guess, nothing confirmed", tree.Hit{Backend: 2, Blocks: 8, Used: 0}, 10, 5*bridge, 0)
	f("guess within the bridge", tree.Hit{Backend: 0, Blocks: 8, Confirmed: 3, Used: 1}, 10, bridge, 8)
	f("not evented", tree.Hit{Backend: 1, Blocks: 8, Used: 0}, 10, 5*bridge, 8)
	f("confirmed whole", tree.Hit{Backend: 0, Blocks: 8, Confirmed: 8, Used: 0}, 10, 5*bridge, 8)
	f("byte-block keys", tree.Hit{Backend: 0, Blocks: 8, Used: 0}, 0, 5*bridge, 8)
	f("token lead confirmed, byte tail", tree.Hit{Backend: 0, Blocks: 8, Confirmed: 4, Used: 0}, 4, 5*bridge, 8)
	f("token lead not confirmed", tree.Hit{Backend: 0, Blocks: 8, Confirmed: 2, Used: 0}, 4, 5*bridge, 2)
	f("unknown backend", tree.Hit{Backend: 7, Blocks: 8, Used: 0}, 10, 5*bridge, 8)
	p.bridge = 0
	f("bridge 0: only confirmed blocks", tree.Hit{Backend: 0, Blocks: 8, Confirmed: 3, Used: 5}, 10, 5, 3)
}

// TestTruthDecides: with the truth applied, both tree policies leave an
// evented backend's stale guess for the backend the engine confirmed.
func TestTruthDecides(t *testing.T) {
	t.Parallel()
	keys := make([]uint64, 8)
	for i := range keys {
		keys[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	bs := []view{
		{id: 0, url: "http://a", urlHash: urlHash("http://a"), routable: true, evented: true},
		{id: 1, url: "http://b", urlHash: urlHash("http://b"), routable: true, evented: true},
		{id: 2, url: "http://c", urlHash: urlHash("http://c"), routable: true},
	}
	for _, kind := range []policyKind{kindPrefix, kindRanvier} {
		p := policy{kind: kind, loadFactor: 2, loadFloor: 4, maxCandidates: 3, blockSize: 16, concurrency: 256,
			queueWait: 0.2, loadTokens: 500, loadSlack: 1, bridge: int64(time.Second)}
		hits := []tree.Hit{
			{Backend: 0, Blocks: 8, Origin: tree.Local, Used: 0},               // a guess the engine never confirmed
			{Backend: 1, Blocks: 5, Origin: tree.Local, Used: 0, Confirmed: 5}, // the engine's word
		}
		s := scratch{pin: -1, home: -1} // no session, no home (decideWith sets them per decision)
		if d := decide(p, bs, slices.Clone(hits), keys, true, &s); d.Backend != 0 || d.MatchedBlocks != 8 {
			t.Fatalf("policy %d without the truth: backend %d, %d matched, want 0 and 8", kind, d.Backend, d.MatchedBlocks)
		}
		within := slices.Clone(hits)
		if cut := p.truth(bs, within, len(keys), int64(time.Second)-1); cut != 0 {
			t.Fatalf("policy %d: %d hits cut within the bridge, want 0", kind, cut)
		}
		if d := decide(p, bs, within, keys, true, &s); d.Backend != 0 || d.MatchedBlocks != 8 {
			t.Fatalf("policy %d within the bridge: backend %d, %d matched, want 0 and 8", kind, d.Backend, d.MatchedBlocks)
		}
		past := slices.Clone(hits)
		if cut := p.truth(bs, past, len(keys), int64(time.Second)); cut != 1 {
			t.Fatalf("policy %d: %d hits cut past the bridge, want 1", kind, cut)
		}
		if d := decide(p, bs, past, keys, true, &s); d.Backend != 1 || d.MatchedBlocks != 5 {
			t.Fatalf("policy %d past the bridge: backend %d, %d matched, want 1 and 5", kind, d.Backend, d.MatchedBlocks)
		}
		// Backend 0 without events: its guess stands.
		bs[0].evented = false
		plain := slices.Clone(hits)
		p.truth(bs, plain, len(keys), int64(time.Hour))
		if d := decide(p, bs, plain, keys, true, &s); d.Backend != 0 || d.MatchedBlocks != 8 {
			t.Fatalf("policy %d, backend 0 not evented: backend %d, %d matched, want 0 and 8", kind, d.Backend, d.MatchedBlocks)
		}
		bs[0].evented = true
	}
}

// TestRouterTruth: through the Router, an engine view makes its backend
// evented; a learned guess there counts within the bridge (here: while
// it is an hour) and is ignored past it (Retune to 0: at once), counted;
// what the engine confirmed counts either way; a backend without a view
// keeps its guess.
func TestRouterTruth(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	c := e.r.cfg
	c.KVEventsBridge = time.Hour
	if err := e.r.Retune(c); err != nil {
		t.Fatal(err)
	}
	vs, err := NewViews(e.r, ViewConfig{MaxBlocks: 64}, e.set)
	if err != nil {
		t.Fatal(err)
	}
	ids := viewIDs(16*8, 1) // 8 blocks
	body := viewBody(t, "m", append(append([]uint32(nil), ids...), 7, 8, 9))
	id32 := make([]int32, len(ids))
	for i, v := range ids {
		id32[i] = int32(v)
	}
	keys := tree.BlockKeys(nil, tree.ModelSeed("m"), id32, 16)
	owner := int(keys[0] % 2)
	// Backend 1 learned the whole chain by routing (a guess); backend
	// 2's engine reports the first 5 blocks.
	e.loops.run(t, owner, func() {
		if err := e.r.shards[owner].tree.Insert(keys, nil, 1, tree.Local, e.r.now()); err != nil {
			t.Error(err)
		}
	})
	v2 := vs.New(2, "b2")
	v2.Apply(batch(storedEv(ids[:16*5], 16, 100, 0)))
	want := func(what string, backend, matched int) {
		t.Helper()
		e.loops.settle(t) // the view's inserts have run
		d, err := e.r.Explain([]byte(body), "/v1/completions")
		if err != nil {
			t.Fatal(err)
		}
		if d.Backend != backend || d.MatchedBlocks != matched {
			t.Fatalf("%s: backend %d, %d matched, want %d and %d", what, d.Backend, d.MatchedBlocks, backend, matched)
		}
	}
	want("backend 1 not evented", 1, 8)
	c.KVEventsBridge = 0
	if err := e.r.Retune(c); err != nil {
		t.Fatal(err)
	}
	want("backend 1 not evented, bridge 0", 1, 8)
	if e.r.up.Snapshot()[2].Evented() != true || e.r.up.Snapshot()[1].Evented() {
		t.Fatal("evented: want backend 2 only")
	}

	// Backend 1's view goes live (an empty batch): its guess is past
	// the bridge.
	v1 := vs.New(1, "b1")
	v1.Apply(batch())
	want("backend 1 evented, past the bridge", 2, 5)
	if got := e.metric(t, "saltus_kvview_guesses_ignored_total"); got != "0" {
		t.Errorf("guesses ignored after Explain: %s, want 0 (Explain is not counted)", got)
	}
	x := newExchange(0, "POST", "/v1/completions", body)
	e.loops.run(t, 0, func() { e.r.serve(x) })
	var call heldCall
	select {
	case call = <-e.hu.held:
	case <-x.done:
		t.Fatalf("answered by the router: %d %s", x.status, x.body)
	case <-time.After(10 * time.Second):
		t.Fatal("no Forward within 10 s")
	}
	if call.cands[0].ID != 2 {
		t.Errorf("served past the bridge: went to %d, want 2", call.cands[0].ID)
	}
	call.answer(call.cands[0], 200, "", time.Millisecond)
	if got := e.metric(t, "saltus_kvview_guesses_ignored_total"); got != "1" {
		t.Errorf("guesses ignored: %s, want 1", got)
	}

	// Within the bridge again, the guess counts.
	c.KVEventsBridge = time.Hour
	if err := e.r.Retune(c); err != nil {
		t.Fatal(err)
	}
	want("backend 1 evented, within the bridge", 1, 8)

	// Backend 1's engine confirms the whole chain: it counts past the
	// bridge.
	c.KVEventsBridge = 0
	if err := e.r.Retune(c); err != nil {
		t.Fatal(err)
	}
	v1.Apply(batch(storedEv(ids, 16, 200, 0)))
	want("backend 1 confirmed", 1, 8)

	// A view closed (the backend left or went unhealthy): not evented.
	v1.Close()
	if e.r.up.Snapshot()[1].Evented() {
		t.Error("backend 1 evented after its view closed")
	}
	v2.Close()
}
