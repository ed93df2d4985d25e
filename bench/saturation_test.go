package bench

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/bench/workload"
	"github.com/saltus-lb/saltus/dataplane"
)

// TestSaturatedRun drives the saturation workload through saltus in front
// of two saturated simulated engines (one request running, one waiting,
// the rest refused with 429 and no Retry-After, as llm-d-inference-sim)
// at several times what they answer, with a gateway queue of 4 entries:
// the summary must count every request once, by priority and by tenant,
// and every refusal the client saw must be saltus's own (429 with
// Retry-After: the queue was full), never an engine's. The run is bounded
// by its Duration; nothing waits for wall-clock time beyond it.
func TestSaturatedRun(t *testing.T) {
	sim := vllmsim.DefaultConfig()
	sim.Speedup = 20 // a 256-512-token prompt and 20 output tokens: ~15 ms of real time alone
	sim.MaxNumSeqs, sim.MaxWaiting, sim.OverloadStatus = 1, 1, 429
	serve := dataplane.DefaultConfig()
	serve.Reactor.Loops = 2
	serve.Router.Queue.MaxEntries = 4
	opts := workload.DefaultOptions()
	opts.MaxTokens, opts.TokensPerWord = 20, 1.5 // byte-block engines: 4 bytes a token
	opts.Rate = 400                              // a second: several times what two engines of one seat answer
	wl, err := workload.New("saturation", opts)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &LocalFleet{Sim: sim, Serve: serve}
	cfg := RunConfig{Backends: 2, Users: 64, Duration: 1500 * time.Millisecond, Drain: 2 * time.Second, Policies: []string{"prefix"},
		Workloads: []Workload{wl}, Model: sim.Model, Log: io.Discard}
	rep, err := Run(context.Background(), cfg, fleet)
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Runs[0]
	o := s.Overload
	if o == nil {
		t.Fatalf("no overload summary: %+v", s)
	}
	// Every request queued at the end gets its answer in the drain:
	// the queue holds 4 and the engines 2 × 2. The 600 arrivals of the
	// schedule are not all sent on a loaded machine (a run beside the
	// race tests sent 86): twice what saltus and the engines hold is
	// enough to fill the queue (the refusals are checked below).
	if o.All.Requests != s.Requests || o.All.Requests < 2*(4+2*2) || s.Cut != 0 {
		t.Fatalf("overload counts %d requests, the run %d (want at least 16) and %d cut (want 0)", o.All.Requests, s.Requests, s.Cut)
	}
	refused := 0
	for kind, n := range o.All.Failed {
		if kind != "429" {
			t.Errorf("%d answers %s, want only saltus's 429 (queue full)", n, kind)
		}
		refused += n
	}
	if o.All.OK+refused != o.All.Requests || o.All.OK != s.Requests-s.Errors {
		t.Fatalf("OK %d + failed %d != requests %d (run: %d errors)", o.All.OK, refused, o.All.Requests, s.Errors)
	}
	if refused == 0 || o.All.RetryAfter != refused {
		t.Fatalf("refused %d, with Retry-After %d: want some, every one with Retry-After (saltus's, not an engine's)", refused, o.All.RetryAfter)
	}
	if o.All.OK == 0 || o.All.Goodput <= 0 || o.All.Latency.P50 <= 0 {
		t.Fatalf("no goodput: %+v", o.All)
	}
	sum := func(m map[string]Outcomes) (n int) {
		for _, x := range m {
			n += x.Requests
		}
		return n
	}
	hi, lo := o.ByPriority["-10"], o.ByPriority["10"]
	if len(o.ByPriority) != 2 || hi.Requests == 0 || lo.Requests == 0 || sum(o.ByPriority) != o.All.Requests {
		t.Fatalf("by priority %+v", o.ByPriority)
	}
	if len(o.ByTenant) != 2 || o.ByTenant["small"].Requests == 0 || o.ByTenant["big"].Requests <= o.ByTenant["small"].Requests ||
		sum(o.ByTenant) != o.All.Requests || sum(o.ByClass) != o.All.Requests {
		t.Fatalf("by tenant %+v, by class %d requests", o.ByTenant, sum(o.ByClass))
	}
	table := OverloadTable(rep.Runs)
	t.Logf("%s", table)
	for _, want := range []string{"| prefix | all |", "| prefix | priority -10 |", "| prefix | priority 10 |", "| prefix | tenant small |",
		"| prefix | class high/big |", "latency p50 priority -10 / 10 ", "tenant small / big "} {
		if !strings.Contains(table, want) {
			t.Errorf("overload table lacks %q:\n%s", want, table)
		}
	}
}
