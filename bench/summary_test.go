package bench

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{Tag: "small", At: 0, TTFT: 10 * ms, Latency: 100 * ms, Prompt: 1000, Cached: 900, Output: 10, Backend: "a"},
		{Tag: "small", At: 100 * ms, TTFT: 20 * ms, Latency: 100 * ms, Prompt: 1000, Cached: 0, Output: 10, Backend: "a"},
		{Tag: "large", At: 200 * ms, TTFT: 30 * ms, Latency: 300 * ms, Prompt: 2000, Cached: 1600, Output: 20, Backend: "b"},
		{Tag: "large", At: 300 * ms, Err: "stream ended without [DONE]", Incomplete: true, Latency: 50 * ms, Backend: "b"},
		{Tag: "large", At: 400 * ms, Err: "status 503", Latency: 600 * ms},
	}
	s := Summarize("stress", "prefix", []string{"a", "b", "c"}, samples)
	if s.Requests != 5 || s.Errors != 2 || s.Incomplete != 1 {
		t.Fatalf("counts %d %d %d", s.Requests, s.Errors, s.Incomplete)
	}
	if s.PromptTokens != 4000 || s.CachedTokens != 2500 || s.OutputTokens != 40 {
		t.Fatalf("tokens %d %d %d", s.PromptTokens, s.CachedTokens, s.OutputTokens)
	}
	if s.TokenHitRatio != 0.625 || s.RequestHitRate != 2.0/3 {
		t.Fatalf("hit ratio %v rate %v", s.TokenHitRatio, s.RequestHitRate)
	}
	if s.TTFT.P50 != 20 || s.TTFT.P99 != 30 {
		t.Fatalf("ttft %+v", s.TTFT)
	}
	if s.Duration != time.Second || s.RPS != 3 || s.OutputTPS != 40 {
		t.Fatalf("duration %v rps %v tps %v", s.Duration, s.RPS, s.OutputTPS)
	}
	// a: 2, b: 1, c: 0 → max 2 / mean 1.
	if s.PerBackend["c"] != 0 || s.LoadSpread != 2 {
		t.Fatalf("per backend %v spread %v", s.PerBackend, s.LoadSpread)
	}
	if c := s.Classes["small"]; c.Requests != 2 || c.TokenHitRatio != 0.45 {
		t.Fatalf("small class %+v", c)
	}
}

func TestPercentilesNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i)*time.Millisecond)
	}
	if p := percentiles(ds); p.P50 != 50 || p.P95 != 95 || p.P99 != 99 {
		t.Fatalf("%+v", p)
	}
	if p := percentiles(nil); p != (Percentiles{}) {
		t.Fatalf("%+v", p)
	}
}

