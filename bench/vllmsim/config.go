package vllmsim

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tree"
)

// Profile is an engine's timing and capacity: one model on one GPU. Step
// times are simulated time (doc.go: the step formula); Config.Speedup
// divides them all.
type Profile struct {
	// Name is the profile's name in Profiles.
	Name string
	// StepBase is the fixed cost of one scheduler step (weights read
	// once per forward pass, kernel launches, sampling).
	StepBase time.Duration
	// PrefillPerToken is the cost of each prompt token computed in a
	// step (tokens found in the prefix cache cost nothing).
	PrefillPerToken time.Duration
	// DecodePerSeq is the cost of each decoding request in a step: what
	// makes decoding slower as the batch grows.
	DecodePerSeq time.Duration
	// MaxBatchedTokens is the token budget of one step: decode tokens
	// plus prefill chunks (vLLM's --max-num-batched-tokens; chunked
	// prefill splits longer prompts across steps).
	MaxBatchedTokens int
	// KVTokens is the KV cache's capacity in tokens; it holds
	// KVTokens/BlockSize blocks.
	KVTokens int
	// MaxNumSeqs is the most requests running (vLLM's --max-num-seqs);
	// more wait.
	MaxNumSeqs int
	// MaxModelLen is the longest prompt plus max_tokens accepted (vLLM's
	// --max-model-len); longer requests get 400. Capped at KVTokens
	// (vLLM refuses to start when the KV cannot hold one such request;
	// the simulator caps instead, so --kv-tokens alone can shrink it).
	MaxModelLen int
}

// Profiles are the built-in profiles; doc.go gives where each number
// comes from. a100-13b is the default.
var Profiles = map[string]Profile{
	"a100-13b": {
		Name:             "a100-13b",
		StepBase:         22 * time.Millisecond,
		PrefillPerToken:  115 * time.Microsecond,
		DecodePerSeq:     3 * time.Millisecond,
		MaxBatchedTokens: 2048,  // vLLM's default on an A100 (arg_utils.py)
		KVTokens:         16384, // the 10,000-20,000 range
		MaxNumSeqs:       256,   // vLLM's default on an A100
		MaxModelLen:      16384, // CodeLlama-13B's context
	},
	"h100-8b": {
		Name:             "h100-8b",
		StepBase:         8 * time.Millisecond,
		PrefillPerToken:  40 * time.Microsecond,
		DecodePerSeq:     500 * time.Microsecond,
		MaxBatchedTokens: 8192, // vLLM's default on an H100 (arg_utils.py)
		KVTokens:         400_000,
		MaxNumSeqs:       1024, // vLLM's default on an H100
		MaxModelLen:      32768,
	},
}

