package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench"
	"github.com/saltus-lb/saltus/policy"
)

func TestSimBenchDemoFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"sim", "--help"}, 0, "\n  --kv-tokens tokens\n"},
		{[]string{"sim", "--profile", "tpu"}, 2, `profile: unknown "tpu", want one of a100-13b, h100-8b`},
		{[]string{"sim", "--speedup", "0.5"}, 2, "speedup: must be at least 1"},
		{[]string{"sim", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"bench", "--help"}, 0, "\n  --policies policies\n"},
		{[]string{"bench", "--policies", "random"}, 2, `unknown policy "random"`},
		{[]string{"bench", "--workloads", "nope"}, 2, `unknown workload "nope"`},
		{[]string{"bench", "--users", "0"}, 2, "users must be positive"},
		{[]string{"demo", "--help"}, 0, "Usage: saltus demo"},
		{[]string{"bench", "--fleet", "moon"}, 2, `fleet: unknown fleet "moon", want one of single, mixed, alpha, beta`},
		{[]string{"bench", "--fleet", "mixed", "--backends", "4"}, 2, "fleet: mixed has 5 engines, --backends says 4"},
		{[]string{"bench", "--fleet", "alpha", "--model", "m"}, 2, "fleet: alpha sets each engine's models"},
		{[]string{"bench", "--fleet", "mixed", "--backend", "http://127.0.0.1:1"}, 2, "fleet: mixed starts simulated engines"},
		{[]string{"bench", "--workloads", "mixed"}, 2, "workloads: mixed names org/alpha, which --fleet single's engines do not serve (sim-llama)"},
		{[]string{"demo", "--fleet", "mixed,beta"}, 2, `the demo runs one layout, got "mixed,beta"`},
		{[]string{"bench", "--kv-events", "--backend", "http://127.0.0.1:1"}, 2, "kv-events: wires the simulated engines the bench starts"},
		{[]string{"bench", "--kv-events=maybe"}, 2, `invalid boolean value "maybe" for -kv-events`},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.err)
		}
	}
}

// TestBenchPolicies: --policies takes every policy saltus serve takes,
// from policy.Names (not a copy), and "all" names them all in order.
func TestBenchPolicies(t *testing.T) {
	t.Parallel()
	all := policy.Names()
	if got := benchPolicies("all"); !slices.Equal(got, all) {
		t.Errorf("all = %q, want %q", got, all)
	}
	if got := benchPolicies(" prefix , round_robin"); !slices.Equal(got, []string{"prefix", "round_robin"}) {
		t.Errorf("split = %q", got)
	}
	for _, p := range append(all, "all") {
		var o benchOptions
		if code := parseBench("saltus bench", []string{"--policies", p, "--backends", "1"}, io.Discard, &o); code >= 0 {
			t.Fatalf("--policies %s: parse exit %d", p, code)
		}
		plans, err := o.plans(nil, io.Discard, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Errorf("--policies %s: %v", p, err)
			continue
		}
		rc := plans[0].rc
		if want := benchPolicies(p); !slices.Equal(rc.Policies, want) {
			t.Errorf("--policies %s: runs %q, want %q", p, rc.Policies, want)
		}
	}
}

