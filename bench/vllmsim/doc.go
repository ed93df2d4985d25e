// Package vllmsim is a simulated vLLM engine: an OpenAI-compatible HTTP
// server whose timing follows the parts of vLLM that routing changes.
//
// # Model
//
// Prompts are rendered with the chat template and tokenized like `saltus
// serve` does (tokenpool; byte-block mode without a tokenizer: 64-byte
// blocks of the rendered text, a block counted as BlockSize tokens), then
// cut into blocks of BlockSize tokens keyed by chained hashes
// (tree.BlockKeys), as vLLM's automatic prefix caching does.
//
// KV cache: KVTokens/BlockSize blocks. A request's cached prefix is its
// leading blocks present and computed. Admission reserves blocks for the
// rest of the prompt plus max_tokens of output; blocks of running
// requests are pinned; when a request finishes its prompt blocks stay
// cached on an LRU free list and are evicted only when an admission needs
// the room (vLLM's behaviour). Output blocks are not cached (a follow-up
// turn hits on the previous prompt, not on the reply). A request that does
// not fit waits; nothing is preempted.
//
// Scheduler: continuous batching in one goroutine. Each step admits
// waiting requests (FIFO) up to MaxNumSeqs running, gives every decoding
// request one token, and spends the rest of MaxBatchedTokens on prefill
// chunks, oldest first (chunked prefill). A step lasts
//
//	StepBase + PrefillPerToken × prefill tokens + DecodePerSeq × decoding requests
//
// of simulated time, then sleeps that long divided by Speedup. A request's
// first token comes at the end of the step that completes its prefill
// (so TTFT = queueing + its prefill steps); vLLM always recomputes at
// least the last prompt token, so a fully cached prompt still prefills
// one token. The waiting queue holds at most MaxWaiting requests; more get
// 503.
//
// # Profiles
//
// a100-13b (default): Llama-2-13B on one A100-80GB. Public vLLM benchmark
// runs put its prefill near 8-9k tokens/s and single-stream decode near
// 40 tokens/s; we take PrefillPerToken 115 µs, StepBase 22 ms,
// DecodePerSeq 3 ms, chunks of 2,048 tokens: an idle 4,096-token prompt
// costs 2 steps ≈ 515 ms to its first token when nothing is cached and
// ≈ 24 ms when all of it is, decode 25 ms per token at batch 1 and 70 ms
// at batch 16. KV: 16,384 tokens, the scale the issue gives (10,000-20,000)
// for a 13B model beside other tenants. MaxNumSeqs 64.
//
// h100-8b: Llama-3-8B on one H100: prefill ~25k tokens/s (40 µs/token),
// StepBase 8 ms, DecodePerSeq 0.5 ms, chunks of 8,192, KV 262,144 tokens,
// MaxNumSeqs 256.
//
// Every parameter can be overridden (Config). These are models, not
// measurements of this simulator against GPUs: they make a cache miss cost
// what it costs on the real thing, relative to a hit.
//
// # Failure injection
//
// FailRate answers that fraction of requests 503 before anything. The
// X-Sim-Fail request header: "503" answers 503; "reset" closes the
// connection without an answer (a streamed request: after two chunks);
// "stall" accepts and never answers until the client leaves or the
// simulator closes.
package vllmsim