// DefaultProfile is the profile DefaultConfig uses.
const DefaultProfile = "a100-13b"

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Config configures one simulated engine. It is immutable once New has
// validated it.
type Config struct {
	Profile
	// Model is the primary served model name: /v1/models lists it first,
	// a request without "model" is served by it, the metrics' model_name
	// label, and the base model of a LoRA adapter whose Base is "".
	// A request naming a model the engine does not serve (Model,
	// ExtraModels, an adapter) gets vLLM's 404.
	Model string
	// ExtraModels are more base model names the engine serves, after
	// Model: the aliases of vLLM's --served-model-name a b, or further
	// models a simulated engine pretends to serve. Each is listed and
	// routable; its prefix cache blocks are keyed by its own name, so
	// two names never share a cached block (doc.go, Prefix cache).
	// Default none; at most maxExtraModels.
	ExtraModels []string
	// LoRAModules are the adapters loaded at start, as vLLM's
	// --lora-modules: each is listed with its Path as root and its Base
	// as parent, and its requests' blocks are keyed by its Name. Default
	// none; at most MaxLoRAs.
	LoRAModules []LoRA
	// MaxLoRAs bounds the adapters loaded at once, from LoRAModules and
	// run-time loads together; a load over it gets 400. vLLM keeps every
	// adapter loaded in its list (its --max-loras bounds the adapters of
	// one batch, --max-cpu-loras the weights cached); the simulator
	// bounds the list instead. Default 64.
	MaxLoRAs int
	// RuntimeLoRA serves POST /v1/load_lora_adapter and
	// /v1/unload_lora_adapter, as vLLM does with
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; off, both are unknown
	// endpoints (404). Default true: the simulator is for tests.
	RuntimeLoRA bool
	// Tokenizer is the path of a HuggingFace tokenizer.json (or its
	// directory, or .json.gz), as `saltus serve --tokenizer`; "" =
	// byte-block mode (doc.go).
	Tokenizer string
	// ChatTemplate is a built-in chat template's name (chat.Names); "" =
	// detect it from the tokenizer_config.json beside the tokenizer.
	// Without a tokenizer, messages render with chat.None.
	ChatTemplate string
	// BlockSize is the KV block size in tokens (vLLM's default: 16). In
	// byte-block mode it must be 16: a block is 64 bytes of text.
	BlockSize int
	// Speedup divides every simulated duration: at 10, a 500 ms prefill
	// takes 50 ms of real time. At least 1. Reported times (the TTFT histogram) are
	// simulated time.
	Speedup float64
	// Seed makes output text a function of (Seed, prompt), and seeds
	// FailRate's draws.
	Seed int64
	// MaxWaiting bounds the waiting queue; a request over it gets
	// OverloadStatus at once. With a small MaxNumSeqs it makes a
	// saturated engine: MaxNumSeqs running, MaxWaiting waiting, the rest
	// refused.
	MaxWaiting int
	// OverloadStatus is the status of a request refused over MaxWaiting:
	// 429 (default) or 503, with a vLLM-style error body and no
	// Retry-After (doc.go, Overload and priority). vLLM's own queue bounds differ:
	// llm-d-inference-sim and vLLM's open --max-waiting-queue-length
	// (PR 49330) answer 429, vLLM's --max-num-queued-reqs (PR 49445) 503.
	OverloadStatus int
	// SchedulingPolicy orders the waiting queue, as vLLM's
	// --scheduling-policy: "fcfs" (default: by arrival; a request with a
	// non-zero "priority" gets vLLM's 400) or "priority" (by the
	// request's "priority", lower first, then by arrival).
	SchedulingPolicy string
	// MaxTokens is the output length of a request that names neither
	// max_tokens nor max_completion_tokens.
	MaxTokens int
	// MaxBody bounds a request body in bytes; over it: 413.
	MaxBody int
	// FailRate is the fraction of completion requests answered 503
	// before anything else (failure injection).
	FailRate float64
	// ResponseStore bounds the stored Responses API responses (store
	// true, the default): over it, or over ResponseStoreBytes of stored
	// conversations, the oldest is evicted (counted).
	ResponseStore      int
	ResponseStoreBytes int
	// TLS, when not nil, serves HTTPS with it (tests of https backends);
	// URL then starts with https://. Default nil: plain HTTP.
	TLS *tls.Config
	// KVEvents publishes the KV cache's events as vLLM does with
	// --kv-events-config (kvevents.go). Default: off.
	KVEvents KVEventsConfig
}

// DefaultConfig returns the a100-13b profile in byte-block mode.
func DefaultConfig() Config {
	return Config{
		Profile:    Profiles[DefaultProfile],
		Model:      "sim-llama", // any name; the benchmark passes its own
		BlockSize:  16,          // vLLM's default
		Speedup:    1,           // real time
		Seed:       1,
		MaxWaiting: 1024,
		// The status of a bounded waiting queue's refusal in
		// llm-d-inference-sim and vLLM's PR 49330: "retry elsewhere".
		OverloadStatus:   429,
		SchedulingPolicy: PolicyFCFS, // vLLM's default
		MaxTokens:        100,        // the benchmark's workloads ask for 100 too
		MaxBody:          16 << 20,
		FailRate:         0,
		// A conversation's history is its prompt's text: 1,024 stored
		// responses of the benchmark's few-KB prompts stay far below the
		// byte bound, which caps a store of long prompts instead.
		ResponseStore:      1024,
		ResponseStoreBytes: 64 << 20,
		MaxLoRAs:           64,   // a test fleet's adapters, with room to spare
		RuntimeLoRA:        true, // load and unload adapters, as tests of model pools do
	}
}

