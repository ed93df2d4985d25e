package bench

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is everything one `saltus bench` invocation measured.
type Report struct {
	// Command is the command line that produced it.
	Command string `json:"command"`
	// Started is when the benchmark began (UTC).
	Started time.Time `json:"started"`
	// Setup describes the fleet: backends, profile, speedup, users...
	Setup map[string]string `json:"setup"`
	// Runs are the summaries in run order (workload-major).
	Runs []Summary `json:"runs"`
	// Samples are every request, by run index; not written to
	// results.json unless asked (they are large).
	Samples [][]Sample `json:"-"`
}

// WriteFiles writes report.md, results.json and the PNG plots into dir
// (created if missing) and returns the paths written.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	md := filepath.Join(dir, "report.md")
	if err := writeFile(md, func(w io.Writer) error { return r.WriteMarkdown(w) }); err != nil {
		return nil, err
	}
	paths = append(paths, md)
	js := filepath.Join(dir, "results.json")
	if err := writeFile(js, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}); err != nil {
		return nil, err
	}
	paths = append(paths, js)
	pngs, err := r.writePlots(dir)
	if err != nil {
		return paths, fmt.Errorf("plots: %w", err)
	}
	return append(paths, pngs...), nil
}

// sampleLine is one line of samples.jsonl: a request and its run.
type sampleLine struct {
	Workload string `json:"workload"`
	Policy   string `json:"policy"`
	Sample
}

// WriteSamples writes every request of every run into dir/samples.jsonl,
// one JSON object per line (the run's workload and policy, then the
// Sample's fields: sent at, TTFT and latency in nanoseconds of simulated
// time, tokens, backend, class tag, error), in run order, and returns its
// path. For looking into a tail: which requests were slow, where they
// went, whether they hit.
func (r *Report) WriteSamples(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "samples.jsonl")
	return path, writeFile(path, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for i, ss := range r.Samples {
			var wl, pol string
			if i < len(r.Runs) {
				wl, pol = r.Runs[i].Workload, r.Runs[i].Policy
			}
			for _, s := range ss {
				if err := enc.Encode(sampleLine{Workload: wl, Policy: pol, Sample: s}); err != nil {
					return err
				}
			}
		}
		return bw.Flush()
	})
}

func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// workloads returns the workloads in run order, each once.
func (r *Report) workloads() []string {
	var out []string
	for _, s := range r.Runs {
		if !slices.Contains(out, s.Workload) {
			out = append(out, s.Workload)
		}
	}
	return out
}

