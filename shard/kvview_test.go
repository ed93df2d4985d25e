package shard

import (
	"encoding/json"
	"testing"

	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// idsBody is a completions body whose prompt is token ids, keyed by them.
func viewBody(t *testing.T, model string, ids []uint32) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": model, "prompt": ids})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func viewIDs(n int, salt uint32) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = salt*100_000 + uint32(i) + 1
	}
	return ids
}

// stored is a BlockStored of ids in blocks of bs tokens, hashes named
// from base, after parent (0: none); the adapter name seeds as "m".
func storedEv(ids []uint32, bs int, base uint64, parent uint64) kvevents.Event {
	e := kvevents.Event{Kind: kvevents.BlockStored, Tokens: ids, BlockSize: bs, LoRAName: kvevents.Some("m")}
	for i := range len(ids) / bs {
		e.Hashes = append(e.Hashes, kvevents.IntHash(base+uint64(i)))
	}
	if parent != 0 {
		e.Parent = kvevents.Some(kvevents.IntHash(parent))
	}
	return e
}

func batch(evs ...kvevents.Event) kvevents.Message {
	return kvevents.Message{Batch: kvevents.Batch{Events: evs}}
}

// TestEngineView: stored blocks (in two events, the second continuing
// the first by its parent) make their engine the holder of the whole
// chain; a removed block takes the holder from it on; a clear, a stale
// mark and an overflow forget the engine; unusable events are counted.
func TestEngineView(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	vs, err := NewViews(e.r, ViewConfig{MaxBlocks: 64, TrustAfter: 2}, e.set)
	if err != nil {
		t.Fatal(err)
	}
	v := vs.New(2, "b2")
	ids := viewIDs(16*8, 1) // 8 blocks
	body := viewBody(t, "m", append(append([]uint32(nil), ids...), 7, 8, 9))
	matched := func() (int, int) {
		e.loops.settle(t)
		dd, err := e.r.Explain([]byte(body), "/v1/completions")
		if err != nil {
			t.Fatal(err)
		}
		return dd.Backend, dd.MatchedBlocks
	}
	e.loops.settle(t)
	if _, m := matched(); m != 0 {
		t.Fatalf("before any event: %d blocks matched, want 0", m)
	}
	v.Apply(batch(storedEv(ids[:16*5], 16, 100, 0)))
	v.Apply(batch(storedEv(ids[16*5:], 16, 200, 104)))
	e.loops.settle(t)
	if b, m := matched(); b != 2 || m != 8 {
		t.Fatalf("after 8 stored blocks: backend %d, %d matched, want 2 and 8", b, m)
	}
	if v.Blocks() != 8 || e.metric(t, `saltus_kvview_blocks{backend="b2"}`) != "8" {
		t.Fatalf("view holds %d blocks (gauge %s), want 8", v.Blocks(), e.metric(t, `saltus_kvview_blocks{backend="b2"}`))
	}
	// The 7th block (hash 201) goes: the engine holds 6.
	v.Apply(batch(kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []kvevents.Hash{kvevents.IntHash(201)}}))
	e.loops.settle(t)
	if b, m := matched(); b != 2 || m != 6 {
		t.Fatalf("after removing block 7: backend %d, %d matched, want 2 and 6", b, m)
	}
	// Unusable: an unknown parent, a block size that is not a multiple.
	v.Apply(batch(storedEv(viewIDs(16, 3), 16, 300, 999)))
	if got := e.metric(t, `saltus_kvview_unusable_total{reason="parent"}`); got != "1" {
		t.Errorf("unusable parent: %s, want 1", got)
	}
	v.Apply(batch(kvevents.Event{Kind: kvevents.AllBlocksCleared}))
	e.loops.settle(t)
	if _, m := matched(); m != 0 || v.Blocks() != 0 {
		t.Fatalf("after AllBlocksCleared: %d matched, view %d blocks, want 0 and 0", m, v.Blocks())
	}
	// An engine block of 32 tokens keys two of saltus's 16.
	v.Apply(batch(storedEv(ids[:32*3], 32, 400, 0)))
	v.Apply(batch(storedEv(ids[32*3:32*4], 32, 500, 402)))
	e.loops.settle(t)
	if b, m := matched(); b != 2 || m != 8 {
		t.Fatalf("after 4 stored 32-token blocks: backend %d, %d matched, want 2 and 8", b, m)
	}
	// The 4th 32-token block goes: the engine holds 6 of saltus's blocks.
	v.Apply(batch(kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []kvevents.Hash{kvevents.IntHash(500)}}))
	e.loops.settle(t)
	if b, m := matched(); b != 2 || m != 6 {
		t.Fatalf("after removing the 4th 32-token block: backend %d, %d matched, want 2 and 6", b, m)
	}
	// A gap: the view is stale, the engine forgotten.
	v.Apply(kvevents.Message{Stale: true, StaleReason: "gap"})
	e.loops.settle(t)
	if _, m := matched(); m != 0 {
		t.Fatalf("after a gap: %d matched, want 0", m)
	}
	// 24 blocks of 8 tokens: not a multiple of 16; reset when it held any.
	v.Apply(batch(storedEv(ids[:16], 16, 600, 0)))
	v.Apply(batch(storedEv(ids[:24], 8, 700, 0)))
	if got := e.metric(t, `saltus_kvview_unusable_total{reason="block_size"}`); got != "1" || v.Blocks() != 0 {
		t.Errorf("unusable block_size: %s, view %d blocks, want 1 and 0", got, v.Blocks())
	}
	// Past MaxBlocks (64): reset, counted.
	v.Apply(batch(storedEv(viewIDs(16*60, 4), 16, 1000, 0)))
	v.Apply(batch(storedEv(viewIDs(16*8, 5), 16, 2000, 0)))
	if got := e.metric(t, `saltus_kvview_resets_total{reason="overflow"}`); got != "1" || v.Blocks() != 0 {
		t.Errorf("overflow resets: %s, view %d blocks, want 1 and 0", got, v.Blocks())
	}
	if got := e.metric(t, `saltus_kvview_resets_total{reason="stale"}`); got != "2" {
		t.Errorf("stale resets: %s, want 2 (the gap, the block size)", got)
	}
	v.Close()
	if got := e.metric(t, `saltus_kvview_blocks{backend="b2"}`); got != "" {
		t.Errorf("gauge after Close: %q, want none", got)
	}
}

