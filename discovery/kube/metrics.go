package kube

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_discovery_k8s_events_total":  "Kubernetes EndpointSlice watch events received, by type (added, modified, deleted, bookmark, error); a --k8s-model-selector's watch has labels model and selector too.",
		"saltus_discovery_k8s_errors_total":  "Kubernetes discovery failures, by reason: request (no answer: connect, TLS, head timeout, token), status (an HTTP error answer; 410 Gone is a relist, not an error), decode (bad JSON or object), too_large (a list or event over the size bound), stalled (a watch silent past its timeout, a list past its), disconnected (a watch cut inside an event or by a read error), watch_error (an ERROR event other than 410), too_many_slices (a slice over the bound, ignored); a --k8s-model-selector's watch has labels model and selector too.",
		"saltus_discovery_k8s_relists_total": "Lists of a watch's EndpointSlices (the Service's; with labels model and selector, a --k8s-model-selector's) after the first, by reason: gone (the watch's resourceVersion expired, 410), error (a watch event could not be applied).",
		"saltus_discovery_k8s_updates_total": "Changes of a watch's ready endpoint set handed to the backend set (the first list's included); a --k8s-model-selector's watch has labels model and selector.",
		"saltus_discovery_k8s_endpoints":     "Endpoints of a watch's EndpointSlices (the Service's; with labels model and selector, a --k8s-model-selector's), by state: ready (the backends, one per pod), not_ready, terminating, unusable (no matching port, bad address).",
		"saltus_discovery_k8s_connected":     "1 while a watch of EndpointSlices (the Service's; with labels model and selector, a --k8s-model-selector's) is open and its endpoint set is current, else 0.",
	})
}

// Error reasons, the errors_total label values.
const (
	reasonRequest = iota
	reasonStatus
	reasonDecode
	reasonTooLarge
	reasonStalled
	reasonDisconnected
	reasonWatchError
	reasonTooManySlices
	numReasons
)

var reasonNames = [numReasons]string{"request", "status", "decode", "too_large", "stalled", "disconnected", "watch_error", "too_many_slices"}

// watchMetrics are a Watcher's series. Counters and gauges are atomics:
// any goroutine. They read nothing of the Watcher (gauges are set, not
// computed), so they need no unregistering when it stops (rule R15); a
// second Watcher of the same watch on the same set shares them
// (GetOrCreate). The Service's watch has the series without labels; a
// model selector's watch the same names with labels model and selector
// (its ModelSelectors entry), so their number is bounded by the
// configuration (maxModelSelectors entries of 21 series each).
type watchMetrics struct {
	events      [numEventTypes]*metrics.Counter
	errors      [numReasons]*metrics.Counter
	relistGone  *metrics.Counter
	relistError *metrics.Counter
	updates     *metrics.Counter
	endpoints   [numStates]*metrics.Gauge
	connected   *metrics.Gauge
}

// newWatchMetrics creates the series with the labels given ("" none, else
// `k="v",...` with the values quoted).
func newWatchMetrics(set *metrics.Set, labels string) *watchMetrics {
	name := func(base, label string) string {
		switch {
		case labels == "" && label == "":
			return base
		case labels == "":
			return base + "{" + label + "}"
		case label == "":
			return base + "{" + labels + "}"
		}
		return base + "{" + labels + "," + label + "}"
	}
	m := &watchMetrics{
		relistGone:  set.GetOrCreateCounter(name("saltus_discovery_k8s_relists_total", `reason="gone"`)),
		relistError: set.GetOrCreateCounter(name("saltus_discovery_k8s_relists_total", `reason="error"`)),
		updates:     set.GetOrCreateCounter(name("saltus_discovery_k8s_updates_total", "")),
		connected:   set.GetOrCreateGauge(name("saltus_discovery_k8s_connected", ""), nil),
	}
	for i, n := range eventTypeNames {
		m.events[i] = set.GetOrCreateCounter(name("saltus_discovery_k8s_events_total", fmt.Sprintf("type=%q", n)))
	}
	for i, n := range reasonNames {
		m.errors[i] = set.GetOrCreateCounter(name("saltus_discovery_k8s_errors_total", fmt.Sprintf("reason=%q", n)))
	}
	for i, n := range stateNames {
		m.endpoints[i] = set.GetOrCreateGauge(name("saltus_discovery_k8s_endpoints", fmt.Sprintf("state=%q", n)), nil)
	}
	return m
}
