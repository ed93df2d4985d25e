package policy

import (
	"errors"
	"fmt"
	"math"
)

// Config holds the decision's knobs, read-only while deciding: the
// caller keeps one per configuration and swaps it whole to retune.
// Validate checks it.
type Config struct {
	Kind          Kind
	LoadFactor    float64 // ranvier only: the multiple of the median in-flight count that diverts
	LoadFloor     int64   // ranvier and prefix: the in-flight count below which nothing diverts or queues
	MaxCandidates int     // the most backends a Decision lists (Backend and its retries)
	// Prefix only (cost.go): tokens per block, the in-flight count over
	// which a backend queues, the queue wait (seconds) over which it is
	// queueing.
	BlockSize   int
	Concurrency int64
	QueueWait   float64
	// Prefix only (cost.go): the prompt tokens one request in flight
	// costs, the bounded load's slack, the engines' KV capacity in tokens
	// (0: unknown).
	LoadTokens, LoadSlack, KVTokens float64
	// Bridge is how long, in the tree's clock (nanoseconds), a learned
	// guess of an evented backend counts without its engine's word
	// (truth.go).
	Bridge int64
}

// Validate reports every knob of p out of its range, each error naming
// the field (as shard.Config names it too). BlockSize and Bridge are
// checked where they are set (shard.Config: the tree's block size, the
// KV events' bridge). Any goroutine.
func (p Config) Validate() error {
	var errs []error
	if int(p.Kind) >= len(names) {
		errs = append(errs, fmt.Errorf("policy: Kind %d is not a policy", p.Kind))
	}
	if !(p.LoadFactor >= 1) || math.IsInf(p.LoadFactor, 0) { // also rejects NaN
		errs = append(errs, fmt.Errorf("policy: LoadFactor must be a finite number of at least 1, got %g", p.LoadFactor))
	}
	if p.LoadFloor < 0 {
		errs = append(errs, fmt.Errorf("policy: LoadFloor must not be negative, got %d", p.LoadFloor))
	}
	if p.MaxCandidates < 1 {
		errs = append(errs, fmt.Errorf("policy: MaxCandidates must be at least 1, got %d", p.MaxCandidates))
	}
	if p.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("policy: Concurrency must be at least 1, got %d", p.Concurrency))
	}
	if !(p.QueueWait > 0) { // also rejects NaN
		errs = append(errs, fmt.Errorf("policy: QueueWait must be positive, got %gs", p.QueueWait))
	}
	if !(p.LoadSlack >= 0) || math.IsInf(p.LoadSlack, 0) { // also rejects NaN
		errs = append(errs, fmt.Errorf("policy: LoadSlack must be a finite number of at least 0, got %g", p.LoadSlack))
	}
	if !(p.LoadTokens >= 0) {
		errs = append(errs, fmt.Errorf("policy: LoadTokens must not be negative, got %.0f", p.LoadTokens))
	}
	if !(p.KVTokens >= 0) {
		errs = append(errs, fmt.Errorf("policy: KVTokens must not be negative (0 = unknown), got %.0f", p.KVTokens))
	}
	return errors.Join(errs...)
}
