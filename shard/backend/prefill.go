package backend

import (
	"sync/atomic"
	"time"
)

// PrefillModel is a backend's time to first token as a function of the
// prompt tokens it must compute (the uncached ones): TTFT ≈ Base +
// uncached / TokensPerSec, learned from observed TTFBs (ObserveTTFT).
type PrefillModel struct {
	Base         time.Duration // TTFT of a fully cached prompt
	TokensPerSec float64       // prefill throughput
	Samples      int64         // observations the fit rests on; 0: the defaults
}

// Defaults of the prefill model until a backend has been observed: a
// 13B model on an A100 (bench/vllmsim profile a100-13b: a 4,096-token miss
// 515 ms, a hit 24 ms). TODO(issue 11): the policy's fit replaces these
// once learned.
const (
	DefaultPrefillBase         = 20 * time.Millisecond
	DefaultPrefillTokensPerSec = 8000
)

// prefillState is a backend's learned prefill model and the tokens of
// its requests sent and not yet answered (their prefill still ahead of a
// new request). Any goroutine.
type prefillState struct {
	pending atomic.Int64 // uncached prompt tokens of requests before their first byte
}

// Prefill returns the backend's prefill model: learned, or the defaults.
// Any goroutine.
func (b *Backend) Prefill() PrefillModel {
	return PrefillModel{Base: DefaultPrefillBase, TokensPerSec: DefaultPrefillTokensPerSec}
}

// ObserveTTFT feeds the prefill model one observation: a request whose
// engine computed uncached prompt tokens (from the engine's own
// usage.prompt_tokens_details.cached_tokens when known, else the
// router's prediction) answered its first byte after ttfb. Any
// goroutine. TODO(issue 11): the robust fit.
func (b *Backend) ObserveTTFT(uncached int, ttfb time.Duration) {}

// PendingPrefill is the uncached prompt tokens of b's requests that were
// sent and have not had their first byte: prefill queued ahead of a new
// request. Any goroutine.
func (b *Backend) PendingPrefill() int64 { return b.prefill.pending.Load() }

// AddPendingPrefill adds n (negative: removes) to PendingPrefill. The
// router adds a request's predicted uncached tokens when it sends it and
// removes them on its first byte or failure, on every exit path. Any
// goroutine.
func (b *Backend) AddPendingPrefill(n int64) { b.prefill.pending.Add(n) }