func TestReportFiles(t *testing.T) {
	ms := time.Millisecond
	var rep Report
	rep.Command = "saltus bench --quick"
	rep.Setup = map[string]string{"backends": "2"}
	for k, pol := range []string{"round_robin", "prefix"} {
		var ss []Sample
		for i := range 50 {
			b := "http://127.0.0.1:800" + string(rune('1'+i%2))
			ss = append(ss, Sample{At: time.Duration(i) * 10 * ms, TTFT: time.Duration(10+i*(2-k)) * ms,
				Latency: 200 * ms, Prompt: 1000, Cached: 500 * k, Output: 10, Backend: b})
		}
		rep.Samples = append(rep.Samples, ss)
		rep.Runs = append(rep.Runs, Summarize("stress", pol, []string{"http://127.0.0.1:8001", "http://127.0.0.1:8002"}, ss))
	}
	dir := t.TempDir()
	paths, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"report.md", "results.json", "stress_ttft_cdf.png", "stress_hit_ratio.png", "stress_ttft_p99.png", "stress_load.png"}
	if len(paths) != len(want) {
		t.Fatalf("paths %v", paths)
	}
	for i, w := range want {
		if filepath.Base(paths[i]) != w {
			t.Fatalf("path %d = %s, want %s", i, paths[i], w)
		}
		b, err := os.ReadFile(paths[i])
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v (%d bytes)", w, err, len(b))
		}
		if strings.HasSuffix(w, ".png") {
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Fatalf("%s: %v", w, err)
			}
		}
	}
	md, _ := os.ReadFile(paths[0])
	for _, s := range []string{"## stress", "| round_robin | 50 | 0 | 0.000 |", "| prefix | 50 | 0 | 0.500 |", "saltus bench --quick"} {
		if !strings.Contains(string(md), s) {
			t.Fatalf("report.md lacks %q:\n%s", s, md)
		}
	}

	// samples.jsonl: one line per request, in run order, with its run.
	sp, err := rep.WriteSamples(dir)
	if err != nil || filepath.Base(sp) != "samples.jsonl" {
		t.Fatalf("samples: %s %v", sp, err)
	}
	b, err := os.ReadFile(sp)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 100 {
		t.Fatalf("%d lines, want 100", len(lines))
	}
	var last struct {
		Workload, Policy string
		TTFT             int64 `json:"ttft_ns"`
		Cached           int   `json:"cached_tokens"`
		Backend          string
	}
	if err := json.Unmarshal([]byte(lines[99]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Workload != "stress" || last.Policy != "prefix" || last.TTFT != int64(59*ms) || last.Cached != 500 || last.Backend != "http://127.0.0.1:8002" {
		t.Fatalf("last line %s: %+v", lines[99], last)
	}
}

func TestSummarizeModels(t *testing.T) {
	ms := time.Millisecond
	ok := func(model, backend string, prompt, cached int) Sample {
		return Sample{Model: model, Backend: backend, Status: 200, TTFT: 10 * ms, Prompt: prompt, Cached: cached}
	}
	samples := []Sample{
		ok("a", "e0", 100, 50),
		ok("a", "e1", 100, 100),
		ok("a", "e2", 100, 0), // e2 does not serve a
		{Model: "a", Backend: "e1", Status: 503, Err: "status 503"},
		ok("b", "e2", 200, 100),
		{Model: "b", Backend: "e2", Status: 200, Err: "stream ended without [DONE]", Incomplete: true},
		{Model: "x", Status: 404, Err: "status 404"},                // saltus's own
		{Model: "x", Backend: "e0", Status: 404, Err: "status 404"}, // forwarded: a wrong engine
		{Model: "x", Status: 0, Err: "connection refused"},
	}
	engines := []string{"e0", "e1", "e2"}
	served := map[string][]string{"e0": {"a"}, "e1": {"a"}, "e2": {"b"}}
	got := SummarizeModels(samples, engines, served)
	want := map[string]ModelSummary{
		"a": {Requests: 4, OK: 3, Non200: 1, WrongEngine: 1, TokenHitRatio: 0.5, TTFT: Percentiles{10, 10, 10}, PerEngine: []int{1, 2, 1}},
		"b": {Requests: 2, OK: 1, WrongEngine: 0, TokenHitRatio: 0.5, TTFT: Percentiles{10, 10, 10}, PerEngine: []int{0, 0, 2}},
		"x": {Requests: 3, Non200: 3, WrongEngine: 1, NotFoundRouter: 1, NotFoundEngine: 1, PerEngine: []int{1, 0, 0}},
	}
	for m, w := range want {
		g := got[m]
		if g.Requests != w.Requests || g.OK != w.OK || g.Non200 != w.Non200 || g.WrongEngine != w.WrongEngine ||
			g.NotFoundRouter != w.NotFoundRouter || g.NotFoundEngine != w.NotFoundEngine || g.TokenHitRatio != w.TokenHitRatio ||
			g.TTFT != w.TTFT || !slices.Equal(g.PerEngine, w.PerEngine) {
			t.Errorf("%s: %+v, want %+v", m, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d models, want %d", len(got), len(want))
	}
	if x := SummarizeModels(samples, engines, nil)["a"]; x.WrongEngine != -1 {
		t.Errorf("engines' models unknown: wrong engine %d, want -1", x.WrongEngine)
	}
	if severalModels(samples[:4]) || !severalModels(samples) || severalModels(nil) {
		t.Error("severalModels")
	}
}

// TestPoolTable: a model's hit ratio in the mixed fleet sits beside its
// hit ratio on its pool alone (same workload and policy), and only there.
func TestPoolTable(t *testing.T) {
	run := func(fleet, policy string, hits map[string]float64) Summary {
		s := Summary{Workload: "mixed", Policy: policy, Fleet: fleet, Models: map[string]ModelSummary{}}
		for m, h := range hits {
			s.Models[m] = ModelSummary{Requests: 10, OK: 10, TokenHitRatio: h}
		}
		s.Models["org/gamma"] = ModelSummary{Requests: 1, Non200: 1}
		return s
	}
	runs := []Summary{
		run("mixed", "prefix", map[string]float64{"org/alpha": 0.8, "alpha-tuned": 0.7, "org/beta": 0.6}),
		run("mixed", "round_robin", map[string]float64{"org/alpha": 0.5, "org/beta": 0.5}),
		run("alpha", "prefix", map[string]float64{"org/alpha": 0.75, "alpha-tuned": 0.72}),
		run("beta", "prefix", map[string]float64{"org/beta": 0.61}),
	}
	got := PoolTable(runs)
	for _, row := range []string{
		"| prefix (mixed) | alpha-tuned | 10 | 0.700 | alpha (3 engines) | 10 | 0.720 | -0.020 |",
		"| prefix (mixed) | org/alpha | 10 | 0.800 | alpha (3 engines) | 10 | 0.750 | +0.050 |",
		"| prefix (mixed) | org/beta | 10 | 0.600 | beta (2 engines) | 10 | 0.610 | -0.010 |",
	} {
		if !strings.Contains(got, row+"\n") {
			t.Errorf("PoolTable lacks %q:\n%s", row, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 5 || strings.Contains(got, "round_robin") || strings.Contains(got, "gamma") {
		t.Errorf("PoolTable has rows beyond the three pairs:\n%s", got)
	}
	if PoolTable(runs[1:2]) != "" {
		t.Error("PoolTable without a pool's run alone is not empty")
	}
}