// TestBenchFleetPlans: --fleet mixed,alpha,beta plans the mixed fleet's
// five engines with every user, then each pool's engines with its users
// only; --fleet single keeps today's one-kind fleet, and --quick's 4
// engines give way to a layout's count.
func TestBenchFleetPlans(t *testing.T) {
	t.Parallel()
	var o benchOptions
	if code := parseBench("saltus bench", []string{"--fleet", "mixed,alpha,beta,single", "--workloads", "mixed,stress", "--quick",
		"--model", "org/alpha", "--model", "org/beta", "--lora-modules", "alpha-tuned=/a"}, io.Discard, &o); code >= 0 {
		t.Fatalf("parse exit %d", code)
	}
	if _, err := o.plans(nil, io.Discard, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "drop --model") {
		t.Fatalf("layouts with --model: %v", err)
	}
	o = benchOptions{}
	if code := parseBench("saltus bench", []string{"--fleet", "mixed,alpha,beta,single", "--workloads", "mixed,stress", "--quick"}, io.Discard, &o); code >= 0 {
		t.Fatalf("parse exit %d", code)
	}
	o.fleets = "mixed,alpha,beta" // single's engines serve no mixed model
	plans, err := o.plans(nil, io.Discard, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		fleet    string
		backends int
		model    string
		users    []int // the users of user ids 0-4 that send
	}{
		{"mixed", 5, "org/alpha", []int{0, 1, 2, 3, 4}},
		{"alpha", 3, "org/alpha", []int{0, 2, 3}},
		{"beta", 2, "org/beta", []int{1, 4}},
	} {
		rc := plans[i].rc
		if rc.Fleet != want.fleet || rc.Backends != want.backends || rc.Model != want.model || len(rc.Workloads) != 2 {
			t.Fatalf("plan %d: fleet %q, %d engines, model %q, %d workloads; want %+v", i, rc.Fleet, rc.Backends, rc.Model, len(rc.Workloads), want)
		}
		if lf := plans[i].fleet.(*bench.LocalFleet); lf.Layout == nil || lf.Layout.Name != want.fleet {
			t.Fatalf("plan %d: layout %+v", i, lf.Layout)
		}
		var users []int
		for id := range 5 {
			if _, ok := rc.Workloads[0].NewUser(id).Next(); ok {
				users = append(users, id)
			}
		}
		if !slices.Equal(users, want.users) {
			t.Errorf("plan %s: users %v send, want %v", want.fleet, users, want.users)
		}
	}
}

// TestBenchRun: a tiny real benchmark (2 engines, 2 policies, 1 s each,
// speedup 50) writes its report, results and plots.
func TestBenchRun(t *testing.T) {
	dir := t.TempDir()
	out := benchReport(t, []string{"bench", "--backends", "2", "--users", "4", "--duration", "1500ms", "--speedup", "50",
		"--policies", "round_robin,prefix", "--workloads", "multiturn", "--overhead-pairs", "5", "--out", dir},
		"| round_robin |", "| prefix |", "saltus bench --backends 2")
	for _, f := range []string{"report.md", "results.json", "multiturn_ttft_cdf.png", "multiturn_hit_ratio.png", "multiturn_ttft_p99.png", "multiturn_load.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(out, "wrote ") {
		t.Errorf("stdout: %s", out)
	}
}

// TestBenchSaturation: the saturation workload on saturated simulated
// engines (one running, one waiting, the rest refused) reports its
// priorities and tenants under overload, with the users raised so that
// arrivals stay open loop.
func TestBenchSaturation(t *testing.T) {
	out := benchReport(t, []string{"bench", "--workloads", "saturation", "--backends", "2", "--max-num-seqs", "1", "--max-waiting", "1",
		"--overload-status", "429", "--max-tokens", "20", "--rate", "20", "--speedup", "20", "--duration", "1500ms", "--drain", "1s",
		"--policies", "prefix", "--overhead-pairs", "0", "--out", t.TempDir()},
		"### saturation under overload", "| prefix | priority -10 |", "| prefix | priority 10 |",
		"| prefix | tenant small |", "| prefix | tenant big |", "latency p50 priority -10 / 10", "| users | 256 |",
		"| saturation arrivals | 20 a second of simulated time (400 real)")
	if !strings.Contains(out, "saturation under overload") {
		t.Errorf("stdout lacks the overload table: %s", out)
	}
}

