package bench

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/bench/workload"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/policy"
)

// TestMixedFleet is issue 29's end-to-end check on the mixed fleet (five
// simulated engines: org/alpha on three, alpha-tuned on two of those,
// org/beta on two; saltus given their URLs only), under every policy:
// no answer from an engine outside the model's pool, every request for a
// served model 200, and every request for org/gamma refused by saltus
// itself (404 without X-Saltus-Backend).
func TestMixedFleet(t *testing.T) {
	layout, err := LookupLayout("mixed")
	if err != nil {
		t.Fatal(err)
	}
	sim := vllmsim.DefaultConfig()
	sim.Speedup = 200 // a 20-token answer in ~3 ms of real time
	serve := dataplane.DefaultConfig()
	serve.Reactor.Loops = 2
	opts := workload.DefaultOptions()
	opts.MaxTokens, opts.TokensPerWord = 20, 1.5 // byte-block engines: 4 bytes a token
	opts.ThinkMin, opts.ThinkMax = time.Millisecond, 5*time.Millisecond
	wl, err := workload.New("mixed", opts)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &LocalFleet{Sim: sim, Serve: serve, Layout: layout}
	cfg := RunConfig{Backends: len(layout.Engines), Users: 10, Duration: time.Second, Policies: policy.Names(),
		Workloads: []Workload{wl}, Model: workload.ModelAlpha, Fleet: layout.Name, Log: io.Discard}
	rep, err := Run(context.Background(), cfg, fleet)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Runs {
		if s.Fleet != "mixed" || len(s.Engines) != 5 {
			t.Fatalf("%s: fleet %q, engines %v", s.Policy, s.Fleet, s.Engines)
		}
		for i, e := range s.Engines {
			if want := layout.Engines[i]; !slices.Equal(e.Models[:1], want.Models) || len(e.Models) != 1+len(want.Adapters) {
				t.Fatalf("%s: engine %d serves %v, want %+v", s.Policy, i, e.Models, want)
			}
		}
		for _, m := range append(workload.MixedModels(), workload.ModelUnknown) {
			x := s.Models[m]
			t.Logf("%s %s: %+v", s.Policy, m, x)
			if x.Requests == 0 || x.WrongEngine != 0 {
				t.Errorf("%s %s: %d requests, %d on a wrong engine; want some, none", s.Policy, m, x.Requests, x.WrongEngine)
			}
			if m == workload.ModelUnknown {
				if x.NotFoundRouter != x.Requests || x.NotFoundEngine != 0 || x.OK != 0 {
					t.Errorf("%s %s: %d requests, %d refused by saltus, %d 404 by an engine; want all refused by saltus", s.Policy, m, x.Requests, x.NotFoundRouter, x.NotFoundEngine)
				}
				continue
			}
			if x.Non200 != 0 || x.OK != x.Requests {
				t.Errorf("%s %s: %d requests, %d non-200, %d whole 200 streams; want every one 200", s.Policy, m, x.Requests, x.Non200, x.OK)
			}
			// The model's answers came from its pool's engines only, and
			// the pool was used: alpha-tuned on e0 and e1, org/beta on e3
			// and e4.
			for i, n := range x.PerEngine {
				if serves := slices.Contains(s.Engines[i].Models, m); n > 0 && !serves {
					t.Errorf("%s %s: %d answers from e%d, which serves %v", s.Policy, m, n, i, s.Engines[i].Models)
				}
			}
		}
		if got := s.Errors; got != s.Models[workload.ModelUnknown].Requests {
			t.Errorf("%s: %d errors, want the %d unknown-model requests only", s.Policy, got, s.Models[workload.ModelUnknown].Requests)
		}
	}
	if tab := ModelTable(rep.Runs); !strings.Contains(tab, "| prefix (mixed) | org/gamma |") {
		t.Errorf("ModelTable:\n%s", tab)
	}
}

func TestLayouts(t *testing.T) {
	t.Parallel()
	if got := LayoutNames(); !slices.Equal(got, []string{"single", "mixed", "alpha", "beta"}) {
		t.Errorf("LayoutNames() = %q", got)
	}
	if l, err := LookupLayout("single"); l != nil || err != nil {
		t.Errorf("single: %v, %v; want nil, nil", l, err)
	}
	if _, err := LookupLayout("gamma"); err == nil || !strings.Contains(err.Error(), `unknown fleet "gamma", want one of single, mixed, alpha, beta`) {
		t.Errorf("gamma: %v", err)
	}
	for name, want := range map[string]struct {
		models []string
		desc   string
	}{
		"mixed": {[]string{"org/alpha", "alpha-tuned", "org/beta"}, "mixed: e0-e1 org/alpha + adapter alpha-tuned; e2 org/alpha; e3-e4 org/beta"},
		"alpha": {[]string{"org/alpha", "alpha-tuned"}, "alpha: e0-e1 org/alpha + adapter alpha-tuned; e2 org/alpha (mixed's engines alone, with its users of these models only)"},
		"beta":  {[]string{"org/beta"}, "beta: e0-e1 org/beta (mixed's engines alone, with its users of these models only)"},
	} {
		l, err := LookupLayout(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Models(); !slices.Equal(got, want.models) {
			t.Errorf("%s: Models() = %q, want %q", name, got, want.models)
		}
		if got := l.Describe(); got != want.desc {
			t.Errorf("%s: Describe() = %q, want %q", name, got, want.desc)
		}
	}
}

// TestRemoteFleetServedModels: running engines' models come from their
// GET /v1/models, adapters included.
func TestRemoteFleetServedModels(t *testing.T) {
	t.Parallel()
	cfg := vllmsim.DefaultConfig()
	mixedFleet[0].apply(&cfg)
	s, err := vllmsim.New(cfg, nil)
	if err == nil {
		err = s.Start("127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	f := &RemoteFleet{Engines: []string{s.URL()}}
	got, err := f.ServedModels(context.Background(), f.Engines)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{workload.ModelAlpha, workload.ModelAlphaTuned}; !slices.Equal(got[s.URL()], want) {
		t.Errorf("served %v, want %q", got, want)
	}
	if _, err := f.ServedModels(context.Background(), []string{"http://127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "cannot list the models of http://127.0.0.1:1") {
		t.Errorf("a dead engine: %v", err)
	}
}
