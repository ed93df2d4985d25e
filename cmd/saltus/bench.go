package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/saltus-lb/saltus/bench"
	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/bench/workload"
	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/gossip"
	"github.com/saltus-lb/saltus/policy"
)

// benchOptions is `saltus bench`'s configuration.
type benchOptions struct {
	backends      int
	engines       multiFlag
	target        string
	policies      string
	workloads     string
	users         int
	duration      time.Duration
	out           string
	quick         bool
	overheadPairs int
	samples       bool
	rate          float64 // --rate, simulated time
	drain         time.Duration
	wl            workload.Options
	sim           vllmsim.Config
	simf          simFlags
	shards        int
	routers       int
	// fleets is --fleet: the layouts to run, in turn.
	fleets string
	// given are the flags the command line set (parseBench).
	given map[string]bool
	// demo applies `saltus demo`'s defaults to the flags not given.
	demo bool
	// The prefix policy's knobs and the engine scrape of each saltus
	// started (dataplane.Config's): to tune and compare them.
	scrape     time.Duration
	loadSlack  float64
	loadTokens int
	// Trace replay (--workloads mooncake:FILE): the load points (arrival
	// speed-ups), each a workload of its own, and the TTFT objective.
	traceSpeeds string
	slo         time.Duration
	// kvEvents is --kv-events: auto unless given (kvEventsOn decides).
	kvEvents autoBool
}

// autoBool is a boolean flag whose default is decided from the other
// flags ("auto" until given).
type autoBool struct{ on, set bool }

func (b *autoBool) String() string {
	if b == nil || !b.set {
		return "auto"
	}
	return strconv.FormatBool(b.on)
}

func (b *autoBool) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true or false, got %q", v)
	}
	b.on, b.set = on, true
	return nil
}

func (b *autoBool) IsBoolFlag() bool { return true }

type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error {
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*m = append(*m, p)
		}
	}
	return nil
}

