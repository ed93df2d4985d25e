package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/workload"
)

func TestParseRoute(t *testing.T) {
	t.Parallel()
	f := func(v string, matched int, reason string, ok bool) {
		t.Helper()
		m, r, o := parseRoute(v)
		if m != matched || r != reason || o != ok {
			t.Fatalf("%q: %d %q %v, want %d %q %v", v, m, r, o, matched, reason, ok)
		}
	}
	f("12/40 tree backend-2=35ms backend-5=410ms", 12, "tree", true)
	f("0/12 round_robin", 0, "round_robin", true)
	f("0/0 hash", 0, "hash", true)
	for _, v := range []string{"", "tree", "12/40", "x/40 tree", "-1/4 tree", "/4 tree", "99999999999999999999/1 tree"} {
		f(v, 0, "", false)
	}
}

func TestSummarizeSLO(t *testing.T) {
	t.Parallel()
	ok := func(ttft time.Duration, prompt, cached int, route string) Sample {
		return Sample{Status: 200, TTFT: ttft, Prompt: prompt, Cached: cached, Route: route}
	}
	samples := []Sample{
		ok(100*time.Millisecond, 1000, 992, "62/62 tree"), // predicted 992: right
		ok(900*time.Millisecond, 1000, 0, "30/62 tree"),   // predicted 480, none cached: over 480
		ok(1500*time.Millisecond, 500, 320, "0/31 hash"),  // predicted 0: under 320
		ok(1000*time.Millisecond, 64, 48, "10/4 tree"),    // predicted at most the prompt: 64, over 16, within a block
		{Status: 429, Err: "status 429", TTFT: 0},         // failed
		{Cut: true, Err: "cut by the end of the run"},     // failed
		{Status: 200, Err: "stream ended without [DONE]"}, // failed
		ok(10*time.Millisecond, 100, 0, ""),               // no route header: no prediction
	}
	s := SummarizeSLO(samples, time.Second, 10*time.Second, 16)
	if s.Requests != 8 || s.Failed != 3 || s.Good != 4 || s.Goodput != 0.4 {
		t.Fatalf("requests %d failed %d good %d goodput %v", s.Requests, s.Failed, s.Good, s.Goodput)
	}
	if s.TTFTMean != (100+900+1500+1000+10)/5.0 || s.TTFT.P50 != 900 || s.TTFT.P99 != 1500 {
		t.Fatalf("TTFT mean %v, %+v", s.TTFTMean, s.TTFT)
	}
	if s.PromptTokens != 2664 || s.CachedTokens != 1360 {
		t.Fatalf("tokens %d %d", s.PromptTokens, s.CachedTokens)
	}
	if !s.Predicted || s.PredictedTokens != 992+480+0+64 || s.Over != 480+16 || s.Under != 320 || s.Agree != 0.5 {
		t.Fatalf("predictions: %+v", s)
	}
	if want := float64(992+480+64) / 2564; s.PredictedRatio != want {
		t.Fatalf("predicted ratio %v, want %v", s.PredictedRatio, want)
	}

	// A policy that does not read the tree predicts nothing.
	rr := SummarizeSLO([]Sample{ok(time.Second, 100, 50, "0/6 round_robin")}, time.Second, time.Second, 16)
	if rr.Predicted || rr.PredictedTokens != 0 || rr.Good != 1 {
		t.Fatalf("round robin: %+v", rr)
	}
	table := SLOTable([]Summary{{Policy: "prefix", SLO: &s}, {Policy: "round_robin", SLO: &rr}, {Policy: "none"}})
	for _, want := range []string{"goodput (TTFT ≤ 1s) req/s", "| prefix | 8 | 3 | 702 | 900 | 1500 | 0.40 | 0.511 | 0.599 | 50.0 % | 496 | 320 |", "| round_robin | 1 | 0 | 1000 |", "| — | — | — | — |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "| none |") || SLOTable([]Summary{{Policy: "x"}}) != "" {
		t.Error("a run without SLO has a row")
	}
}

// TestRequestBodyTokenIDs: a token-id request is a completions request
// whose prompt is the ids, with ignore_eos.
func TestRequestBodyTokenIDs(t *testing.T) {
	t.Parallel()
	path, body := requestBody(workload.Request{PromptIDs: []int32{101, 7, 29999}, MaxTokens: 3, IgnoreEOS: true}, "m")
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if path != "/v1/completions" || got["max_tokens"] != 3.0 || got["ignore_eos"] != true || got["model"] != "m" || got["stream"] != true {
		t.Fatalf("%s %s", path, body)
	}
	if ids, ok := got["prompt"].([]any); !ok || len(ids) != 3 || ids[0] != 101.0 || ids[2] != 29999.0 {
		t.Fatalf("prompt: %s", body)
	}
	if _, body := requestBody(workload.Request{Prompt: "hi"}, "m"); strings.Contains(string(body), "ignore_eos") || !strings.Contains(string(body), `"prompt":"hi"`) {
		t.Fatalf("text prompt: %s", body)
	}
}
