// Package workload makes the requests of saltus's benchmark: simulated
// users that each ask, in a closed loop, for their next request, send it
// (OpenAI chat completions or completions, streamed), read the whole
// answer, pass it back with Reply (multi-turn users build on it) and
// think before the next. Every workload is deterministic for a seed.
//
// # Place in the request path
//
// None: this is the benchmark's client side (package bench drives the
// users against a router or an engine). What the workloads decide is what
// the router is measured on: how much of each request's token prefix some
// engine may already hold.
//
// # Workloads
//
// stress is Ranvier's published benchmark distribution, as saltus issue 5
// quotes it: 10 % small (100–500 tokens), 20 % medium (500–2,000),
// 30 % large (2,000–4,000), 40 % xlarge (4,000–8,000), sizes uniform in
// each range. Large and xlarge requests share a pool of 5 long prefixes
// (the system message) followed by one of 10 questions (the user message,
// 16–48 tokens); small and medium requests start with one of 5 category
// system prompts 90 % of the time, then a unique user turn of 16–64
// tokens (at most half the request), and are unique text alone otherwise.
// A category prompt is 2,000 tokens cut to the request's size less its
// turn, like a prefix: an application's system prompt is most of a short
// chat request. (A first version used a fixed 64-token category prompt:
// then small and medium requests could hit at most ~5-15 % of their
// tokens, and prefix routing's overall token hit ratio topped out near
// 0.85 whatever the router did.) Every request asks for 100 output tokens;
// users think 0.5–2 s (uniform) before each request. The quote does not
// say how 5 prefixes serve two size ranges: here each prefix is 8,000
// tokens and a request sends it cut to its size less its question (at a
// word or full stop), so of two requests on one prefix the shorter one's
// prefix is a byte prefix of the longer one's, and an engine that served
// a prefix holds most of any later request on it.
// (Ranvier's load test, tests/integration/locustfile_real.py in
// github.com/Ranvier-Systems/ranvier-core, names a "stress" distribution
// whose large prefixes default to 5 of 2,000–8,000 tokens; the rest of
// the quote was not checked against its code.) Tags: "large/prefix0" …
// "xlarge/prefix4", "small/category0" … "medium/category4",
// "small/none", "medium/none".
//
// multiturn: each user holds conversations of 3–10 turns behind one of 4
// system prompts (400 tokens); each user message is 20–200 tokens of
// fresh text, and the assistant's replies (Reply) are appended, so each
// turn's prompt extends the last. 20 % of conversations branch: after
// turn b (2 ≤ b < last) the user drops the last k turns (1 ≤ k < b) and
// continues differently, as a user editing an earlier message does. A
// failed request (Reply("") or none) is forgotten, as a user asks again.
// Tags: "turn1" … "turn10" (user messages in the request), "branch" (the
// first request after a branch).
//
// mixed: model pools (issue 29). multiturn's users and conversations,
// each user on one model by its id mod 5: org/alpha, org/beta,
// alpha-tuned (a LoRA adapter of org/alpha), org/alpha, org/beta, so
// 40 / 20 / 40 %. The 4 system prompts are shared by every model: the
// same text under two models must not share cached blocks (engines key
// them by the served name), so a router must keep each model's prefixes
// in its own pool. Every 50th request of a user (2 %, at a per-user
// offset; user 0's first) is a one-turn request (a system prompt and a
// fresh 20-200-token user message) naming org/gamma, which no engine
// serves: the router must refuse it itself (404 model_not_found). Such a
// request and its answer are not part of the conversation.
// Options.Models keeps only the users of some models (the rest send
// nothing), so that one pool's users alone are the very users it had in
// the mixed run. Tags: multiturn's, and "unknown".
//
// rag: 50 documents of 2,000–8,000 tokens (lengths uniform, fixed per
// seed) with Zipf(1.1) popularity, each request one document as the
// system message and a unique 16–64-token question. math/rand/v2's Zipf
// (which needs s > 1) draws the document of rank k ∝ (k+1)^-1.1: the
// top one takes 26 % of requests and the top five 56 %
// (TestRAGPopularity). Tags: "hot" (ranks 1–5), "warm" (6–20), "cold".
//
// hotspot: one application's system prompt is most of the traffic. 80 %
// of requests send one 2,000-token system prompt (the issue 11 table's
// "one 2,000-word system prompt"), the rest one of 30 others of
// 1,000–2,000 tokens (uniform, lengths fixed per seed), each then a unique
// 16–64-token user turn. One engine cannot serve the hot prompt's load:
// a router must give it several holders without scattering it over all.
// Tags: "hot", "other".
//
// manydocs: more documents than the fleet's KV holds. 64 documents of
// 2,000–4,000 tokens (about 192k tokens, 1.5× the KV of 8 a100-13b
// engines of 16,384; TestManydocsExceedsFleet) with Zipf(0.8)
// popularity, flatter than rag's: the top document takes 14 % of
// requests, the top 8 46 %, the top 24 71 %, so the working set, not a
// few hot documents, must fit, and where a router puts a document decides
// what the engines evict. (rag's documents exceed the fleet too, but its
// top five take 56 %.) The draw is by inverse CDF, as math/rand/v2's Zipf
// needs s > 1. Each request is one document as the system message and a
// unique 16–64-token question. Tags: "hot" (ranks 1–8), "warm" (9–24),
// "cold".
//
// unique: the control. Every request is one user message of fresh text
// whose first 7 words spell the request's number (user id and sequence,
// scrambled per seed), so no two requests share their first 64 bytes or
// their first block; sizes follow the stress mix. Prefix-aware routing
// has nothing to win here, so it must not lose to least-request. Tags:
// the size class.
//
// saturation: the overload workload (issue 30). Open loop: arrivals are
// Poisson at Options.Rate a second, on one schedule that every user
// shares (as a trace's cursor: each Next takes the next arrival, whose
// Request.At is its send time), so that a saturated fleet's queue grows
// and its order shows in every percentile, not only in the tail as with
// closed-loop users. Each request is one unique user message of 256-512
// tokens (unique's opener, numbered by arrival) with vLLM's "priority"
// -10 or 10 (half each) and a tenant key sent as Authorization: Bearer,
// "small" for 1 in 12 requests (4 of issue 30's 48 clients) and "big"
// for the rest; a request's content and time depend on its number only.
// Tags: "high/big", "high/small", "low/big", "low/small".
//
// trace FILE (New("trace:FILE", …) or Options.TraceFile): replays a JSONL
// file. Each line is one JSON object, the body of an OpenAI request:
//
//	{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
//	{"prompt": "Once upon a time", "timestamp": 12.5, "tag": "batch"}
//
// The fields:
//
//   - "messages" (chat completions: role and content, content a string,
//     null, or an array of {"type": "text", "text": …} parts joined by
//     "\n" as vLLM does; other part types are refused) or "prompt"
//     (completions: a string, or an array of exactly one string); exactly
//     one of the two.
//   - "model", "max_tokens" or "max_completion_tokens" (the latter wins):
//     optional. Options.Model, when set, replaces the model; a line
//     without a maximum gets Options.MaxTokens.
//   - "timestamp" or "t": optional send time in seconds (any origin, e.g.
//     Unix time; non-negative). Either every line has one or none does.
//     With timestamps the trace is replayed open-loop: requests in
//     timestamp order, Request.At counted from the earliest, no Think.
//     Without, in file order, closed-loop with the Options' think time.
//   - "tag": optional class for per-class statistics (default "trace").
//   - Every other field (stream, temperature, …) is ignored: the client
//     sends its own. Blank lines are skipped.
//
// A line may hold 16 MiB and the file 1 GiB (it is read whole, once, at
// New); a bad line is an error naming its number. A trace's users share
// one cursor: the trace is sent once, in order, each line by whichever
// user asks next, and Next returns false when it is used up. An open-loop
// replay needs enough users (or a client that does not wait) to keep up.
//
// mooncake FILE (New("mooncake:FILE", …)): replays a trace in the format
// of Mooncake's public FAST'25 traces (kvcache-ai/Mooncake,
// FAST25-release/traces), one JSON object a line:
//
//	{"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}
//
// timestamp is the arrival in milliseconds (an integer or not; any
// origin), input_length and output_length the prompt's and the answer's
// tokens (1 to 2^20 each), and hash_ids one id per block of the prompt
// (Options.TraceBlock tokens, 512 by default, as in the public traces;
// at most 2^16 ids, each an integer in [0, 2^53)): rows sharing leading
// ids share that prefix. All blocks but the last are whole: the row's
// ids must cover its input_length, the last block holding 1 to a block
// of tokens (every row of the public conversation and synthetic traces
// does). Other fields are ignored; a bad row is an error naming its line
// and field; line and file bounds are trace's. Each row becomes a
// completions request whose prompt is token ids (vLLM takes a list of
// ints; saltus keys it by those ids, so the router's blocks and the
// engine's are the same whatever the tokenizer): each hash id's block is
// a fixed function of the seed and the id, its first 4 tokens spelling
// the id in base 29,900 (distinct ids, distinct blocks), the others
// drawn, all in [100, 30,000) (below any vocabulary's size, clear of
// special tokens), the last block cut to the row's length.
// output_length is max_tokens, with vLLM's ignore_eos so the engine
// generates exactly that many. The rows are replayed open loop, in
// timestamp order, each at (timestamp − first) / (TraceSpeed × Speedup)
// (Request.At; Speedup is the engines' clock), the users sharing one
// cursor as trace's do; TraceWindow and TraceRequests keep the first
// rows. The workload's name carries its load point, "mooncake-x4", so
// that `saltus bench` reports each speed apart. Tags: the input size,
// "in<2k", "in2k-8k", "in8k-32k", "in32k+".
//
// MooncakeConversations writes such a trace of multi-turn conversations
// (bench/traces/mooncake-small.jsonl, 300 rows, is
// DefaultConversationTrace's; `go run ./bench/cmd/mooncaketrace` makes
// it): conversations start at Poisson times, each behind one of 4 shared
// system prompts of 1-4 blocks, with 2-8 turns of 50-1,500-token user
// messages and 30-500-token answers 10-60 s apart, each turn's ids
// extending the previous turn's, prompts kept under 12,000 tokens so
// that a turn and its answer fit the simulator's a100-13b context.
//
// Trace replays (trace, mooncake) and saturation share one schedule
// between their users; Replay.Restart rewinds it, so that every run of
// a benchmark sends the same requests at the same times.
//
// # Text
//
// Generated text is English-like: words from a fixed list of common
// words, each one Llama-3 token with or without a leading space, in
// sentences and paragraphs, so n words and full stops are n tokens.
// TestTextTokenCount measures it with the real Llama-3 tokenizer: exact,
// at 5.5 bytes a token (what the simulator's byte-block mode sees). Text
// gives n tokens of it for a seed. Options.TokensPerWord rescales the
// sizes for a tokenizer that splits more words. Shared texts (prefixes,
// system prompts, documents) are made once per workload and are
// byte-identical for every user; the distinct ones of a workload start
// with distinct words, so they differ in their first token and so in
// their first block of 16 (TestSharedTextsDivergeEarly).
//
// # Concurrency
//
// A Workload is immutable after New (a trace's cursor is atomic; the
// saturation schedule is behind a mutex) and safe for concurrent use. A User is owned by one goroutine: its random source,
// conversation and buffers are its own. Requests returned are the
// caller's; users never touch them again.
package workload