func benchFlags(fs *flag.FlagSet, o *benchOptions) {
	o.sim = vllmsim.DefaultConfig()
	o.wl = workload.DefaultOptions()
	fs.IntVar(&o.backends, "backends", 8, "simulated engines to start per run, `count`")
	fs.Var(&o.engines, "backend", "use this running engine `URL` instead of simulators (repeat); they are not restarted between policies")
	fs.StringVar(&o.target, "target", "", "measure this running router `URL` instead of starting saltus per policy (one run per workload)")
	fs.StringVar(&o.policies, "policies", "round_robin,least_request,consistent_hash,prefix", "routing `policies` to compare, in order, comma-separated, or all (every one saltus serve --policy takes): "+strings.Join(policy.Names(), ", "))
	fs.StringVar(&o.workloads, "workloads", "stress", "`workloads`, comma-separated: "+strings.Join(workload.Names(), ", ")+", trace:FILE, mooncake:FILE (a Mooncake-format trace: JSONL rows of timestamp in ms, input_length, output_length, hash_ids; e.g. bench/traces/mooncake-small.jsonl)")
	fs.IntVar(&o.users, "users", 30, "closed-loop simulated users, `count`")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured `time` per policy and workload")
	fs.DurationVar(&o.drain, "drain", 0, "real `time` the requests in flight when a run's --duration ends get to finish, nothing new being sent (0: they are cut; 90s with --workloads saturation unless given): a saturated fleet's queued requests are its slowest, so cutting them hides its tail")
	fs.StringVar(&o.out, "out", "bench-results", "`directory` for report.md, results.json and the PNG plots")
	fs.BoolVar(&o.quick, "quick", false, "a run of about a minute: 4 engines, 16 users, 12 s per policy, --speedup 10 (flags given still win)")
	fs.IntVar(&o.overheadPairs, "overhead-pairs", 40, "request pairs measuring the router's added latency after each run (0: skip)")
	fs.BoolVar(&o.samples, "samples", false, "also write samples.jsonl into --out: one JSON line per request (workload, policy, sent at, TTFT, latency, tokens, cached tokens, backend, class, error; simulated time)")
	fs.Int64Var(&o.wl.Seed, "workload-seed", o.wl.Seed, "workload `seed`: equal seeds, equal requests")
	fs.Float64Var(&o.rate, "rate", 6, "workload saturation: open-loop arrivals a second of simulated time, `rate` (6: about 1.3 × the 4.7 a second that 4 engines of --max-num-seqs 2 answered with profile a100-13b and --max-tokens 50); each user sends the next arrival when free, so --users bounds the requests in flight (default 256 with saturation)")
	fs.IntVar(&o.shards, "shards", 0, "saltus event loops, `count` (0: GOMAXPROCS)")
	fs.StringVar(&o.fleets, "fleet", bench.SingleLayout, "engine `layouts` to run in turn, comma-separated: single (--backends engines, each serving --model and --lora-modules); "+
		"mixed (5 engines given to saltus by URL only: "+workload.ModelAlpha+" on e0-e2, its LoRA adapter "+workload.ModelAlphaTuned+" on e0-e1, "+workload.ModelBeta+" on e3-e4); "+
		"alpha, beta (the mixed fleet's pools alone, driven by the --workloads mixed users of their models only: the baseline of each pool's token hit ratio; e.g. --fleet mixed,alpha,beta)")
	fs.IntVar(&o.routers, "routers", 1, "saltus routers per run, `count`, 1–16: more than one run as a cluster (--cluster-bind on loopback, sharing routes and load) and the requests go to them in turn, as behind a TCP load balancer")
	d := dataplane.DefaultConfig()
	fs.DurationVar(&o.scrape, "scrape-interval", -1, "real `time` between saltus's scrapes of each engine's /metrics (waiting and running requests, KV usage and capacity: policy prefix's inputs); 0: off; -1: 1 s of simulated time (1s / --speedup, at least 10ms), as saltus serve's default of 1s on real engines")
	fs.Float64Var(&o.loadSlack, "load-slack", d.Router.LoadSlack, "saltus serve --load-slack of each saltus started (policy prefix's bounded load)")
	fs.IntVar(&o.loadTokens, "load-tokens", d.Router.LoadTokens, "saltus serve --load-tokens of each saltus started (policy prefix: prompt `tokens` one request in flight costs)")
	fs.StringVar(&o.traceSpeeds, "trace-speeds", "1", "mooncake:FILE load points: arrival speed-ups of the trace, comma-separated `factors` (4: four times the trace's rate, in the engines' time), each a run per policy on cold engines")
	fs.DurationVar(&o.wl.TraceWindow, "trace-window", 0, "mooncake:FILE replays the rows within this much trace `time` from its first (0: all; the public FAST'25 conversation trace spans about an hour, e.g. 300s)")
	fs.IntVar(&o.wl.TraceRequests, "trace-requests", 0, "mooncake:FILE replays at most this many rows, `count` (0: all within --trace-window)")
	fs.IntVar(&o.wl.TraceBlock, "trace-block", 512, "mooncake:FILE: prompt `tokens` a hash id stands for (the Mooncake traces': 512)")
	fs.Var(&o.kvEvents, "kv-events", "wire the simulated engines' KV-cache events into each saltus started: every engine publishes them as vLLM's --kv-events-config does (a ZMQ PUB socket on a loopback port), every saltus subscribes to each engine (serve's --kv-events), so policies prefix and ranvier route by what the engines confirm; "+
		"auto: on when saltus keys prompts as the engines do (--tokenizer given, or a mooncake:FILE workload's token-id prompts), off in byte-block mode, where saltus keys text prompts by bytes that no event carries; --kv-events=false turns it off; not with --backend or --target")
	fs.DurationVar(&o.slo, "slo-ttft", time.Second, "TTFT objective, simulated `time`: each run's goodput counts the 200 answers whose first token came within it (judged with mooncake:FILE, or when given)")
	addSimFlags(fs, &o.sim, &o.simf)
}

