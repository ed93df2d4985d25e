// Package policy decides where a routed request goes: stage 7 of the
// request path, between the tree's lookup (which backends hold the
// request's prefix) and the forward. It is a set of pure functions over
// values the caller reads once per decision; the only state it keeps is
// the deciding loop's Scratch.
//
// A decision is Decide(cfg, views, hits, keys, useTree, scratch): cfg is
// the policy and its knobs (Config), views are the backends of the
// request's pool as the caller saw them (View: in-flight count,
// routability, and for the prefix policy the prefill model, the pending
// prefill, the engine's scraped load, footprints), hits are the tree's
// holders of the request's block keys (tree.Hit), keys are those keys. It
// returns a Decision: the backend, the reason (X-Saltus-Route and
// saltus_route_decisions_total name it), how many of the request's blocks
// that backend holds, the candidates to retry on, and for the prefix
// policy its estimates. The caller (package shard) builds the views,
// applies the decision and learns from its outcome; nothing here sends,
// counts or learns.
//
// The policies (Names, Parse, Kind):
//   - prefix (the default, cost.go): the least estimated cost of
//     answering, led by the time to first token.
//   - round_robin (baselines.go): the routable backends in turn.
//   - least_request (baselines.go): power of two choices by in-flight count.
//   - consistent_hash (baselines.go): rendezvous hash of the first blocks,
//     with bounded load.
//   - body_hash (cost.go): rendezvous hash of the body's first 512 bytes,
//     no load term (DecideBodyHash).
//   - ranvier (decide.go): the deepest routable holder, else the hash,
//     diverted to the least loaded above LoadFactor × the median load.
//
// The cost model (cost.go, whose opening comment has every term): for each
// routable backend, the estimated time to first token is its base latency
// plus its queue (prefill sent and not answered, the engine's waiting
// requests, the wait for a running slot and for KV room) plus the prefill
// of the blocks it does not hold at its learned rate; the choice compares
// that estimate plus what the request costs the others in flight there
// (load) and the prefixes its miss would evict (evict). A backend that is
// not queueing is never skipped for one that holds less, unless what the
// other lacks is worth less than a near-tie of the estimate; when every holder
// of a hot prefix queues, one newcomer competes with them; a cold prefix
// goes to its group's home or the first backend in its rendezvous order
// unless that is clearly busier. Truth (truth.go) first cuts the holders of
// backends whose engine reports its own KV cache to what the engine
// confirmed.
//
// # Concurrency
//
// Decide, DecideBodyHash, Config.Truth and Config.Validate are pure: they
// read their arguments and write only the views' and hits' slices they are
// documented to change and the Scratch. A Scratch belongs to one event
// loop (the deciding loop's; its round_robin cursor and least_request
// random source are that loop's, without atomics), and a Decision's
// Candidates may alias it until that loop's next decision. A Config is
// read-only while deciding: swap a new one to retune. Names, Parse and
// URLHash are safe from any goroutine.
package policy
