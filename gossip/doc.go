// Package gossip makes saltus routers behind one load balancer a cluster:
// they share the routes they learn and the load they send each backend,
// over hashicorp/memberlist. It is DESIGN.md § Stage 10: the owner
// shards hand it every route change they make (a pending route, a learned
// one, a demotion), and it inserts what peers learned with origin REMOTE
// through the owner shards of this router. A Node's state is owned by its
// goroutines and guarded as marked; Share is what the event loops call,
// and it never blocks.
//
// # Messages
//
// Route changes are batched (Config.BatchInterval, or when a message of
// Config.BatchBytes fills) into the versioned binary messages of
// gossip/wire: the whole block-key chain (8 bytes per block; a chain
// longer than one message is split into parts the receivers join again,
// up to wire.MaxChain blocks, 16M tokens at block size 16), the message
// boundaries, the backend's identity key and the age. Each batch goes at
// once to every alive or suspect peer as one UDP packet (memberlist's
// SendBestEffort, encrypted with the cluster key): Config.GossipInterval
// says why not through memberlist's piggybacked broadcasts. A malformed
// message, or one of an unknown version, is dropped and counted.
//
// Every Config.LoadInterval a node reports its requests in flight and
// pending prefill tokens per backend through memberlist's
// TransmitLimitedQueue (bounded here by Config.QueueLimit, the most
// retransmitted pruned first, counted), piggybacked on its gossip every
// Config.GossipInterval to Config.GossipNodes random peers; a newer report
// replaces an older one still queued. A load that changed is also sent at
// once to every peer, checked every Config.BatchInterval. Each node sums its live peers' latest reports per
// backend into backend.Backend's peer load, which the routing policy adds
// to its own. A peer that leaves or dies is dropped at once (memberlist's
// leave event), and a report not refreshed within Config.LoadTTL expires
// even before memberlist notices.
//
// A joining or restarted node gets each peer's most recently used routes
// (up to Config.SnapshotRoutes and Config.SnapshotBytes) in memberlist's
// push-pull exchange, which also runs every Config.PushPullInterval with a
// random peer and so heals what broadcasts lost. A Join peer that is not
// a member is joined again every Config.ReconnectInterval: a partition
// that outlasted memberlist's gossip to the dead heals that way.
//
// # Identity
//
// Backends are named the same on every router by backend.Backend.Key, the
// hash of the configured name or else the normalized URL: a route learned
// on one router names the same engine on all of them, whatever order
// their backends were added in. A route for a backend this router does
// not have is skipped, counted.
//
// # Concurrency
//
//   - Share: any goroutine (the owner loops): a non-blocking send on the
//     bounded outbox; a full outbox drops the change, counted.
//   - The batch goroutine (gossip.batch) owns the Batcher: it drains the
//     outbox, emits messages to the queue, sends the load report and
//     expires peers' reports.
//   - memberlist's goroutines call the delegates: NotifyMsg decodes under
//     Node.mu (its scratch, the reassembler, the peer table), then hands
//     whole routes to the Table, which posts them to the owner loops'
//     bounded mailboxes; LocalState waits up to a second for the loops'
//     most recent routes (Table.Recent), never on a loop.
//   - gossip.reconnect rejoins missing Join peers (it waits on the
//     network).
package gossip
