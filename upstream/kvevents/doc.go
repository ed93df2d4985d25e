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
// (Config.Bind true, one Subscriber for the fleet; ParseTopic). vLLM's
// optional replay endpoint (a ROUTER answering [empty, start seq] with
// the buffered batches from it, then seq -1) is not used yet: a gap marks
// the source stale (Message.Stale), which is what a consumer does when
// replay fails too.
//
// # Concurrency
//
// A Decoder or Encoder is used by one goroutine. A Subscriber runs one
// goroutine (rules.Group "kvevents.<endpoint>") that owns the socket, the
// decoder and the per-source sequence state; it hands each Message to
// the caller's channel without blocking (a full channel drops the batch,
// counted, and marks its source stale). Start, Close and Stats are safe
// from any goroutine. The ZMQ library (go-zeromq/zmq4) runs its own
// reader goroutines per connection, ended by closing the socket.
package kvevents