// The scheduling policies (Config.SchedulingPolicy), vLLM's names.
const (
	PolicyFCFS     = "fcfs"
	PolicyPriority = "priority"
)

// LoRA is one LoRA adapter an engine serves: vLLM's LoRAModulePath.
type LoRA struct {
	// Name is the model name requests use for the adapter (validModel).
	Name string
	// Path is where vLLM would read its weights: /v1/models shows it as
	// the adapter's root; the simulator reads nothing. 1 to 4,096 bytes.
	Path string
	// Base is the base model the adapter applies to, its parent in
	// /v1/models: Model or one of ExtraModels; "" = Model.
	Base string
}

// Bounds Validate enforces.
const (
	maxSpeedup   = 1000 // simulated nanoseconds overflow int64 after 292 years / Speedup of real time
	maxBlockSize = 1024
	maxKVTokens  = 1 << 30
	maxNumSeqs   = 1 << 16
	maxWaiting   = 1 << 20
	maxStep      = time.Minute
	// maxExtraModels and maxMaxLoRAs bound the served names: each is a
	// map entry, a model card and a cache seed.
	maxExtraModels = 255
	maxMaxLoRAs    = 4096
	// maxLoRAPath bounds an adapter's path (Linux's PATH_MAX).
	maxLoRAPath = 4096
)

// Validate reports every invalid field, each error naming it by its
// `saltus sim` flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("vllmsim: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{{"step-base", c.StepBase, 1}, {"prefill-per-token", c.PrefillPerToken, 0}, {"decode-per-seq", c.DecodePerSeq, 0}} {
		if d.v < d.min || d.v > maxStep {
			bad(d.name, "must be between %v and %v, got %v", d.min, maxStep, d.v)
		}
	}
	if c.BlockSize < 1 || c.BlockSize > maxBlockSize || c.BlockSize&(c.BlockSize-1) != 0 {
		bad("block-size", "must be a power of two between 1 and %d, got %d", maxBlockSize, c.BlockSize)
	} else if c.Tokenizer == "" && c.BlockSize != tree.ByteBlockBytes/4 {
		bad("block-size", "must be %d without a tokenizer (byte-block mode: a block is %d bytes of text, 4 bytes a token), got %d",
			tree.ByteBlockBytes/4, tree.ByteBlockBytes, c.BlockSize)
	}
	if err := c.KVEvents.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.KVTokens < c.BlockSize || c.KVTokens > maxKVTokens {
		bad("kv-tokens", "must be between one block (%d) and %d, got %d", c.BlockSize, maxKVTokens, c.KVTokens)
	}
	if c.MaxNumSeqs < 1 || c.MaxNumSeqs > maxNumSeqs {
		bad("max-num-seqs", "must be between 1 and %d, got %d", maxNumSeqs, c.MaxNumSeqs)
	}
	if c.MaxBatchedTokens < c.MaxNumSeqs || c.MaxBatchedTokens > maxKVTokens {
		bad("max-num-batched-tokens", "must be between max-num-seqs (%d: one decode token each) and %d, got %d", c.MaxNumSeqs, maxKVTokens, c.MaxBatchedTokens)
	}
	if c.MaxModelLen < 2 {
		bad("max-model-len", "must be at least 2 (a prompt token and an output token), got %d", c.MaxModelLen)
	}
	if !(c.Speedup >= 1 && c.Speedup <= maxSpeedup) {
		bad("speedup", "must be at least 1 and at most %d, got %g", maxSpeedup, c.Speedup)
	}
	if c.MaxWaiting < 1 || c.MaxWaiting > maxWaiting {
		bad("max-waiting", "must be between 1 (every request waits for its first step) and %d, got %d", maxWaiting, c.MaxWaiting)
	}
	if c.OverloadStatus != 429 && c.OverloadStatus != 503 {
		bad("overload-status", "must be 429 or 503, got %d", c.OverloadStatus)
	}
	if c.SchedulingPolicy != PolicyFCFS && c.SchedulingPolicy != PolicyPriority {
		bad("scheduling-policy", "must be %s or %s, got %q", PolicyFCFS, PolicyPriority, c.SchedulingPolicy)
	}
	if c.MaxTokens < 1 {
		bad("max-tokens", "must be at least 1, got %d", c.MaxTokens)
	}
	if c.MaxBody < 1<<10 || c.MaxBody > 1<<30 {
		bad("max-body", "must be between 1KiB and 1GiB, got %d bytes", c.MaxBody)
	}
	if !(c.FailRate >= 0 && c.FailRate <= 1) {
		bad("fail-rate", "must be between 0 and 1, got %g", c.FailRate)
	}
	if c.ResponseStore < 1 || c.ResponseStore > maxWaiting {
		bad("response-store", "must be between 1 and %d, got %d", maxWaiting, c.ResponseStore)
	}
	if c.ResponseStoreBytes < 1<<10 || c.ResponseStoreBytes > 1<<30 {
		bad("response-store-bytes", "must be between 1KiB and 1GiB, got %d bytes", c.ResponseStoreBytes)
	}
	errs = append(errs, c.validateNames()...)
	if c.ChatTemplate != "" && !slices.Contains(chat.Names(), c.ChatTemplate) {
		bad("chat-template", "unknown template %q, want one of %s (or empty: detect from the tokenizer)", c.ChatTemplate, strings.Join(chat.Names(), ", "))
	}
	return errors.Join(errs...)
}

