package tree

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// packRef is the scheme's definition, written plainly: the whole text as
// little-endian pseudo-ids, keyed in one BlockKeys call.
func packRef(seed uint64, text string) []uint64 {
	b := []byte(text)
	ids := make([]int32, len(b)/4)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return BlockKeys(nil, seed, ids, 16)
}

func TestByteBlockKeysMatchesDefinition(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	seed := ByteBlockSeed("m")
	for _, n := range []int{0, 3, 63, 64, 65, 127, 128, 4095, 4096, 4097, 8192 + 70, 20000} {
		text := randText(r, n)
		want := packRef(seed, text)
		if len(want) != n/64 {
			t.Fatalf("n=%d: reference gave %d keys", n, len(want))
		}
		if got := ByteBlockKeys(nil, seed, text); !slices.Equal(got, want) {
			t.Fatalf("n=%d: one string: keys differ from the definition", n)
		}
		// The same text in random pieces, some empty or shorter than a
		// pseudo-id, gives the same keys.
		for range 20 {
			var segs []string
			for rest := text; len(rest) > 0; {
				k := min(len(rest), r.IntN(9)) // many tiny pieces
				if r.IntN(4) == 0 {
					k = min(len(rest), r.IntN(5000))
				}
				segs = append(segs, rest[:k])
				rest = rest[k:]
			}
			if got := ByteBlockKeys([]uint64{42}, seed, segs...); got[0] != 42 || !slices.Equal(got[1:], want) {
				t.Fatalf("n=%d in %d pieces: keys differ from the definition", n, len(segs))
			}
		}
	}
}

func TestByteBlockKeysProperties(t *testing.T) {
	t.Parallel()
	m := "meta-llama/Meta-Llama-3-8B-Instruct"
	if ByteBlockSeed(m) == ModelSeed(m) {
		t.Fatal("byte-block seed equals the token seed")
	}
	seed := ByteBlockSeed(m)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	all := ByteBlockKeys(nil, seed, text)
	for k := 0; k*64 <= len(text); k++ {
		// A prefix of the text gives a prefix of the keys; the partial
		// last block has none.
		if got := ByteBlockKeys(nil, seed, text[:k*64+min(63, len(text)-k*64)]); !slices.Equal(got, all[:k]) {
			t.Fatalf("prefix of %d blocks and a partial one: not a prefix of the keys", k)
		}
	}
	if slices.Equal(ByteBlockKeys(nil, ByteBlockSeed("other"), text), all) {
		t.Fatal("two models share byte-block keys")
	}
	// Wire format: these values are pinned like tree's golden keys.
	golden := ByteBlockKeys(nil, ByteBlockSeed("m"), strings.Repeat("a", 64), strings.Repeat("b", 70))
	want := []uint64{0xa595e5dd1e87aea5, 0x25c1b28ecb162ce2}
	if !slices.Equal(golden, want) {
		t.Fatalf("golden byte-block keys = %#x, want %#x", golden, want)
	}
}

func randText(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// FuzzByteBlockKeys: any text cut anywhere gives the definition's keys.
func FuzzByteBlockKeys(f *testing.F) {
	f.Add(strings.Repeat("hello, world ", 30), []byte{1, 2, 3, 200})
	f.Add("", []byte{})
	f.Fuzz(func(t *testing.T, text string, cuts []byte) {
		seed := ByteBlockSeed("fuzz")
		want := packRef(seed, text)
		var segs []string
		rest := text
		for _, c := range cuts {
			k := min(len(rest), int(c))
			segs = append(segs, rest[:k])
			rest = rest[k:]
		}
		segs = append(segs, rest)
		if got := ByteBlockKeys(nil, seed, segs...); !slices.Equal(got, want) {
			t.Fatalf("%d bytes in %d pieces: keys differ from the definition", len(text), len(segs))
		}
	})
}
