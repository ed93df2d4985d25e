package tokenizer

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// spWord appends the ids of a whole normalized text for SentencePiece-style
// BPE (no pre-tokenizer, or one that leaves whole texts: Gemma 3's Split on
// spaces runs after they became ▁). BPE over a 4 KB text is one heap of
// 4,000 symbols; but every symbol BPE makes is a vocab token's text, a
// substring of the text (spCutSafe), so no merge joins two characters
// that no vocab token holds side by side, and the text can be cut there,
// each piece encoded on its own, with the same result (TestSPCutExact).
// Where only a few tokens hold the pair (bridges: Gemma 3's '>▁</' holds
// '>' before ▁), the cut is made unless one of them lies across it.
//
// The pairs are looked up by class (spJoinClass: an ASCII byte, ▁, any
// other character), which is exact because a class pair counts as joined
// when any token holds any of its character pairs. Issue 34: cutting only
// before ▁ and around newlines (the first version) left Mistral at ~16
// and Gemma 3 at ~20 MB/s on prose; cutting at every pair no token joins
// (Mistral's 32K vocab joins few punctuation marks to letters: "▁int," is
// "▁int" and ",") took Mistral 2.8 and Gemma 3 1.8 times faster in the
// same run (BENCHMARKS.md has the numbers).
func (t *Tokenizer) spWord(dst []int32, s string) []int32 {
	if !t.spCut || len(s) < 2 {
		return t.spPiece(dst, s)
	}
	start := 0
	prev, w := spJoinClass(s)
	for b := w; b < len(s); {
		c, w := int(s[b]), 1 // spJoinClass inline for ASCII (pprof)
		if c >= utf8.RuneSelf {
			c, w = spJoinClass(s[b:])
		}
		p := prev*spJoinN + c
		prev = c
		if j := t.spJoin[p]; j == spNever || j == spBridged && !t.bridged(s, b, p) {
			dst = t.spPiece(dst, s[start:b])
			start = b
		}
		b += w
	}
	return t.spPiece(dst, s[start:])
}

// spJoinClass returns the class of the character s starts with and its
// width, as spMerge cuts characters: an ASCII byte is its own class,
// spMark is ▁, spOtherChar any other character (or an invalid byte, one
// byte wide).
func spJoinClass(s string) (int, int) {
	if s[0] < utf8.RuneSelf {
		return int(s[0]), 1
	}
	if strings.HasPrefix(s, spaceMark) {
		return spMark, len(spaceMark)
	}
	_, w := utf8.DecodeRuneInString(s)
	return spOtherChar, w
}

const (
	spOtherChar = spN     // spJoinClass of a character other than ASCII and ▁
	spJoinN     = spN + 1 // number of spJoinClass values
	maxBridges  = 8       // per class pair; more and the pair counts as joined
)

// spJoin values.
const (
	spNever   = uint8(iota) // no vocab token holds the pair
	spBridged               // only the tokens in bridges do
	spJoined                // many tokens do: never cut there
)

// spCutSafe reports whether every symbol BPE makes is vocab text, which
// spWord's cuts rely on: no merge takes a byte-fallback token (<0xXX>) or
// the unknown token, no unknown characters can fuse across a cut
// (fuse_unk without byte_fallback), and no character is dropped (neither
// byte_fallback nor unk_token), which would put its neighbours side by
// side (TestUnknownDropped).
func (t *Tokenizer) spCutSafe() bool {
	if !t.byteFallback && (t.unk < 0 || t.fuseUnk) {
		return false
	}
	odd := map[int32]bool{}
	if t.unk >= 0 {
		odd[t.unk] = true
	}
	if t.byteFallback {
		for _, id := range t.byteTok {
			odd[id] = true
		}
	}
	for _, s := range t.merges.slots {
		if k := s.key - 1; s.key != 0 && (odd[int32(k>>32)] || odd[int32(uint32(k))]) {
			return false
		}
	}
	return true
}

// spaceMark is SentencePiece's space, U+2581.
const spaceMark = "\u2581"

// bridge is a vocab token holding a spBridged class pair whose second
// character starts at byte k.
type bridge struct {
	tok string
	k   int
}

// buildSPJoin fills spJoin, bridges and bridgeList from the vocab (one
// pass to count each class pair's occurrences, one to list the bridges of
// the rare ones) and sets spCut. Bounded: at most maxBridges bridges per
// class pair, spJoinN² pairs.
func (t *Tokenizer) buildSPJoin() {
	pairs := func(tok string, f func(p, k int)) {
		prev := -1
		for k := 0; k < len(tok); {
			c, w := spJoinClass(tok[k:])
			if prev >= 0 {
				f(prev*spJoinN+c, k)
			}
			prev = c
			k += w
		}
	}
	counts := make([]int32, spJoinN*spJoinN)
	for tok := range t.vocab {
		pairs(tok, func(p, _ int) { counts[p]++ })
	}
	t.spJoin = make([]uint8, len(counts))
	byPair := map[int][]bridge{}
	for p, n := range counts {
		switch {
		case n == 0:
			t.spJoin[p] = spNever
		case n <= maxBridges:
			t.spJoin[p] = spBridged
			byPair[p] = nil
		default:
			t.spJoin[p] = spJoined
		}
	}
	for tok := range t.vocab {
		pairs(tok, func(p, k int) {
			if t.spJoin[p] == spBridged {
				byPair[p] = append(byPair[p], bridge{tok: tok, k: k})
			}
		})
	}
	t.bridges = newTable(len(byPair))
	for _, p := range slices.Sorted(maps.Keys(byPair)) {
		list := byPair[p]
		t.bridges.put(uint64(p), int32(len(t.bridgeList)), int32(len(list)))
		t.bridgeList = append(t.bridgeList, list...)
	}
	t.spCut = true
}

// bridged reports whether a bridge of class pair p lies across s[b:].
func (t *Tokenizer) bridged(s string, b, p int) bool {
	start, n, _ := t.bridges.get(uint64(p))
	for _, br := range t.bridgeList[start : start+n] {
		if b >= br.k && strings.HasPrefix(s[b-br.k:], br.tok) {
			return true
		}
	}
	return false
}
