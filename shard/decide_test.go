package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// viewFleet is n routable views of distinct URLs (policy's test helper).
func viewFleet(n int) []policy.View {
	bs := make([]policy.View, n)
	for i := range bs {
		url := fmt.Sprintf("http://10.0.0.%d:8000", i+1)
		bs[i] = policy.View{ID: i, URL: url, URLHash: policy.URLHash(url), Routable: true}
	}
	return bs
}

// randKeys is n random route keys.
func randKeys(r *rand.Rand, n int) []uint64 {
	k := make([]uint64, n)
	for i := range k {
		k[i] = r.Uint64()
	}
	return k
}

func TestConfigPolicy(t *testing.T) {
	t.Parallel()
	for _, name := range policy.Names() {
		c := DefaultConfig()
		c.Policy = name
		if err := c.Validate(); err != nil {
			t.Errorf("policy %q: %v", name, err)
		}
		k, ok := policy.Parse(name)
		if !ok || policy.Names()[k] != name {
			t.Errorf("policy.Parse(%q) = %d, %v", name, k, ok)
		}
	}
	if DefaultConfig().Policy != policy.Prefix.String() || policy.Names()[0] != policy.Prefix.String() {
		t.Fatal("prefix is not the default")
	}
	for _, bad := range []string{"", "round-robin", "Prefix", "random"} {
		c := DefaultConfig()
		c.Policy = bad
		want := `shard: Policy must be one of prefix, round_robin, least_request, consistent_hash, body_hash, ranvier, got "` + bad + `"`
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Errorf("policy %q: %v, want %s", bad, err, want)
		}
	}
}

func TestDecidePolicyReasonsAreMetrics(t *testing.T) {
	t.Parallel()
	for _, name := range policy.Names() {
		if k, _ := policy.Parse(name); k.UsesTree() {
			continue // its reasons are tree, hash, override, fallback
		}
		if !slices.Contains(reasonNames[:], name) {
			t.Errorf("policy %q is not a saltus_route_decisions_total reason", name)
		}
		if strings.ContainsAny(name, " /") {
			t.Errorf("policy %q would break X-Saltus-Route", name)
		}
	}
}

// The session table is respTable: bounded, oldest evicted.
func TestSessionTableBounded(t *testing.T) {
	t.Parallel()
	st := newRespTable(2, int64(time.Hour))
	st.insert("a", 1, 0)
	st.insert("b", 2, 1)
	st.insert("a", 3, 2) // re-pinned
	st.insert("c", 0, 3) // evicts b (a's first slot is stale)
	if id, ok := st.lookup("a", 4); !ok || id != 3 {
		t.Fatalf("a: %d %v", id, ok)
	}
	if _, ok := st.lookup("b", 4); ok {
		t.Fatal("b survived eviction")
	}
}

func TestRouteReceipt(t *testing.T) {
	t.Parallel()
	snap := []*backend.Backend{{ID: 0, Name: "backend-0"}, {ID: 2, Name: "gpu-a"}, {ID: 5}}
	got := string(appendReceipt([]byte("12/14 tree"), policy.Decision{Backend: 2, EstMS: 35.4, RunnerUp: 5, RunnerUpMS: 410}, snap))
	if got != "12/14 tree gpu-a=35ms 5=410ms" {
		t.Fatalf("receipt %q", got)
	}
	got = string(appendReceipt([]byte("0/3 hash"), policy.Decision{Backend: 0, EstMS: 2.25, RunnerUp: -1}, snap))
	if got != "0/3 hash backend-0=2.2ms" && got != "0/3 hash backend-0=2.3ms" {
		t.Fatalf("receipt %q", got)
	}
	if got := string(appendReceipt([]byte("0/3 round_robin"), policy.Decision{Backend: 0, RunnerUp: -1}, snap)); got != "0/3 round_robin" {
		t.Fatalf("a baseline's receipt %q", got)
	}
}

