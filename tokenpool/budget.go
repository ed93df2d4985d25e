package tokenpool

import "github.com/saltus-lb/saltus/tree"

// The token budget: how much tokenizer work one request may cause, so that
// one prompt cannot hold a worker, and the requests queued behind it, for
// long (issue 15: a 4 MB prompt of one repeated letter held its shard's
// worker for 3.7 s). A request whose text costs more than Config.TokenBudget
// is tokenized up to a cut and keyed as byte blocks after it: its keys are
// the token blocks of the text before the cut, then the byte blocks of the
// text from the cut on (TailKeys), chained to them.
//
// Cost is counted in bytes of text, from the text alone, so that the cut is
// the same on every replica and for every cache state: an ordinary byte
// costs 1; a byte in a run of at least longRun bytes of one class (letters
// and every non-ASCII byte, ASCII digits, ASCII whitespace, ASCII
// punctuation) costs longRunCost, because such a run is one pre-token piece
// of a byte-level BPE, merged with a heap at ~20x the cost per byte of prose
// (measured on Llama-3.1 here: 4 MiB of prose 90 ms, of one letter 1.6 s,
// of spaces 2.2 s; 64 KiB: 0.9, 12.8 and 18.3 ms). An encoder that runs BPE
// over its whole text (no pre-tokenizer, see wholeText) pays that on every
// byte, so there every byte costs longRunCost.
//
// The cut is at the last safe point at or before the first byte over the
// budget: a segment's start, or a space that follows a non-whitespace
// byte. The pre-tokenizers saltus supports end a piece there (a letter,
// digit or punctuation run stops at a space; Metaspace starts a word at
// one; not at a newline, which Llama-3's and Qwen's punctuation pieces
// take in: ">\n\n" is one token), so the ids of the text before the cut
// are exactly the first ids of the whole text's (TestCutExact, FuzzCut),
// and the cut depends only on the text before it: a conversation that
// grows keeps its keys up to the cut.
//
// The segment cache remembers each cached segment's cost, so the scan
// (~0.4 GB/s on a loaded machine) runs over new text only: a cached
// 200 KiB prompt costs 4.4 µs, not 0.9 ms (BenchmarkCutAt).
const (
	longRun     = 64
	longRunCost = 32
)

// byteClass maps a byte to its run class: 1 letters and non-ASCII, 2
// digits, 3 whitespace, 4 other ASCII.
var byteClass = func() (c [256]uint8) {
	for i := range c {
		switch b := byte(i); {
		case b >= 0x80, 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z':
			c[i] = 1
		case '0' <= b && b <= '9':
			c[i] = 2
		case b == ' ', b == '\t', b == '\n', b == '\r', b == '\v', b == '\f':
			c[i] = 3
		default:
			c[i] = 4
		}
	}
	return c
}()

// wholeText is implemented by an encoder that can say whether it runs BPE
// over its whole text at once (*tokenizer.Tokenizer without a pre-tokenizer,
// such as Mistral-7B's tokenizer.json).
type wholeText interface{ WholeTextBPE() bool }

// Cut says where a request's token-keyed prefix ends. Seg is the segment
// the cut is in and Off its byte offset there: segments before Seg and
// segs[Seg][:Off] were tokenized; segs[Seg][Off:] and the segments after
// it are keyed as byte blocks.
type Cut struct {
	Seg, Off int
	// On is false when the whole request fit the budget.
	On bool
}

// cutAt returns where segs cross budget, at the cost described above
// (every byte longRunCost if whole). It reads at most the bytes up to the
// cut, and none of a segment whose cost cache holds (nil: none): it
// records there the cost of every cached segment it counts in full, so
// that a long conversation's earlier turns are counted once. Loop only
// with a cache.
func cutAt(segs []string, budget int, whole bool, cache *SegmentCache) Cut {
	total := 0
	for _, s := range segs {
		total += len(s)
	}
	if total*longRunCost <= budget {
		return Cut{} // fits whatever the text: no scan
	}
	c := newCoster(budget, whole)
	for k, s := range segs {
		var e *entry
		if cache != nil {
			e = cache.peek(s)
		}
		if e != nil && e.work > 0 && c.work+e.work-1 <= c.budget {
			c.work += e.work - 1
			continue
		}
		before := c.work
		if off, over := c.add(s); over {
			return Cut{Seg: k, Off: off, On: true}
		}
		if e != nil {
			e.work = c.work - before + 1
		}
	}
	return Cut{}
}

