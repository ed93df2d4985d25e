package tree

import (
	"encoding/binary"
	"hash/fnv"
	"math/bits"
	"slices"
	"unsafe"
)

// DefaultBlockSize is vLLM's default KV-cache block size in tokens.
const DefaultBlockSize = 16

// ModelSeed returns the seed for a model's key chains (FNV-1a of the name,
// finalized), so that two models never share a key even for identical ids.
func ModelSeed(model string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(model)) // never fails
	return fmix(h.Sum64())
}

// SaltSeed returns the seed of the key chains of a request with a cache
// salt, from its model's seed (ModelSeed or ByteBlockSeed): vLLM's
// cache_salt, which it mixes into a chain's first block so that salted
// prompts (a tenant's) share no prefix cache with the same prompt
// unsalted or under another salt; their keys share none either.
func SaltSeed(seed uint64, salt string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])         // never fails
	h.Write([]byte(salt)) // never fails
	return fmix(h.Sum64())
}

// Block keys are part of saltus's wire format (gossip carries them), so the
// functions below are fixed: changing them is a protocol change, and
// TestBlockKeysGolden pins their output.
//
// Key i is fmix(state_i) with state_i = state_{i-1}·M + hashBlock(block i)
// (mod 2^64) and state_{-1} = seed. fmix is a bijection, so key i is a
// function of key i-1 and block i alone: a chained hash, as DESIGN.md § Stage 5 asks,
// and a key names its whole prefix.
//
// Why not a library hash: xxh3 (github.com/zeebo/xxh3) chained through its
// seed took 2.5-3.1 µs for 4,096 tokens here (a 2 µs target): it is bound by
// multiplies, seven per 64-byte block, with one 128-bit multiply and a full
// avalanche on the serial chain. Here a block is hashed on its own (four
// 64×64→128 multiply-folds, xxh3's and wyhash's construction, independent of
// the parent so the CPU overlaps consecutive blocks); the serial chain is one
// 64-bit multiply-add, and the finalizer is off it.

// secret holds 16 pseudo-random 64-bit words (splitmix64 from a constant
// seed), fixed forever.
var secret = func() (s [16]uint64) {
	x := uint64(0x5a17_05_b10c_4e75)
	for i := range s {
		x += 0x9e3779b97f4a7c15
		s[i] = fmix(x)
	}
	return s
}()

// chainMul is M above: odd, so state·M is a bijection of the state.
const chainMul = 0x9e3779b97f4a7c15

// fmix is murmur3's 64-bit finalizer: a bijection in which every input bit
// affects every output bit.
func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func mulFold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// stripe folds 64 bytes given as eight little-endian words.
func stripe(w0, w1, w2, w3, w4, w5, w6, w7 uint64) uint64 {
	return mulFold(w0^secret[0], w1^secret[1]) + mulFold(w2^secret[2], w3^secret[3]) +
		mulFold(w4^secret[4], w5^secret[5]) + mulFold(w6^secret[6], w7^secret[7])
}

// hashBlock hashes one block's bytes (little-endian int32 ids). A 64-byte
// block (16 tokens) is one stripe; other sizes fold 64-byte stripes, then
// 8-byte words, then a last 4-byte word, into a length-seeded accumulator.
func hashBlock(b []byte) uint64 {
	le := binary.LittleEndian
	if len(b) == 64 {
		return stripe(le.Uint64(b), le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:]),
			le.Uint64(b[32:]), le.Uint64(b[40:]), le.Uint64(b[48:]), le.Uint64(b[56:]))
	}
	acc := fmix(uint64(len(b)))
	for ; len(b) >= 64; b = b[64:] {
		s := stripe(le.Uint64(b), le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:]),
			le.Uint64(b[32:]), le.Uint64(b[40:]), le.Uint64(b[48:]), le.Uint64(b[56:]))
		acc = mulFold(acc^secret[8], s^secret[9])
	}
	for ; len(b) >= 8; b = b[8:] {
		acc = mulFold(acc^secret[10], le.Uint64(b)^secret[11])
	}
	if len(b) >= 4 {
		acc = mulFold(acc^secret[12], uint64(le.Uint32(b))^secret[13])
	}
	return acc
}