func TestPendingPrefillAccounting(t *testing.T) {
	t.Parallel()
	a, b := &backend.Backend{ID: 0}, &backend.Backend{ID: 1}
	snap := []*backend.Backend{a, b}
	d := policy.Decision{Backend: 1, TotalBlocks: 10, MatchedBlocks: 4}
	var p pendingPrefill
	p.add(d, snap, 16)
	if b.PendingPrefill() != 96 || a.PendingPrefill() != 0 {
		t.Fatalf("added: %d %d", a.PendingPrefill(), b.PendingPrefill())
	}
	p.release()
	p.done(backend.Outcome{Backend: b, Status: 200, TTFB: time.Millisecond})
	if b.PendingPrefill() != 0 {
		t.Fatalf("released twice: %d", b.PendingPrefill())
	}
	// A failure before any first byte releases in done.
	var q pendingPrefill
	q.add(d, snap, 16)
	q.done(backend.Outcome{Backend: b, Status: 502})
	if b.PendingPrefill() != 0 {
		t.Fatalf("failure: %d", b.PendingPrefill())
	}
	// A fully cached request adds nothing.
	var z pendingPrefill
	z.add(policy.Decision{Backend: 0, TotalBlocks: 3, MatchedBlocks: 3}, snap, 16)
	z.done(backend.Outcome{Backend: a, Status: 503})
	if a.PendingPrefill() != 0 {
		t.Fatalf("cached: %d", a.PendingPrefill())
	}
	// What Hooks.Events.Done does with a clean sample and no usage in the answer
	// (job.feedback): the predicted uncached count.
	settle := func(p *pendingPrefill, o backend.Outcome) {
		p.done(o)
		if p.clean(o) {
			o.Backend.ObserveTTFT(int(p.tokens), o.FirstData)
		}
	}
	// Each 2xx first try feeds the prefill model: 20 samples fit it.
	for i := range 24 {
		var o pendingPrefill
		o.add(policy.Decision{Backend: 0, TotalBlocks: 4 + 8*i}, snap, 16)
		settle(&o, backend.Outcome{Backend: a, Status: 200, TTFB: time.Millisecond, FirstData: time.Duration(10+i) * time.Millisecond})
	}
	if a.Prefill().Samples == 0 || a.PendingPrefill() != 0 {
		t.Fatalf("not learned: %+v, pending %d", a.Prefill(), a.PendingPrefill())
	}
	// A request sent behind pending prefill is no sample: 8 of them
	// would trigger a refit, and none happens.
	before := a.Prefill()
	var ahead pendingPrefill
	ahead.add(policy.Decision{Backend: 0, TotalBlocks: 100}, snap, 16)
	for range 8 {
		var o pendingPrefill
		o.add(policy.Decision{Backend: 0, TotalBlocks: 4}, snap, 16)
		settle(&o, backend.Outcome{Backend: a, Status: 200, TTFB: time.Millisecond, FirstData: 5 * time.Second})
	}
	ahead.done(backend.Outcome{Backend: a, Status: 500})
	if a.Prefill() != before || a.PendingPrefill() != 0 {
		t.Fatalf("queued samples were learned: %+v, was %+v", a.Prefill(), before)
	}
}

// TestAppendMS: the receipt's numbers as strconv.AppendFloat wrote them
// (one decimal below 10 ms, none from there), but for halves, which
// round up.
func TestAppendMS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ms   float64
		want string
	}{
		{0, "0.0"}, {0.04, "0.0"}, {0.06, "0.1"}, {2.25, "2.3"}, {9.94, "9.9"}, {9.96, "10.0"},
		{10, "10"}, {10.4, "10"}, {10.6, "11"}, {12345.6, "12346"}, {1e15, "1000000000000000"}, {math.Inf(1), "+Inf"}, {-3, "-3"},
	} {
		if got := string(appendMS(nil, c.ms)); got != c.want {
			t.Errorf("appendMS(%v) = %q, want %q", c.ms, got, c.want)
		}
	}
	for ms := 0.0; ms < 2000; ms += 0.37 {
		prec := 0
		if ms < 10 {
			prec = 1
		}
		want := strconv.FormatFloat(ms, 'f', prec, 64)
		if got := string(appendMS(nil, ms)); got != want {
			t.Errorf("appendMS(%v) = %q, strconv writes %q", ms, got, want)
		}
	}
}