// newCoster returns a coster of budget for an encoder (whole: see
// wholeText).
func newCoster(budget int, whole bool) coster {
	if whole {
		return coster{budget: budget / longRunCost}
	}
	return coster{budget: budget, runs: true}
}

// coster counts the cost of text, segment by segment, against a budget.
type coster struct {
	work, budget int
	runs         bool // bytes of long runs cost longRunCost
}

// add counts s. Once the work exceeds the budget it stops and returns
// over and the last safe cut in s at or before the byte that crossed.
func (c *coster) add(s string) (off int, over bool) {
	if !c.runs {
		// Every byte costs 1: the crossing is a subtraction.
		if c.work+len(s) <= c.budget {
			c.work += len(s)
			return 0, false
		}
		i := c.budget - c.work // the byte that crosses
		c.work = c.budget + 1
		return lastSafe(s, i), true
	}
	work, budget := c.work, c.budget
	safe := 0     // the last safe cut in s
	var cls uint8 // the class of the current run, that of s[i-1]
	run := 0      // its length so far
	for i := 0; i < len(s); i++ {
		b := byteClass[s[i]]
		if b != cls {
			if s[i] == ' ' && i > 0 {
				safe = i // a space after a byte of another class
			}
			cls, run = b, 0
		}
		run++
		switch {
		case run < longRun:
			work++
		case run == longRun:
			// The run turns out long: its first bytes cost as
			// much as the rest.
			work += longRunCost*longRun - (longRun - 1)
		default:
			work += longRunCost
		}
		if work > budget {
			c.work = work
			return safe, true
		}
	}
	c.work = work
	return 0, false
}

// lastSafe returns the last safe cut in s at or before i: a space after a
// byte that is not whitespace, or 0.
func lastSafe(s string, i int) int {
	for i > 0 {
		if s[i] == ' ' && byteClass[s[i-1]] != 3 {
			return i
		}
		i--
	}
	return 0
}

// TailKeys appends to dst the keys of a request cut by the budget (r.Cut.On
// with r.Reason ReasonNone): the token keys, tree.BlockKeys(dst, seed,
// r.IDs, blockSize), then byte-block keys (see tree.ByteBlockKeys) of the text
// from the cut on, segs[r.Cut.Seg][r.Cut.Off:] and the segments after it,
// chained to the token keys and to the ids of their partial last block, so
// that every key still names its whole prefix. It returns the extended
// slice and the number of token keys. Any goroutine.
func TailKeys(dst []uint64, seed uint64, r *Result, segs []string, blockSize int) ([]uint64, int) {
	n0 := len(dst)
	dst = tree.BlockKeys(dst, seed, r.IDs, blockSize)
	nTok := len(dst) - n0
	st := seed
	if nTok > 0 {
		st = tree.ContinueSeed(dst[len(dst)-1])
	}
	// A distinct chain from here on: the tail's first key differs from
	// any token key of the same prefix.
	st ^= tree.ByteBlockDomain
	if rest := r.IDs[nTok*blockSize:]; len(rest) > 0 {
		var one [1]uint64
		st = tree.ContinueSeed(tree.BlockKeys(one[:0], st, rest, len(rest))[0])
	}
	tail := segs[r.Cut.Seg:]
	first := tail[0][r.Cut.Off:]
	// tree.ByteBlockKeys over first, then the rest, without building a slice.
	dst = byteBlockKeys2(dst, st, first, tail[1:])
	return dst, nTok
}

// byteBlockKeys2 is tree.ByteBlockKeys(dst, seed, append([]string{first},
// rest...)...) without the allocation.
func byteBlockKeys2(dst []uint64, seed uint64, first string, rest []string) []uint64 {
	var h tree.ByteHasher
	h.Init(dst, seed)
	h.Write(first)
	for _, s := range rest {
		h.Write(s)
	}
	return h.Finish()
}
