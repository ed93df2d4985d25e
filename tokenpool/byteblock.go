package tokenpool

import "github.com/saltus-lb/saltus/tree"

// Byte-block mode: what the router keys on when it has no token ids, either
// because no tokenizer is configured (the whole server runs in this mode,
// DESIGN.md: "still consistent, zero config") or because one request bailed
// out of stage 4 ([Result].Reason is not ReasonNone).
//
// The scheme: the rendered text (the concatenation of a request's segments)
// is read as pseudo-ids, pseudo-id k being bytes 4k..4k+3 as a little-endian
// uint32, and keyed with tree.BlockKeys in blocks of 16 pseudo-ids, so one
// block is 64 bytes of text and its hash is the hash of exactly those bytes.
// The seed is [ByteBlockSeed], not tree.ModelSeed, so byte-block chains do
// not share keys with token chains of the same model. As in token mode a
// key names its whole prefix, and the partial last block (under 64 bytes)
// has no key. Byte blocks do not match what an engine caches (its blocks
// are tokens), so they route the same text to the same place but predict
// cached tokens only roughly; they are keys like any other for the tree
// and gossip.

// ByteBlockBytes is the block size of byte-block mode, in bytes of rendered
// text: 16 pseudo-ids of 4 bytes.
const ByteBlockBytes = 64

// byteBlockDomain separates byte-block seeds from token seeds (an arbitrary
// odd constant; part of the wire format, like tree's).
const byteBlockDomain = 0xb7e1_5162_8aed_2a6b

// ByteBlockSeed returns the seed of a model's byte-block chains:
// tree.ModelSeed(model) XOR a fixed constant, so it differs from the model's
// token-mode seed. Any goroutine.
func ByteBlockSeed(model string) uint64 { return tree.ModelSeed(model) ^ byteBlockDomain }

// chunkIDs is how many pseudo-ids ByteBlockKeys hashes per tree.BlockKeys
// call: 4 KiB of text in a stack buffer; chunks chain through
// tree.ContinueSeed, so the keys do not depend on it.
const chunkIDs = 1024

// ByteBlockKeys appends to dst the byte-block keys of the concatenation of
// text (for a chat request: its rendered segments, in order), one per full
// 64-byte block, and returns the extended slice. The keys equal
// tree.BlockKeys(dst, seed, pseudo-ids, 16) over the packed text (see the
// scheme above). It allocates only if dst lacks capacity. Any goroutine.
func ByteBlockKeys(dst []uint64, seed uint64, text ...string) []uint64 {
	var buf [chunkIDs]int32
	n := 0 // pseudo-ids in buf
	var carry [4]byte
	nc := 0 // bytes in carry: a pseudo-id split across two strings
	for _, s := range text {
		if nc > 0 {
			k := copy(carry[nc:], s)
			nc += k
			s = s[k:]
			if nc < 4 {
				continue // s was shorter than the missing bytes
			}
			buf[n] = int32(uint32(carry[0]) | uint32(carry[1])<<8 | uint32(carry[2])<<16 | uint32(carry[3])<<24)
			n, nc = n+1, 0
			if n == chunkIDs {
				dst = flushChunk(dst, seed, &buf)
				seed, n = tree.ContinueSeed(dst[len(dst)-1]), 0
			}
		}
		for len(s) >= 4 {
			k := min(len(s)/4, chunkIDs-n)
			ids := buf[n : n+k]
			for i := range ids {
				j := 4 * i
				ids[i] = int32(uint32(s[j]) | uint32(s[j+1])<<8 | uint32(s[j+2])<<16 | uint32(s[j+3])<<24)
			}
			n += k
			s = s[4*k:]
			if n == chunkIDs {
				dst = flushChunk(dst, seed, &buf)
				seed, n = tree.ContinueSeed(dst[len(dst)-1]), 0
			}
		}
		nc = copy(carry[:], s)
	}
	// The partial block, and the bytes in carry, have no key.
	return tree.BlockKeys(dst, seed, buf[:n], ByteBlockBytes/4)
}

func flushChunk(dst []uint64, seed uint64, buf *[chunkIDs]int32) []uint64 {
	return tree.BlockKeys(dst, seed, buf[:], ByteBlockBytes/4)
}
