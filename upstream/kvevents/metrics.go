package kvevents

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_kvevents_batches_total":          "KV-event batches an engine published that were decoded (vLLM's KVEventBatch), per subscription endpoint.",
		"saltus_kvevents_events_total":           "KV events in decoded batches, by type: BlockStored, BlockRemoved, AllBlocksCleared, unknown (a tag this saltus does not know: skipped).",
		"saltus_kvevents_dropped_total":          "KV-event batches dropped, by reason: oversize (payload over its bound), over_limit (too many events, hashes or token ids), malformed, bad_frame (not [topic, 8-byte seq, payload]), queue_full (the consumer's channel was full), too_many_sources (topics past the bound). The source's view is then marked stale.",
		"saltus_kvevents_sequence_gaps_total":    "Sequence numbers an engine's batches skipped or restarted from (a lost batch, an engine restart): the view of that engine is marked stale.",
		"saltus_kvevents_reconnects_total":       "Subscription sockets re-opened after an error (connect: the publisher went away; bind: the listener failed), with backoff.",
		"saltus_kvevents_conns_closed_total":     "ZMQ connections saltus closed, by reason: frame_over_limit (a frame declared over 16 MiB), over_limit (a listening socket past 1,024 connections).",
		"saltus_kvevents_replays_total":          "Replays asked of an engine's replay endpoint (vLLM's replay_endpoint) after missed batches, by outcome: filled (all came back: the view stays exact), too_old (the engine no longer had the first missed batch, or the gap was wider than 10,000 batches), partial (some never came back), timeout, error (no connection, malformed reply), over_limit (over 64 MiB), overflow (over 1,024 live batches arrived meanwhile). Every outcome but filled marks the view stale.",
		"saltus_kvevents_replayed_batches_total": "KV-event batches brought back by filled replays and applied before the live ones that followed.",
	})
}

// subMetrics are one Subscriber's series, labelled by its endpoint;
// Close unregisters them.
type subMetrics struct {
	set                 *metrics.Set
	names               []string
	batches             *metrics.Counter
	events              [AllBlocksCleared + 1]*metrics.Counter // by Kind
	oversize, overLimit *metrics.Counter
	malformed, badFrame *metrics.Counter
	queueFull, sources  *metrics.Counter
	gaps, reconnects    *metrics.Counter
	// Registered with a replay endpoint only; replays by outcome.
	replays         map[string]*metrics.Counter
	replayedBatches *metrics.Counter
}

func newSubMetrics(set *metrics.Set, endpoint string, g *guardStats, replay bool) *subMetrics {
	m := &subMetrics{set: set}
	ep := `endpoint=` + promtext.QuoteLabel(endpoint)
	counter := func(family, labels string) *metrics.Counter {
		name := family + `{` + ep + labels + `}`
		m.names = append(m.names, name)
		return set.NewCounter(name)
	}
	m.batches = counter("saltus_kvevents_batches_total", "")
	for k := range m.events {
		m.events[k] = counter("saltus_kvevents_events_total", `,type="`+Kind(k).String()+`"`)
	}
	dropped := func(reason string) *metrics.Counter {
		return counter("saltus_kvevents_dropped_total", `,reason="`+reason+`"`)
	}
	m.oversize, m.overLimit, m.malformed = dropped("oversize"), dropped("over_limit"), dropped("malformed")
	m.badFrame, m.queueFull, m.sources = dropped("bad_frame"), dropped("queue_full"), dropped("too_many_sources")
	m.gaps = counter("saltus_kvevents_sequence_gaps_total", "")
	m.reconnects = counter("saltus_kvevents_reconnects_total", "")
	g.oversize = counter("saltus_kvevents_conns_closed_total", `,reason="frame_over_limit"`)
	g.refused = counter("saltus_kvevents_conns_closed_total", `,reason="over_limit"`)
	if replay {
		m.replays = make(map[string]*metrics.Counter, len(replayOutcomes))
		for _, o := range replayOutcomes {
			m.replays[o] = counter("saltus_kvevents_replays_total", `,outcome="`+o+`"`)
		}
		m.replayedBatches = counter("saltus_kvevents_replayed_batches_total", "")
	}
	return m
}

// count counts b's events by kind.
func (m *subMetrics) count(b *Batch) {
	for i := range b.Events {
		m.events[b.Events[i].Kind].Inc()
	}
}

func (m *subMetrics) drop(err error) {
	switch Reason(err) {
	case "oversize":
		m.oversize.Inc()
	case "over_limit":
		m.overLimit.Inc()
	default:
		m.malformed.Inc()
	}
}

func (m *subMetrics) unregister() {
	for _, n := range m.names {
		m.set.UnregisterMetric(n)
	}
}