// TestBenchMooncake replays the shipped Mooncake trace's first rows at two
// load points through two policies on simulated engines: every row is
// answered (token-id prompts, exact output lengths), each load point has
// its table against the TTFT objective, and prefix's predictions are
// compared with the engines' cached tokens.
func TestBenchMooncake(t *testing.T) {
	dir := t.TempDir()
	benchReport(t, []string{"bench", "--workloads", "mooncake:../../bench/traces/mooncake-small.jsonl", "--trace-requests", "40", "--trace-speeds", "8,16",
		"--backends", "2", "--speedup", "50", "--policies", "round_robin,prefix", "--overhead-pairs", "0", "--samples", "--out", dir},
		"## mooncake-x8", "## mooncake-x16", "### mooncake-x8 against the TTFT objective", "### mooncake-x16 against the TTFT objective",
		"goodput (TTFT ≤ 1s)", "| round_robin | 40 | 0 |", "| prefix | 40 | 0 |", "| users | 256 |", "| trace replay | open loop at the trace's arrival times sped up 8,16×")
	var rep struct {
		Runs []bench.Summary `json:"runs"`
	}
	js, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err == nil {
		err = json.Unmarshal(js, &rep)
	}
	if err != nil || len(rep.Runs) != 4 {
		t.Fatalf("results.json: %d runs, %v", len(rep.Runs), err)
	}
	for _, r := range rep.Runs {
		x := r.SLO
		if x == nil || x.Requests != 40 || x.Failed != 0 || x.PromptTokens == 0 || r.OutputTokens == 0 {
			t.Fatalf("%s %s: %+v", r.Workload, r.Policy, x)
		}
		if x.Predicted != (r.Policy == "prefix") {
			t.Errorf("%s %s: predicted %v", r.Workload, r.Policy, x.Predicted)
		}
		if r.Policy == "prefix" && (x.CachedTokens == 0 || x.PredictedTokens == 0) {
			t.Errorf("%s prefix: nothing cached or predicted on a trace of conversations: %+v", r.Workload, x)
		}
	}
	// Every answer generated exactly the row's output_length.
	var want []int
	rows, _ := os.ReadFile("../../bench/traces/mooncake-small.jsonl")
	for line := range strings.SplitSeq(string(rows), "\n") {
		var row struct {
			Output int `json:"output_length"`
		}
		if len(want) < 40 && json.Unmarshal([]byte(line), &row) == nil {
			want = append(want, row.Output)
		}
	}
	var sum int64
	for _, n := range want {
		sum += int64(n)
	}
	for _, r := range rep.Runs {
		if r.OutputTokens != sum {
			t.Errorf("%s %s: %d output tokens, want the trace's %d", r.Workload, r.Policy, r.OutputTokens, sum)
		}
	}
}

