package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/dataplane"
)

// Saltus is a saltus serving path running in this process (no admin
// listener): what the benchmark routes through.
type Saltus struct {
	Addr    string // host:port of the data plane
	Metrics *metrics.Set
	path    *dataplane.Path
}

// StartSaltus builds and starts a serving path from cfg
// (cfg.Reactor.Listen "127.0.0.1:0" picks a port). logger may be nil (discarded).
func StartSaltus(cfg dataplane.Config, logger *slog.Logger) (*Saltus, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	set := metrics.NewSet()
	p, err := dataplane.Build(cfg, logger, set)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, errors.Join(err, p.Close(context.Background()))
	}
	// Until the first round of GET /v1/models ends, a backend whose
	// models are not known yet may get any model (fleet.Index.Wild), a
	// model no engine serves included: wait for it, as saltus serve's
	// readiness does (a few ms on loopback; at most the fetch timeout).
	t := time.NewTimer(fleetWait)
	defer t.Stop()
	select {
	case <-p.Fleet.Ready():
	case <-t.C:
		err := fmt.Errorf("the backends' models are not known after %v", fleetWait)
		return nil, errors.Join(err, p.Data.Shutdown(context.Background()), p.Close(context.Background()))
	}
	return &Saltus{Addr: p.Data.Addr(), Metrics: set, path: p}, nil
}

// fleetWait bounds the wait for the first round of GET /v1/models (its
// fetches time out after fleet.Config.Timeout, 3 s by default).
const fleetWait = 15 * time.Second

// Close drains the data plane (requests in flight get until ctx ends) and
// releases the rest.
func (s *Saltus) Close(ctx context.Context) error {
	err := s.path.Data.Shutdown(ctx)
	return errors.Join(err, s.path.Close(context.WithoutCancel(ctx)))
}
