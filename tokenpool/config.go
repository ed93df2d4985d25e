package tokenpool

import (
	"errors"
	"fmt"
)

// Config sizes a Pool. It is immutable after New; a reload builds a new
// pool.
type Config struct {
	// CacheBytes bounds each shard's segment cache (text + ids + overhead).
	// Default 64 MiB per shard.
	CacheBytes int
	// MaxSegmentBytes: longer segments are tokenized but not cached.
	// Default 256 KiB (see DefaultMaxSegmentBytes).
	MaxSegmentBytes int
	// RingSize is the capacity of one single-producer single-consumer ring,
	// in jobs; each worker has one ring per producer shard, so a shard can
	// queue at most RingSize jobs at each worker. A power of two. Default
	// 256. Memory: shards² rings of RingSize pointers (64 shards: 8 MiB).
	// The bound is per ring rather than per worker so that every ring has
	// a single producer and needs no lock.
	RingSize int
	// MaxInFlight bounds the jobs one shard has submitted whose completion
	// has not yet run on its loop, and so the completions the pool can put
	// in that loop's (unbounded) Execute queue. Over it, a miss goes to the
	// local fallback or bails out. Default 1024.
	MaxInFlight int
	// MaxJobBytes is the most missing text, in bytes, one request may send
	// to a worker; a larger miss bails out to byte-block keys at once
	// (ReasonTooLarge) rather than hold a worker, and the requests queued
	// behind it, for long. Default 4 MiB: ~200 ms at ~20 MB/s, about a
	// million tokens, more than the context of the models served today.
	// A request is cut at TokenBudget first, and its cost counts every
	// byte at least once, so this bites only when TokenBudget exceeds it.
	MaxJobBytes int
	// LocalMaxBytes is the most missing text, in bytes, that the local
	// fallback tokenizes on the event loop itself, counted as TokenBudget
	// counts (a byte of a long run of one class costs 32); a larger miss
	// with every ring full bails out to byte-block keys. Default 8 KiB:
	// ~0.4 ms at the ~20 MB/s measured for the Llama-3 tokenizer on prose,
	// and 256 bytes of one repeated letter.
	LocalMaxBytes int
	// TokenBudget bounds the tokenizer work one request may cause, in
	// bytes of text, where a byte in a run of 64 or more bytes of one
	// class (letters, digits, whitespace, punctuation), or any byte for a
	// tokenizer without a pre-tokenizer, counts 32 (see budget.go). A
	// request over it is tokenized up to a cut and keyed as byte blocks
	// from there (64-byte blocks, about 16 tokens of English each, so the
	// routing stays as fine). Default 128 KiB: prose up to 128 KiB (~32 K
	// tokens) is tokenized whole, and a short request behind a 4 MiB
	// prompt waits 3.7-5.3 ms behind prose, 0.9 ms behind runs of one
	// letter, instead of 212 ms and 3.2 s with no budget
	// (BenchmarkBudgetDelay on a loaded 2-core machine; 256 KiB: 8.5-8.9
	// and 1.5-1.8 ms; 64 KiB: 2.0-2.3 and 0.4-0.5 ms).
	TokenBudget int
}

// DefaultTokenBudget is Config.TokenBudget's default, 128 KiB.
const DefaultTokenBudget = 128 << 10

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		CacheBytes:      DefaultCacheBytes,
		MaxSegmentBytes: DefaultMaxSegmentBytes,
		RingSize:        256,
		MaxInFlight:     1024,
		MaxJobBytes:     4 << 20,
		LocalMaxBytes:   8 << 10,
		TokenBudget:     DefaultTokenBudget,
	}
}

// Validate reports every invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	if c.CacheBytes <= 0 {
		errs = append(errs, fmt.Errorf("tokenpool: CacheBytes must be positive, got %d", c.CacheBytes))
	}
	if c.MaxSegmentBytes <= 0 {
		errs = append(errs, fmt.Errorf("tokenpool: MaxSegmentBytes must be positive, got %d", c.MaxSegmentBytes))
	}
	if c.RingSize <= 0 || c.RingSize&(c.RingSize-1) != 0 {
		errs = append(errs, fmt.Errorf("tokenpool: RingSize must be a power of two, got %d", c.RingSize))
	}
	if c.MaxInFlight <= 0 {
		errs = append(errs, fmt.Errorf("tokenpool: MaxInFlight must be positive, got %d", c.MaxInFlight))
	}
	if c.MaxJobBytes <= 0 {
		errs = append(errs, fmt.Errorf("tokenpool: MaxJobBytes must be positive, got %d", c.MaxJobBytes))
	}
	if c.TokenBudget <= 0 {
		errs = append(errs, fmt.Errorf("tokenpool: TokenBudget must be positive, got %d", c.TokenBudget))
	}
	if c.LocalMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("tokenpool: LocalMaxBytes must not be negative, got %d", c.LocalMaxBytes))
	}
	return errors.Join(errs...)
}