// quickDefaults are --quick's settings for the flags not given.
func (o *benchOptions) applyQuick(set map[string]bool) {
	if !o.quick {
		return
	}
	if !set["backends"] {
		o.backends = 4
	}
	if !set["users"] {
		o.users = 16
	}
	if !set["duration"] {
		o.duration = 12 * time.Second
	}
	if !set["speedup"] {
		o.sim.Speedup = 10
	}
	if !set["overhead-pairs"] {
		o.overheadPairs = 20
	}
}

// applyDemo sets `saltus demo`'s defaults for the flags not given: 4
// engines (or the --fleet layout's), 16 users, 15 s through round-robin
// and prefix at speedup 5, the stress workload (mixed on a mixed fleet).
func (o *benchOptions) applyDemo(set map[string]bool) {
	if !o.demo {
		return
	}
	if !set["backends"] {
		o.backends = 4
	}
	if !set["users"] {
		o.users = 16
	}
	if !set["duration"] {
		o.duration = 15 * time.Second
	}
	if !set["speedup"] {
		o.sim.Speedup = 5
	}
	if !set["policies"] {
		o.policies = "round_robin,prefix"
	}
	if !set["overhead-pairs"] {
		o.overheadPairs = 0
	}
	if !set["workloads"] && o.fleets != bench.SingleLayout {
		o.workloads = "mixed"
	}
}

// applySaturation gives the saturation workload enough users that its
// arrivals stay open loop (each user holds one request in flight: a
// saturated fleet's queue holds many) and a drain long enough for every
// queued request to be answered, unless --users or --drain is given.
func (o *benchOptions) applySaturation(set map[string]bool) {
	if !o.runs("saturation") {
		return
	}
	if !set["users"] {
		o.users = 256
	}
	if !set["drain"] {
		o.drain = 90 * time.Second // serve's --queue-max-wait (1m) and an answer
	}
}

// traceCount is ", at most N rows" for --trace-requests N > 0.
func traceCount(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", at most %d rows", n)
}

// applyMooncake gives a trace replay enough users that its arrivals stay
// open loop (each user holds one request in flight) and a drain for the
// requests still in flight when the last row is sent, unless --users or
// --drain is given.
func (o *benchOptions) applyMooncake(set map[string]bool) {
	if !o.runsMooncake() {
		return
	}
	if !set["users"] {
		o.users = 256
	}
	if !set["drain"] {
		o.drain = 2 * time.Minute // real time; the run ends at its last answer
	}
}

// drainNote says how a run ends: its requests in flight cut, or drained.
func drainNote(d time.Duration) string {
	if d <= 0 {
		return "; requests in flight then are cut"
	}
	return "; requests in flight then get " + d.String() + " to finish"
}

// runsMooncake reports whether --workloads names a mooncake trace.
func (o *benchOptions) runsMooncake() bool {
	for name := range strings.SplitSeq(o.workloads, ",") {
		if strings.HasPrefix(strings.TrimSpace(name), "mooncake:") {
			return true
		}
	}
	return false
}

// newWorkloads makes --workloads' workloads with opts: a mooncake:FILE
// once per --trace-speeds load point.
func (o *benchOptions) newWorkloads(opts workload.Options) ([]bench.Workload, error) {
	var speeds []float64
	for f := range strings.SplitSeq(o.traceSpeeds, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0 && v <= maxTraceSpeed) {
			return nil, fmt.Errorf("trace-speeds: want factors in (0, %d], got %q", maxTraceSpeed, f)
		}
		speeds = append(speeds, v)
	}
	var wls []bench.Workload
	for name := range strings.SplitSeq(o.workloads, ",") {
		name = strings.TrimSpace(name)
		points := []float64{0}
		if strings.HasPrefix(name, "mooncake:") {
			points = speeds
		}
		for _, v := range points {
			opts.TraceSpeed = v
			w, err := workload.New(name, opts)
			if err != nil {
				return nil, err
			}
			wls = append(wls, w)
		}
	}
	return wls, nil
}

