package backend

import (
	"sync/atomic"
	"time"
)

// Decoding requests (issue 31): when each of the router's requests
// decoding at a backend is expected to end, so that the prefix policy
// prices the wait for a running slot longer than an average answer's
// time says when the requests holding the slots end later
// (policy/cost.go: slotWait). An engine that draws the long answers frees its slots
// late, which a running average learns only after they ended: on the
// Mooncake conversation trace at ×16 the slowest first tokens waited at
// such an engine, its estimates behind its queue by a median factor of
// 1.28 (docs/BENCHMARKS.md).
//
// A streamed request is tracked from its first event (its prefill is
// over, its slot held) until its answer ends: Track stores its expected
// end in a free cell of a fixed table, Untrack clears it. The expected
// end is the first event's time plus its expected output tokens (its
// max_tokens when it asks for ignore_eos, else the backend's mean
// answer within its max_tokens: ExpectedTokens) times the backend's
// learned time per output token (TokenTime). Requests in their prefill,
// answers read whole and other routers' requests are not tracked: the
// policy prices their ends as before, spread over a whole service time.
//
// Lock-free: the loops track and clear cells with atomics (R2: no lock
// on a loop), and a decision reads the table only when the backend's
// slots are full. The table holds decodingCap requests; beyond that a
// request is not tracked (counted by the caller) and is priced as an
// untracked one.

// decodingCap bounds the requests tracked per backend: vLLM runs at most
// --max-num-seqs (256 by default) at once.
const decodingCap = 512

// decodeWeight is the weight of a new sample in TokenTime's and
// meanTokens' running averages.
const decodeWeight = 0.05

// decodingState is a backend's decoding requests and its learned decode
// speed.
type decodingState struct {
	cells atomic.Pointer[[decodingCap]atomic.Int64] // expected ends, unix nanoseconds; 0: free. Made at the first Track.
	hi    atomic.Int32                              // one past the highest cell ever taken: Remaining's scan bound
	n     atomic.Int32                              // cells taken
	token atomic.Int64                              // TokenTime, nanoseconds per output token; 0: not learned
	mean  atomic.Int64                              // mean completion tokens of 2xx streamed answers, ×16; 0: not learned
}

// Track records a request decoding at b until end (unix nanoseconds) and
// returns its cell for Untrack, or -1 when the table is full (the
// request is not tracked). Any goroutine; Loop only as a caller's hook.
func (b *Backend) Track(end int64) int {
	d := &b.decoding
	cells := d.cells.Load()
	if cells == nil {
		d.cells.CompareAndSwap(nil, new([decodingCap]atomic.Int64))
		cells = d.cells.Load()
	}
	end = max(end, 1) // 0 marks a free cell
	for i := range cells {
		if cells[i].Load() == 0 && cells[i].CompareAndSwap(0, end) {
			d.n.Add(1)
			for {
				h := d.hi.Load()
				if int32(i) < h || d.hi.CompareAndSwap(h, int32(i)+1) {
					break
				}
			}
			return i
		}
	}
	return -1
}

// Untrack clears cell i, which Track returned (-1: nothing). Any
// goroutine.
func (b *Backend) Untrack(i int) {
	cells := b.decoding.cells.Load()
	if i < 0 || cells == nil || i >= len(cells) {
		return
	}
	if cells[i].Swap(0) != 0 {
		b.decoding.n.Add(-1)
	}
}

// Decoding returns how many requests are tracked decoding at b. Any
// goroutine.
func (b *Backend) Decoding() int { return int(b.decoding.n.Load()) }

// Remaining appends to dst, in seconds, how long each request tracked at
// b is expected to decode from now (0 for one past its expected end).
// Any goroutine.
func (b *Backend) Remaining(now int64, dst []float64) []float64 {
	cells := b.decoding.cells.Load()
	if cells == nil || b.decoding.n.Load() == 0 {
		return dst
	}
	hi := min(int(b.decoding.hi.Load()), len(cells))
	for i := range cells[:hi] {
		if e := cells[i].Load(); e != 0 {
			dst = append(dst, float64(max(e-now, 0))/1e9)
		}
	}
	return dst
}

// TokenTime returns b's learned time per output token of its streamed
// answers (their decode: last byte less first event, over their
// completion tokens but the first), 0 until learned. Any goroutine.
func (b *Backend) TokenTime() time.Duration { return time.Duration(b.decoding.token.Load()) }

// ObserveDecode feeds TokenTime and the mean answer length with one 2xx
// streamed answer: completion tokens, and how long from its first event
// to its last byte. Any goroutine.
func (b *Backend) ObserveDecode(completion int, decode time.Duration) {
	if completion <= 0 {
		return
	}
	ewma(&b.decoding.mean, int64(completion)*16, decodeWeight)
	if completion > 1 && decode > 0 {
		ewma(&b.decoding.token, int64(decode)/int64(completion-1), decodeWeight)
	}
}

// ExpectedTokens is how many tokens a request is expected to generate at
// b: its maxTokens when it asks for ignore_eos (the engine then stops
// there), else b's mean answer, within maxTokens when given (> 0); 0 when
// neither tells. Any goroutine.
func (b *Backend) ExpectedTokens(maxTokens int64, ignoreEOS bool) int64 {
	if ignoreEOS && maxTokens > 0 {
		return maxTokens
	}
	mean := b.decoding.mean.Load() / 16
	if mean <= 0 {
		return 0
	}
	if maxTokens > 0 {
		return min(mean, maxTokens)
	}
	return mean
}

// ewma moves the running average at a toward sample by weight (the
// first sample sets it; a non-positive one is ignored). Lock-free:
// concurrent samples each land (compare-and-swap).
func ewma(a *atomic.Int64, sample int64, weight float64) {
	if sample <= 0 {
		return
	}
	for {
		old := a.Load()
		next := sample
		if old > 0 {
			next = old + int64(weight*float64(sample-old))
		}
		if a.CompareAndSwap(old, next) {
			return
		}
	}
}
