package backend

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"
)

// startProbeLocked starts b's probe goroutine in s.probes; Remove and
// Close stop it through s.stops. s.mu held.
//
// With Config.ScrapeInterval it starts b's engine metrics scrape too
// (scrape.go), stopped with the probe.
func (s *Set) startProbeLocked(b *Backend) {
	stop := make(chan struct{})
	closed := false
	s.stops[b.ID] = func() {
		if !closed {
			closed = true
			close(stop)
		}
	}
	s.probes.Go("backend-probe", func(ctx context.Context) {
		t := time.NewTimer(s.probeInterval(b))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-t.C:
			case <-b.wake:
				t.Stop()
			}
			// Bounded by HealthInterval even when probing faster: probes
			// are sequential, and a slow /health is not a dead one.
			s.probeResult(b, s.probeFn(b, s.tune().HealthInterval))
			t.Reset(s.probeInterval(b))
		}
	})
	if s.cfg.ScrapeInterval > 0 {
		s.startScrapeLocked(b, stop)
	}
}

// probeInterval is the wait before b's next probe: HealthInterval while
// it is healthy, HealthDownInterval while it is down or its breaker is
// open (Config says why there is no backoff).
func (s *Set) probeInterval(b *Backend) time.Duration {
	if b.Healthy() {
		return s.tune().HealthInterval
	}
	return s.tune().HealthDownInterval
}

// probe GETs b's HealthPath once, bounded by timeout; a 2xx is a
// success. Set.probeFn, except in tests.
func (s *Set) probe(b *Backend, timeout time.Duration) bool {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI(s.cfg.HealthPath)
	b.ctlScheme(req)
	req.Header.SetHost(b.host)
	b.probeErr = nil
	if err := b.ctl.DoTimeout(req, resp, timeout); err != nil {
		b.probeErr = err
		return false
	}
	if bs := resp.BodyStream(); bs != nil {
		// A health body is small; read at most 64 KiB so the connection
		// can be reused, then close (which closes it if more was left).
		_, _ = io.Copy(io.Discard, io.LimitReader(bs, 64<<10)) // an error shows as a short body: the status decides
	}
	_ = resp.CloseBodyStream() // an error here only means the connection is not reused
	code := resp.StatusCode()
	if code < 200 || code >= 300 {
		b.probeErr = fmt.Errorf("%s answered %d", s.cfg.HealthPath, code)
		return false
	}
	return true
}

// probeResult applies the hysteresis: HealthFailsDown failures in a row
// mark b down, HealthOKUp successes in a row mark it up; any success
// resets the passive breaker. On b's probe goroutine.
func (s *Set) probeResult(b *Backend, ok bool) {
	if ok {
		b.probeFails = 0
		b.probeOKs++
		if b.tripped.Load() {
			b.passive.Store(0)
			b.tripped.Store(false)
			s.logger.Info("backend breaker reset by a probe", "backend", b.URL)
		}
		if !b.up.Load() && b.probeOKs >= s.cfg.HealthOKUp {
			b.up.Store(true)
			s.logger.Info("backend up", "backend", b.URL, "probes_ok", b.probeOKs)
		}
		return
	}
	b.probeOKs = 0
	b.probeFails++
	if b.up.Load() && b.probeFails >= s.cfg.HealthFailsDown {
		b.up.Store(false)
		s.logger.Warn("backend down", "backend", b.URL, "probes_failed", b.probeFails, "err", b.probeErr)
	}
}
