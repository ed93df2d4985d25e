// Package tokenpool turns a request's rendered prompt segments into token
// ids for the router: DESIGN.md § Stage 4, between the chat template
// (stage 3, tokenpool/chat) and the block keys (stage 5, tree.BlockKeys).
// Subpackage tokenizer does the encoding itself.
//
// # Place in the request path
//
// Each shard's event loop calls [Shard.Tokenize] with the request's
// segments. Every segment is looked up in the shard's [SegmentCache]; if all
// hit, the ids are returned at once, without allocating. Otherwise the
// missing segments (copied) go to a worker as one job, with bounded
// fallbacks, each counted:
//
//  1. this shard's worker, through a bounded single-producer
//     single-consumer ring (Config.RingSize, default 256);
//  2. another shard's worker, round-robin, through that worker's ring for
//     this shard;
//  3. the loop itself, for at most Config.LocalMaxBytes of missing text,
//     if it wins the pool's single local permit (try only, never wait);
//  4. give up: the Result's Reason says why, and the caller keys the
//     request with tree.ByteBlockKeys over its rendered text. A job over
//     Config.MaxJobBytes gives up at once.
//
// Before that, a request whose text costs more than Config.TokenBudget
// (budget.go: bytes of text, a byte of a long run of one class counting
// 32) is cut: only the segments before the cut, and the cut segment up to
// a space, are tokenized; the Result's Cut says where, and the caller keys
// the rest as byte blocks chained to the token blocks ([TailKeys]). The
// cut depends on the text alone, so replicas agree and a growing
// conversation keeps its keys.
//
// A worker's result comes back to the loop through the shard's post
// function (gnet's EventLoop.Execute in the server), where the new ids
// enter the cache and the request's callback runs.
//
// Without a tokenizer the pool runs in byte-block mode: every request gets
// ReasonNoTokenizer and is keyed by 64-byte blocks of its rendered text
// (tree.ByteBlockKeys, whose scheme tree/bytekeys.go documents).
//
// # Concurrency
//
//   - A [Shard] and its SegmentCache are owned by the shard's event loop:
//     Tokenize, and every completion the pool posts, run there. The loop
//     never waits: ring pushes and the local permit are try-only, and the
//     wake-up of a worker is a non-blocking send on a one-slot channel.
//   - A worker goroutine (started through rules.Group, named
//     "tokenpool.worker/i") owns its consumer side of N rings, one per
//     producer shard, so every ring has exactly one producer and one
//     consumer. A job belongs to the loop until pushed, to the worker until
//     it posts the completion, and to the loop again after; it carries
//     copies (texts, cached ids), never pointers into connection buffers.
//   - The encoder (a *tokenizer.Tokenizer) is immutable and shared.
//   - Counters are atomics, written by the loop or a worker and read by
//     Stats and the metrics writer from any goroutine.
//   - [Pool.Close] (any goroutine but a loop) stops the pool: every job
//     submitted gets exactly one completion, the workers are joined.
//
// Bounds: per shard, RingSize jobs at each worker and MaxInFlight jobs
// outstanding in all (so at most MaxInFlight completions in its loop's
// queue); CacheBytes of cache; TokenBudget of tokenizer work and
// MaxJobBytes of missing text per job;
// LocalMaxBytes of text tokenized on a loop per request, one loop at a
// time.
package tokenpool
