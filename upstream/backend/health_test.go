package backend

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/saltus-lb/saltus/rules"
)

// probeRecorder is a Set's probeFn for synctest: it answers ok and
// records when each probe ran, from the bubble's start.
type probeRecorder struct {
	start time.Time
	ok    atomic.Bool
	mu    sync.Mutex
	at    []time.Duration
}

func (p *probeRecorder) probe(*Backend, time.Duration) bool {
	p.mu.Lock()
	p.at = append(p.at, time.Since(p.start))
	p.mu.Unlock()
	return p.ok.Load()
}

func (p *probeRecorder) times() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.at)
}

// healthSet is a Set with the default health settings and a recorded
// probe, started in the bubble; it is closed when fn returns.
func healthSet(t *testing.T, fn func(s *Set, b *Backend, p *probeRecorder)) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewSet(DefaultConfig(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &probeRecorder{start: time.Now()}
		p.ok.Store(true)
		s.probeFn = p.probe
		b, err := s.Add("http://10.0.0.1:8000")
		if err != nil {
			t.Fatal(err)
		}
		g := rules.NewGroup(context.Background())
		s.Start(g)
		fn(s, b, p)
		g.Stop()
		s.Close()
		_ = g.Wait(context.Background()) // Background: Wait joins
	})
}

func secs(ss ...int) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s) * time.Second
	}
	return out
}

// TestHealthRecovery: a backend that went down is probed every
// HealthDownInterval, and the first good probe makes it routable again,
// within 1 s of its return (issue 15: two probes 5 s apart were 9.4 s of
// 503s); once up it is probed every HealthInterval again.
func TestHealthRecovery(t *testing.T) {
	t.Parallel()
	healthSet(t, func(s *Set, b *Backend, p *probeRecorder) {
		p.ok.Store(false) // the engine dies at once
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if got, want := p.times(), secs(5, 10, 15); !slices.Equal(got, want) || b.Routable() {
			t.Fatalf("after 15 s: probes at %v (want %v), routable %v (want false: 3 failures)", got, want, b.Routable())
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if got, want := p.times(), secs(5, 10, 15, 16, 17); !slices.Equal(got, want) {
			t.Fatalf("down: probes at %v, want %v (every HealthDownInterval)", got, want)
		}
		back := time.Now() // 17.5 s: the engine is back
		p.ok.Store(true)
		for !b.Routable() {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		if d := time.Since(back); d > time.Second {
			t.Errorf("routable %v after the engine came back, want ≤ 1 s", d)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got, want := p.times(), secs(5, 10, 15, 16, 17, 18, 23, 28); !slices.Equal(got, want) {
			t.Errorf("probes at %v, want %v (HealthInterval once up)", got, want)
		}
	})
}

// TestHealthBreakerWakesProbe: a tripped breaker probes at once rather
// than at the next HealthInterval tick, and a good probe closes it.
func TestHealthBreakerWakesProbe(t *testing.T) {
	t.Parallel()
	healthSet(t, func(s *Set, b *Backend, p *probeRecorder) {
		time.Sleep(time.Second)
		for range s.cfg.BreakerFails {
			b.passiveResult(false, s.cfg.BreakerFails, s.logger)
		}
		synctest.Wait()
		if got, want := p.times(), secs(1); !slices.Equal(got, want) || !b.Routable() {
			t.Errorf("after the trip at 1 s: probes at %v (want %v), routable %v (want true)", got, want, b.Routable())
		}
	})
}

// TestHealthPassiveUp: an answered request brings back a backend the
// probes marked down (it is alive); a tripped breaker still needs a probe.
func TestHealthPassiveUp(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, "http://127.0.0.1:9001")
	for range s.cfg.HealthFailsDown {
		s.probeResult(b, false)
	}
	if b.Routable() {
		t.Fatal("routable after HealthFailsDown failed probes")
	}
	b.passiveResult(true, s.cfg.BreakerFails, s.logger)
	if !b.Routable() {
		t.Fatal("not routable after a passive success")
	}
	// One good probe is enough by default (HealthOKUp 1).
	for range s.cfg.HealthFailsDown {
		s.probeResult(b, false)
	}
	s.probeResult(b, true)
	if !b.Routable() {
		t.Fatal("not routable after one good probe")
	}
}