// maxTraceSpeed bounds --trace-speeds: beyond it a trace's arrivals are
// one burst.
const maxTraceSpeed = 10_000

// runs reports whether --workloads names workload.
func (o *benchOptions) runs(workload string) bool {
	for name := range strings.SplitSeq(o.workloads, ",") {
		if strings.TrimSpace(name) == workload {
			return true
		}
	}
	return false
}

// benchPlan is one fleet layout's runs.
type benchPlan struct {
	rc     bench.RunConfig
	fleet  bench.Fleet
	layout *bench.Layout // nil: single
}

// plans turns the options into the benchmark's runs, one plan per --fleet
// layout.
func (o *benchOptions) plans(progress, log io.Writer, logger *slog.Logger) ([]benchPlan, error) {
	var layouts []*bench.Layout
	for name := range strings.SplitSeq(o.fleets, ",") {
		l, err := bench.LookupLayout(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		if l == nil {
			layouts = append(layouts, nil)
			continue
		}
		switch {
		case len(o.engines) > 0 || o.target != "":
			return nil, fmt.Errorf("fleet: %s starts simulated engines; --backend and --target measure running ones", l.Name)
		case o.given["model"] || o.given["lora-modules"]:
			return nil, fmt.Errorf("fleet: %s sets each engine's models; drop --model and --lora-modules", l.Name)
		case o.given["backends"] && o.backends != len(l.Engines):
			return nil, fmt.Errorf("fleet: %s has %d engines, --backends says %d", l.Name, len(l.Engines), o.backends)
		}
		layouts = append(layouts, l)
	}
	rc, fleet, err := o.runConfig(progress, log, logger)
	if err != nil {
		return nil, err
	}
	var plans []benchPlan
	for _, l := range layouts {
		if l == nil {
			if err := o.checkSingleModels(rc); err != nil {
				return nil, err
			}
			plans = append(plans, benchPlan{rc: rc, fleet: fleet})
			continue
		}
		// The layout's users only (a pool alone drives the users the
		// mixed fleet had on it), the layout's engines, and its first
		// model as the client's default and the overhead probe's.
		opts := o.wl
		opts.Models = l.Models()
		lrc := rc
		lrc.Backends, lrc.Model, lrc.Fleet = len(l.Engines), opts.Models[0], l.Name
		if lrc.Workloads, err = o.newWorkloads(opts); err != nil {
			return nil, err
		}
		lf := *fleet.(*bench.LocalFleet)
		lf.Layout = l
		plans = append(plans, benchPlan{rc: lrc, fleet: &lf, layout: l})
	}
	return plans, nil
}

// checkSingleModels refuses the mixed workload on simulated engines that
// do not serve its models: every request would get 404.
func (o *benchOptions) checkSingleModels(rc bench.RunConfig) error {
	if len(o.engines) > 0 || o.target != "" {
		return nil // running engines: they serve what they serve
	}
	served := append([]string{o.sim.Model}, o.sim.ExtraModels...)
	for _, l := range o.sim.LoRAModules {
		served = append(served, l.Name)
	}
	for _, w := range rc.Workloads {
		if w.Name() != "mixed" {
			continue
		}
		for _, m := range workload.MixedModels() {
			if !slices.Contains(served, m) {
				return fmt.Errorf("workloads: mixed names %s, which --fleet single's engines do not serve (%s): use --fleet mixed, or --model and --lora-modules serving %s",
					m, strings.Join(served, ", "), strings.Join(workload.MixedModels(), ", "))
			}
		}
	}
	return nil
}

// runConfig turns the options into the benchmark's run and fleet for
// --fleet single (plans derives the other layouts' from them).
func (o *benchOptions) runConfig(progress, log io.Writer, logger *slog.Logger) (bench.RunConfig, bench.Fleet, error) {
	if err := applySimProfile(&o.sim, &o.simf); err != nil {
		return bench.RunConfig{}, nil, err
	}
	o.wl.MaxTokens = o.sim.MaxTokens // --max-tokens: what every request asks for
	// Think times are real time: scale them with the engines' clock.
	o.wl.ThinkMin = time.Duration(float64(o.wl.ThinkMin) / o.sim.Speedup)
	o.wl.ThinkMax = time.Duration(float64(o.wl.ThinkMax) / o.sim.Speedup)
	o.wl.Rate = o.rate * o.sim.Speedup // arrivals a second of real time
	if o.sim.Tokenizer == "" {
		// Byte-block engines count 4 bytes a token; a generated word
		// and its space average 6 bytes.
		o.wl.TokensPerWord = 1.5
	}
	o.wl.Speedup = o.sim.Speedup
	if len(o.engines) > 0 || o.target != "" {
		o.wl.Speedup = 1 // running engines keep real time
	}
	wls, err := o.newWorkloads(o.wl)
	if err != nil {
		return bench.RunConfig{}, nil, err
	}
	var replay time.Duration // the longest trace replay, real time
	for _, w := range wls {
		if sp, ok := w.(interface{ Span() time.Duration }); ok {
			replay = max(replay, sp.Span())
		}
	}
	if replay > 0 && !o.given["duration"] {
		// A cap, not the run's length: a run ends once its trace is
		// sent and answered. Twice the replay leaves room for sends
		// that came late because every user was busy.
		o.duration = 2*replay + 30*time.Second
	}
	pols := benchPolicies(o.policies)
	serve := dataplane.DefaultConfig()
	serve.Tokenizer, serve.Router.ChatTemplate, serve.Router.BlockSize, serve.Reactor.Loops = o.sim.Tokenizer, o.sim.ChatTemplate, o.sim.BlockSize, o.shards
	serve.Backend.FirstByteTimeout = 10 * time.Minute // a queued engine is slow, not broken
	serve.Backend.ScrapeInterval, serve.Router.LoadSlack, serve.Router.LoadTokens = o.scrapeInterval(), o.loadSlack, o.loadTokens
	o.scaleCluster(&serve.Cluster)
	kv, _ := o.kvEventsOn()
	if kv {
		serve.Router.KVEventsBridge = o.scaleBridge(serve.Router.KVEventsBridge)
	}
	for _, p := range pols {
		if !slices.Contains(policy.Names(), p) {
			return bench.RunConfig{}, nil, fmt.Errorf("policies: unknown policy %q, want some of %s", p, strings.Join(policy.Names(), ", "))
		}
	}
	if err := serve.Validate(); err != nil { // the checks serve runs: --shards, --block-size, --load-slack, --load-tokens
		var lines []string
		for line := range strings.SplitSeq(err.Error(), "\n") {
			if key, rest := componentKey(line); key != "" {
				line = key + ": " + rest
			}
			lines = append(lines, line)
		}
		return bench.RunConfig{}, nil, errors.New(strings.Join(lines, "\n"))
	}
	if o.routers < 1 || o.routers > 16 {
		return bench.RunConfig{}, nil, fmt.Errorf("routers: want 1 to 16, got %d", o.routers)
	}
	if o.routers > 1 && o.target != "" {
		return bench.RunConfig{}, nil, errors.New("routers: --target measures one running router; start a cluster of saltus serve and name one")
	}
	if o.kvEvents.on && (len(o.engines) > 0 || o.target != "") {
		return bench.RunConfig{}, nil, errors.New("kv-events: wires the simulated engines the bench starts; --backend and --target measure running ones (give saltus serve --kv-events BACKEND=tcp://HOST:PORT for those)")
	}
	local := bench.LocalFleet{Sim: o.sim, Serve: serve, Logger: logger, Routers: o.routers, KVEvents: kv}
	var fleet bench.Fleet = &local
	if len(o.engines) > 0 || o.target != "" {
		fleet = &bench.RemoteFleet{Engines: o.engines, Target: o.target, Local: local}
		if o.target != "" {
			pols = []string{"target"}
		}
		if len(o.engines) > 0 {
			o.backends = len(o.engines)
		}
	}
	rc := bench.RunConfig{
		Backends: o.backends, Users: o.users, Duration: o.duration, Policies: pols, Workloads: wls,
		Model: o.sim.Model, OverheadPairs: o.overheadPairs, Progress: progress, Log: log, TimeScale: o.sim.Speedup, Drain: o.drain,
	}
	if len(o.engines) > 0 || o.target != "" {
		rc.TimeScale = 1 // real engines: real time
	}
	if o.runsMooncake() || o.given["slo-ttft"] {
		rc.SLO, rc.RouteBlock = o.slo, o.sim.BlockSize
	}
	return rc, fleet, rc.Validate()
}

// benchPolicies splits --policies; "all" is every policy saltus serve
// takes (policy.Names: a policy added there is benchmarked too).
func benchPolicies(flag string) []string {
	if strings.TrimSpace(flag) == "all" {
		return policy.Names()
	}
	var pols []string
	for p := range strings.SplitSeq(flag, ",") {
		pols = append(pols, strings.TrimSpace(p))
	}
	return pols
}

// scrapeInterval is --scrape-interval in real time: -1 is saltus serve's
// default of 1 s in simulated time.
func (o *benchOptions) scrapeInterval() time.Duration {
	if o.scrape >= 0 {
		return o.scrape
	}
	sp := o.sim.Speedup
	if len(o.engines) > 0 || sp <= 0 {
		sp = 1 // running engines keep real time
	}
	return max(time.Duration(float64(time.Second)/sp), 10*time.Millisecond)
}

// kvEventsOn is whether the simulated engines' KV events are wired into
// each saltus started (--kv-events), and why, for the report. Unless
// given, on when the run is exact: saltus keys prompts by the engines'
// token ids (--tokenizer, or the token-id prompts of a mooncake:FILE
// workload); in byte-block mode it keys text prompts by bytes, which no
// event's token ids reproduce, and keeps its guesses for them
// (policy/truth.go), so the events would add nothing but work. Running
// engines (--backend, --target) are not the bench's to wire.
func (o *benchOptions) kvEventsOn() (on bool, why string) {
	switch {
	case len(o.engines) > 0 || o.target != "":
		return false, "running engines, which the bench does not wire: saltus serve --kv-events does"
	case o.kvEvents.set && o.kvEvents.on:
		return true, "--kv-events"
	case o.kvEvents.set:
		return false, "--kv-events=false"
	case o.sim.Tokenizer != "":
		return true, "the default with --tokenizer: saltus keys prompts by the engines' token ids"
	case o.runsMooncake():
		return true, "the default with mooncake:FILE: token-id prompts"
	}
	return false, "the default in byte-block mode: no event carries the byte keys of text prompts"
}

// scaleBridge divides serve's --kv-events-bridge by the engines'
// speedup, as the scrape's interval: the bridge covers an engine's queue
// wait and first prefill step, which the simulated engines run --speedup
// times faster. At least 100 ms: an event's trip to the loops on a
// loaded machine.
func (o *benchOptions) scaleBridge(d time.Duration) time.Duration {
	sp := max(o.sim.Speedup, 1)
	return max(time.Duration(float64(d)/sp), 100*time.Millisecond)
}

// scaleCluster divides the cluster's real-time periods (route batches,
// gossip, load reports) by the engines' speedup, as the scrape's: the
// simulated engines run --speedup times faster, so the routers must share
// that much faster for a route or a load report to be as fresh, in the
// engines' time, as serve's defaults make it on real engines.
func (o *benchOptions) scaleCluster(c *gossip.Config) {
	sp := o.sim.Speedup
	if len(o.engines) > 0 || sp <= 0 {
		sp = 1 // running engines keep real time
	}
	scale := func(d, floor time.Duration) time.Duration { return max(time.Duration(float64(d)/sp), floor) }
	c.BatchInterval = scale(c.BatchInterval, time.Millisecond)
	c.GossipInterval = scale(c.GossipInterval, 5*time.Millisecond)
	c.LoadInterval = scale(c.LoadInterval, 10*time.Millisecond)
	c.LoadTTL = 4 * c.LoadInterval
}

func (o *benchOptions) setup() map[string]string {
	m := map[string]string{
		"engines":          fmt.Sprint(o.backends),
		"users":            fmt.Sprint(o.users),
		"duration":         o.duration.String() + " per run (real time)" + drainNote(o.drain),
		"workload seed":    fmt.Sprint(o.wl.Seed),
		"output tokens":    fmt.Sprint(o.wl.MaxTokens),
		"engine profile":   fmt.Sprintf("%s (KV %d tokens, max-num-seqs %d, max-waiting %d, then %d)", o.sim.Name, o.sim.KVTokens, o.sim.MaxNumSeqs, o.sim.MaxWaiting, o.sim.OverloadStatus),
		"speedup":          fmt.Sprintf("%g (times in the tables are simulated: measured × speedup)", o.sim.Speedup),
		"tokenizer":        "byte-block (4 bytes a token)",
		"time per request": "TTFT and latency as the client saw them",
		"engine scrape":    "off",
	}
	if o.runsMooncake() {
		m["trace replay"] = fmt.Sprintf("open loop at the trace's arrival times sped up %s× (each a run per policy on cold engines), rows within %v of trace time%s; prompts of token ids, %d tokens a hash id; output_length as max_tokens with ignore_eos",
			o.traceSpeeds, o.wl.TraceWindow, traceCount(o.wl.TraceRequests), cmp.Or(o.wl.TraceBlock, 512))
	}
	if o.runs("saturation") {
		m["saturation arrivals"] = fmt.Sprintf("%g a second of simulated time (%g real), Poisson, open loop while a user is free", o.rate, o.rate*o.sim.Speedup)
	}
	if iv := o.scrapeInterval(); iv > 0 && o.target == "" {
		m["engine scrape"] = "every " + iv.String() + " (real time) by each saltus started"
	}
	if o.routers > 1 {
		c := gossip.DefaultConfig()
		o.scaleCluster(&c)
		m["routers"] = fmt.Sprintf("%d saltus in a cluster (gossip on loopback; route batches every %v, load reports every %v real time: serve's defaults / speedup), requests sent to them in turn",
			o.routers, c.BatchInterval, c.LoadInterval)
	}
	if on, why := o.kvEventsOn(); on {
		d := dataplane.DefaultConfig()
		m["KV events"] = fmt.Sprintf("wired (%s): each engine publishes its KV-cache events (vLLM's ZMQ publisher on loopback), each saltus subscribes to every engine (serve's --kv-events); "+
			"prefix and ranvier route by what the engines confirm, a guess counting for --kv-events-bridge %v real time (serve's %v / speedup)", why, o.scaleBridge(d.Router.KVEventsBridge), d.Router.KVEventsBridge)
	} else {
		m["KV events"] = "off (" + why + ")"
	}
	if o.target != "" {
		delete(m, "engine scrape")
		delete(m, "KV events")
	}
	if o.sim.Tokenizer != "" {
		m["tokenizer"] = o.sim.Tokenizer
	}
	if len(o.engines) > 0 {
		m["engines"] = strings.Join(o.engines, " ")
		delete(m, "engine profile")
		delete(m, "speedup")
	}
	if o.target != "" {
		m["router"] = o.target
	}
	if o.fleets != bench.SingleLayout {
		var parts []string
		for name := range strings.SplitSeq(o.fleets, ",") {
			if l, err := bench.LookupLayout(strings.TrimSpace(name)); err == nil && l != nil {
				parts = append(parts, l.Describe())
			} else {
				parts = append(parts, bench.SingleLayout+": --backends engines serving "+strings.Join(append([]string{o.sim.Model}, o.sim.ExtraModels...), ", "))
			}
		}
		m["fleet"] = strings.Join(parts, "; ") + " (saltus given the engines' URLs only)"
		var counts []string
		for name := range strings.SplitSeq(o.fleets, ",") {
			n := o.backends
			if l, err := bench.LookupLayout(strings.TrimSpace(name)); err == nil && l != nil {
				n = len(l.Engines)
			}
			counts = append(counts, fmt.Sprintf("%s %d", strings.TrimSpace(name), n))
		}
		m["engines"] = strings.Join(counts, ", ")
	}
	return m
}

// parseBench parses args; exit code >= 0 means stop with it.
func parseBench(name string, args []string, stderr io.Writer, o *benchOptions) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	benchFlags(fs, o)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s [flags]\n\nStarts simulated engines and a saltus per routing policy, drives a workload\nthrough each on cold engines, and writes report.md, results.json and PNG plots.\n\nFlags:\n", name)
		printFlags(stderr, fs, nil)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.given = set
	o.applyQuick(set)
	o.applyDemo(set)
	o.applySaturation(set)
	o.applyMooncake(set)
	return -1
}

