// Package backend is the upstream side of the serving path (DESIGN.md
// stage 8): the registry of backends (a [Set]), their health, and
// [Set.Forward], which proxies one request to a backend with fasthttp and
// relays the answer, SSE event by SSE event, to a [Sink] (the reactor's
// exchange).
//
// Each backend has one fasthttp.HostClient for requests: keep-alive
// connections, pooled, bounded by MaxConnsPerBackend (a request finding
// them all busy waits up to ConnectTimeout, then tries the next
// candidate), dialed with ConnectTimeout, idle ones closed after
// IdleConnTimeout; and a second one of 4 connections for probes and
// /v1/models, so that a saturated backend still answers its probes.
// Response bodies are streamed, never buffered whole (except known-length ones up to 256 KiB, answered with
// one Respond). A request's memory is bounded by one 32 KiB relay buffer
// and fasthttp's 16 KiB read buffer: Sink.Write blocking (a slow client)
// stops the upstream reads, and TCP flow control then stops the backend.
//
// Health: an active probe per backend GETs HealthPath every
// HealthInterval while it is healthy, every HealthDownInterval (1 s)
// while it is down or tripped; HealthFailsDown failures in a row mark it
// down, HealthOKUp successes in a row (1 by default) up again, as does a
// passive success (backends start up). A passive breaker trips after
// BreakerFails connect errors or 5xx answers in a row, probes at once,
// and keeps the backend unhealthy until one probe succeeds (so without
// Start, a tripped backend stays tripped). Draining backends are healthy
// but not routable.
//
// Timeouts: FirstByteTimeout bounds the wait for a response head (for a
// non-streamed answer, the whole generation: 10 m by default),
// RequestTimeout (off by default) the whole request. Answers saltus
// makes itself name backends as Config.BackendHeader says (URL or name);
// 502 (nothing answered: each backend tried and why) and 503 carry
// Retry-After: 1.
//
// Cancellation: once the head has arrived, a client that leaves (Sink.Gone)
// closes the upstream connection at once: the only way an engine can
// learn that nobody reads the generation any more. Before the head, fasthttp keeps the connection to
// itself, so a client that leaves is noticed when the head arrives (at
// once for a streamed answer: vLLM sends the head first) or when
// FirstByteTimeout passes. Close, which needs no particular
// connection, closes them all.
//
// The loop path ([Set.ForwardOnLoop], loop.go; Config.LoopIO, serve
// --upstream-io): for chat, completion and responses requests, streamed
// or not, the upstream I/O runs on the client connection's event loop
// over the reactor's upstream connections (reactor.Server.DialUpstream),
// per (loop, backend) keep-alive pools, the response parsed incrementally
// (respparse.go); an SSE answer relayed event by event as it comes
// (loopstream.go, through the sseRelay Forward uses too), any other
// buffered whole up to MaxResponseBody (over it: relayed as it comes,
// spill.go), then answered with one
// RespondLoop. It keeps Forward's behaviour:
// candidates, retries, 502/503/504 bodies, the breaker, in-flight
// counts, metrics, hooks (run on the loop), and shares its code where
// the two would otherwise be written twice: the SSE relay (sseRelay),
// the stale-connection rule (staleRetry), a stream's deadlines
// (Config.streamTimeout), the error bodies and answer headers. It
// differs in three ways: a client that leaves closes the upstream
// connection at once, head or not (the reactor tells the loop, and the
// sweep checks every 50 ms); a loop whose share of MaxConnsPerBackend
// is busy tries the next candidate at once instead of waiting up to
// ConnectTimeout; and a stream whose client does not read is ended at
// 4 MiB owed (a loop cannot wait, and gnet cannot pause one
// connection's reads) where the proxy goroutine waits for the client
// (the reactor's outbound bound) up to its write-stall timeout. The
// goroutine path stays for the other paths (embeddings, files, audio:
// bodies of any size and type, relayed with that backpressure) and for
// --upstream-io goroutine. Its histograms and newly seen status codes are written
// by a goroutine ("backend-loop-metrics") a sweep later, since their
// updates take a mutex.
//
// Backend URLs are http://host:port only: a base path prefix is rejected,
// since the engines serve /v1 at their root.
//
// Metrics (in the Set's *metrics.Set): saltus_backend_in_flight{backend},
// the prefix policy's per-backend inputs saltus_backend_pending_prefill_tokens,
// saltus_backend_footprint_tokens and saltus_backend_kv_pinned_tokens
// {backend} (gauges, the router's own counts),
// saltus_backend_requests_total{backend,code} (the status the client got
// for that backend, 504 included), saltus_upstream_errors_total{backend,
// kind=connect|timeout|reset|midstream|stream_idle}, saltus_retries_total,
// saltus_backend_ttfb_seconds{backend} and
// saltus_backend_request_duration_seconds{backend} (Prometheus
// histograms with le buckets from 1 ms to 10 min, metrics.go; Update takes
// a mutex, fine off the event loops),
// saltus_backend_breaker_trips_total{backend}, saltus_proxy_in_flight and
// saltus_backend_overload_total (Forwards refused over MaxInFlight).
//
// # Concurrency
//
// A Set and its Backends are safe for concurrent use: the backend list is
// an immutable snapshot behind an atomic.Pointer (Add, Remove and Drain
// build and swap a new one under a mutex), per-backend state is atomics.
// Forward never blocks, so an event loop may call it; the answer is
// written from its proxy goroutine. The loop path's state (pools,
// connections, requests) is owned by its loop and touched only from that
// loop's callbacks; Close posts to each loop and waits. Every goroutine starts through a
// rules.Group: proxy goroutines (at most MaxInFlight) and their watchers
// (one per streamed answer, closing the upstream when the client leaves)
// in the Set's own group, joined by Close; probes in the group given to
// Start; Models' fetches in a group of their own, joined before it
// returns. The one exception is fasthttp's own idle-connection cleaner
// (HostClient.connsCleaner), which exits once its client has no
// connections left.
package backend
