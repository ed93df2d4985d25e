package tree

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBlockKeysGolden(t *testing.T) {
	t.Parallel()
	// These values are saltus's wire format: a change here breaks gossip
	// between routers of different versions. Change them only with a
	// protocol version bump.
	toks := make([]int32, 40)
	for i := range toks {
		toks[i] = int32(i * 977)
	}
	seed := ModelSeed("meta-llama/Meta-Llama-3-8B-Instruct")
	f := func(bs int, want ...uint64) {
		t.Helper()
		if got := BlockKeys(nil, seed, toks, bs); !slices.Equal(got, want) {
			t.Errorf("BlockKeys(bs=%d) = %#x, want %#x", bs, got, want)
		}
	}
	f(16, golden16...)
	f(7, golden7...)
	f(40, golden40...)
	f(41)
}

func TestBlockKeysPortableAgrees(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, bs := range []int{1, 2, 15, 16, 17, 32, 64} {
		toks := randTokens(r, 1000)
		fast := BlockKeys(nil, 42, toks, bs)
		slow := blockKeysPortable(nil, 42, toks[:len(toks)/bs*bs], bs)
		if !slices.Equal(fast, slow) {
			t.Fatalf("bs=%d: BlockKeys and the portable path disagree", bs)
		}
		if len(fast) != 1000/bs {
			t.Fatalf("bs=%d: %d keys, want %d", bs, len(fast), 1000/bs)
		}
	}
}

func TestBlockKeysChain(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	toks := randTokens(r, 16*20+5)
	all := BlockKeys(nil, 9, toks, 16)
	if len(all) != 20 {
		t.Fatalf("%d keys for 20 full blocks and a partial one", len(all))
	}
	// Prefixes of the tokens give prefixes of the keys.
	for k := 0; k <= 20; k++ {
		if got := BlockKeys(nil, 9, toks[:16*k+3], 16); !slices.Equal(got, all[:k]) {
			t.Fatalf("keys of %d blocks are not a prefix of the full chain", k)
		}
	}
	// dst is appended to.
	if got := BlockKeys([]uint64{7}, 9, toks, 16); got[0] != 7 || !slices.Equal(got[1:], all) {
		t.Fatal("BlockKeys does not append to dst")
	}
	// One changed token changes its block's key and every later one.
	mod := slices.Clone(toks)
	mod[16*7+3]++
	got := BlockKeys(nil, 9, mod, 16)
	for i := range got {
		if (got[i] == all[i]) != (i < 7) {
			t.Fatalf("after changing block 7, key %d equal=%v", i, got[i] == all[i])
		}
	}
	// Swapping two blocks changes the chain from the first swapped block.
	sw := slices.Clone(toks)
	copy(sw[16*2:16*3], toks[16*5:16*6])
	copy(sw[16*5:16*6], toks[16*2:16*3])
	if got := BlockKeys(nil, 9, sw, 16); got[1] != all[1] || got[2] == all[2] || got[19] == all[19] {
		t.Fatal("swapping blocks 2 and 5 did not change the chain from block 2 on")
	}
	// Another seed (model) shares no key.
	other := BlockKeys(nil, ModelSeed("other"), toks, 16)
	for i := range other {
		if slices.Contains(all, other[i]) {
			t.Fatalf("key %d shared between two seeds", i)
		}
	}
}

func TestBlockKeysDistribution(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	// No collisions among 200,000 keys of short, similar token runs.
	seen := make(map[uint64]bool, 200_000)
	toks := make([]int32, 16)
	for i := 0; i < 200_000; i++ {
		toks[i%16] = int32(i)
		for _, k := range BlockKeys(nil, 1, toks, 16) {
			if seen[k] {
				t.Fatalf("collision after %d keys", i)
			}
			seen[k] = true
		}
	}
	// Avalanche: flipping one input bit flips about half the key bits.
	for _, bs := range []int{16, 5} {
		flipped, trials := 0, 4000
		for i := 0; i < trials; i++ {
			toks := randTokens(r, bs)
			a := BlockKeys(nil, 3, toks, bs)[0]
			toks[r.IntN(bs)] ^= 1 << r.IntN(32)
			b := BlockKeys(nil, 3, toks, bs)[0]
			flipped += bits.OnesCount64(a ^ b)
		}
		if mean := float64(flipped) / float64(trials); mean < 30 || mean > 34 {
			t.Errorf("bs=%d: one flipped input bit flips %.2f key bits on average, want about 32", bs, mean)
		}
	}
}

// FuzzBlockKeys checks the fast path against the portable one and the
// prefix property for arbitrary ids and block sizes.
func FuzzBlockKeys(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), uint8(16), uint64(1))
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, seed uint64) {
		if bs == 0 {
			return
		}
		toks := make([]int32, len(raw)/4)
		for i := range toks {
			toks[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		got := BlockKeys(nil, seed, toks, int(bs))
		n := len(toks) / int(bs)
		if want := blockKeysPortable(nil, seed, toks[:n*int(bs)], int(bs)); len(got) != n || !slices.Equal(got, want) {
			t.Fatalf("BlockKeys = %x, portable %x", got, want)
		}
		if n > 0 {
			if pre := BlockKeys(nil, seed, toks[:(n-1)*int(bs)], int(bs)); !slices.Equal(pre, got[:n-1]) {
				t.Fatal("prefix property broken")
			}
		}
	})
}

// TestContinueSeed: hashing in chunks, each seeded by ContinueSeed of the
// previous chunk's last key, gives the one-call chain.
func TestContinueSeed(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	toks := randTokens(r, 16*37)
	seed := ModelSeed("m")
	all := BlockKeys(nil, seed, toks, 16)
	for _, chunk := range []int{1, 2, 5, 36} {
		var got []uint64
		s := seed
		for i := 0; i < len(toks); i += 16 * chunk {
			got = BlockKeys(got, s, toks[i:min(len(toks), i+16*chunk)], 16)
			s = ContinueSeed(got[len(got)-1])
		}
		if !slices.Equal(got, all) {
			t.Fatalf("chunks of %d blocks: chain differs from one call", chunk)
		}
	}
	for range 1000 {
		x := r.Uint64()
		if fmix(ContinueSeed(x)) != x || ContinueSeed(fmix(x)) != x {
			t.Fatalf("ContinueSeed does not invert fmix at %#x", x)
		}
	}
}

// TestSaltSeed: a salt makes another chain, one per salt and model, and
// is pinned (gossip carries the keys: peers must agree).
func TestSaltSeed(t *testing.T) {
	m := ModelSeed("llama3")
	a, b := SaltSeed(m, "tenant-a"), SaltSeed(m, "tenant-b")
	if a == m || b == m || a == b || SaltSeed(ModelSeed("other"), "tenant-a") == a || SaltSeed(m, "tenant-a") != a {
		t.Fatalf("salted seeds: %x %x from %x", a, b, m)
	}
	if a != 0xd307c45f82b63018 {
		t.Errorf("SaltSeed(ModelSeed(llama3), tenant-a) = %#x: a change of the key chains (a protocol change)", a)
	}
}
