package shard

import (
	"testing"
	"time"

	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

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
	vs, ids, want := guessedChain(t, e)
	body := viewBody(t, "m", append(append([]uint32(nil), ids...), 7, 8, 9))
	// Backend 2's engine reports the first 5 blocks.
	v2 := vs.New(2, "b2")
	v2.Apply(batch(storedEv(ids[:16*5], 16, 100, 0)))
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

// TestIncompleteViewKeepsGuesses: a view that meets a block it cannot
// key (its parent unknown: a batch lost before the subscription, or an
// engine warm before saltus) misses every descendant of that block, so
// its engine's word must not cut the guesses: the backend stops being
// evented until an AllBlocksCleared, or TrustAfter keyed stores in a
// row; what the view does map is still inserted.
func TestIncompleteViewKeepsGuesses(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 3)
	c := e.r.cfg
	c.KVEventsBridge = 0 // every guess is past the bridge
	if err := e.r.Retune(c); err != nil {
		t.Fatal(err)
	}
	vs, ids, want := guessedChain(t, e)
	matched := func(what string, blocks int) { t.Helper(); want(what, 1, blocks) }
	b1 := e.r.up.Snapshot()[1]
	v := vs.New(1, "b1")
	defer v.Close()

	// Complete (its first stores keyed): the engine's word (3 blocks)
	// supersedes the 8-block guess.
	v.Apply(batch(storedEv(ids[:16*3], 16, 100, 0)))
	if !b1.Evented() || !v.Complete() {
		t.Fatalf("after keyed stores: evented %v, complete %v; want both", b1.Evented(), v.Complete())
	}
	matched("complete view", 3)

	// A store after a parent the view never saw: incomplete, the guess
	// counts again.
	v.Apply(batch(storedEv(viewIDs(16, 9), 16, 500, 999)))
	if b1.Evented() || v.Complete() {
		t.Fatalf("after an unknown parent: evented %v, complete %v; want neither", b1.Evented(), v.Complete())
	}
	if got := e.metric(t, `saltus_kvview_incomplete{backend="b1"}`); got != "1" {
		t.Errorf("incomplete gauge %s, want 1", got)
	}
	matched("incomplete view", 8)

	// One keyed store is not enough (TrustAfter 2); two in a row are.
	v.Apply(batch(storedEv(ids[16*3:16*4], 16, 103, 102)))
	if b1.Evented() {
		t.Fatal("trusted after one keyed store, want two")
	}
	v.Apply(batch(storedEv(viewIDs(16, 7), 16, 700, 0)))
	if !b1.Evented() || !v.Complete() {
		t.Fatalf("after two keyed stores: evented %v, complete %v; want both", b1.Evented(), v.Complete())
	}
	matched("trusted again", 4)

	// Incomplete again, then the engine is emptied: complete.
	v.Apply(batch(storedEv(viewIDs(16, 8), 16, 800, 998)))
	if b1.Evented() {
		t.Fatal("evented after a second unknown parent")
	}
	v.Apply(batch(kvevents.Event{Kind: kvevents.AllBlocksCleared}))
	if !b1.Evented() || !v.Complete() {
		t.Fatalf("after AllBlocksCleared: evented %v, complete %v; want both", b1.Evented(), v.Complete())
	}
	if got := e.metric(t, `saltus_kvview_incomplete{backend="b1"}`); got != "0" {
		t.Errorf("incomplete gauge %s after the clear, want 0", got)
	}
}

// guessedChain makes e's views (TrustAfter 2) and an 8-block chain of
// token ids (model "m") that backend 1 learned by routing (a guess); want
// checks the decision Explain makes for those ids and 3 more tokens once
// the loops have run what the views posted.
func guessedChain(t *testing.T, e *holdEnv) (*Views, []uint32, func(what string, backend, matched int)) {
	t.Helper()
	vs, err := NewViews(e.r, ViewConfig{MaxBlocks: 64, TrustAfter: 2}, e.set)
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
	e.loops.run(t, owner, func() {
		if err := e.r.shards[owner].tree.Insert(keys, nil, 1, tree.Local, e.r.now()); err != nil {
			t.Error(err)
		}
	})
	return vs, ids, func(what string, backend, matched int) {
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
}