// TestEngineViewHostile: a block stored again under its own descendant
// keeps its first mapping (no cycle of parents can form; the store is
// another copy), malformed events are counted, and the view stays usable.
func TestEngineViewHostile(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	vs, err := NewViews(e.r, DefaultViewConfig(), e.set)
	if err != nil {
		t.Fatal(err)
	}
	v := vs.New(1, "b1")
	defer v.Close()
	ids := viewIDs(16, 7)
	v.Apply(batch(storedEv(ids, 16, 1, 0), storedEv(ids, 16, 2, 1), storedEv(ids, 16, 1, 2), storedEv(ids, 16, 3, 1)))
	if got := e.metric(t, `saltus_kvview_unusable_total{reason="parent"}`); got != "0" {
		t.Errorf("a block stored under its descendant: unusable parent %s, want 0", got)
	}
	if got := v.Blocks(); got != 3 {
		t.Errorf("a block stored under its descendant: view holds %d blocks, want 3", got)
	}
	if _, ok := v.chainOf(nil, kvevents.IntHash(3)); !ok {
		t.Errorf("the chain of block 3 (parent 1) cannot be walked: a cycle was made")
	}
	short := storedEv(ids, 16, 9, 0)
	short.Tokens = short.Tokens[:5]
	v.Apply(batch(short, kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []kvevents.Hash{kvevents.IntHash(77)}}))
	if a, b := e.metric(t, `saltus_kvview_unusable_total{reason="tokens"}`), e.metric(t, `saltus_kvview_unusable_total{reason="removed_unknown"}`); a != "1" || b != "1" {
		t.Errorf("short tokens %s, unknown removal %s, want 1 and 1", a, b)
	}
	v.Apply(batch(storedEv(viewIDs(32, 8), 16, 50, 0)))
	e.loops.settle(t)
	d, err := e.r.Explain([]byte(viewBody(t, "m", viewIDs(40, 8))), "/v1/completions")
	if err != nil || d.Backend != 1 || d.MatchedBlocks != 2 {
		t.Fatalf("after hostile events, a good one: %+v %v, want backend 1, 2 blocks", d, err)
	}
	// An adapter named only by its lora_id (vLLM before lora_name): not
	// keyed as the base model's blocks, counted, the view incomplete.
	byID := storedEv(viewIDs(32, 9), 16, 60, 0)
	byID.LoRAName, byID.LoRAID = kvevents.Opt[string]{}, kvevents.Some[int64](3)
	v.Apply(batch(byID))
	if got := e.metric(t, `saltus_kvview_unusable_total{reason="model"}`); got != "1" || v.Complete() {
		t.Errorf("an adapter known by lora_id only: unusable model %s, complete %v, want 1 and false", got, v.Complete())
	}
}

