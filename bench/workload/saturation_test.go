package workload

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSaturation(t *testing.T) {
	t.Parallel()
	opts := DefaultOptions()
	opts.Rate, opts.TokensPerWord = 50, 4 // shorter texts keep the test fast
	w := mustNew(t, "saturation", opts)
	// Three users take arrivals in turn from one schedule.
	users := []User{w.NewUser(0), w.NewUser(1), w.NewUser(7)}
	const n = 6000
	var last time.Duration
	starts := map[string]bool{}
	tags := map[string]int{}
	prios := map[int]int{}
	keys := map[string]int{}
	var reqs []Request
	for i := range n {
		r, ok := users[i%len(users)].Next()
		if !ok {
			t.Fatal("a saturation user ran out")
		}
		if r.At < last || (i > 0 && r.At == 0) {
			t.Fatalf("request %d at %v after %v: arrivals must increase", i, r.At, last)
		}
		last = r.At
		if len(r.Messages) != 1 || r.Messages[0].Role != "user" || r.Think != 0 || r.MaxTokens != opts.MaxTokens {
			t.Fatalf("request %d: %+v", i, r)
		}
		start := r.Messages[0].Content[:min(64, len(r.Messages[0].Content))]
		if starts[start] {
			t.Fatalf("request %d shares its first 64 bytes %q with another", i, start)
		}
		starts[start] = true
		tags[r.Tag]++
		prios[r.Priority]++
		keys[r.Key]++
		if want := saturationTag(r.Priority, r.Key); r.Tag != want {
			t.Fatalf("request %d: tag %q, want %q", i, r.Tag, want)
		}
		reqs = append(reqs, r)
	}
	// Poisson at 50 a second: n arrivals take about n/50 s (the sum of
	// n exponential gaps has a relative deviation of 1/sqrt(n), 1.3 %).
	if want := time.Duration(n / opts.Rate * float64(time.Second)); math.Abs(float64(last-want)) > 0.05*float64(want) {
		t.Errorf("%d arrivals over %v, want about %v", n, last, want)
	}
	share := func(what string, got int, want float64) {
		t.Helper()
		if f := float64(got) / n; math.Abs(f-want) > 0.03 {
			t.Errorf("%s: %.3f of the requests, want about %.3f", what, f, want)
		}
	}
	share("priority -10", prios[SaturationHigh], 0.5)
	share("priority 10", prios[SaturationLow], 0.5)
	share("tenant small", keys[SaturationSmall], 1.0/saturationSmallEvery)
	if len(prios) != 2 || len(keys) != 2 || len(tags) != 4 {
		t.Fatalf("priorities %v, keys %v, tags %v", prios, keys, tags)
	}
	// The same options give the same schedule and requests, whichever
	// user takes them.
	again := mustNew(t, "saturation", opts).NewUser(3)
	for i := range 50 {
		r, _ := again.Next()
		if r.At != reqs[i].At || r.Messages[0].Content != reqs[i].Messages[0].Content || r.Tag != reqs[i].Tag {
			t.Fatalf("request %d differs in a second workload of the same options", i)
		}
	}
	if d := w.Describe(); !strings.Contains(d, "50 a second") || !strings.Contains(d, "Poisson") {
		t.Errorf("Describe() = %q", d)
	}
}

// TestSaturationRestart: Restart rewinds the schedule, so a second run
// (the next policy's) sends the first run's requests at the first run's
// times; the trace's cursor likewise.
func TestSaturationRestart(t *testing.T) {
	t.Parallel()
	opts := DefaultOptions()
	opts.Rate = 50
	w := mustNew(t, "saturation", opts)
	first := make([]Request, 5)
	for i := range first {
		first[i], _ = w.NewUser(i).Next()
	}
	w.(Replay).Restart()
	for i := range first {
		r, _ := w.NewUser(i + 7).Next()
		if !reflect.DeepEqual(r, first[i]) {
			t.Fatalf("after Restart, request %d: %+v, want %+v", i, r, first[i])
		}
	}
	tr := mustNew(t, "trace:"+writeTrace(t, `{"prompt":"a"}`, `{"prompt":"b"}`), opts)
	u := tr.NewUser(0)
	u.Next()
	u.Next()
	tr.(Replay).Restart()
	if r, ok := u.Next(); !ok || r.Prompt != "a" {
		t.Fatalf("trace after Restart: %+v %v", r, ok)
	}
}
