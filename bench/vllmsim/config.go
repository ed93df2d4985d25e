package vllmsim

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Profile is an engine's timing and capacity.
type Profile struct {
	Name             string
	PrefillPerToken  time.Duration // per uncached prompt token in a step
	StepBase         time.Duration // every step
	DecodePerSeq     time.Duration // per decoding request in a step
	MaxBatchedTokens int           // token budget of one step (chunked prefill)
	KVTokens         int           // KV cache capacity in tokens
	MaxNumSeqs       int           // running requests at most
}

// Profiles are the built-in profiles (doc.go gives their sources).
var Profiles = map[string]Profile{
	"a100-13b": {Name: "a100-13b", PrefillPerToken: 115 * time.Microsecond, StepBase: 22 * time.Millisecond,
		DecodePerSeq: 3 * time.Millisecond, MaxBatchedTokens: 2048, KVTokens: 16384, MaxNumSeqs: 64},
	"h100-8b": {Name: "h100-8b", PrefillPerToken: 40 * time.Microsecond, StepBase: 8 * time.Millisecond,
		DecodePerSeq: 500 * time.Microsecond, MaxBatchedTokens: 8192, KVTokens: 262144, MaxNumSeqs: 256},
}

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string {
	var names []string
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Config configures a simulated engine.
type Config struct {
	Profile
	// Model is the served model name (/v1/models, responses, metrics).
	Model string
	// Tokenizer is a HuggingFace tokenizer.json path; "" = byte-block mode.
	Tokenizer    string
	ChatTemplate string // "" = detect from tokenizer_config.json
	BlockSize    int    // tokens per KV block (vLLM: 16)
	// Speedup divides every simulated duration (≥ 1 for quick runs).
	Speedup float64
	// Seed makes the output text deterministic per prompt.
	Seed int64
	// MaxWaiting bounds the waiting queue; over it: 503.
	MaxWaiting int
	// MaxTokens is the output length when a request gives none.
	MaxTokens int
	// MaxBody bounds a request body; over it: 413.
	MaxBody int
	// FailRate answers this fraction of requests 503 at once.
	FailRate float64
}

// DefaultConfig is the a100-13b profile with byte-block prompts.
func DefaultConfig() Config {
	return Config{Profile: Profiles["a100-13b"], Model: "sim-llama", BlockSize: 16, Speedup: 1,
		Seed: 1, MaxWaiting: 1024, MaxTokens: 100, MaxBody: 16 << 20}
}

// Validate reports every invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("vllmsim: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.PrefillPerToken < 0 || c.StepBase <= 0 || c.DecodePerSeq < 0 {
		bad("timing", "step-base must be positive and the per-token costs not negative")
	}
	if c.BlockSize <= 0 || c.BlockSize&(c.BlockSize-1) != 0 {
		bad("block-size", "must be a power of two, got %d", c.BlockSize)
	}
	if c.KVTokens < c.BlockSize {
		bad("kv-tokens", "must hold at least one block, got %d", c.KVTokens)
	}
	if c.MaxNumSeqs <= 0 {
		bad("max-num-seqs", "must be positive, got %d", c.MaxNumSeqs)
	}
	if c.MaxBatchedTokens < c.MaxNumSeqs {
		bad("max-num-batched-tokens", "must be at least max-num-seqs (%d), got %d", c.MaxNumSeqs, c.MaxBatchedTokens)
	}
	if !(c.Speedup >= 1) {
		bad("speedup", "must be at least 1, got %g", c.Speedup)
	}
	if c.MaxWaiting < 0 {
		bad("max-waiting", "must not be negative, got %d", c.MaxWaiting)
	}
	if c.MaxTokens <= 0 {
		bad("max-tokens", "must be positive, got %d", c.MaxTokens)
	}
	if c.MaxBody <= 0 {
		bad("max-body", "must be positive, got %d", c.MaxBody)
	}
	if !(c.FailRate >= 0 && c.FailRate <= 1) {
		bad("fail-rate", "must be in [0, 1], got %g", c.FailRate)
	}
	if strings.TrimSpace(c.Model) == "" {
		bad("model", "must not be empty")
	}
	return errors.Join(errs...)
}

// sim turns simulated time into real time.
func (c Config) sim(d time.Duration) time.Duration { return time.Duration(float64(d) / c.Speedup) }