// viewMatch is where the router sends ids (and a short tail) and how many
// blocks it matched there.
func viewMatch(t *testing.T, e *holdEnv, ids []uint32) (int, int) {
	t.Helper()
	e.loops.settle(t)
	d, err := e.r.Explain([]byte(viewBody(t, "m", append(append([]uint32(nil), ids...), 7, 8, 9))), "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	return d.Backend, d.MatchedBlocks
}

// bytesOf is h's bytes form as vLLM's offloading connector sends it: a
// 32-byte digest whose int form (its low 64 bits, what the GPU's events
// carry) is v.
func bytesOf(v uint64) kvevents.Hash {
	var b [32]byte
	for i := range 8 {
		b[24+i] = byte(v >> (56 - 8*i))
	}
	h, _ := kvevents.BytesHash(b[:])
	return h
}

func removedEv(medium string, hs ...kvevents.Hash) kvevents.Event {
	e := kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: hs}
	if medium != "" {
		e.Medium = kvevents.Some(medium)
	}
	return e
}

// TestEngineViewCopies: a block is held while the engine has a copy of
// it. A block stored twice (vLLM caches a second copy when two requests
// compute it at once) keeps its holder after one removal; an offloading
// tier's store (medium CPU, no token ids, blocks of two of the GPU's,
// hashes as bytes where the GPU's were ints) keeps the engine the holder
// after the GPU evicts, also when the GPU's removal came first, until the
// tier removes them; AllBlocksCleared clears the GPU's copies only; a
// copy of an unknown block is counted and makes the view incomplete;
// orphans are bounded and give their room to new blocks.
func TestEngineViewCopies(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	vs, err := NewViews(e.r, ViewConfig{MaxBlocks: 64, TrustAfter: 2}, e.set)
	if err != nil {
		t.Fatal(err)
	}
	v := vs.New(3, "b3")
	defer v.Close()
	want := func(step string, ids []uint32, blocks int) {
		t.Helper()
		b, m := viewMatch(t, e, ids)
		if m != blocks || (blocks > 0 && b != 3) {
			t.Fatalf("%s: backend %d, %d blocks matched, want 3 and %d", step, b, m, blocks)
		}
	}
	a := viewIDs(16*8, 1)
	v.Apply(batch(storedEv(a, 16, 100, 0)))
	v.Apply(batch(storedEv(a, 16, 100, 0))) // a second copy
	want("two copies", a, 8)
	v.Apply(batch(removedEv("GPU", kvevents.IntHash(105))))
	want("one copy of block 6 removed", a, 8)
	v.Apply(batch(removedEv("", kvevents.IntHash(105))))
	want("both copies of block 6 removed", a, 5)

	// The offloading tier: 4 CPU blocks of 2 GPU blocks each.
	c := viewIDs(16*8, 2)
	v.Apply(batch(storedEv(c, 16, 200, 0)))
	cpu := kvevents.Event{Kind: kvevents.BlockStored, Tokens: []uint32{}, BlockSize: 32, Medium: kvevents.Some("CPU"),
		Hashes: []kvevents.Hash{bytesOf(201), bytesOf(203), bytesOf(205), bytesOf(207)}}
	v.Apply(batch(cpu))
	var gpuAll []kvevents.Hash
	for i := 207; i >= 200; i-- {
		gpuAll = append(gpuAll, kvevents.IntHash(uint64(i)))
	}
	v.Apply(batch(removedEv("GPU", gpuAll...)))
	want("GPU evicted, CPU holds", c, 8)
	// Two of the CPU's blocks, in chain order in one event: the first's
	// demotion is not undone by the second's.
	v.Apply(batch(removedEv("CPU", bytesOf(205), bytesOf(207))))
	want("the CPU's last two blocks (GPU blocks 5 to 8) removed", c, 4)
	v.Apply(batch(kvevents.Event{Kind: kvevents.AllBlocksCleared}))
	want("after AllBlocksCleared, the CPU's copies", c, 4)
	want("after AllBlocksCleared, the GPU-only chain", a, 0)
	if got := e.metric(t, `saltus_kvview_resets_total{reason="cleared"}`); got != "1" {
		t.Errorf("cleared resets %s, want 1", got)
	}
	if got := e.metric(t, `saltus_kvview_blocks{backend="b3"}`); got != "4" {
		t.Errorf("blocks held %s, want 4 (the CPU's)", got)
	}

	// The GPU's removal before the tier's store: the orphans come back.
	d := viewIDs(16*4, 3)
	v.Apply(batch(storedEv(d, 16, 300, 0)))
	v.Apply(batch(removedEv("GPU", kvevents.IntHash(303), kvevents.IntHash(302), kvevents.IntHash(301), kvevents.IntHash(300))))
	want("GPU evicted before the CPU stored", d, 0)
	v.Apply(batch(kvevents.Event{Kind: kvevents.BlockStored, Tokens: []uint32{}, BlockSize: 32, Medium: kvevents.Some("CPU"),
		Hashes: []kvevents.Hash{bytesOf(301), bytesOf(303)}}))
	want("the CPU's store after the GPU's removal", d, 4)

	// A copy of a block the view never mapped.
	if !v.Complete() {
		t.Fatal("the view is incomplete before an unknown copy")
	}
	v.Apply(batch(kvevents.Event{Kind: kvevents.BlockStored, Tokens: []uint32{}, BlockSize: 32, Medium: kvevents.Some("CPU"),
		Hashes: []kvevents.Hash{bytesOf(999)}}))
	if got := e.metric(t, `saltus_kvview_unusable_total{reason="copy_unknown"}`); got != "1" || v.Complete() {
		t.Errorf("an unknown copy: copy_unknown %s, complete %v, want 1 and false", got, v.Complete())
	}

	// Orphans: at most MaxBlocks/16 (4) stay mapped, and they give way to
	// new blocks rather than overflow the view.
	v.Apply(batch(kvevents.Event{Kind: kvevents.AllBlocksCleared}))
	v.Apply(batch(removedEv("CPU", bytesOf(201), bytesOf(203), bytesOf(301), bytesOf(303))))
	if v.Blocks() != 0 || len(v.blocks) > 4 || v.norphans != len(v.blocks) {
		t.Fatalf("all removed: %d held, %d mapped (%d orphans), want 0 and at most 4", v.Blocks(), len(v.blocks), v.norphans)
	}
	v.Apply(batch(storedEv(viewIDs(16*62, 4), 16, 1000, 0)))
	if got := e.metric(t, `saltus_kvview_resets_total{reason="overflow"}`); got != "0" || v.Blocks() != 62 || len(v.blocks) > 64 {
		t.Errorf("62 new blocks beside orphans: overflow resets %s, %d held, %d mapped, want 0, 62, ≤ 64", got, v.Blocks(), len(v.blocks))
	}
}