// runBench is `saltus bench`.
func runBench(args []string, stdout, stderr io.Writer) int {
	var o benchOptions
	if code := parseBench("saltus bench", args, stderr, &o); code >= 0 {
		return code
	}
	var progress io.Writer
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		progress = stderr
	}
	logger, _ := newLogger(stderr, "text", "warn") // a valid format and level: no error
	plans, err := o.plans(progress, stdout, logger)
	if err != nil {
		fmt.Fprintf(stderr, "saltus bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := runPlans(ctx, plans)
	if rep != nil {
		rep.Command = "saltus bench " + strings.Join(args, " ")
		rep.Setup = o.setup()
		paths, werr := rep.WriteFiles(o.out)
		if werr == nil && o.samples {
			var sp string
			sp, werr = rep.WriteSamples(o.out)
			paths = append(paths, sp)
		}
		if werr != nil {
			fmt.Fprintf(stderr, "saltus bench: writing the report: %v\n", werr)
			return 1
		}
		fmt.Fprintf(stdout, "\n%s", tables(rep))
		fmt.Fprintf(stdout, "\nwrote %s\n", strings.Join(paths, ", "))
	}
	if err != nil {
		fmt.Fprintf(stderr, "saltus bench: %v\n", err)
		return 1
	}
	return 0
}

// runPlans runs every plan in turn into one report (its runs in plan
// order), up to the first error.
func runPlans(ctx context.Context, plans []benchPlan) (*bench.Report, error) {
	var all *bench.Report
	for _, p := range plans {
		rep, err := bench.Run(ctx, p.rc, p.fleet)
		if all == nil {
			all = rep
		} else if rep != nil {
			all.Runs = append(all.Runs, rep.Runs...)
			all.Samples = append(all.Samples, rep.Samples...)
		}
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// tables is every workload's table, for the terminal.
func tables(rep *bench.Report) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, s := range rep.Runs {
		if seen[s.Workload] {
			continue
		}
		seen[s.Workload] = true
		var runs []bench.Summary
		for _, r := range rep.Runs {
			if r.Workload == s.Workload {
				runs = append(runs, r)
			}
		}
		fmt.Fprintf(&b, "%s\n%s\n", s.Workload, bench.Table(runs))
		if t := bench.ModelTable(runs); t != "" {
			fmt.Fprintf(&b, "%s by model\n%s\n%s\n", s.Workload, t, bench.EngineTable(runs))
		}
		if t := bench.OverloadTable(runs); t != "" {
			fmt.Fprintf(&b, "%s under overload\n%s\n", s.Workload, t)
		}
		if t := bench.SLOTable(runs); t != "" {
			fmt.Fprintf(&b, "%s against the TTFT objective\n%s\n", s.Workload, t)
		}
	}
	if t := bench.PoolTable(rep.Runs); t != "" {
		fmt.Fprintf(&b, "pools against their engines alone\n%s\n", t)
	}
	return b.String()
}
