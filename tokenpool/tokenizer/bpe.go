package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// bpe appends the ids of one pre-tokenized piece (raw bytes) to dst.
// Merges apply lowest rank first, leftmost among equals, as HuggingFace's
// BPE does. Short pieces use a linear scan per merge; long ones a heap, so
// a 100 KB run of one letter is O(n log n), not quadratic.
func (t *Tokenizer) bpe(dst []int32, piece string) []int32 {
	if piece == "" {
		return dst
	}
	if id, ok := t.token(piece); ok && (t.ignore || len(piece) == 1 || t.whole(id)) {
		return append(dst, id)
	}
	return t.bpeMerge(dst, piece)
}

// whole reports whether BPE of token id's own text gives id (see
// selfMerging): a piece that is such a token needs no merging.
func (t *Tokenizer) whole(id int32) bool {
	return uint32(id) < uint32(len(t.selfMerging))*64 && t.selfMerging[id>>6]&(1<<(id&63)) != 0
}

// markSelfMerging computes selfMerging at load: for each token of the
// vocab, whether BPE of its text ends in that token, which is how most
// words of a large vocabulary encode. The merge path costs a hash lookup
// per pair of symbols, each a likely cache miss in a table of 500K merges
// (pprof, Gemma 3 prose); one lookup of the whole piece replaces them.
// Exact by construction: the same functions compute the flag.
func (t *Tokenizer) markSelfMerging() {
	maxID := int32(-1)
	for _, id := range t.vocab {
		maxID = max(maxID, id)
	}
	bits := make([]uint64, (int(maxID)+64)/64)
	var buf []int32
	for b, id := range t.vocab {
		if id < 0 || len(b) < 2 {
			continue
		}
		if t.byteLevel {
			buf = t.bpeMerge(buf[:0], b)
		} else {
			buf = t.spMerge(buf[:0], b)
		}
		if len(buf) == 1 && buf[0] == id {
			bits[id>>6] |= 1 << (id & 63)
		}
	}
	t.selfMerging = bits
}

// bpeMerge is bpe without the whole-piece lookup.
func (t *Tokenizer) bpeMerge(dst []int32, piece string) []int32 {
	var buf [48]int32
	ids := buf[:0]
	if len(piece) > len(buf) {
		ids = make([]int32, 0, len(piece))
	}
	for i := 0; i < len(piece); i++ {
		ids = append(ids, t.byteID[piece[i]])
	}
	if len(ids) <= 48 {
		return t.mergeScan(dst, ids, piece, nil)
	}
	return t.mergeHeap(dst, ids)
}

// spPiece runs SentencePiece-style BPE over s: one symbol per character, a
// character outside the vocab becomes its UTF-8 bytes' <0xXX> tokens
// (byte_fallback) or the unknown token (fused with a preceding one under
// fuse_unk).
func (t *Tokenizer) spPiece(dst []int32, s string) []int32 {
	// One ASCII character, a third of the pieces spWord cuts from Gemma 3
	// prose: its token, which selfMerging does not mark (one byte).
	if len(s) == 1 && s[0] < utf8.RuneSelf && t.spChar[s[0]] >= 0 {
		return append(dst, t.spChar[s[0]])
	}
	if id, ok := t.token(s); ok && t.whole(id) {
		return append(dst, id)
	}
	return t.spMerge(dst, s)
}

// spMerge is spPiece without the whole-piece lookup.
func (t *Tokenizer) spMerge(dst []int32, s string) []int32 {
	var buf [48]int32
	var cbuf [48]uint8 // spClass of each symbol, while they fit
	ids := buf[:0]
	if len(s) > len(buf) {
		ids = make([]int32, 0, len(s))
	}
	lastUnk := false
	for i := 0; i < len(s); {
		// ASCII and ▁, most of the text, by index (spChar); the rest
		// through the vocab.
		c, w := uint8(spOther), 1
		if s[i] < utf8.RuneSelf {
			c = s[i]
		} else if strings.HasPrefix(s[i:], spaceMark) {
			c, w = spMark, len(spaceMark)
		} else {
			_, w = utf8.DecodeRuneInString(s[i:])
		}
		if c != spOther && t.spChar[c] >= 0 {
			if len(ids) < len(cbuf) {
				cbuf[len(ids)] = c
			}
			ids = append(ids, t.spChar[c])
			lastUnk = false
		} else if id, ok := t.token(s[i : i+w]); ok {
			if len(ids) < len(cbuf) {
				cbuf[len(ids)] = spOther
			}
			ids = append(ids, id)
			lastUnk = false
		} else if t.byteFallback {
			for k := i; k < i+w; k++ {
				if len(ids) < len(cbuf) {
					cbuf[len(ids)] = spOther
				}
				ids = append(ids, t.byteTok[s[k]])
			}
			lastUnk = false
		} else if t.unk >= 0 && !(t.fuseUnk && lastUnk) {
			if len(ids) < len(cbuf) {
				cbuf[len(ids)] = spOther
			}
			ids = append(ids, t.unk)
			lastUnk = true
		}
		i += w
	}
	if len(ids) <= 48 {
		return t.mergeScan(dst, ids, "", cbuf[:len(ids)])
	}
	return t.mergeHeap(dst, ids)
}

