package kvevents

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func sha(i byte) Hash {
	h, ok := BytesHash(bytes.Repeat([]byte{i}, 32))
	if !ok {
		panic("BUG: 32-byte hash refused")
	}
	return h
}

// sample is a batch of every kind with every optional field set or not.
func sample(enc Encoding, hashOf func(i byte) Hash) Batch {
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(1000 + i)
	}
	return Batch{
		TS:       1.75e9 + 0.25,
		Encoding: enc,
		DPRank:   Some[int64](0),
		Events: []Event{
			{Kind: BlockStored, Hashes: []Hash{hashOf(1), hashOf(2)}, Tokens: toks, BlockSize: 16,
				Medium: Some("GPU"), Extra: []string{"tenant-salt"}},
			{Kind: BlockStored, Hashes: []Hash{hashOf(3)}, Parent: Some(hashOf(2)), Tokens: toks[:16], BlockSize: 16,
				LoRAID: Some[int64](7), LoRAName: Some("sql-lora"), Medium: Some("GPU"), GroupIdx: Some[int64](1)},
			{Kind: BlockRemoved, Hashes: []Hash{hashOf(1)}, Medium: Some("GPU")},
			{Kind: BlockRemoved, Hashes: []Hash{hashOf(3)}, GroupIdx: Some[int64](0)},
			{Kind: AllBlocksCleared},
		},
	}
}

