package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/dataplane"
)

// LocalFleet runs simulated engines and saltus in this process: every run
// gets fresh (cold) engines and a fresh router.
type LocalFleet struct {
	Sim    vllmsim.Config   // each engine's config
	Serve  dataplane.Config // the router's; Reactor.Listen, Backends and Router.Policy are set per run
	Logger *slog.Logger     // may be nil
}

type closers []func(context.Context) error

func (c closers) Close(ctx context.Context) error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i](ctx))
	}
	return errors.Join(errs...)
}

// StartEngines starts n simulated engines on loopback ports.
func (f *LocalFleet) StartEngines(n int) ([]string, Closer, error) {
	var urls []string
	var cs closers
	for i := range n {
		cfg := f.Sim
		cfg.Seed += int64(i) // engines answer differently; each is deterministic
		s, err := vllmsim.New(cfg, f.Logger)
		if err == nil {
			err = s.Start("127.0.0.1:0")
		}
		if err != nil {
			_ = cs.Close(context.Background()) // the start's error is the one to report
			return nil, nil, fmt.Errorf("engine %d: %w", i, err)
		}
		cs = append(cs, s.Close)
		urls = append(urls, s.URL())
	}
	return urls, cs, nil
}

// StartRouter starts saltus with policy over backends on a loopback port.
func (f *LocalFleet) StartRouter(policy string, backends []string) (string, Closer, error) {
	cfg := f.Serve
	cfg.Reactor.Listen, cfg.Backends, cfg.Router.Policy = "127.0.0.1:0", backends, policy
	s, err := StartSaltus(cfg, f.Logger)
	if err != nil {
		return "", nil, err
	}
	return "http://" + s.Addr, closers{s.Close}, nil
}

// RemoteFleet uses engines that run elsewhere (real vLLM or `saltus sim`
// processes): they are not restarted between runs, so later policies may
// find them warm. Target, when set, is an existing router to measure
// instead of a saltus per policy.
type RemoteFleet struct {
	Engines []string
	Target  string
	Local   LocalFleet // the router settings when Target is empty
}

// StartEngines returns the configured engines (n is ignored).
func (f *RemoteFleet) StartEngines(int) ([]string, Closer, error) {
	for _, e := range f.Engines {
		if u, err := url.Parse(e); err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, nil, fmt.Errorf("backend %q: want http://host:port", e)
		}
	}
	return f.Engines, closers{}, nil
}

// StartRouter starts saltus over the engines, or returns Target.
func (f *RemoteFleet) StartRouter(policy string, backends []string) (string, Closer, error) {
	if f.Target != "" {
		return f.Target, closers{}, nil
	}
	return f.Local.StartRouter(policy, backends)
}