// spClass indexes spChar and spPair: an ASCII byte, spMark for ▁, spOther
// for any other symbol.
const (
	spMark  = 128
	spOther = 255
	spN     = 129
)

// buildSPPairs fills spChar and spPair for SentencePiece-style models: the
// first pass of spMerge over ASCII and ▁ (most of a text) then looks up
// pairs in 133 KB that stay in cache, not in the merge table (16 MB for
// Gemma 3's 515K merges; pprof: its lookups were the largest cost).
func (t *Tokenizer) buildSPPairs() {
	for c := range t.spChar {
		b := string([]byte{byte(c)})
		if c == spMark {
			b = spaceMark
		}
		id, ok := t.vocab[b]
		if !ok {
			id = -1
		}
		t.spChar[c] = id
	}
	t.spPair = make([]merge, spN*spN)
	for a := range spN {
		for b := range spN {
			m, ok := merge{rank: -1}, false
			if t.spChar[a] >= 0 && t.spChar[b] >= 0 {
				if m, ok = t.lookup(t.spChar[a], t.spChar[b]); !ok {
					m.rank = -1
				}
			}
			t.spPair[a*spN+b] = m
		}
	}
}

func (t *Tokenizer) lookup(a, b int32) (merge, bool) {
	rank, id, ok := t.merges.get(uint64(uint32(a))<<32 | uint64(uint32(b)))
	return merge{rank: rank, id: id}, ok
}

// mergeScan keeps each adjacent pair's merge (rank -1: none) and, after a
// merge, looks up only the two pairs it changed: O(n) map lookups and an
// O(n) scan per merge, for n ≤ 48 (clobbering ids). bytes: the piece when
// ids are its bytes' ids (byte-level), whose pairs' merges bytePair holds.
//
// cls: for SentencePiece-style models, the spClass of each symbol, whose
// pairs' merges spPair holds.
func (t *Tokenizer) mergeScan(dst, ids []int32, bytes string, cls []uint8) []int32 {
	if len(ids) < 2 {
		// None: spWord dropped every character (outside the vocab, no
		// byte_fallback or unk_token), as HuggingFace does.
		return append(dst, ids...)
	}
	var rbuf, nbuf [48]int32
	rank, next := rbuf[:len(ids)-1:len(ids)-1], nbuf[:len(ids)-1:len(ids)-1]
	pair := func(i int) {
		if m, ok := t.lookup(ids[i], ids[i+1]); ok {
			rank[i], next[i] = m.rank, m.id
		} else {
			rank[i] = -1
		}
	}
	switch {
	case bytes != "":
		for i := range rank {
			m := &t.bytePair[uint16(bytes[i])<<8|uint16(bytes[i+1])]
			rank[i], next[i] = m.rank, m.id
		}
	case cls != nil:
		for i := range rank {
			if a, b := cls[i], cls[i+1]; a != spOther && b != spOther {
				m := &t.spPair[int(a)*spN+int(b)]
				rank[i], next[i] = m.rank, m.id
			} else {
				pair(i)
			}
		}
	default:
		for i := range rank {
			pair(i)
		}
	}
	for len(ids) > 1 {
		best := -1
		for i, r := range rank {
			if r >= 0 && (best < 0 || r < rank[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		ids[best] = next[best]
		ids = append(ids[:best+1], ids[best+2:]...)
		rank = append(rank[:best], rank[best+1:]...)
		next = append(next[:best], next[best+1:]...)
		if best < len(rank) {
			pair(best)
		}
		if best > 0 {
			pair(best - 1)
		}
	}
	return append(dst, ids...)
}

type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	dead       bool
}

type candidate struct {
	rank, pos, id int32
}

func less(a, b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

type minHeap []candidate

func (h *minHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(s[i], s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *minHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && less(s[l], s[m]) {
			m = l
		}
		if r < n && less(s[r], s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

func (t *Tokenizer) mergeHeap(dst, ids []int32) []int32 {
	syms := make([]symbol, len(ids))
	h := make(minHeap, 0, len(ids))
	for i := range syms {
		syms[i] = symbol{id: ids[i], prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := t.lookup(syms[i].id, syms[i+1].id); ok {
			h.push(candidate{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	for len(h) > 0 {
		c := h.pop()
		s := &syms[c.pos]
		if s.dead || s.next < 0 {
			continue
		}
		r := &syms[s.next]
		if m, ok := t.lookup(s.id, r.id); !ok || m.id != c.id {
			continue // stale: a neighbour merged since
		}
		s.id = c.id
		r.dead = true
		s.next = r.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			if m, ok := t.lookup(syms[s.prev].id, s.id); ok {
				h.push(candidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := t.lookup(s.id, syms[s.next].id); ok {
				h.push(candidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}
