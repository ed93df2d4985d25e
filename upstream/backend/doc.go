// Package backend is the upstream side of the serving path (DESIGN.md §
// Stage 8): the registry of backends (a [Set]), their health, and
// [Set.ForwardOnLoop], the one upstream transport: it proxies a request
// to a backend on the event loop of the client's connection and relays
// the answer to that connection, for every route and every policy,
// streamed or not.
//
// The transport (loop.go): per (loop, backend) a pool of keep-alive
// upstream connections (reactor.Loop.DialUpstream), used LIFO, bounded
// by MaxConnsPerBackend divided among the loops (a loop whose share is
// busy tries the next candidate at once), dialed within ConnectTimeout,
// idle ones closed after IdleConnTimeout; the request written from the
// client's (hop-by-hop headers dropped, X-Request-ID propagated or
// generated); the response parsed incrementally (respparse.go). One
// attempt state machine: connect, send, head, body; before the head a
// failure goes to the next candidate, at most MaxRetries more sends
// (and one more send on a fresh connection when a pooled one the server
// had closed breaks before any byte: staleRetry); breaker accounting on
// every head and failure; no candidate answering is a 502 listing each
// backend tried and why, with Retry-After; no head within
// FirstByteTimeout, or RequestTimeout passed, a 504.
//
// Answers: an SSE answer is relayed event by event as it comes
// (loopstream.go, sserelay.go: the usage chunk saltus asked for removed
// when the client did not ask, usageopt.go); a stream silent for
// StreamIdleTimeout ends with an SSE error event, as does one whose
// upstream dies (never a fabricated [DONE]). Any other answer is
// buffered whole up to MaxResponseBody and answered with one write;
// a longer one is relayed as it comes (spill.go). A client that leaves
// closes the upstream connection at once, head or not (the reactor's
// gone hook, and the sweep every 50 ms): the only way an engine learns
// that nobody reads its generation.
//
// Backpressure: gnet cannot stop reading one connection, so a loop
// cannot pause an upstream for a slow client; instead a stream ends once
// its client owes 4 MiB, and a spilled answer once it owes
// MaxResponseBody (at least 4 MiB), the upstream closed and counted
// (saltus_stream_overflow_total). The reactor's own outbound bound
// (MaxOutboundBytes) stops reading a client's requests while its answers
// wait.
//
// Health: an active probe per backend GETs HealthPath every
// HealthInterval while it is healthy, every HealthDownInterval (1 s)
// while it is down or tripped; HealthFailsDown failures in a row mark it
// down, HealthOKUp successes in a row (1 by default) up again, as does a
// passive success (backends start up). A passive breaker trips after
// BreakerFails connect errors or 5xx answers in a row, probes at once,
// and keeps the backend unhealthy until one probe succeeds (so without
// Start, a tripped backend stays tripped). Draining backends are healthy
// but not routable. Probes, /v1/models and the engine scrape use a
// fasthttp.HostClient of 4 connections per backend (ctl), apart from the
// requests' connections, so a saturated backend still answers them.
//
// Answers saltus makes itself name backends as Config.BackendHeader says
// (URL or name). The loop path's histograms and newly seen status codes
// are written by a goroutine ("backend-loop-metrics") a sweep later,
// since their updates take a mutex.
//
// Backend URLs are http://host:port or https://host:port: a base path
// prefix is rejected, since the engines serve /v1 at their root. An https
// backend's requests dial through reactor.Loop.DialUpstreamTLS (the
// handshake on the dial goroutine, verified against Config.TLS's roots,
// the system's by default, and the URL's host), its probes and scrape
// through the control client's fasthttp TLS.
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
// saltus_backend_breaker_trips_total{backend}, saltus_proxy_in_flight (requests in
// flight on the loop path) and saltus_backend_overload_total (requests
// refused over MaxInFlight).
//
// # Concurrency
//
// A Set and its Backends are safe for concurrent use: the backend list is
// an immutable snapshot behind an atomic.Pointer (Add, Remove and Drain
// build and swap a new one under a mutex), per-backend state is atomics.
// The loop path's state (pools, connections, requests) is kept in its
// reactor.Loop (a reactor.Part), owned by that loop and touched only
// from that loop's callbacks; ForwardOnLoop runs on
// the client's loop, and so do its hooks; Close posts to each loop and
// waits. Every goroutine starts through a rules.Group: the metrics
// flusher in the Set's own group, joined by Close; probes in the group
// given to Start; Models' fetches in a group of their own, joined before
// it returns. The one exception is fasthttp's own idle-connection
// cleaner (HostClient.connsCleaner), which exits once its client has no
// connections left.
package backend