// TestEngineViewCacheSalt: a chain stored with a cache_salt (vLLM puts it
// in its first block's extra_keys, after the adapter's name) is the
// prefix of requests with that cache_salt only, and an unsalted chain of
// unsalted requests only.
func TestEngineViewCacheSalt(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	vs, err := NewViews(e.r, DefaultViewConfig(), e.set)
	if err != nil {
		t.Fatal(err)
	}
	v := vs.New(2, "b2")
	defer v.Close()
	matched := func(ids []uint32, salt any) (int, int) {
		t.Helper()
		e.loops.settle(t)
		body := map[string]any{"model": "m", "prompt": append(append([]uint32(nil), ids...), 7, 8, 9)}
		if salt != nil {
			body["cache_salt"] = salt
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.r.Explain(b, "/v1/completions")
		if err != nil {
			t.Fatal(err)
		}
		return d.Backend, d.MatchedBlocks
	}
	salted := viewIDs(16*4, 1)
	ev := storedEv(salted, 16, 100, 0)
	ev.Extra = []string{"m", "tenant-a"} // the adapter's name, then the salt
	v.Apply(batch(ev, storedEv(salted[:16], 16, 200, 103)))
	plain := viewIDs(16*4, 2)
	v.Apply(batch(storedEv(plain, 16, 300, 0)))
	for _, c := range []struct {
		name string
		ids  []uint32
		salt any
		want int
	}{
		{"salted chain, its salt (and the block continuing it)", append(append([]uint32(nil), salted...), salted[:16]...), "tenant-a", 5},
		{"salted chain, no salt", salted, nil, 0},
		{"salted chain, another salt", salted, "tenant-b", 0},
		{"salted chain, a salt that is not a string", salted, 7, 0},
		{"unsalted chain, no salt", plain, nil, 4},
		{"unsalted chain, a salt", plain, "tenant-a", 0},
	} {
		if b, m := matched(c.ids, c.salt); m != c.want || (m > 0 && b != 2) {
			t.Errorf("%s: backend %d, %d blocks matched, want 2 and %d", c.name, b, m, c.want)
		}
	}
}
