package vllmsim

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/tree"
	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// subscribe connects a kvevents.Subscriber to s's publisher and returns
// its channel; it stops at the test's end.
func subscribe(t *testing.T, s *Sim) <-chan kvevents.Message {
	t.Helper()
	cfg := kvevents.DefaultConfig()
	cfg.Endpoint = "tcp://" + s.KVEventsAddr()
	ch := make(chan kvevents.Message, 256)
	sub, err := kvevents.New(cfg, ch, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	g := rules.NewGroup(context.Background())
	g.Go("sub", sub.Run)
	t.Cleanup(func() {
		g.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Wait(ctx); err != nil {
			t.Error(err)
		}
		sub.Close()
	})
	// A SUB misses what was published before its subscription reached
	// the PUB: reset the (empty) cache until an AllBlocksCleared arrives.
	for end := time.Now().Add(10 * time.Second); ; {
		if code, b := post(t, s, "/reset_prefix_cache", ""); code != http.StatusOK {
			t.Fatalf("reset: %d %s", code, b)
		}
		select {
		case m := <-ch:
			if m.Batch.Events[0].Kind != kvevents.AllBlocksCleared {
				t.Fatalf("first event %v", m.Batch.Events[0].Kind)
			}
			for len(ch) > 0 {
				<-ch
			}
			return ch
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(end) {
			t.Fatal("no KV events from the simulator")
		}
	}
}

// next returns the next event of kind, skipping others.
func next(t *testing.T, ch <-chan kvevents.Message, kind kvevents.Kind) kvevents.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-ch:
			for _, e := range m.Batch.Events {
				if e.Kind == kind {
					return e
				}
			}
		case <-timeout:
			t.Fatalf("no %v event", kind)
		}
	}
}

// pseudoIDs are byte-block mode's token ids of text: 4 bytes each,
// little-endian, the last zero-padded.
func pseudoIDs(text string) []uint32 {
	b := []byte(text)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	ids := make([]uint32, len(b)/4)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return ids
}

func TestKVEventsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ hash, enc string }{{"int", "array"}, {"bytes", "map"}} {
		t.Run(tc.hash+"/"+tc.enc, func(t *testing.T) {
			t.Parallel()
			s := startSim(t, func(c *Config) {
				c.KVTokens = 8 * 16 // 8 blocks: the second prompt evicts
				c.KVEvents = KVEventsConfig{Enable: true, Endpoint: "tcp://127.0.0.1:0", Bind: true, HashForm: tc.hash, Encoding: tc.enc}
			})
			ch := subscribe(t, s)

			// 3 full 64-byte blocks and a partial one.
			first := text("first", 3*64+10)
			complete(t, s, "/v1/completions", prompt(first, 1))
			ev := next(t, ch, kvevents.BlockStored)
			var hashes []kvevents.Hash
			var toks []uint32
			for {
				hashes = append(hashes, ev.Hashes...)
				toks = append(toks, ev.Tokens...)
				if ev.BlockSize != 16 || len(ev.Tokens) != 16*len(ev.Hashes) {
					t.Fatalf("BlockStored: block_size %d, %d tokens for %d blocks", ev.BlockSize, len(ev.Tokens), len(ev.Hashes))
				}
				if len(hashes) >= 3 {
					break
				}
				ev = next(t, ch, kvevents.BlockStored)
			}
			if want := pseudoIDs(first)[:48]; !slices.Equal(toks, want) {
				t.Fatalf("stored tokens %v, want the prompt's first 48 %v", toks, want)
			}
			keys := tree.ByteBlockKeys(nil, tree.ByteBlockSeed("m"), first)
			if len(keys) != 3 {
				t.Fatalf("%d keys", len(keys))
			}
			if tc.hash == "int" {
				for i, h := range hashes {
					if v, ok := h.Int(); !ok || v != keys[i] {
						t.Fatalf("hash %d = %v, want the block key %d", i, h, keys[i])
					}
				}
			} else if b := hashes[0].Bytes(); len(b) != 32 {
				t.Fatalf("bytes hash of %d bytes", len(b))
			}

			// 5 blocks and a partial one, 1 output token: 6 blocks of 8,
			// 3 cached: one is evicted, the first prompt's last block
			// (a prompt's tail goes first).
			complete(t, s, "/v1/completions", prompt(text("second", 5*64+10), 1))
			if rm := next(t, ch, kvevents.BlockRemoved); len(rm.Hashes) != 1 || rm.Hashes[0] != hashes[2] {
				t.Fatalf("BlockRemoved %v, want the first prompt's last block %v", rm.Hashes, hashes[2])
			}

			if code, b := post(t, s, "/reset_prefix_cache", ""); code != http.StatusOK {
				t.Fatalf("reset: %d %s", code, b)
			}
			next(t, ch, kvevents.AllBlocksCleared)
			if got := complete(t, s, "/v1/completions", prompt(first, 1)); got.Usage.Details.CachedTokens != 0 {
				t.Fatalf("cached tokens after a reset: %d", got.Usage.Details.CachedTokens)
			}
		})
	}
}

func TestKVEventsConfigValidate(t *testing.T) {
	t.Parallel()
	for _, k := range []KVEventsConfig{
		{Enable: true, HashForm: "sha"},
		{Enable: true, Encoding: "json"},
		{Enable: true, Endpoint: "ipc:///x"},
		{Enable: true, Queue: -1},
	} {
		c := DefaultConfig()
		c.KVEvents = k
		if c.Validate() == nil {
			t.Errorf("accepted %+v", k)
		}
	}
}
