package shard

import (
	"testing"

	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// FuzzEngineView applies programs of events (stores with and without
// token ids, in the GPU and another medium, of few hashes, so that
// blocks repeat, chains cross and parents are missing; removals;
// clears; stale marks) to a small view, and checks after every batch
// that its accounts agree with its map: the held blocks, the orphans
// (mapped without a copy; bounded), the blocks with a tier copy, the
// orphans' queue (each block at most once), the map within MaxBlocks.
func FuzzEngineView(f *testing.F) {
	f.Add([]byte{0, 1, 0, 3, 1, 2, 1, 2, 2, 1, 0, 3})
	f.Add([]byte{0, 0, 4, 0, 1, 3, 2, 2, 1, 0, 3, 0, 2, 2, 0, 0, 4})
	f.Add([]byte{0, 9, 0, 4, 0, 9, 0, 4, 2, 5, 1, 2, 4, 1, 1, 3, 3, 2, 6, 1})
	e := newEnv(f, envOpts{loops: 2, backends: 4})
	vs, err := NewViews(e.r, ViewConfig{MaxBlocks: 32, TrustAfter: 4}, e.set)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		v := vs.New(1, "fuzz")
		defer v.Close()
		next := func() int {
			if len(prog) == 0 {
				return 0
			}
			c := int(prog[0])
			prog = prog[1:]
			return c
		}
		for len(prog) > 0 {
			op, a, b := next(), next(), next()
			var ev kvevents.Event
			var hashes []kvevents.Hash
			for i := range 1 + b%4 {
				hashes = append(hashes, kvevents.IntHash(uint64((a+i)%24)))
			}
			medium := [...]kvevents.Opt[string]{{}, kvevents.Some("GPU"), kvevents.Some("CPU")}[b/4%3]
			switch op % 6 {
			case 0, 1: // a store with token ids, honest: a hash's tokens follow from it
				ev = kvevents.Event{Kind: kvevents.BlockStored, Hashes: hashes, BlockSize: 16, Medium: medium, LoRAName: kvevents.Some("m")}
				for _, h := range hashes {
					x, _ := h.Int()
					for j := range 16 {
						ev.Tokens = append(ev.Tokens, uint32(x)*16+uint32(j)+1)
					}
				}
				if p := b / 16; p > 0 {
					ev.Parent = kvevents.Some(kvevents.IntHash(uint64(p % 24)))
				}
			case 2: // another copy, as bytes or ints
				ev = kvevents.Event{Kind: kvevents.BlockStored, BlockSize: 16 * (b / 16 % 4), Medium: medium, Tokens: []uint32{}}
				for _, h := range hashes {
					if b%2 == 0 {
						x, _ := h.Int()
						h = bytesOf(x)
					}
					ev.Hashes = append(ev.Hashes, h)
				}
			case 3:
				ev = kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: hashes, Medium: medium}
			case 4:
				ev = kvevents.Event{Kind: kvevents.AllBlocksCleared}
			default:
				v.Apply(kvevents.Message{Stale: true, StaleReason: "gap"})
				checkView(t, v)
				continue
			}
			v.Apply(batch(ev))
			checkView(t, v)
		}
	})
}

// checkView fails t unless v's accounts agree with its map.
func checkView(t *testing.T, v *EngineView) {
	t.Helper()
	held, orphans, tiered, queued := 0, 0, 0, 0
	for _, b := range v.blocks {
		if b.held() {
			held++
		} else {
			orphans++
		}
		if b.tier > 0 {
			tiered++
		}
		if b.queued {
			queued++
		}
	}
	inQueue := map[kvevents.Hash]bool{}
	for _, h := range v.orphans {
		if inQueue[h] {
			t.Fatalf("block %v queued twice", h)
		}
		inQueue[h] = true
		if b, ok := v.blocks[h]; ok && !b.queued {
			t.Fatalf("block %v in the queue, not marked queued", h)
		}
	}
	switch {
	case held != v.live || held != v.Blocks():
		t.Fatalf("held %d, live %d, gauge %d", held, v.live, v.Blocks())
	case orphans != v.norphans:
		t.Fatalf("orphans %d, counted %d", orphans, v.norphans)
	case orphans > v.maxOrphans():
		t.Fatalf("orphans %d over %d", orphans, v.maxOrphans())
	case tiered != v.tiered:
		t.Fatalf("tiered %d, counted %d", tiered, v.tiered)
	case len(v.blocks) > v.vs.cfg.MaxBlocks:
		t.Fatalf("%d blocks mapped, MaxBlocks %d", len(v.blocks), v.vs.cfg.MaxBlocks)
	}
	for h, b := range v.blocks {
		if b.queued && !inQueue[h] {
			t.Fatalf("block %v marked queued, not in the queue", h)
		}
	}
	_ = queued
}
