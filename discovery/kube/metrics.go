package kube

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_discovery_k8s_events_total":  "Kubernetes EndpointSlice watch events received, by type (added, modified, deleted, bookmark, error).",
		"saltus_discovery_k8s_errors_total":  "Kubernetes discovery failures, by reason: request (no answer: connect, TLS, head timeout, token), status (an HTTP error answer; 410 Gone is a relist, not an error), decode (bad JSON or object), too_large (a list or event over the size bound), stalled (a watch silent past its timeout, a list past its), disconnected (a watch cut inside an event or by a read error), watch_error (an ERROR event other than 410), too_many_slices (a slice over the bound, ignored).",
		"saltus_discovery_k8s_relists_total": "Lists of the Service's EndpointSlices after the first, by reason: gone (the watch's resourceVersion expired, 410), error (a watch event could not be applied).",
		"saltus_discovery_k8s_updates_total": "Changes of the ready endpoint set handed to the backend set (the first list's included).",
		"saltus_discovery_k8s_endpoints":     "Endpoints of the watched Service's EndpointSlices, by state: ready (the backends, one per pod), not_ready, terminating, unusable (no matching port, bad address).",
		"saltus_discovery_k8s_connected":     "1 while a watch of the Service's EndpointSlices is open and the endpoint set is current, else 0.",
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
// second Watcher on the same set shares them (GetOrCreate).
type watchMetrics struct {
	events      [numEventTypes]*metrics.Counter
	errors      [numReasons]*metrics.Counter
	relistGone  *metrics.Counter
	relistError *metrics.Counter
	updates     *metrics.Counter
	endpoints   [numStates]*metrics.Gauge
	connected   *metrics.Gauge
}

func newWatchMetrics(set *metrics.Set) *watchMetrics {
	m := &watchMetrics{
		relistGone:  set.GetOrCreateCounter(`saltus_discovery_k8s_relists_total{reason="gone"}`),
		relistError: set.GetOrCreateCounter(`saltus_discovery_k8s_relists_total{reason="error"}`),
		updates:     set.GetOrCreateCounter("saltus_discovery_k8s_updates_total"),
		connected:   set.GetOrCreateGauge("saltus_discovery_k8s_connected", nil),
	}
	for i, name := range eventTypeNames {
		m.events[i] = set.GetOrCreateCounter(fmt.Sprintf(`saltus_discovery_k8s_events_total{type=%q}`, name))
	}
	for i, name := range reasonNames {
		m.errors[i] = set.GetOrCreateCounter(fmt.Sprintf(`saltus_discovery_k8s_errors_total{reason=%q}`, name))
	}
	for i, name := range stateNames {
		m.endpoints[i] = set.GetOrCreateGauge(fmt.Sprintf(`saltus_discovery_k8s_endpoints{state=%q}`, name), nil)
	}
	return m
}