// validateNames checks the served names: Model, ExtraModels and
// LoRAModules, each a valid name used once, MaxLoRAs and the adapters
// within their bounds.
func (c Config) validateNames() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("vllmsim: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	seen := make(map[string]bool, 1+len(c.ExtraModels)+len(c.LoRAModules))
	name := func(field, n string) {
		switch {
		case !validModel(n):
			bad(field, "must be 1 to %d characters among letters, digits and %s, got %q", maxModelName, modelPunct, n)
		case seen[n]:
			bad(field, "%q is served already (a name is a base model or an adapter, once)", n)
		}
		seen[n] = true
	}
	name("model", c.Model)
	if len(c.ExtraModels) > maxExtraModels {
		bad("model", "at most %d names besides the first, got %d", maxExtraModels, len(c.ExtraModels))
	}
	for _, m := range c.ExtraModels {
		name("model", m)
	}
	bases := seen
	seen = maps.Clone(bases)
	if c.MaxLoRAs < 1 || c.MaxLoRAs > maxMaxLoRAs {
		bad("max-loras", "must be between 1 and %d, got %d", maxMaxLoRAs, c.MaxLoRAs)
	}
	if len(c.LoRAModules) > max(c.MaxLoRAs, 1) {
		bad("lora-modules", "%d adapters, more than max-loras (%d)", len(c.LoRAModules), c.MaxLoRAs)
	}
	for _, l := range c.LoRAModules {
		name("lora-modules", l.Name)
		if l.Path == "" || len(l.Path) > maxLoRAPath {
			bad("lora-modules", "adapter %q: the path must be 1 to %d bytes, got %d", l.Name, maxLoRAPath, len(l.Path))
		}
		if l.Base != "" && !bases[l.Base] {
			bad("lora-modules", "adapter %q: base model %q is not served (want --model or empty: the first --model)", l.Name, l.Base)
		}
	}
	return errs
}

// A model name is written into JSON and Prometheus labels unescaped, so
// it keeps to characters neither escapes (HuggingFace names fit).
const (
	maxModelName = 256
	modelPunct   = "._-:/@+"
)

func validModel(m string) bool {
	if m == "" || len(m) > maxModelName {
		return false
	}
	for i := 0; i < len(m); i++ {
		b := m[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(modelPunct, b) >= 0) {
			return false
		}
	}
	return true
}

// maxModelLen is MaxModelLen capped at the KV cache's capacity.
func (c Config) maxModelLen() int {
	return min(c.MaxModelLen, c.KVTokens/c.BlockSize*c.BlockSize)
}
