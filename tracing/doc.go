// Package tracing exports one OpenTelemetry span per request saltus
// serves, over OTLP/HTTP, with the official Go SDK. It sits beside the
// request path: a shard's loop chooses a request's trace and span IDs and
// its sampling decision when it forwards the request (Loop.Begin, the
// traceparent the engine gets), and hands the finished request to the
// Tracer (a reqlog.Sink), which builds and exports the span on its own
// goroutine. Each Loop is owned by its shard's event loop; the Tracer is
// safe for concurrent use.
//
// # Mechanism
//
// On the loop: Loop.Begin parses the client's traceparent (W3C Trace
// Context), keeps its trace ID and, as the parent, its span ID (else
// draws a new trace ID), draws saltus's span ID from the loop's own
// random source (no lock), and decides sampling as the configured
// sampler would (Sampler: the SDK's own rules, checked against them in
// sampler_test.go). The forwarded request carries a traceparent whose
// parent is saltus's span, so the engine's span, if it makes one, is its
// child; tracestate passes through (its first 512 bytes). Nothing else
// happens on the loop: when the request ends, Log copies a sampled
// request's record (timestamps, attributes' values, each string cut at
// 256 bytes) into a small value sent to a bounded queue without waiting;
// when it is full the span is dropped and counted
// (saltus_tracing_spans_dropped_total).
//
// One span per request, of kind SERVER: the forward is saltus's whole
// work on it, retries are an attribute, and a CLIENT span beside it
// would double what the collector stores; the engine's span is the
// SERVER span's child directly.
//
// Off the loop, one goroutine (a rules.Group's) turns each value into an
// SDK span with the IDs chosen on the loop (idGenerator reads them from
// the context given to Start) and the recorded timestamps
// (trace.WithTimestamp), and ends it into the SDK's BatchSpanProcessor,
// which exports batches to the collector. The processor blocks that
// goroutine when its queue is full, so spans are lost in one counted
// place only, the queue from the loops; a slow or dead collector fills
// both queues and costs requests nothing. Failed exports are counted and
// logged at most every 10 s.
//
// # Concurrency
//
//   - A Loop is owned by one event loop (a shard's): Begin is loop only.
//   - Tracer: Log (the reqlog.Sink) never blocks and may run on any
//     goroutine (a loop); Close any goroutine but a loop.
package tracing
