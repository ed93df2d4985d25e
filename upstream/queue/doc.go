// Package queue is the gateway queue of one model pool: a bounded, ordered
// set of requests waiting for an engine slot. A request waits in it when no
// engine of its pool has a free slot (admission, before routing:
// shard/gate.go); a slot freed by an answer pops the next
// one at once, the queue deciding who goes next and the routing policy
// where. Its state is owned by the event loop that owns the pool.
//
// The order is the request's priority (vLLM's field, lower first), then
// weighted fair share between tenants by start-time fair queuing, then
// arrival; [Queue] documents the algorithm and its properties. Past
// Config.MaxEntries a Push is refused and past Config.MaxWait [Queue.Expire]
// hands the entry back: the caller answers both with 429/503 and
// Retry-After. The queue is a pure data structure: no clock (the caller
// passes now), no goroutines, no metrics library (counters in [Stats]).
//
// # Concurrency
//
// A Queue is owned by one goroutine, the pool's event loop, and has no
// locks; other loops reach it by message. Every method is "loop only".
package queue
