// Package kvevents reads the KV-cache events inference engines publish
// (vLLM's KVEventBatch over ZMQ) and writes them, for the simulator. It
// sits beside the upstream transport, off the request path: what it
// decodes will feed the routers' exact view of each engine's cache
// (issue 31), which no request waits on. A Subscriber's state is owned
// by its one goroutine; decoded batches leave it as values.
//
// # Wire format
//
// vLLM (vllm/distributed/kv_events.py, ZmqEventPublisher) sends one ZMQ
// message per batch of three frames: the topic, the sequence number (8
// bytes, big-endian, from 0 per publisher), and the msgpack payload, a
// KVEventBatch: ts (float seconds), events, data_parallel_rank (optional).
// An event is tagged BlockStored (block_hashes, parent_block_hash,
// token_ids, block_size, lora_id, medium, lora_name, then defaulted
// extra_keys, group_idx, …), BlockRemoved (block_hashes, medium,
// group_idx) or AllBlocksCleared. Two layouts exist: msgspec's array_like
// structs (a batch [ts, events, dp_rank], an event [tag, fields…],
// trailing defaults omitted) and, since vLLM PR #42892, maps keyed by
// field name with the tag under "type". Block hashes are ints in older
// versions and 32-byte sha256 digests (msgpack bin) in newer ones.
// Decoder takes both layouts and both hash forms, skips fields it does
// not use (extra_keys; unknown ones a newer vLLM adds), and keeps events
// of an unknown tag as Kind Unknown. Encoder writes either layout.
//
// Decode refuses a payload whole when it is over a Limit (bytes, events,
// hashes per event, tokens per event), malformed (wrong types, trailing
// bytes, values nested deeper than 8 in a skipped field, a hash longer
// than 32 bytes, a token id outside uint32) or cut short; Reason names
// the refusal for the drop counter. Allocation is bounded by the payload:
// no slice is sized by a declared length beyond the bytes left.
//
// # Wirings
//
// vLLM binds its PUB socket (tcp://*:5557) and a subscriber connects to
// it: Config.Bind false, one Subscriber per engine. llm-d wires it the
// other way: the router binds one SUB socket, every engine's PUB
// connects to it, and the topic kv@<ip>:<port>@<model> names the engine
// (Config.Bind true, one Subscriber for the fleet; ParseTopic): engines
// that dial have no replay endpoint saltus could name, so there a gap
// marks the source stale (Message.Stale), which is what a consumer does
// when a replay fails too.
//
// # Replay
//
// vLLM's publisher can also bind a ROUTER socket (KVEventsConfig
// replay_endpoint, e.g. tcp://*:5558) that keeps its last buffer_steps
// batches (default 10,000; a deque, the oldest dropped) and answers a
// request for them (vllm/distributed/kv_events.py,
// ZmqEventPublisher._service_replay):
//
//   - request: one frame, the first sequence number wanted, 8 bytes
//     big-endian; a REQ socket sends it as [empty, start] and the ROUTER
//     reads [identity, empty, start]. vLLM ignores a request of another
//     frame count.
//   - answer: for every buffered batch whose seq ≥ start, oldest first,
//     [identity, empty, seq (8 bytes BE), payload], the payload the bytes
//     the PUB socket sent; then the end marker [identity, empty, -1 as a
//     signed 8-byte BE integer (ff…ff), empty payload]. The identity
//     routes it back, so the client sees [empty, seq, payload]. A start
//     older than the buffer gets what the buffer holds (its first seq
//     then is above start: the batches before are gone); a start beyond
//     it gets the end marker alone. Nothing but that first seq says how
//     far back the buffer goes. vLLM serves replays on its publishing
//     thread, between two live batches.
//   - llm-d-inference-sim (pkg/kv-cache/kv_events_replayer.go) answers
//     the same requests with the topic too: [identity, empty, topic, seq,
//     payload], and its end marker is [identity, empty, empty topic,
//     ff…ff, empty].
//
// vLLM's example subscriber uses a REQ socket; saltus uses a DEALER (it
// sends the empty delimiter itself), as a REQ socket in libzmq takes one
// reply per request, not a stream. parseReplay takes both answers.
//
// A connecting Subscriber with Config.ReplayEndpoint replays what it
// missed: when a batch follows missed ones (its seq skipped some, or
// batches were dropped here: malformed, over a limit, no room in the
// channel), it holds that batch and asks for the missed ones, one replay
// at a time, on a new connection bounded by ReplayTimeout (dial,
// handshake, request and answer). Live batches that arrive meanwhile are
// held too (MaxPending; one more abandons the replay). If every missed
// batch comes back, in order, the replayed batches go out first, then
// the held ones, none stale; a held batch that followed missed batches
// of its own starts the next replay. Otherwise (the first missed batch
// is gone, one is missing, a timeout, an error, a malformed reply or
// batch) the held batches go out as they would have, the first stale.
// A start, a restart of the publisher (seq went back) or a reconnect is
// stale as before: a reconnected publisher may be a new process whose
// sequence merely reached the old one's, and its buffer says nothing of
// the blocks stored before it. Each reply's frames are bounded by the
// transport's MaxFrame, each payload by Limits, a replay's payload bytes
// by MaxReplayBytes.
//
// A Publisher with PublisherConfig.ReplayEndpoint answers as vLLM does
// (the simulator's, tests'), from a ring of its last ReplayBuffer
// batches.
//
// # Concurrency
//
// A Decoder or Encoder is used by one goroutine. A Subscriber's Run
// goroutine (in the caller's rules.Group) owns the socket, the decoder,
// the per-source sequence state and the held batches; per socket it
// starts "kvevents.recv", which reads the socket and hands messages over
// an unbuffered channel, and, while one runs, "kvevents.replay", which
// owns the replay's socket and decoder and hands back its result. Run
// hands each live Message to the caller's channel without blocking (a
// full channel drops the batch, counted, and marks its source stale);
// the batches a replay releases wait for room, ReplayTimeout at most in
// all. A Publisher's Run starts "kvevents.replay" to answer replay
// requests, when it has a replay socket. Start, Close and Stats are safe
// from any goroutine. The ZMQ library (go-zeromq/zmq4) runs its own
// reader goroutines per connection, ended by closing the socket.
package kvevents
