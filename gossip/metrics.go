package gossip

import (
	"fmt"
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_gossip_routes_sent_total":          "Route changes (pending routes, learned routes, demotions) this router put in cluster messages.",
		"saltus_gossip_routes_received_total":      "Whole route changes received from peers (split ones once joined) and handed to the owner shards.",
		"saltus_gossip_routes_dropped_total":       "Route changes lost, by reason: outbox_full (this router's queue to the batcher was full), unknown_backend (a peer's route names a backend this router does not have), mailbox_full (the owner shard's mailbox refused it).",
		"saltus_gossip_messages_sent_total":        "Cluster messages queued for broadcast, by kind (routes, load).",
		"saltus_gossip_messages_received_total":    "Cluster messages received, by kind (routes, load).",
		"saltus_gossip_messages_dropped_total":     "Cluster messages dropped, by reason: malformed, version (a format this router does not know), queue_full (pruned from the bounded broadcast queue).",
		"saltus_gossip_split_routes_dropped_total": "Split routes whose parts were not all joined, by reason: inconsistent, evicted (too many pending), expired (parts missing past the timeout; retransmitted duplicates of a joined route end here too).",
		"saltus_gossip_snapshot_routes_total":      "Routes exchanged in memberlist's push-pull (a joiner's snapshot, the periodic anti-entropy), by direction (sent, received).",
		"saltus_gossip_members":                    "Alive members of the cluster, this router included.",
		"saltus_gossip_queue_depth":                "Messages waiting in the bounded broadcast queue.",
		"saltus_gossip_send_errors_total":          "Route messages a peer could not be sent (UDP send failed; the push-pull heals it).",
		"saltus_gossip_join_errors_total":          "Failed attempts to join the cluster through the --join peers (the log says why).",
		"saltus_gossip_resyncs_total":              "State exchanges (push-pull) with a peer that came back from dead or left, as a partition heals.",
		"saltus_gossip_reconnects_total":           "Rejoin attempts for --join peers that were not alive members.",
		"saltus_gossip_peer_load_expired_total":    "Peers' load reports dropped because no newer one came within the load TTL.",
		"saltus_gossip_peers_full_total":           "Messages from a peer the bounded peer table had no room for.",
		"saltus_gossip_route_lag_seconds":          "Delay from a peer sending a route message to this router receiving it (its wall clock to ours), over the last 1,024 messages, by quantile.",
		"saltus_gossip_log_suppressed_total":       "memberlist log lines not written because the same level logged within the last second.",
	})
}

const (
	kindRoutes = iota
	kindLoad
	numKinds
)

var kindNames = [numKinds]string{"routes", "load"}

const (
	dropOutbox = iota
	dropUnknownBackend
	dropMailbox
	numRouteDrops
)

var routeDropNames = [numRouteDrops]string{"outbox_full", "unknown_backend", "mailbox_full"}

const (
	dropMalformed = iota
	dropVersion
	numMessageDrops
)

// nodeMetrics are a Node's counters. Any goroutine (atomics).
type nodeMetrics struct {
	routesSent, routesReceived         *metrics.Counter
	routesDropped                      [numRouteDrops]*metrics.Counter
	messagesSent, messagesReceived     [numKinds]*metrics.Counter
	messagesDropped                    [numMessageDrops]*metrics.Counter
	queuePruned                        *metrics.Counter
	snapshotSent, snapshotReceived     *metrics.Counter
	joinErrors, reconnects, sendErrors *metrics.Counter
	resyncs                            *metrics.Counter
	loadExpired, peersFull, suppressed *metrics.Counter
}

func newNodeMetrics(set *metrics.Set) *nodeMetrics {
	m := &nodeMetrics{
		routesSent:       set.NewCounter("saltus_gossip_routes_sent_total"),
		routesReceived:   set.NewCounter("saltus_gossip_routes_received_total"),
		queuePruned:      set.NewCounter(`saltus_gossip_messages_dropped_total{reason="queue_full"}`),
		snapshotSent:     set.NewCounter(`saltus_gossip_snapshot_routes_total{dir="sent"}`),
		snapshotReceived: set.NewCounter(`saltus_gossip_snapshot_routes_total{dir="received"}`),
		joinErrors:       set.NewCounter("saltus_gossip_join_errors_total"),
		reconnects:       set.NewCounter("saltus_gossip_reconnects_total"),
		sendErrors:       set.NewCounter("saltus_gossip_send_errors_total"),
		resyncs:          set.NewCounter("saltus_gossip_resyncs_total"),
		loadExpired:      set.NewCounter("saltus_gossip_peer_load_expired_total"),
		peersFull:        set.NewCounter("saltus_gossip_peers_full_total"),
		suppressed:       set.NewCounter("saltus_gossip_log_suppressed_total"),
	}
	for i, name := range routeDropNames {
		m.routesDropped[i] = set.NewCounter(fmt.Sprintf(`saltus_gossip_routes_dropped_total{reason=%q}`, name))
	}
	for i, name := range kindNames {
		m.messagesSent[i] = set.NewCounter(fmt.Sprintf(`saltus_gossip_messages_sent_total{kind=%q}`, name))
		m.messagesReceived[i] = set.NewCounter(fmt.Sprintf(`saltus_gossip_messages_received_total{kind=%q}`, name))
	}
	m.messagesDropped[dropMalformed] = set.NewCounter(`saltus_gossip_messages_dropped_total{reason="malformed"}`)
	m.messagesDropped[dropVersion] = set.NewCounter(`saltus_gossip_messages_dropped_total{reason="version"}`)
	return m
}

// register adds the gauges that read n: memberlist's member count, the
// queue, the lag quantiles and the reassembler's drops.
func (m *nodeMetrics) register(set *metrics.Set, n *Node) {
	set.NewGauge("saltus_gossip_members", func() float64 { return float64(n.ml.NumMembers()) })
	set.NewGauge("saltus_gossip_queue_depth", func() float64 { return float64(n.queue.NumQueued()) })
	for _, q := range []float64{0.5, 0.99} {
		set.NewGauge(fmt.Sprintf(`saltus_gossip_route_lag_seconds{quantile="%g"}`, q), func() float64 {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.lags.quantile(q).Seconds()
		})
	}
	set.RegisterMetricsWriter(func(w io.Writer) {
		n.mu.Lock()
		st := n.reasm.Stats()
		n.mu.Unlock()
		metrics.WriteMetadataIfNeeded(w, "saltus_gossip_split_routes_dropped_total", "counter")
		fmt.Fprintf(w, "saltus_gossip_split_routes_dropped_total{reason=\"inconsistent\"} %d\n", st.Dropped)
		fmt.Fprintf(w, "saltus_gossip_split_routes_dropped_total{reason=\"evicted\"} %d\n", st.Evicted)
		fmt.Fprintf(w, "saltus_gossip_split_routes_dropped_total{reason=\"expired\"} %d\n", st.Expired)
	})
}
