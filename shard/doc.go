// Package shard is saltus's routing core: for every request the reactor
// hands it, it finds the backend most likely to hold the request's prefix
// in its KV cache, forwards the request there (through upstream/backend) and
// learns from the answer.
//
// # Place in the request path
//
// The Router is the reactor's Handler. On the connection's event loop it
// runs stages 2 to 5 (DESIGN.md § Request path): decode the OpenAI body
// (package openai), render a chat with the model's template (tokenpool/chat),
// tokenize the segments through the loop's tokenpool.Shard (cache hit: at
// once; miss: a worker, whose completion comes back to the loop), and cut
// the ids into block keys (tree.BlockKeys; byte-block keys, tokenpool.
// ByteBlockKeys, without a tokenizer or when the pool bails out). Message
// ends, block-aligned, become the tree's boundaries. Stage 6 posts the
// lookup to the owner shard (first key mod loops), which matches the keys
// in its tree, decides (package policy, a pure function of the views
// decide.go reads from the backends: the least estimated cost) and
// calls backend.Set.ForwardOnLoop on the connection's loop with
// X-Saltus-Route (decided on another loop, the request is posted back
// to the connection's loop first, unrefused: it was admitted and
// bounded where it came in, and must run once), for every route and
// policy, streamed or not.
// When the answer's head is 2xx (Hooks.Events.FirstByte, on that loop)
// the keys are inserted on the owner shard with the backend that answered
// (stage 9; Router.learn says why that one). The decided backend was
// already inserted as a pending holder when the decision was made, so
// that concurrent siblings follow it; an attempt that gets no 2xx from it
// removes that holder again (pending.go). Routed chat and completion
// answers' usage is compared with the prediction, and a holder the engine
// contradicts is demoted (feedback.go).
//
// That is the default policy, "prefix". Config.Policy selects a baseline
// instead, so that the benchmark can compare on identical backends:
// "round_robin", "least_request" (power of two choices) or
// "consistent_hash" (rendezvous hash of the first blocks with bounded
// load), rules in policy/baselines.go. They decide on the connection's loop right
// after stage 5, never post a lookup to the owner shard and learn nothing;
// X-Saltus-Route names the policy as its reason ("0/12 round_robin").
//
// vLLM's pooling and scoring routes (embeddings, /pooling, /classify,
// /score, /rerank) are keyed by their input or query and routed by prefix
// when saltus reads their body (pooled), else as the next ones. Audio
// uploads (their multipart form's model), /tokenize, /detokenize and
// other /v1/* POSTs go to the least loaded
// backend and teach nothing; GET /v1/models is answered off the loops by
// backend.Set.Models; other paths get 404, wrong methods 405.
//
// # Concurrency
//
//   - One Shard per event loop, kept in its reactor.Loop (a reactor.Part)
//     and owned by that loop: its tree, tokenizer
//     shard, decode and render scratch, footprints, response ids and
//     sessions, and its handles: the loop's part of the backend set (the
//     loop path's upstream connections), its post and poster, and its tick
//     (Router.Tick, from the reactor's sweep). Every message to another
//     shard goes through its post, whose one bound is the loop's mailbox
//     (reactor.Config.MailboxSize; when full: a lookup routes without the
//     tree, reason fallback; a learn is dropped; both counted). Messages
//     carry the request's own key slices (allocated per request, never
//     written after dispatch), never pointers into connection buffers.
//   - A job (one request in flight) belongs to one goroutine at a time:
//     the connection's loop, then the owner's loop, then the proxy
//     goroutine's hooks, which only read it.
//   - round_robin's cursor and least_request's random source are each
//     loop's own (its decision scratch): no atomic and no lock on the
//     hot path; each loop cycles (or draws) on its own.
//   - The backend list is backend.Set's immutable snapshot; in-flight
//     counts and health are its atomics, read once per decision.
//   - Each loop's one tick (Router.Tick, run by the reactor's OnSweep
//     every 50 ms on that loop) drives the loop path's deadlines and idle
//     upstream connections (backend.Set.Tick) and, every
//     MaintainInterval, the shard's maintenance step (MaintainBudget slots
//     of tree.Maintain, backends removed from the Set forgotten, gauges
//     published): no goroutine and no message of its own, off the request
//     path and independent of traffic.
//   - GET /v1/models waits on the network, so it is queued (bounded,
//     overflow 503) to two goroutines of the Router's rules.Group.
//   - A chat or completion body over Config.OffloopBytes is decoded and
//     rendered on Config.DecodeWorkers goroutines of that Group (queue
//     Config.DecodeQueue, overflow 503 with Retry-After, counted); the job
//     belongs to the worker until it posts stage 4 back to its loop, and
//     what it decoded is its own (offload.go).
//   - Cluster (cluster.go): the owner loop hands each change it makes to
//     its tree to Peers.Share, which never waits (gossip's bounded
//     outbox); ApplyRemote, Restore, Recent and Saved run on gossip's or
//     the state saver's goroutines and reach the trees only by posting
//     to the owner loops (at most 256 routes per message).
//   - API keys (keys.go, optional): the key set is package keys'
//     immutable snapshot behind an atomic pointer, its limiters atomics
//     shared by every loop; serve looks the key up before any body work,
//     with no lock and no message.
//   - Request records (reqlog.go): with a sink (UseSinks, before the
//     loops start) every answer's end hands one reqlog.Record to it: a
//     forward's Done fills its loop's scratch Record (the Shard's rec),
//     saltus's own answers off the loops (fail, /v1/models) a Record
//     each. Without one, no record and no allocation.
//   - Tracing (UseTracer, optional): each Shard's tracing.Loop (its own
//     random source, no lock) chooses a request's span IDs and sampling
//     on the loop that decides, before the forward (job.traceHeaders);
//     the engine gets the traceparent (backend.Hooks.ReqHeader), the
//     request's record the IDs, and the Tracer, one of the sinks, the
//     rest.
//   - Counters are atomics; Serve is loop only, Explain, RouteStats and
//     Close any goroutine but a loop.
package shard
