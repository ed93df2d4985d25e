// Package reactor is saltus's HTTP/1.1 server on gnet event loops: stage 1
// of the request path (DESIGN.md § Stage 1: accept, framing, keep-alive), and the
// transport every answer goes back through.
//
// # Place in the request path
//
// Each of Config.Loops gnet event loops (one per shard) owns its
// connections. When bytes arrive, the loop frames requests with [parse], a
// pure function over the connection's buffered bytes (peeked, never
// copied unless gnet must join two buffers): it waits until the head, and
// the body by Content-Length or chunked encoding, are complete, then
// discards exactly the bytes the request used. Each request becomes an
// [Exchange] and goes to [Handler.Serve] on the loop, in arrival order.
// The handler answers now or later, from any goroutine.
//
// The request target is normalized before the handler sees it
// (httplex.NormalizePath: dot segments removed, unreserved escapes
// decoded, the rest in uppercase hex), so Request.Path is what routing
// decides on and what a proxy forwards; an encoded "/" or "\", a %2E dot
// segment, an encoded control character or a path above the root is a
// 400. Absolute-form targets keep their path and query; "*" is for
// OPTIONS only. An HTTP/1.1 request needs exactly one valid Host.
//
// The reactor answers framing errors itself, with an OpenAI-style JSON
// body, and closes: 400 malformed HTTP, 431 head over MaxHeaderBytes, 413
// body over MaxBodyBytes (both name the limit), 501 a Transfer-Encoding
// other than chunked, 503 over MaxConns (with Retry-After). Each carries
// the refused request's X-Request-ID when its head had a readable one,
// else a generated one ([NewRequestID]), and is reported to a Handler
// that implements [OwnAnswers], which Serve never sees. A head not complete HeaderTimeout after its first byte, a
// keep-alive connection idle for IdleTimeout, and an answer whose bytes
// have not drained for IdleTimeout are closed. "Expect: 100-continue" gets
// "100 Continue" before the body is read (unless earlier pipelined answers
// are still owed: then the client's own timer sends the body). HTTP/1.0
// connections close after the answer unless the request asked for
// keep-alive.
//
// # Answers
//
// Pipelined answers go out in request order: a later exchange's bytes are
// parked until the earlier ones ended. A whole answer ([Exchange.Respond])
// may come from any goroutine: it turns into a message run on the
// connection's loop (gnet's EventLoop.Execute), where the loop writes
// with gnet's Conn.Write; [Exchange.RespondLoop] is the same on the loop,
// without the message. Streamed answers are written on the connection's
// own loop (streamloop.go: chunked for HTTP/1.1, each write one chunk
// sent at once, so SSE events reach the client without a flush;
// close-delimited for HTTP/1.0); they never block, and return the bytes
// the connection owes its client, and the caller applies its own bound
// (the backend's loop path ends a stream whose client let 4 MiB pile up).
//
// gnet's queues are unbounded, so the reactor bounds what it puts in
// them. The loop stops parsing a connection's requests while the answers
// it owes exceed MaxOutboundBytes, or maxPipeline (8) exchanges are open
// (saltus_reactor_read_paused_total), and resumes within 50 ms of the
// client draining; a client that never reads is closed after IdleTimeout
// without progress. gnet's AsyncWrite is not used: its callback fires
// when the bytes reach gnet's outbound buffer, not the socket, so it
// cannot bound anything; and gnet reports no "outbound drained" event, so
// each loop looks at its paused connections' buffers on every tick.
//
// # Loops, their parts, and Post
//
// Each event loop is one value, a [Loop], made by NewServer
// ([Server.Loops]) and handed to everything that runs on the loop:
// [Exchange.Loop], [Upstream.Loop], the [Server.OnSweep] hook. It holds
// the reactor's state of the loop (connections, mailbox, cork buffer,
// scratch), and the packages above keep their own per-loop state in it
// by type ([Part], part.go: the backend set's upstream connections, the
// router's shard), so no loop number indexes tables across packages;
// [Loop.Index] remains for metric labels and for partitions that name a
// loop by number. docs/ARCHITECTURE.md lists the parts and their owners.
//
// gnet 2.9.7 hands out an event loop (whose Execute runs a function on it)
// only through a connection (Conn.EventLoop); the engine offers no list of
// loops. Start therefore connects to itself once per loop: round-robin
// balancing gives N connections to N loops, each loop's first connection
// binds it to a Loop, and the probes are closed. [Loop.Post] queues a
// function on the loop's own mailbox (mailbox.go: gnet's lock-free queue,
// bounded by a per-loop count, MailboxSize), which the loop runs as it
// leaves a traffic callback; only a loop outside one is woken, with
// Execute (an eventfd write). Under load most posts find their loop busy
// and cost no system call (saltus_reactor_mailbox_wakes_total against
// _posts_total: about 1 in 10 in `make bench-serve`), where Execute on
// every post had made the hop to a prompt's owner shard and back the
// largest cost of routing after the sockets themselves. [Loop.Poster] is
// the same without the MailboxSize bound, for callers that bound their own
// posts and must not lose one (tokenpool's completions). The timeout sweep
// is one Execute per loop at most.
//
// # Upstream connections
//
// [Loop.DialUpstream] makes a client connection to an upstream owned by
// the loop, for handlers that do their upstream I/O on the loop (the
// backend's loop path): the connect runs on a "reactor.dial" goroutine
// within its timeout, gnet's EventLoop.Enroll moves the socket onto the
// loop, and from then on its [UpstreamHandler] gets OnUpstreamOpen,
// OnUpstreamData and exactly one OnUpstreamClose there (a failed connect
// is an OnUpstreamClose with the dial's error). gnet hands every event of
// the engine to one handler, so the conn's context type (*Upstream or a
// client conn) decides; upstream connections count neither toward
// MaxConns nor the client metrics (saltus_upstream_conns,
// saltus_upstream_dials_total, saltus_upstream_dial_errors_total).
// [Server.OnSweep] runs a hook on every loop each 50 ms for their
// deadlines; [Exchange.RespondLoop] answers on the loop without a message;
// [Exchange.SetGoneHook] tells the loop at once when the client leaves.
// While OnUpstreamData runs, what it answers to client connections is
// held in the loop's cork buffer (at most 64 KiB, one connection at a
// time) and written with one write when it returns (cork.go): the
// events of one upstream read reach the client in one syscall.
//
// # TLS (Config.TLS)
//
// With Config.TLS set the listen address speaks TLS 1.2/1.3 (ALPN
// "http/1.1" only). Handshakes never run on a loop; records do (tls.go,
// tlswire.go). A Go acceptor ("reactor.tls-accept") owns the TCP listener;
// each connection's handshake runs on a "reactor.tls" worker within
// TLSHandshakeTimeout, through the socket itself. Then gnet enrolls the
// socket on a loop (round-robin, EventLoop.Enroll, which dups it) with a
// context (*tlsPeer) that marks it a client connection and carries its
// tlsWire: the net.Conn under the handshake's crypto/tls.Conn, which on
// the loop reads the ciphertext gnet buffered (answering a temporary
// "would block" once it is used, which crypto/tls survives with a partial
// record kept) and stages the records it writes for one gnet write. On
// each read the loop decrypts every whole record into its plaintext buffer
// and frames from there as from gnet's buffer on a plain connection;
// answers are encrypted as they are written. Framing, timeouts, bounds,
// pausing (ciphertext waits in gnet's buffer, counted against the same
// bound) and drain are the same code. A request that arrived with the
// handshake's last flight is held by crypto/tls, so OnOpen wakes the
// connection once. The client's close_notify ends the connection as EOF
// does; the loop's close sends close_notify first. Bounds: MaxConns counts
// TLS connections from accept (handshaking or on a loop) and
// MaxTLSHandshakes those still handshaking; over either the connection is
// closed before a byte is read (saltus_tls_rejected_total{reason}). Failed
// handshakes are counted by reason (saltus_tls_handshakes_total{result=
// "error",reason}); plain HTTP on the TLS port gets a plain 400. gnet
// 2.9.7 cannot run without a listener, so the engine listens on a unix
// socket in a private (0700) temporary directory, used only by
// discoverLoops' probes; any other connection there is closed. Unlike
// gnet's, the TLS listener closes at StopAccepting. https upstreams
// (DialUpstreamTLS) work the same way from the client side.
//
// Why handshakes stay off the loops: one full handshake costs 0.5–1.1 ms
// with an ECDSA P-256 certificate and 1.4–1.7 ms with RSA-2048 (TLS
// 1.2–1.3, client and server in one process, BenchmarkTLSHandshake); the
// server's signature alone is 31 µs (ECDSA) and 1.2 ms (RSA),
// BenchmarkTLSServerSign. Done on a loop, every RSA handshake would stall
// all of that loop's streams for over a millisecond, and a burst of new
// connections for much longer. A record costs its AEAD (a few µs for 16
// KiB with AES-NI): on the loop, it saves the two extra reads, writes and
// goroutine wake-ups per request of the socketpair bridge this replaced
// (docs/BENCHMARKS.md, TLS, gives both).
//
// # Measured (2 shared cores, Go 1.26, see reactor_timing_test.go)
//
// parse of a 1.2 KB chat request: ~1.9–2.5 µs, 4 allocations. A tiny
// keep-alive GET answered at once: ~42–60k req/s with one loop and the
// client in the same process (net/http: ~27–35k with the same client);
// with two loops and GOMAXPROCS=2 in the same process it falls to ~11k,
// because the client goroutines and the loops (blocked in epoll_wait, a
// raw syscall) fight for two Ps; with the client in another process, one
// and two loops both serve ~40–45k (16 connections). Bench Loops on the
// target machine before choosing the default.
//
// # Concurrency
//
//   - A connection's state (framing progress, its queue of open exchanges,
//     parked answers, timeouts) is owned by its event loop. Other
//     goroutines reach it only through messages (Execute), never a lock:
//     a loop never waits.
//   - An Exchange's Respond and Abort are safe to call from any goroutine,
//     one at a time (whoever answers); RespondLoop, SetGoneHook and the
//     streamed answer are loop only. None blocks. Request, Loop and Gone
//     are any goroutine.
//   - Server methods are any goroutine; Start and Shutdown never on a loop.
//   - A Loop's own state is owned by its loop, except its mailbox (any
//     goroutine posts, through atomics) and its gnet handle (bound once at
//     Start, published by an atomic). Its parts are set before Start (or
//     on the loop) and read on the loop (part.go).
//   - Counters and gauges are atomics. gnet's own goroutines (loops, main
//     reactor, ticker) run under one rules.Group goroutine,
//     "reactor.engine", joined by Shutdown.
//   - A TLS connection's tls.Conn is its handshake worker's until gnet
//     enrolls the socket (the enrollment's queue orders the two), then its
//     loop's, like the rest of the connection.
package reactor