func intHash(i byte) Hash { return IntHash(uint64(i) * 0x9e3779b97f4a7c15) }

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, enc := range []Encoding{ArrayEncoding, MapEncoding} {
		for name, hashOf := range map[string]func(byte) Hash{"bytes": sha, "int": intHash} {
			want := sample(enc, hashOf)
			payload, err := NewEncoder().Append(nil, &want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := NewDecoder(DefaultLimits()).Decode(payload)
			if err != nil {
				t.Fatalf("encoding %d, %s hashes: %v", enc, name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("encoding %d, %s hashes:\n got %+v\nwant %+v", enc, name, got, want)
			}
		}
	}
}

// TestDecodesVLLMShapes decodes payloads written by a generic msgpack
// encoder in the shapes vLLM's msgspec writes, not by our Encoder: the
// array form with trailing fields omitted (older vLLM: no lora_name, no
// medium) and extra ones (extra_keys), the map form with keys in another
// order and fields we skip, negative int hashes, str hashes.
func TestDecodesVLLMShapes(t *testing.T) {
	t.Parallel()
	h32 := bytes.Repeat([]byte{0xab}, 32)
	f := func(name string, v any, want Batch) {
		t.Helper()
		payload, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewDecoder(DefaultLimits()).Decode(payload)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	hb, _ := BytesHash(h32)
	f("array, old vLLM (5 fields, no dp rank)",
		[]any{1.5, []any{[]any{"BlockStored", []any{int64(-5), uint64(math.MaxUint64)}, nil, []any{1, 2, 3, 4}, 2}}},
		Batch{TS: 1.5, Encoding: ArrayEncoding, Events: []Event{{Kind: BlockStored,
			Hashes: []Hash{IntHash(uint64(math.MaxUint64 - 4)), IntHash(math.MaxUint64)}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2}}})
	f("array, extra_keys and an unknown trailing field",
		[]any{2, []any{
			[]any{"BlockStored", []any{h32}, h32, []any{9}, 1, nil, "GPU", nil, []any{[]any{"mm", 1}}, 3, "future"},
			[]any{"SomethingNew", 1, 2},
			[]any{"AllBlocksCleared"},
		}, 4},
		Batch{TS: 2, Encoding: ArrayEncoding, DPRank: Some[int64](4), Events: []Event{
			{Kind: BlockStored, Hashes: []Hash{hb}, Parent: Some(hb), Tokens: []uint32{9}, BlockSize: 1, Medium: Some("GPU"), GroupIdx: Some[int64](3),
				Extra: []string{"mm"}},
			{Kind: Unknown},
			{Kind: AllBlocksCleared},
		}})
	f("array, llm-d-inference-sim: parent 0 is no parent, lora_name after medium",
		[]any{4.5, []any{[]any{"BlockStored", []any{uint64(11), uint64(12)}, uint64(0), []any{1, 2}, 1, nil, "GPU", "tuned"},
			[]any{"BlockStored", []any{uint64(13)}, uint64(12), []any{3}, 1, nil, "GPU"}}},
		Batch{TS: 4.5, Encoding: ArrayEncoding, Events: []Event{
			{Kind: BlockStored, Hashes: []Hash{IntHash(11), IntHash(12)}, Tokens: []uint32{1, 2}, BlockSize: 1, Medium: Some("GPU"), LoRAName: Some("tuned")},
			{Kind: BlockStored, Hashes: []Hash{IntHash(13)}, Parent: Some(IntHash(12)), Tokens: []uint32{3}, BlockSize: 1, Medium: Some("GPU")},
		}})
	f("map, keys out of order, str hash, fields skipped",
		map[string]any{"events": []any{
			map[string]any{"token_ids": []any{5, 6}, "block_size": 2, "type": "BlockStored", "block_hashes": []any{string(h32)},
				"parent_block_hash": nil, "lora_id": nil, "medium": nil, "lora_name": "a", "extra_keys": []any{nil},
				"kv_cache_spec_kind": "full_attention"},
			map[string]any{"type": "BlockRemoved", "block_hashes": []any{7}, "medium": "CPU"},
		}, "ts": 3.0, "data_parallel_rank": nil},
		Batch{TS: 3, Encoding: MapEncoding, Events: []Event{
			{Kind: BlockStored, Hashes: []Hash{hb}, Tokens: []uint32{5, 6}, BlockSize: 2, LoRAName: Some("a")},
			{Kind: BlockRemoved, Hashes: []Hash{IntHash(7)}, Medium: Some("CPU")},
		}})
}

// TestDecodeCopies: vLLM's offloading connector stores copies of blocks
// without token ids or parent, its block size several of the GPU's (or
// 0, as vLLM's snapshot tests write them), in both layouts.
func TestDecodeCopies(t *testing.T) {
	t.Parallel()
	h32 := bytes.Repeat([]byte{7}, 32)
	hb, _ := BytesHash(h32)
	for _, bs := range []int{0, 32} {
		want := Batch{TS: 1, Encoding: ArrayEncoding, Events: []Event{
			{Kind: BlockStored, Hashes: []Hash{hb}, Tokens: []uint32{}, BlockSize: bs, Medium: Some("CPU")}}}
		for _, v := range []any{
			[]any{1.0, []any{[]any{"BlockStored", []any{h32}, nil, []any{}, bs, nil, "CPU", nil}}},
			map[string]any{"ts": 1.0, "events": []any{map[string]any{"type": "BlockStored", "block_hashes": []any{h32},
				"parent_block_hash": nil, "token_ids": []any{}, "block_size": bs, "lora_id": nil, "medium": "CPU", "lora_name": nil}}},
		} {
			got, err := NewDecoder(DefaultLimits()).Decode(must(msgpack.Marshal(v)))
			if _, isMap := v.(map[string]any); isMap {
				want.Encoding = MapEncoding
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("block size %d: %+v %v, want %+v", bs, got, err, want)
			}
		}
	}
}

// TestDecodeExtraKeys: of extra_keys, the strings of the first block's
// entry are kept (vLLM's adapter name, multimodal identifiers, cache
// salt), at most maxExtra of at most maxString bytes; the other blocks'
// entries and anything not a string are skipped.
func TestDecodeExtraKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", maxString+1)
	for _, c := range []struct {
		name string
		keys any
		want []string
	}{
		{"adapter and salt", []any{[]any{"tuned", "salt-1"}, nil}, []string{"tuned", "salt-1"}},
		{"salt only, non-strings skipped", []any{[]any{[]any{"mm-id", 3}, 7, "salt-2"}}, []string{"salt-2"}},
		{"the first block's entry nil", []any{nil, []any{"x"}}, nil},
		{"a long string left out", []any{[]any{long, "ok"}}, []string{"ok"}},
		{"at most maxExtra", []any{[]any{"1", "2", "3", "4", "5", "6", "7", "8", "9"}}, []string{"1", "2", "3", "4", "5", "6", "7", "8"}},
		{"nil", nil, nil},
	} {
		payload := must(msgpack.Marshal(map[string]any{"ts": 1.0, "events": []any{map[string]any{"type": "BlockStored",
			"block_hashes": []any{1, 2}, "token_ids": []any{1, 2}, "block_size": 1, "extra_keys": c.keys}}}))
		b, err := NewDecoder(DefaultLimits()).Decode(payload)
		if err != nil || !reflect.DeepEqual(b.Events[0].Extra, c.want) {
			t.Errorf("%s: %q %v, want %q", c.name, b.Events[0].Extra, err, c.want)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	lim := DefaultLimits()
	lim.MaxEvents, lim.MaxHashes, lim.MaxTokens, lim.MaxPayload = 2, 3, 4, 2048
	f := func(name string, v any, reason string) {
		t.Helper()
		payload, ok := v.([]byte)
		if !ok {
			var err error
			if payload, err = msgpack.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		_, err := NewDecoder(lim).Decode(payload)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if got := Reason(err); got != reason {
			t.Fatalf("%s: reason %q (%v), want %q", name, got, err, reason)
		}
	}
	stored := func(hashes, toks int) []any {
		return []any{"BlockStored", make([]int, hashes), nil, make([]int, toks), 1}
	}
	f("oversize", bytes.Repeat([]byte{0xc0}, 2049), "oversize")
	f("too many events", []any{1, []any{[]any{"AllBlocksCleared"}, []any{"AllBlocksCleared"}, []any{"AllBlocksCleared"}}}, "over_limit")
	f("too many hashes", []any{1, []any{stored(4, 1)}}, "over_limit")
	f("too many tokens", []any{1, []any{stored(1, 5)}}, "over_limit")
	f("not msgpack", []byte{0xc1}, "malformed")
	f("empty", []byte{}, "malformed")
	f("a string", "hello", "malformed")
	f("one field", []any{1}, "malformed")
	f("trailing bytes", append(must(msgpack.Marshal([]any{1, []any{}})), 0), "malformed")
	f("negative token", []any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1}}}, "malformed")
	f("token over uint32", []any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{int64(1) << 32}, 1}}}, "malformed")
	f("33-byte hash", []any{1, []any{[]any{"BlockRemoved", []any{make([]byte, 33)}}}}, "malformed")
	f("float hash", []any{1, []any{[]any{"BlockRemoved", []any{1.5}}}}, "malformed")
	f("block size 0", []any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{1}, 0}}}, "malformed")
	f("map block size 0 with token ids", []any{1, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "token_ids": []any{1}, "block_size": 0}}}, "malformed")
	f("negative block size", []any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{}, -1}}}, "malformed")
	f("BlockStored array short", []any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{1}}}}, "malformed")
	f("map event without type", []any{1, []any{map[string]any{"block_hashes": []any{1}}}}, "malformed")
	f("map BlockStored without tokens", []any{1, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "block_size": 1}}}, "malformed")
	f("map batch without events", map[string]any{"ts": 1}, "malformed")
	f("nested too deep", []any{1, []any{}, nil, deep(20)}, "malformed")
	f("array length past the payload", []byte{0x94, 0x01, 0x90, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff}, "malformed")
	f("long tag", []any{1, []any{[]any{strings.Repeat("x", 1025)}}}, "malformed")
}

