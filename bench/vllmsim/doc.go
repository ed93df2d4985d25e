// Package vllmsim is a simulated vLLM engine: an OpenAI-compatible HTTP
// server whose answers and timing follow the parts of vLLM that routing
// changes: the prefix cache, continuous batching, chunked prefill and the
// queue. `saltus sim` runs one per process; the benchmark (package bench)
// runs several in one process, each with its own listener, scheduler and
// metrics.
//
// # API
//
// New(cfg, logger) validates a Config (DefaultConfig: profile a100-13b,
// byte-block mode, 100 output tokens, real time) and loads the
// tokenizer; Start(addr) listens ("127.0.0.1:0" picks a port); Addr and
// URL say where; Stats reads the state; Close(ctx) stops it.
//
// Endpoints: POST /v1/chat/completions and /v1/completions, streamed
// (SSE: `data: {…}` chunks in OpenAI's chat.completion.chunk or
// text_completion shape, the chat's assistant role first, finish_reason
// "length" on the last token, a usage chunk with "choices":[] when
// stream_options.include_usage is set, then `data: [DONE]`) or not;
// usage carries prompt_tokens, completion_tokens, total_tokens and
// prompt_tokens_details.cached_tokens. POST /tokenize ({"prompt"} or
// {"messages"} → {"count","max_model_len","tokens"}, as vLLM's).
// POST /v1/responses (the Responses API, as vLLM's serving_responses
// serves it with VLLM_ENABLE_RESPONSES_API_STORE=1 and no reasoning or
// tool parser): input (a string, or message, function_call,
// function_call_output and reasoning items) rendered into chat messages
// as vLLM's construct_input_messages does, instructions as a system
// message; previous_response_id continues a stored response (its
// messages without system ones, its output as an assistant message, then
// the new input), so the prefix cache sees the earlier turns; an unknown
// one is vLLM's 404 with param response_id. One output message of
// output_text; status "incomplete" (max_output_tokens) as vLLM reports a
// "length" finish; usage with input_tokens_details.cached_tokens; tools,
// tool_choice and metadata echoed; streamed as `event: <type>` + `data:`
// events with sequence_number from 0 (response.created,
// response.in_progress, response.output_item.added,
// response.content_part.added, one response.output_text.delta per token,
// response.output_text.done, response.content_part.done,
// response.output_item.done, response.completed). store (default true)
// keeps at most Config.ResponseStore responses and ResponseStoreBytes
// of their text, the oldest evicted (vllmsim_responses_stored,
// vllmsim_responses_evicted_total); vLLM keeps them all. GET
// /v1/responses/{id} returns one; POST /v1/responses/{id}/cancel answers
// vLLM's 400 (nothing runs in the background: background true is a 400);
// vLLM has no DELETE (405). Response ids are random (resp_ + 32 hex, as
// vLLM's), so ids of several engines never collide. POST /v1/messages
// (Anthropic's Messages API, as vLLM's entrypoints/anthropic serves it;
// messages.go): the request converted into its chat request (system,
// text, image, thinking, tool_use and tool_result blocks, tools as
// function tools), served as a chat completion and answered as a message
// object, or streamed as message_start, ping, content_block_start, one
// content_block_delta (text_delta) per token, content_block_stop,
// message_delta (stop_reason, usage) and message_stop events; usage
// input_tokens (the uncached part), output_tokens,
// cache_read_input_tokens and cache_creation_input_tokens (0); with
// tools and tool_choice any or tool, one tool_use block instead of text
// (stop_reason tool_use); errors as Anthropic's error object with vLLM's
// error types. GET /v1/models (every
// served name, below), GET /v1/models/{id}: a served name's card, else
// vLLM's 404 for an unknown model (vLLM, as read at its commit 055e47c,
// serves only the list). POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter (below). GET /health,
// /metrics: vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (in
// prompt tokens), vllm:prompt_tokens_total, vllm:generation_tokens_total,
// vllm:request_success_total, vllm:num_preemptions_total (always 0) and
// the histogram vllm:time_to_first_token_seconds (vLLM's buckets,
// simulated seconds), each with a model_name label as vLLM's;
// vllm:cache_config_info (value 1, labels block_size and num_gpu_blocks,
// as vLLM exports its cache config); vllm:lora_requests_info (below);
// and vllmsim_rejected_total (waiting queue full) and
// vllmsim_injected_failures_total. Errors are OpenAI error bodies
// ({"error":{"message","type","param","code"}}, reactor.ErrorBody); those
// worded as vLLM words them (an unknown model, LoRA loads and unloads,
// a refused priority, a full waiting queue: below) in vLLM's own
// ErrorResponse: the same fields, type vLLM's ("NotFoundError",
// "InvalidUserInput", "Bad Request", "BadRequestError", …) and code the
// status as a number.
//
// # Models and LoRA adapters
//
// An engine serves base models, Config.Model (the primary) then
// ExtraModels, and LoRA adapters, Config.LoRAModules then those loaded at
// run time, as vLLM's OpenAIServingModels (vllm/entrypoints/openai/
// models/serving.py). GET /v1/models lists them in that order in vLLM's
// ModelCard shape: id, object "model", created, owned_by "vllm", root
// (a base model's name; an adapter's path), parent (null; an adapter's
// base model), max_model_len (a base model's; null for an adapter, as
// vLLM sets it on base models only), permission (one model_permission
// object with vLLM's defaults and a random modelperm- id).
//
// Chat, completions, Responses and /tokenize requests name one in
// "model"; none (absent, null or "") is the primary model. Any other name
// is vLLM's 404 (OpenAIServing._check_model): {"error":{"message":"The
// model `X` does not exist.","type":"NotFoundError","param":"model",
// "code":404}}, after the body's own 400s and before the prompt's. An
// answer's "model" is the name the request gave (the primary one's when
// none): vLLM answers with an adapter's name too, but for a base model
// always with its first served name (its aliases are one model, where
// ExtraModels may stand for distinct ones).
//
// Each served name keys its prompts' blocks with its own seed
// (tree.ModelSeed / tree.ByteBlockSeed of the name): an adapter's blocks
// are not its base model's (vLLM adds the adapter to its block hashes),
// nor are two base models' (vLLM's aliases do share theirs: the
// simulator treats every name as its own model, as `saltus serve`
// predicts, seeding a request's blocks with the model it names). The
// cost model is the same for every name. A request's "cache_salt" (a
// non-empty string, else vLLM's 400) salts its blocks' seed too
// (tree.SaltSeed): a salted prompt shares no cached block with the same
// prompt unsalted or under another salt, as in vLLM, and its chain's
// first BlockStored carries the salt in extra_keys, after the adapter's
// name.
//
// POST /v1/load_lora_adapter {"lora_name","lora_path","load_inplace"?,
// "is_3d_lora_weight"?} and /v1/unload_lora_adapter {"lora_name",
// "lora_int_id"?} (vLLM's LoadLoRAAdapterRequest and
// UnloadLoRAAdapterRequest; is_3d_lora_weight and lora_int_id are
// checked, not used) are served when Config.RuntimeLoRA (vLLM's
// VLLM_ALLOW_RUNTIME_LORA_UPDATING; default true), else unknown
// endpoints (404). 200 with vLLM's text/plain "Success: LoRA adapter
// 'X' added successfully." (or "removed"); the adapter's parent is the
// primary model. vLLM's errors: 400 InvalidUserInput "Both 'lora_name'
// and 'lora_path' must be provided.", "The lora adapter 'X' has already
// been loaded. If you want to load the adapter in place, set
// 'load_inplace' to True." (load_inplace true replaces its path),
// "'lora_name' needs to be provided to unload a LoRA adapter."; 404
// NotFoundError "The lora adapter 'X' cannot be found."; a body that is
// not JSON, not an object or of the wrong types: 400 "Bad Request" (as
// vLLM's validation handler), naming the field. The simulator's own
// 400s (InvalidUserInput): more than Config.MaxLoRAs adapters (static and
// loaded together; default 64), a base model's name, a name that is not
// a valid model name, a path over 4,096 bytes. A load or unload is
// visible to every request answered after its 200; requests already
// taken finish on the adapter they named.
//
// With adapters at start or RuntimeLoRA, /metrics ends with vLLM's
// vllm:lora_requests_info{max_lora,running_lora_adapters,
// waiting_lora_adapters} (the adapters with requests running and
// waiting, comma-separated; max_lora is MaxLoRAs, where vLLM's is its
// --max-loras, adapters in one batch), valued the current time in
// seconds as vLLM's; vLLM keeps a series for every label set it has
// seen, the simulator writes the current one.
//
// # Prompts
//
// With a tokenizer (Config.Tokenizer, loaded like `saltus serve
// --tokenizer`; the chat template by name or detected by chat.Load, else
// none with a warning), messages are rendered and each text segment
// encoded on its own (tokenizer.EncodeSegment), special segments taken
// as their ids: the ids vLLM computes. A completions prompt string gets
// the tokenizer's special tokens (BOS) as vLLM's add_special_tokens
// (default true) gives them; token-id prompts and prompt_token_ids are
// taken as given.
//
// Without a tokenizer (byte-block mode) messages render with template
// none, and the rendered text counts one token per 4 bytes, rounded up
// (/tokenize shows each 4 bytes as a little-endian id, the last
// zero-padded). Its blocks are tree.ByteBlockKeys: 64-byte blocks of
// the text, 16 such tokens each, the very blocks `saltus serve` keys in
// byte-block mode, so the router's predicted blocks and the engine's
// cached blocks are the same ones. BlockSize must then be 16.
//
// Output is Config.MaxTokens words (max_tokens or max_completion_tokens
// when given, the latter winning; at most MaxModelLen minus the prompt),
// one word a token, drawn from a fixed list by a generator seeded with
// (Config.Seed, a hash of the whole prompt): equal prompts get equal
// answers, so a multi-turn history replays the same way.
//
// # Prefix cache
//
// KVTokens/BlockSize blocks, keyed by chained hashes of the prompt's full
// blocks (tree.BlockKeys, seeded with the served name the request named:
// above), as vLLM's automatic
// prefix caching keys them. A request's cached prefix is its leading
// blocks present and computed, capped as vLLM caps it: the last prompt
// token is always recomputed, in whole blocks, so the hit is the leading
// cached blocks within the first prompt-1 tokens (vllm/v1/core/
// kv_cache_manager.py, get_computed_blocks). cached_tokens and
// vllm:prefix_cache_hits_total count those blocks × BlockSize.
//
// Admission reserves every block the request will use: its prompt's
// blocks (cached ones are pinned, shared ones counted once) plus
// blocks for the partial last block and max_tokens of output. Blocks of
// running requests are pinned (reference counts); a prefill chunk's full
// blocks become hits for later prompts as soon as the chunk is computed;
// when a request ends, its computed prompt blocks go to an LRU free list,
// last block first (so a prompt's tail is evicted before its head, as in
// vLLM's free queue), and stay cached until an admission needs the room.
// Output blocks are freed, not cached. vllm:kv_cache_usage_perc is the
// fraction of blocks pinned.
//
// # Scheduler
//
// One goroutine, continuous batching, as vLLM V1's scheduler: each step,
// the running requests in admission order take what they need of the
// step's token budget (MaxBatchedTokens): one token each when decoding,
// the rest of the prompt (or what budget is left: chunked prefill) when
// prefilling. Then waiting requests are admitted in the queue's order
// (first come first served; under the priority policy by priority, then
// arrival: below) while budget, a running slot (MaxNumSeqs) and KV room
// remain; the first that does not fit stops admission (nothing jumps
// the queue) and waits: nothing is preempted. A step lasts, in
// simulated time,
//
//	StepBase + PrefillPerToken × prefill tokens in the step + DecodePerSeq × decoding requests in the step
//
// The step that completes a prompt's prefill yields its first token;
// each later step one more. So an idle request's TTFT is one step per
// chunk, and a decode step at batch b lasts StepBase + b × DecodePerSeq.
//
// Simulated time is real time since New × Speedup: the scheduler sleeps
// until each step's end at an absolute deadline (timer lateness does not
// accumulate), and a step starts at the previous one's end or, when the
// engine was idle or fell behind real time, now. The TTFT histogram
// records simulated seconds from the request's arrival in the queue
// (after its body is decoded and tokenized) to the end of its first
// token's step; a client's own real TTFT × Speedup adds its HTTP latency
// × Speedup.
//
// # Profiles
//
// Models fitted to public numbers, not measurements of this simulator
// against a GPU. Every value can be overridden (Config; `saltus sim`
// flags).
//
// a100-13b (default): a Llama-2-13B-class model (CodeLlama-13B, the model
// of the 8×A100 measurements of DESIGN.md § Numbers from the field) on one A100. Targets: an
// idle 4,096-token prompt's first token in ≈ 500 ms on a miss and ≈ 18
// ms on a hit (DESIGN.md § Numbers from the field; the issue allows 500
// ms ± 20 % and ≤ 40 ms), decoding ≈ 25 ms a token at batch 1 (the
// issue), slower with batch. PrefillPerToken 115 µs is ≈ 8,700 tokens/s:
// at 26 GFLOP a token (2 × 13 B parameters) that is 226 TFLOP/s, 72 % of
// the A100's 312 TFLOP/s bf16 peak, about what large prefill chunks
// reach. StepBase 22 ms + DecodePerSeq 3 ms = 25 ms at batch 1, 70 ms at
// batch 16; reading 26 GB of weights at 2.0 TB/s (A100-80GB) takes 13 ms
// of it, the rest is launch and scheduling overhead. MaxBatchedTokens
// 2,048 and MaxNumSeqs 256 are vLLM's defaults for `vllm serve` on an
// A100 (vllm/engine/arg_utils.py, get_batch_defaults). KVTokens 16,384 is
// inside the 10,000-20,000: Llama-2-13B's KV takes 800 KiB a
// token (2 × 40 layers × 5,120 × 2 bytes), so an A100-40GB at
// gpu_memory_utilization 0.9 keeps ≈ 12,000 tokens beside 26 GB of
// weights (an 80 GB card ≈ 55,000): a few long prompts fill it, which is
// where routing matters. MaxModelLen 16,384 is CodeLlama-13B's context.
// Result (TestProfileTTFT): miss 515 ms (two 2,048-token chunks), hit
// 23.8 ms (255 blocks cached, 16 tokens recomputed), decode 25 ms.
//
// h100-8b: Llama-3-8B (or 3.1) on one H100-80GB SXM. PrefillPerToken 40
// µs is ≈ 25,000 tokens/s: 16 GFLOP a token, 400 TFLOP/s, 40 % of the
// H100's 989 TFLOP/s dense bf16. StepBase 8 ms + DecodePerSeq 0.5 ms =
// 8.5 ms a token at batch 1 (reading 16 GB at 3.35 TB/s takes 4.8 ms).
// MaxBatchedTokens 8,192 and MaxNumSeqs 1,024 are vLLM's defaults on
// GPUs of 70 GiB or more other than the A100. KVTokens 400,000: 128 KiB
// a token (2 × 32 layers × 8 KV heads × 128 × 2 bytes) in ≈ 52 GB
// (80 GB × 0.9 − 16 GB of weights − activations). MaxModelLen 32,768, a
// common --max-model-len for Llama-3.1-8B (128k context). Result: miss
// 172 ms (one chunk), hit 8.6 ms, decode 8.5 ms.
//
// # Overload and priority
//
// MaxNumSeqs requests run, MaxWaiting more wait; a request over that is
// refused at once with Config.OverloadStatus (`saltus sim
// --max-num-seqs 2 --max-waiting 2 --overload-status 429` is a
// saturated engine at the fifth concurrent request), counted in
// vllmsim_rejected_total and Stats.Rejected (the simulator's metric),
// in vLLM's ErrorResponse with llm-d-inference-sim's words and no
// Retry-After (neither sends one):
//
//	429: {"error":{"message":"waiting requests queue is full","type":"RateLimitError","param":null,"code":429}}
//	503: {"error":{"message":"waiting requests queue is full","type":"ServiceUnavailableError","param":null,"code":503}}
//
// 429 is the default: llm-d-inference-sim answers it over its
// --max-waiting-queue-length, as does vLLM's proposed flag of that name
// (PR 49330); vLLM's --max-num-queued-reqs (PR 49445), which bounds
// waiting and running requests together, answers 503. A request taken
// while the engine shuts down still gets the simulator's 503
// ("overloaded", "the engine is shutting down").
//
// Chat, completions and Responses requests take vLLM's "priority": an
// integer JSON number, default 0 (another type, null included, is a
// 400 naming the field; /tokenize ignores it, as vLLM). Under
// SchedulingPolicy "fcfs" (vLLM's default) a non-zero one is refused,
// after the other checks (model, prompt length) and before the queue,
// as vLLM's input processor refuses it:
//
//	400: {"error":{"message":"Got priority 5 but Priority scheduling is not enabled.","type":"BadRequestError","param":null,"code":400}}
//
// Under "priority" the waiting queue is ordered by (priority, arrival),
// lower first, as vLLM V1's PriorityRequestQueue; a full queue refuses
// a request whatever its priority.
//
// # Failure injection
//
// Config.FailRate answers that fraction of completion requests 503 before
// anything else (a deterministic sequence of draws per Seed). The request
// header X-Sim-Fail: "503" answers 503 at once; "reset" takes the request
// (after decoding it) and resets the connection (SO_LINGER 0, so the
// client sees a reset) without an answer, or, for a streamed request,
// after the role chunk and 2 content chunks (fewer if max_tokens is
// smaller), 20 ms after flushing them so they reach the client first;
// "stall" takes the request and never answers, until the client closes
// the connection or Close closes it (1,024 stalls at most, more get
// 503). Another value is a 400. Each injected failure is counted.
//
// # Trace context
//
// A request's W3C traceparent and tracestate headers, when it has them,
// are echoed in the answer's X-Sim-Traceparent and X-Sim-Tracestate:
// what vLLM would make its own spans children of, shown to tests (saltus
// passes the X-Sim-* headers through).
//
// # Bounds
//
// Body Config.MaxBody (413), head 16 KiB (431), waiting requests
// MaxWaiting (OverloadStatus: 429 or 503), connections MaxNumSeqs + MaxWaiting + 256 (fasthttp
// answers 503), stalls 1,024, prompt + max_tokens MaxModelLen (400, in
// vLLM's words), LoRA adapters MaxLoRAs (400), base models 256. A request's memory is its prompt's (tokens and keys)
// plus its answer; progress is published through two atomics and a
// one-slot channel, not a channel sized by max_tokens. Malformed JSON and
// wrong field types get 400 naming the field; client input never panics
// (FuzzDecodeRequest).
//
// # Limits
//
//   - Only the served names are served (404 for others, as vLLM), but
//     every name is its own model: aliases do not share cached blocks
//     and a response echoes the name asked for (above). Adapters cost
//     what their base model costs and answer the same text; no adapter
//     is read from its path; vLLM's LoRA resolvers (loading an adapter a
//     request names) are not simulated. Content-Type is not checked
//     (vLLM wants application/json).
//   - n other than 1 and batches of prompts get 400; sampling
//     parameters, stop sequences, logprobs and tools are ignored: every
//     answer is max_tokens words with finish_reason "length", like vLLM
//     with ignore_eos.
//   - Timing is deterministic: no jitter. A decode step does not get
//     slower with context length (attention over long contexts).
//   - No preemption: admission reserves the output's blocks up front,
//     where vLLM V1 allocates them as it goes and preempts (recomputes)
//     the newest running request when a step finds no free block (under
//     the priority policy, the running request of the highest priority
//     number). Priority orders the waiting queue only.
//   - "priority" must be an integer JSON number: vLLM (pydantic's lax
//     int) also takes 5.0 and "5".
//   - Output blocks are not cached: vLLM caches full blocks of generated
//     tokens too, so a follow-up turn that sends the reply back hits a
//     few blocks more on vLLM than here.
//   - A non-streamed request whose client left runs to its end (fasthttp
//     does not report a client gone before the answer; vLLM aborts it). A
//     streamed one is dropped at its next write, its computed blocks kept.
//   - A stream cut by Close ends with an error chunk and, unlike vLLM, no
//     [DONE], so a client cannot take it for a finished one.
//   - Completions prompts get BOS in tokenizer mode (as in vLLM) while
//     `saltus serve` keys them without it: the router's blocks are then
//     shifted by one token against the engine's.
//
// # Concurrency
//
//   - The scheduler goroutine (rules.Group "vllmsim.scheduler") owns the
//     KV cache and the running requests. The waiting queue is guarded by
//     engine.mu. A request (seq) is handed over through the queue; the
//     scheduler publishes its progress in atomics (tokens produced, final
//     state) with a one-slot notify channel, and the handler sets an
//     atomic cancel flag when its client leaves; the scheduler never
//     blocks on a handler.
//   - fasthttp's Serve runs in "vllmsim.serve". Handlers run on fasthttp's
//     worker goroutines, streams on its stream-writer goroutines, stalls on
//     its hijack goroutines: fasthttp starts them, and they end with their
//     connections; Close waits for them through Server.Shutdown and a
//     count of stalls.
//   - The served names are an immutable set behind an atomic pointer,
//     read by any handler; loads and unloads serialize on a mutex and
//     swap in a new set before they answer. An adapter's waiting and
//     running counts are atomics: the handler counts a request waiting
//     as it submits it, the scheduler moves it to running and uncounts
//     it at its end.
//   - Counters, gauges and Stats are atomics, read by any goroutine. Sim's
//     methods (New, Start, Addr, URL, Stats, Config, Close) are safe from
//     any goroutine.
package vllmsim
