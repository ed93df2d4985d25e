// Package tokenpool turns rendered prompt segments into token ids for the
// router: stage 4 of DESIGN.md. Each shard owns a segment cache; on a miss
// the text goes to the shard's tokenizer worker (subpackage tokenizer does
// the encoding itself), with bounded fallbacks so that an event loop never
// waits.
//
// Today the package holds the segment cache; the workers, their rings and
// the fallbacks land with the rest of the tokenizer-pool issue.
//
// # Concurrency
//
// A SegmentCache is owned by one shard's event loop and is not safe for
// concurrent use; every method is "loop only".
package tokenpool