func deep(n int) any {
	var v any = 1
	for range n {
		v = []any{v}
	}
	return v
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestReasonOfWrapped(t *testing.T) {
	t.Parallel()
	if got := Reason(errors.Join(errors.New("x"), ErrOverLimit)); got != "over_limit" {
		t.Fatalf("Reason = %q", got)
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	h := IntHash(0x0102030405060708)
	if v, ok := h.Int(); !ok || v != 0x0102030405060708 || h.Bytes() != nil || h.String() != "#72623859790382856" {
		t.Fatalf("IntHash: %v %v %v %q", v, ok, h.Bytes(), h.String())
	}
	b, ok := BytesHash([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	if !ok || b == h {
		t.Fatal("an 8-byte bytes hash must not equal the int of the same bytes")
	}
	if _, ok := b.Int(); ok || b.String() != "0102030405060708" {
		t.Fatalf("BytesHash: %q", b.String())
	}
	if _, ok := BytesHash(make([]byte, 33)); ok {
		t.Fatal("33 bytes accepted")
	}
	// vLLM's int form of a digest: its bytes as a big-endian integer, the
	// low 64 bits.
	long, _ := BytesHash(append(bytes.Repeat([]byte{0xff}, 24), 1, 2, 3, 4, 5, 6, 7, 8))
	if got, ok := long.AsInt(); !ok || got != h {
		t.Fatalf("AsInt of a 32-byte digest: %v %v, want %v", got, ok, h)
	}
	if got, ok := b.AsInt(); !ok || got != h {
		t.Fatalf("AsInt of 8 bytes: %v %v, want %v", got, ok, h)
	}
	short, _ := BytesHash([]byte{1, 2})
	if got, ok := short.AsInt(); !ok || got != IntHash(0x0102) {
		t.Fatalf("AsInt of 2 bytes: %v %v", got, ok)
	}
	if _, ok := h.AsInt(); ok {
		t.Fatal("AsInt of an int hash: ok")
	}
}
