package policy

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
	p := Config{Bridge: bridge}
	bs := []View{{ID: 0, Evented: true}, {ID: 1}, {ID: 2, Evented: true}}
	f := func(name string, h tree.Hit, exact int, now int64, want int) {
		t.Helper()
		hits := []tree.Hit{h}
		cut := p.Truth(bs, hits, exact, now)
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
	p.Bridge = 0
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
	bs := []View{
		{ID: 0, URL: "http://a", URLHash: URLHash("http://a"), Routable: true, Evented: true},
		{ID: 1, URL: "http://b", URLHash: URLHash("http://b"), Routable: true, Evented: true},
		{ID: 2, URL: "http://c", URLHash: URLHash("http://c"), Routable: true},
	}
	for _, kind := range []Kind{Prefix, Ranvier} {
		p := Config{Kind: kind, LoadFactor: 2, LoadFloor: 4, MaxCandidates: 3, BlockSize: 16, Concurrency: 256,
			QueueWait: 0.2, LoadTokens: 500, LoadSlack: 1, Bridge: int64(time.Second)}
		hits := []tree.Hit{
			{Backend: 0, Blocks: 8, Origin: tree.Local, Used: 0},               // a guess the engine never confirmed
			{Backend: 1, Blocks: 5, Origin: tree.Local, Used: 0, Confirmed: 5}, // the engine's word
		}
		s := Scratch{Pin: -1, Home: -1} // no session, no home (decideWith sets them per decision)
		if d := Decide(p, bs, slices.Clone(hits), keys, true, &s); d.Backend != 0 || d.MatchedBlocks != 8 {
			t.Fatalf("policy %d without the truth: backend %d, %d matched, want 0 and 8", kind, d.Backend, d.MatchedBlocks)
		}
		within := slices.Clone(hits)
		if cut := p.Truth(bs, within, len(keys), int64(time.Second)-1); cut != 0 {
			t.Fatalf("policy %d: %d hits cut within the bridge, want 0", kind, cut)
		}
		if d := Decide(p, bs, within, keys, true, &s); d.Backend != 0 || d.MatchedBlocks != 8 {
			t.Fatalf("policy %d within the bridge: backend %d, %d matched, want 0 and 8", kind, d.Backend, d.MatchedBlocks)
		}
		past := slices.Clone(hits)
		if cut := p.Truth(bs, past, len(keys), int64(time.Second)); cut != 1 {
			t.Fatalf("policy %d: %d hits cut past the bridge, want 1", kind, cut)
		}
		if d := Decide(p, bs, past, keys, true, &s); d.Backend != 1 || d.MatchedBlocks != 5 {
			t.Fatalf("policy %d past the bridge: backend %d, %d matched, want 1 and 5", kind, d.Backend, d.MatchedBlocks)
		}
		// Backend 0 without events: its guess stands.
		bs[0].Evented = false
		plain := slices.Clone(hits)
		p.Truth(bs, plain, len(keys), int64(time.Hour))
		if d := Decide(p, bs, plain, keys, true, &s); d.Backend != 0 || d.MatchedBlocks != 8 {
			t.Fatalf("policy %d, backend 0 not evented: backend %d, %d matched, want 0 and 8", kind, d.Backend, d.MatchedBlocks)
		}
		bs[0].Evented = true
	}
}
