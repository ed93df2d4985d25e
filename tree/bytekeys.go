package tree

import (
	"math/bits"
	"unsafe"
)

// Byte-block mode: what the router keys on when it has no token ids, either
// because no tokenizer is configured (the whole server runs in this mode,
// DESIGN.md § Tokenizer: "still consistent, zero config") or because one request bailed
// out of stage 4 ([Result].Reason is not ReasonNone).
//
// The scheme: the rendered text (the concatenation of a request's segments)
// is read as pseudo-ids, pseudo-id k being bytes 4k..4k+3 as a little-endian
// uint32, and keyed with BlockKeys in blocks of 16 pseudo-ids, so one
// block is 64 bytes of text and its hash is the hash of exactly those bytes.
// The seed is [ByteBlockSeed], not ModelSeed, so byte-block chains do
// not share keys with token chains of the same model. As in token mode a
// key names its whole prefix, and the partial last block (under 64 bytes)
// has no key. Byte blocks do not match what an engine caches (its blocks
// are tokens), so they route the same text to the same place but predict
// cached tokens only roughly; they are keys like any other for the tree
// and gossip.

// ByteBlockBytes is the block size of byte-block mode, in bytes of rendered
// text: 16 pseudo-ids of 4 bytes.
const ByteBlockBytes = 64

// ByteBlockDomain separates byte-block seeds from token seeds (an arbitrary
// odd constant; part of the wire format, like ModelSeed's): XORed into a
// seed, it starts a byte-block chain.
const ByteBlockDomain = 0xb7e1_5162_8aed_2a6b

// ByteBlockSeed returns the seed of a model's byte-block chains:
// ModelSeed(model) XOR a fixed constant, so it differs from the model's
// token-mode seed. Any goroutine.
func ByteBlockSeed(model string) uint64 { return ModelSeed(model) ^ ByteBlockDomain }

// chunkIDs is how many pseudo-ids ByteBlockKeys hashes per BlockKeys
// call: 4 KiB of text in a stack buffer; chunks chain through
// ContinueSeed, so the keys do not depend on it.
const chunkIDs = 1024

// On a little-endian machine (keys.go's littleEndian) int32s in memory
// are their little-endian bytes, so text copied into an []int32 is
// already its pseudo-ids.

// ByteBlockKeys appends to dst the byte-block keys of the concatenation of
// text (for a chat request: its rendered segments, in order), one per full
// 64-byte block, and returns the extended slice. The keys equal
// BlockKeys(dst, seed, pseudo-ids, 16) over the packed text (see the
// scheme above). It allocates only if dst lacks capacity. Any goroutine.
func ByteBlockKeys(dst []uint64, seed uint64, text ...string) []uint64 {
	var h ByteHasher
	h.Init(dst, seed)
	for _, s := range text {
		h.Write(s)
	}
	return h.Finish()
}

// ByteHasher is ByteBlockKeys as a stream of strings, for callers whose
// text is not one slice (TailKeys). Its buffer is on the caller's stack.
type ByteHasher struct {
	buf  [chunkIDs]int32
	nb   int // bytes in buf
	seed uint64
	dst  []uint64
}

func (h *ByteHasher) Init(dst []uint64, seed uint64) { h.dst, h.seed, h.nb = dst, seed, 0 }

func (h *ByteHasher) Write(s string) {
	// The buffer's bytes, written by copy: packing text into pseudo-ids
	// is a memmove. Packing 4 bytes at a time in Go ran at ~2 GB/s on
	// 16 KiB here, this at ~8 GB/s (BenchmarkByteBlockKeys). Only this
	// hasher sees the view, during this call. On a big-endian machine
	// hashChunk swaps each id first (not run here: no such machine).
	b := unsafe.Slice((*byte)(unsafe.Pointer(&h.buf)), 4*chunkIDs)
	for len(s) > 0 {
		k := copy(b[h.nb:], s)
		h.nb += k
		s = s[k:]
		if h.nb == len(b) {
			h.dst = hashChunk(h.dst, h.seed, h.buf[:])
			h.seed, h.nb = ContinueSeed(h.dst[len(h.dst)-1]), 0
		}
	}
}

// finish returns dst with the keys of every full block written.
func (h *ByteHasher) Finish() []uint64 {
	// The partial block, and a partial pseudo-id, have no key.
	return hashChunk(h.dst, h.seed, h.buf[:h.nb/4])
}

func hashChunk(dst []uint64, seed uint64, ids []int32) []uint64 {
	if !littleEndian {
		for i, id := range ids {
			ids[i] = int32(bits.ReverseBytes32(uint32(id)))
		}
	}
	return BlockKeys(dst, seed, ids, ByteBlockBytes/4)
}
