package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/saltus-lb/saltus/bench"
	"github.com/saltus-lb/saltus/bench/workload"
)

// demoListen is where the demo's saltus serves afterwards.
const demoListen = "127.0.0.1:8080"

// runDemo is `saltus demo`: 4 simulated engines, ~30 s of the stress
// workload through round-robin and then prefix routing, the comparison,
// then saltus (prefix) on 127.0.0.1:8080 over the engines until Ctrl-C.
// With --fleet mixed: the mixed fleet's 5 engines and the mixed workload,
// and which model went to which engine.
func runDemo(args []string, stdout, stderr io.Writer) int {
	o := benchOptions{demo: true}
	if code := parseBench("saltus demo", args, stderr, &o); code >= 0 {
		return code
	}
	logger, _ := newLogger(stderr, "text", "error") // a valid format and level: no error
	var progress io.Writer
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		progress = stderr
	}
	plans, err := o.plans(progress, io.Discard, logger)
	if err == nil && len(plans) != 1 {
		err = fmt.Errorf("fleet: the demo runs one layout, got %q", o.fleets)
	}
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 2
	}
	plan := plans[0]
	fleetDesc := fmt.Sprintf("%d simulated %s engines", plan.rc.Backends, o.sim.Name)
	if plan.layout != nil {
		fleetDesc = fmt.Sprintf("the %s fleet: %d simulated %s engines serving %s (saltus given their URLs only)",
			plan.layout.Name, plan.rc.Backends, o.sim.Name, strings.Join(plan.layout.Models(), ", "))
	}
	pols := strings.Join(plan.rc.Policies, ", then ")
	kv := ""
	if on, _ := o.kvEventsOn(); on {
		kv = " The engines' KV-cache events are wired into saltus: it routes by what they confirm."
	}
	fmt.Fprintf(stdout, "saltus demo: %s (speedup %g), %d users of the %s workload,\n"+
		"%v through %s, each on cold engines.%s\n\n",
		fleetDesc, o.sim.Speedup, o.users, o.workloads, o.duration, pols, kv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, plan.rc, plan.fleet)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", bench.Table(rep.Runs))
	if t := bench.ModelTable(rep.Runs); t != "" {
		fmt.Fprintf(stdout, "Which model went where (X-Saltus-Backend of each answer; a 404 by saltus was not forwarded):\n\n%s\n%s\n", t, bench.EngineTable(rep.Runs))
	}
	if len(rep.Runs) == 2 && rep.Runs[0].Policy == "round_robin" && rep.Runs[1].Policy == "prefix" {
		rr, px := rep.Runs[0], rep.Runs[1]
		fmt.Fprintf(stdout, "Prefix routing: token hit ratio %.2f vs %.2f, TTFT p50 %.0f ms vs %.0f ms (simulated time).\n\n",
			px.TokenHitRatio, rr.TokenHitRatio, px.TTFT.P50, rr.TTFT.P50)
	}

	// Keep serving: fresh engines and saltus with prefix routing.
	lf := plan.fleet.(*bench.LocalFleet)
	urls, engines, err := lf.StartEngines(plan.rc.Backends)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 1
	}
	defer closeWithin(engines)
	serve, err := lf.RouterConfig("prefix", urls)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 1
	}
	serve.Reactor.Listen = demoListen
	s, err := bench.StartSaltus(serve, logger)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: cannot serve on %s: %v\n", demoListen, err)
		return 1
	}
	defer closeWithin(s)
	if err := lf.WaitKVEvents(ctx, s); err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "saltus is serving on http://%s with prefix routing over %s. Try:\n\n", s.Addr, strings.Join(urls, " "))
	models := []string{plan.rc.Model}
	if plan.layout != nil {
		models = append(plan.layout.Models(), workload.ModelUnknown)
	}
	for _, m := range models {
		fmt.Fprintf(stdout, "  curl -s -D - http://%s/v1/chat/completions -H 'Content-Type: application/json' \\\n"+
			"    -d '{\"model\":\"%s\",\"max_tokens\":20,\"messages\":[{\"role\":\"system\",\"content\":\"You are a meticulous assistant for a shipping company. Answer with port codes, tide tables and vessel names; keep every answer short and precise.\"},{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n\n",
			s.Addr, m)
	}
	if plan.layout != nil {
		fmt.Fprintf(stdout, "Each model's answers come from its engines only (X-Saltus-Backend); %s, which no engine serves, gets saltus's own 404 model_not_found. ", workload.ModelUnknown)
	}
	fmt.Fprintln(stdout, "Run it twice: the second answer reports cached_tokens, and X-Saltus-Route says why it went where it did. Ctrl-C stops.")
	<-ctx.Done()
	return 0
}

func closeWithin(c interface{ Close(context.Context) error }) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Close(ctx) // exiting: nothing left to tell
}
