package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/saltus-lb/saltus/bench"
)

// demoListen is where the demo's saltus serves afterwards.
const demoListen = "127.0.0.1:8080"

// runDemo is `saltus demo`: 4 simulated engines, ~30 s of the stress
// workload through round-robin and then prefix routing, the comparison,
// then saltus (prefix) on 127.0.0.1:8080 over the engines until Ctrl-C.
func runDemo(args []string, stdout, stderr io.Writer) int {
	var o benchOptions
	if code := parseBench("saltus demo", append([]string{"--backends", "4", "--users", "16", "--duration", "15s",
		"--speedup", "5", "--policies", "round_robin,prefix", "--overhead-pairs", "0"}, args...), stderr, &o); code >= 0 {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var progress io.Writer
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		progress = stderr
	}
	rc, fleet, err := o.runConfig(progress, io.Discard, logger)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "saltus demo: %d simulated %s engines (speedup %g), %d users of the stress workload,\n"+
		"%v through round-robin, then %v through prefix routing, each on cold engines.\n\n",
		o.backends, o.sim.Name, o.sim.Speedup, o.users, o.duration, o.duration)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, rc, fleet)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", bench.Table(rep.Runs))
	if len(rep.Runs) == 2 {
		rr, px := rep.Runs[0], rep.Runs[1]
		fmt.Fprintf(stdout, "Prefix routing: token hit ratio %.2f vs %.2f, TTFT p50 %.0f ms vs %.0f ms (simulated time).\n\n",
			px.TokenHitRatio, rr.TokenHitRatio, px.TTFT.P50, rr.TTFT.P50)
	}

	// Keep serving: fresh engines and saltus with prefix routing.
	lf := fleet.(*bench.LocalFleet)
	urls, engines, err := lf.StartEngines(o.backends)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: %v\n", err)
		return 1
	}
	defer closeWithin(engines)
	serve := lf.Serve
	serve.Reactor.Listen, serve.Backends, serve.Router.Policy = demoListen, urls, "prefix"
	s, err := bench.StartSaltus(serve, logger)
	if err != nil {
		fmt.Fprintf(stderr, "saltus demo: cannot serve on %s: %v\n", demoListen, err)
		return 1
	}
	defer closeWithin(s)
	fmt.Fprintf(stdout, "saltus is serving on http://%s with prefix routing over %s. Try:\n\n", s.Addr, strings.Join(urls, " "))
	fmt.Fprintf(stdout, "  curl -s -D - http://%s/v1/chat/completions -H 'Content-Type: application/json' \\\n"+
		"    -d '{\"model\":\"%s\",\"max_tokens\":20,\"messages\":[{\"role\":\"system\",\"content\":\"You are a meticulous assistant for a shipping company. Answer with port codes, tide tables and vessel names; keep every answer short and precise.\"},{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n\n",
		s.Addr, o.sim.Model)
	fmt.Fprintln(stdout, "Run it twice: the second answer reports cached_tokens, and X-Saltus-Route says why it went where it did. Ctrl-C stops.")
	<-ctx.Done()
	return 0
}

func closeWithin(c interface{ Close(context.Context) error }) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Close(ctx) // exiting: nothing left to tell
}