// WriteMarkdown writes the report: the setup, then a table per workload.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# saltus bench\n\n")
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`  \nStarted: %s\n\n", r.Command, r.Started.UTC().Format(time.RFC3339))
	}
	if len(r.Setup) > 0 {
		b.WriteString("| setting | value |\n|---|---|\n")
		for _, k := range sortedKeys(r.Setup) {
			fmt.Fprintf(&b, "| %s | %s |\n", k, r.Setup[k])
		}
		b.WriteString("\n")
	}
	for _, wl := range r.workloads() {
		fmt.Fprintf(&b, "## %s\n\n", wl)
		b.WriteString(Table(r.runsOf(wl)))
		b.WriteString("\n")
		if t := ModelTable(r.runsOf(wl)); t != "" {
			fmt.Fprintf(&b, "### %s by model\n\n%s\n%s\n", wl, t, EngineTable(r.runsOf(wl)))
		}
		if t := OverloadTable(r.runsOf(wl)); t != "" {
			fmt.Fprintf(&b, "### %s under overload\n\n%s\n", wl, t)
		}
		if t := SLOTable(r.runsOf(wl)); t != "" {
			fmt.Fprintf(&b, "### %s against the TTFT objective\n\n%s\n", wl, t)
		}
	}
	if t := PoolTable(r.Runs); t != "" {
		fmt.Fprintf(&b, "## Pools against their engines alone\n\n%s\n", t)
	}
	b.WriteString("Token hit ratio: Σ cached_tokens / Σ prompt_tokens as the engines reported them. " +
		"Request hit rate: requests with any cached token. TTFT: first SSE event with content. " +
		"Spread: most requests on one backend / mean per backend (1.00 = even). " +
		"Errors include incomplete streams. Router overhead: through-router minus direct TTFT of the same request on the same backend, real time.\n")
	if slices.ContainsFunc(r.Runs, func(s Summary) bool { return s.Models != nil }) {
		b.WriteString("\nBy model: wrong engine counts answers whose X-Saltus-Backend is an engine that does not serve the model named (its config); " +
			"a 404 by saltus has no X-Saltus-Backend (nothing was forwarded). Engines e0, e1, … are the run's, in order; answers per engine are of any status. " +
			"Pools against their engines alone: each model's token hit ratio in the whole fleet, and with the same users on its pool's engines alone (a layout that is part of the fleet).\n")
	}
	if slices.ContainsFunc(r.Runs, func(s Summary) bool { return s.Overload != nil }) {
		b.WriteString("\nUnder overload: each run's requests by priority, by tenant (Authorization: Bearer key) and by class; 200 % counts whole 200 streams, " +
			"the others by status (none: no answer; cut: a 2xx stream that failed; unfinished: still in flight when the run and its drain ended), and how many non-2xx answers carried Retry-After. " +
			"TTFT and latency are of the 200s; goodput is 200s a second of the run. The ratios compare latency p50: the lowest priority value against the highest, the tenant with fewer requests against the one with more. " +
			"Late: open-loop requests sent more than 20 ms (real time) after their time because every user was busy (raise --users).\n")
	}
	if slices.ContainsFunc(r.Runs, func(s Summary) bool { return s.SLO != nil }) {
		b.WriteString("\nAgainst the TTFT objective: failed counts every request that did not end in a whole 200 stream (cut ones too); TTFT mean and percentiles are of the 200s; " +
			"goodput is the 200s whose TTFT was within the objective, a second of the run (a failed request counts as missed). " +
			"Token hit ratio is the engines' (usage.prompt_tokens_details.cached_tokens over prompt_tokens); predicted hit ratio is saltus's own, from X-Saltus-Route " +
			"(matched blocks × the route block, at most the prompt), for the policies that read the route table (prefix, ranvier; — for the others); " +
			"a prediction within a block of the engine's cached tokens counts as right.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) runsOf(workload string) []Summary {
	var out []Summary
	for _, s := range r.Runs {
		if s.Workload == workload {
			out = append(out, s)
		}
	}
	return out
}

// Table renders runs as one Markdown table, a row per policy.
func Table(runs []Summary) string {
	var b strings.Builder
	b.WriteString("| policy | requests | errors | token hit ratio | request hit rate | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | latency p50 ms | req/s | output tok/s | spread | router overhead p50 ms |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range runs {
		overhead := "—"
		if s.RouterOverhead != (Percentiles{}) {
			overhead = fmt.Sprintf("%.2f", s.RouterOverhead.P50)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.3f | %.3f | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f | %.2f | %s |\n",
			s.Label(), s.Requests, s.Errors, s.TokenHitRatio, s.RequestHitRate,
			s.TTFT.P50, s.TTFT.P95, s.TTFT.P99, s.Latency.P50, s.RPS, s.OutputTPS, s.LoadSpread, overhead)
	}
	return b.String()
}

// ModelTable renders the runs that name several models as one Markdown
// table, a row per run and model; "" if none does.
func ModelTable(runs []Summary) string {
	var b strings.Builder
	for _, s := range runs {
		if s.Models == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| policy | model | requests | non-200 | wrong engine | 404 by saltus | 404 by an engine | token hit ratio | TTFT p50 ms | TTFT p99 ms | answers per engine |\n")
			b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		}
		for _, m := range sortedKeys(s.Models) {
			x := s.Models[m]
			wrong := "—"
			if x.WrongEngine >= 0 {
				wrong = fmt.Sprint(x.WrongEngine)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d | %d | %.3f | %.0f | %.0f | %s |\n",
				s.Label(), m, x.Requests, x.Non200, wrong, x.NotFoundRouter, x.NotFoundEngine, x.TokenHitRatio, x.TTFT.P50, x.TTFT.P99, perEngine(x.PerEngine))
		}
	}
	return b.String()
}

// perEngine is "e0 12, e2 3": the engines that answered, by index.
func perEngine(counts []int) string {
	var parts []string
	for i, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("e%d %d", i, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// EngineTable lists what each engine serves, per fleet, from the first
// run of the fleet that knows ("" if none does).
func EngineTable(runs []Summary) string {
	var b strings.Builder
	var seen []string
	for _, s := range runs {
		if s.Engines == nil || slices.Contains(seen, s.Fleet) {
			continue
		}
		seen = append(seen, s.Fleet)
		if b.Len() == 0 {
			b.WriteString("| fleet | engine | serves |\n|---|---|---|\n")
		}
		for i, e := range s.Engines {
			fmt.Fprintf(&b, "| %s | e%d | %s |\n", cmp.Or(s.Fleet, SingleLayout), i, strings.Join(e.Models, ", "))
		}
	}
	return b.String()
}

// PoolTable compares each model's token hit ratio in a fleet's run with
// its hit ratio on its pool's engines alone: a run of the same workload
// and policy on a layout that is part of the fleet's (Layout.Of) and
// that served the model. "" when the runs hold no such pair.
func PoolTable(runs []Summary) string {
	var b strings.Builder
	for _, whole := range runs {
		for _, m := range sortedKeys(whole.Models) {
			x := whole.Models[m]
			if x.OK == 0 {
				continue // a model nobody serves
			}
			for _, part := range runs {
				l, err := LookupLayout(part.Fleet)
				if err != nil || l == nil || l.Of != whole.Fleet || whole.Fleet == "" ||
					part.Workload != whole.Workload || part.Policy != whole.Policy || part.Models[m].OK == 0 {
					continue
				}
				if b.Len() == 0 {
					b.WriteString("| policy | model | requests in the fleet | token hit ratio in the fleet | pool alone | requests alone | token hit ratio alone | difference |\n")
					b.WriteString("|---|---|--:|--:|---|--:|--:|--:|\n")
				}
				y := part.Models[m]
				fmt.Fprintf(&b, "| %s | %s | %d | %.3f | %s (%d engines) | %d | %.3f | %+.3f |\n",
					whole.Label(), m, x.OK, x.TokenHitRatio, part.Fleet, len(l.Engines), y.OK, y.TokenHitRatio, x.TokenHitRatio-y.TokenHitRatio)
			}
		}
	}
	return b.String()
}

// overloadClassRows bounds the class rows of OverloadTable: a workload
// with many classes (stress has 12) shows its priorities and tenants only.
const overloadClassRows = 8

// OverloadTable renders the runs' Overload as one Markdown table, a row
// per run and group (all, each priority, each tenant, each class), and
// under it a line per run with the latency ratios; "" if no run has one.
func OverloadTable(runs []Summary) string {
	var b, notes strings.Builder
	for _, s := range runs {
		o := s.Overload
		if o == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| policy | requests of | requests | 200 % | not 200 | non-2xx with Retry-After | TTFT p50 ms | TTFT p99 ms | latency p50 ms | latency p99 ms | goodput req/s |\n")
			b.WriteString("|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|\n")
		}
		row := func(group string, x Outcomes) {
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %s | %d | %.0f | %.0f | %.0f | %.0f | %.2f |\n",
				s.Label(), group, x.Requests, 100*x.OKShare(), failed(x.Failed), x.RetryAfter, x.TTFT.P50, x.TTFT.P99, x.Latency.P50, x.Latency.P99, x.Goodput)
		}
		row("all", o.All)
		prios := sortedKeys(o.ByPriority)
		slices.SortFunc(prios, func(a, b string) int { return cmp.Compare(atoiOr0(a), atoiOr0(b)) })
		for _, k := range prios {
			row("priority "+k, o.ByPriority[k])
		}
		tenants := sortedKeys(o.ByTenant)
		for _, k := range tenants {
			row("tenant "+k, o.ByTenant[k])
		}
		if len(o.ByClass) <= overloadClassRows {
			for _, k := range sortedKeys(o.ByClass) {
				row("class "+k, o.ByClass[k])
			}
		}
		var parts []string
		if len(prios) >= 2 {
			hi, lo := prios[0], prios[len(prios)-1]
			parts = append(parts, fmt.Sprintf("latency p50 priority %s / %s %s", hi, lo, ratioOf(o.ByPriority[hi].Latency.P50, o.ByPriority[lo].Latency.P50)))
		}
		if len(tenants) >= 2 {
			slices.SortStableFunc(tenants, func(a, b string) int { return cmp.Compare(o.ByTenant[a].Requests, o.ByTenant[b].Requests) })
			few, many := tenants[0], tenants[len(tenants)-1]
			parts = append(parts, fmt.Sprintf("tenant %s / %s %s", few, many, ratioOf(o.ByTenant[few].Latency.P50, o.ByTenant[many].Latency.P50)))
		}
		parts = append(parts, fmt.Sprintf("late sends %d", o.Late))
		fmt.Fprintf(&notes, "%s: %s.  \n", s.Label(), strings.Join(parts, "; "))
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + "\n" + notes.String()
}

// failed is "429 12, 503 1" ("—" for none), statuses in order.
func failed(m map[string]int) string {
	if len(m) == 0 {
		return "—"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// atoiOr0 orders priority keys, which Summarize made with strconv.Itoa.
func atoiOr0(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0 // not a number: not one of Summarize's keys, sorted as 0
	}
	return n
}

// ratioOf is "0.12×", or "—" when either side has no value.
func ratioOf(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
