package loopmetrics

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

type backend struct {
	set      *metrics.Set
	requests *metrics.Counter // resolved once, in newBackend
	code     int
}

func newBackend(set *metrics.Set) *backend { // want newBackend:"resolves metrics: resolves a metric by name \\(metrics.GetOrCreateCounter\\)"
	return &backend{set: set, requests: set.GetOrCreateCounter("requests_total")}
}

func (b *backend) byCode() *metrics.Counter { // want byCode:"resolves metrics: resolves a metric by name \\(metrics.GetOrCreateCounter\\)"
	return b.set.GetOrCreateCounter(fmt.Sprintf("requests_total{code=\"%d\"}", b.code))
}

// answered counts an answer. Loop only.
func (b *backend) answered() { // want answered:"resolves metrics: resolves a metric by name \\(metrics.NewCounter\\)"
	b.requests.Inc()
	b.byCode().Inc()              // want `R10: answered runs on an event loop and calls byCode, which resolves a metric by name`
	metrics.NewCounter("x").Inc() // want `R10: answered runs on an event loop and resolves a metric by name \(metrics.NewCounter\)`
}