// littleEndian reports whether int32 slices can be hashed in place: keys are
// defined over the little-endian encoding of token ids, so that routers on
// different architectures gossip the same keys.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// BlockKeys appends to dst one key per full block of blockSize tokens and
// returns the extended slice. Key i is a hash of key i-1 (for key 0: seed,
// see [ModelSeed]) and block i's token ids, so key i names the whole prefix
// of i+1 blocks. The trailing partial block has no key: vLLM caches whole
// blocks only.
//
// It allocates only if dst lacks capacity (and, for block sizes other than
// 16, one small buffer). Any goroutine.
func BlockKeys(dst []uint64, seed uint64, tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		panic("BUG: tree.BlockKeys called with blockSize <= 0")
	}
	n := len(tokens) / blockSize
	if n == 0 {
		return dst
	}
	if blockSize != 16 || !littleEndian {
		return blockKeysPortable(dst, seed, tokens[:n*blockSize], blockSize)
	}
	dst = slices.Grow(dst, n)
	out := dst[len(dst) : len(dst)+n]
	// The one zero-copy conversion of this package: the caller's ids read
	// as little-endian words, during this call only.
	p := unsafe.Pointer(unsafe.SliceData(tokens))
	st := seed
	k := &secret
	for i := range out {
		// stripe, written out: the compiler does not inline it, and
		// the call cost 10-15 % here.
		w := (*[8]uint64)(unsafe.Add(p, i*64))
		h := mulFold(w[0]^k[0], w[1]^k[1]) + mulFold(w[2]^k[2], w[3]^k[3]) +
			mulFold(w[4]^k[4], w[5]^k[5]) + mulFold(w[6]^k[6], w[7]^k[7])
		st = st*chainMul + h
		out[i] = fmix(st)
	}
	return dst[:len(dst)+n]
}

// blockKeysPortable is BlockKeys for any block size and byte order: it
// encodes each block before hashing it.
func blockKeysPortable(dst []uint64, st uint64, tokens []int32, blockSize int) []uint64 {
	buf := make([]byte, 0, blockSize*4)
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		buf = buf[:0]
		for _, t := range tokens[i : i+blockSize] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		st = st*chainMul + hashBlock(buf)
		dst = append(dst, fmix(st))
	}
	return dst
}

// ContinueSeed returns the seed that continues a chain after key:
// BlockKeys(dst, ContinueSeed(k), rest, n) appends the keys that one
// BlockKeys call over the whole sequence would have produced for the blocks
// of rest following the block keyed k. A caller can then hash a long
// sequence in bounded chunks (tokenpool's byte-block keys hash text through
// a fixed buffer this way). It inverts fmix, which is a bijection: the seed
// is the chain state of which k is the finalized form. Any goroutine.
func ContinueSeed(key uint64) uint64 {
	// x ^= x>>33 is its own inverse (33 ≥ 64/2); multiplies are undone by
	// the constants' inverses mod 2^64.
	x := key
	x ^= x >> 33
	x *= invMul2
	x ^= x >> 33
	x *= invMul1
	x ^= x >> 33
	return x
}

// invMul1 and invMul2 are the inverses mod 2^64 of fmix's multipliers.
var invMul1, invMul2 = inverse(0xff51afd7ed558ccd), inverse(0xc4ceb9fe1a85ec53)

// inverse returns the multiplicative inverse of an odd a mod 2^64 by
// Newton's iteration: a is its own inverse mod 8, and each step doubles the
// correct low bits (3, 6, 12, 24, 48, 96).
func inverse(a uint64) uint64 {
	x := a
	for range 5 {
		x *= 2 - a*x
	}
	return x
}