// TestBenchKVEventsDefault: --kv-events is on by default when saltus
// keys prompts as the engines do (--tokenizer, mooncake:FILE's token-id
// prompts) and off in byte-block mode; given, it wins; running engines
// are not wired. The report's settings say which and why, and a wired
// run's saltus gets serve's --kv-events-bridge scaled by the speedup.
func TestBenchKVEventsDefault(t *testing.T) {
	t.Parallel()
	const trace = "mooncake:../../bench/traces/mooncake-small.jsonl"
	for _, tc := range []struct {
		args []string
		on   bool
		row  string // the report's KV events row starts so; "" none
	}{
		{nil, false, "off (the default in byte-block mode"},
		{[]string{"--tokenizer", "x"}, true, "wired (the default with --tokenizer"},
		{[]string{"--workloads", trace}, true, "wired (the default with mooncake:FILE"},
		{[]string{"--workloads", trace, "--kv-events=false"}, false, "off (--kv-events=false)"},
		{[]string{"--tokenizer", "x", "--kv-events=false"}, false, "off (--kv-events=false)"},
		{[]string{"--kv-events"}, true, "wired (--kv-events)"},
		{[]string{"--backend", "http://127.0.0.1:1"}, false, "off (running engines"},
		{[]string{"--target", "http://127.0.0.1:1"}, false, ""},
	} {
		var o benchOptions
		if code := parseBench("saltus bench", tc.args, io.Discard, &o); code >= 0 {
			t.Fatalf("%q: parse exit %d", tc.args, code)
		}
		if on, why := o.kvEventsOn(); on != tc.on {
			t.Errorf("%q: on %v (%s), want %v", tc.args, on, why, tc.on)
		}
		row, ok := o.setup()["KV events"]
		if tc.row == "" && ok || !strings.HasPrefix(row, tc.row) {
			t.Errorf("%q: KV events row %q, want %q…", tc.args, row, tc.row)
		}
	}
	for _, args := range [][]string{nil, {"--tokenizer", "x"}} {
		d := benchOptions{demo: true}
		if code := parseBench("saltus demo", args, io.Discard, &d); code >= 0 {
			t.Fatalf("demo %q: parse exit %d", args, code)
		}
		if on, _ := d.kvEventsOn(); on != (args != nil) {
			t.Errorf("demo %q: kv events %v", args, on)
		}
	}
	var o benchOptions
	if code := parseBench("saltus bench", []string{"--workloads", trace, "--speedup", "10", "--backends", "2"}, io.Discard, &o); code >= 0 {
		t.Fatalf("parse exit %d", code)
	}
	plans, err := o.plans(nil, io.Discard, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	lf := plans[0].fleet.(*bench.LocalFleet)
	if !lf.KVEvents || lf.Serve.Router.KVEventsBridge != time.Second {
		t.Errorf("fleet: kv events %v, bridge %v; want true, 1s (10s / speedup 10)", lf.KVEvents, lf.Serve.Router.KVEventsBridge)
	}
	if row := o.setup()["KV events"]; !strings.Contains(row, "--kv-events-bridge 1s real time (serve's 10s / speedup)") {
		t.Errorf("KV events row %q", row)
	}
}

// TestBenchKVEvents (issue 31, item 3): a trace replay of token-id
// prompts wires the simulated engines' KV events into the saltus it
// starts by default: the report says so and the run's saltus received
// BlockStored events; with --kv-events=false it received none.
func TestBenchKVEvents(t *testing.T) {
	for _, tc := range []struct {
		flag string // "": the default
		row  string
		on   bool
	}{
		{"", "| KV events | wired (the default with mooncake:FILE", true},
		{"--kv-events=false", "| KV events | off (--kv-events=false) |", false},
	} {
		dir := t.TempDir()
		args := []string{"bench", "--workloads", "mooncake:../../bench/traces/mooncake-small.jsonl", "--trace-requests", "20", "--trace-speeds", "16",
			"--backends", "2", "--speedup", "50", "--policies", "prefix", "--overhead-pairs", "0", "--out", dir}
		if tc.flag != "" {
			args = append(args, tc.flag)
		}
		benchReport(t, args, "| prefix | 20 | 0 |", tc.row)
		var rep struct {
			Runs []bench.Summary `json:"runs"`
		}
		js, err := os.ReadFile(filepath.Join(dir, "results.json"))
		if err == nil {
			err = json.Unmarshal(js, &rep)
		}
		if err != nil || len(rep.Runs) != 1 {
			t.Fatalf("%s: results.json: %d runs, %v", tc.flag, len(rep.Runs), err)
		}
		if r := rep.Runs[0]; (r.KVEventsStored > 0) != tc.on {
			t.Errorf("%q: saltus received %d BlockStored events", tc.flag, r.KVEventsStored)
		} else {
			t.Logf("%q: saltus received %d BlockStored events; token hit ratio %.3f", tc.flag, r.KVEventsStored, r.TokenHitRatio)
		}
	}
}

// benchReport runs saltus with args (a bench whose --out is given), fails
// the test unless it exits 0, and checks that its report.md contains
// each of want. It returns what it wrote to stdout.
func benchReport(t *testing.T, args []string, want ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("code %d: %s\n%s", code, out.String(), errb.String())
	}
	md, err := os.ReadFile(filepath.Join(args[slices.Index(args, "--out")+1], "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
	return out.String()
}
