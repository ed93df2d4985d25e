package shard

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/policy"
)

// policyMetrics checks what every non-prefix run shows: the decisions
// under the policy's reason, nothing learned, no tree, no match ratio.
func policyMetrics(t *testing.T, e *env, reason string, decisions int) {
	t.Helper()
	s := e.r.routeStats()
	if s.Decisions[reason] != int64(decisions) || s.Learned != 0 || s.Nodes != 0 || s.MailboxOverflow != 0 ||
		s.Decisions[policy.ReasonTree]+s.Decisions[policy.ReasonHash] != 0 {
		t.Fatalf("stats %+v", s)
	}
	var out bytes.Buffer
	e.set.WritePrometheus(&out)
	for _, want := range []string{
		`saltus_route_decisions_total{reason="` + reason + `"} ` + strconv.Itoa(decisions) + "\n",
		"saltus_router_prefix_match_ratio_count 0\n",
		"saltus_route_learned_total 0\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, out.String())
		}
	}
}

func TestRouterRoundRobin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3, tokenizer: true, policy: policy.RoundRobin.String()})
	body := chatBody("system", systemA, "user", "When should the lamp be lit?")
	n := 0
	f := func(loop int, want int, wantCands ...int) {
		t.Helper()
		c, matched, total, reason := routed(t, e, loop, "/v1/chat/completions", body)
		n++
		if c.candidates[0] != want || c.served != want || reason != policy.ReasonRoundRobin || matched != 0 || total < 5 {
			t.Fatalf("request %d from loop %d: backend %d (want %d) %d/%d %s", n, loop, c.candidates[0], want, matched, total, reason)
		}
		if wantCands != nil && !slices.Equal(c.candidates, wantCands) {
			t.Fatalf("request %d: candidates %v, want %v", n, c.candidates, wantCands)
		}
	}
	// Loop 0 cycles from backend 0, whatever the prefix and the load.
	f(0, 0, 0, 1, 2)
	e.up.inFlight[1].Store(50)
	f(0, 1, 1, 2, 0)
	f(0, 2, 2, 0, 1)
	f(0, 0)
	// Loop 1 has its own cycle, from backend 1.
	f(1, 1)
	f(1, 2)
	// A down backend is skipped.
	e.up.down[2].Store(true)
	f(0, 1, 1, 0)
	f(0, 0, 0, 1)
	f(0, 1)
	// A non-routed endpoint takes its turn too.
	x := newExchange(0, "POST", "/v1/embeddings", `{"model":"m","input":"hello"}`)
	if c := e.serve(t, x); c == nil || c.candidates[0] != 0 || c.header(HeaderRoute) != "0/0 round_robin" {
		t.Fatalf("embeddings: %+v", c)
	}
	policyMetrics(t, e, policy.ReasonRoundRobin, 10)
}

func TestRouterLeastRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3, tokenizer: true, policy: policy.LeastRequest.String()})
	body := chatBody("system", systemA, "user", "Tides today?")
	// Backend 1 is busy: any pair that holds it holds a less loaded one.
	e.up.inFlight[1].Store(9)
	seen := map[int]int{}
	for i := range 24 {
		c, matched, total, reason := routed(t, e, i%2, "/v1/chat/completions", body)
		if c.candidates[0] == 1 || reason != policy.ReasonLeastRequest || matched != 0 || total < 3 ||
			len(c.candidates) != 3 || c.candidates[2] != 1 {
			t.Fatalf("request %d: candidates %v %d/%d %s", i, c.candidates, matched, total, reason)
		}
		seen[c.candidates[0]]++
	}
	// Backends 0 and 2 tie: each wins about half (the first drawn); all 24
	// on one of them has probability 2^-23.
	if seen[0] == 0 || seen[2] == 0 {
		t.Fatalf("ties not spread: %v", seen)
	}
	policyMetrics(t, e, policy.ReasonLeastRequest, 24)
}

func TestRouterConsistentHash(t *testing.T) {
	t.Parallel()
	o := envOpts{loops: 3, backends: 4, tokenizer: true}
	pre := newEnv(t, o)
	o.policy = policy.ConsistentHash.String()
	e := newEnv(t, o)
	body := chatBody("system", systemA, "user", "When should the lamp be lit?")
	// The prefix policy's cold placement of this prefix, on the same URLs.
	cold, _, _, reason := routed(t, pre, 0, "/v1/chat/completions", body)
	if reason != policy.ReasonHash {
		t.Fatalf("prefix: %s", reason)
	}
	home := cold.candidates[0]
	// Every loop agrees, every time: nothing learned, no tree.
	for i := range 6 {
		c, matched, total, reason := routed(t, e, i%3, "/v1/chat/completions", body)
		if c.candidates[0] != home || !slices.Equal(c.candidates, cold.candidates) || reason != policy.ReasonConsistentHash ||
			matched != 0 || total < 5 {
			t.Fatalf("request %d: candidates %v (prefix's cold %v) %d/%d %s", i, c.candidates, cold.candidates, matched, total, reason)
		}
	}
	// A later turn shares the first four blocks: same backend.
	c, _, _, _ := routed(t, e, 1, "/v1/chat/completions", chatBody("system", systemA, "user", "Fog?"))
	if c.candidates[0] != home {
		t.Fatalf("same opening, other question: %d, want %d", c.candidates[0], home)
	}
	// Over the bound (10 in flight of 10, capacity ⌈1.25 × 11/4⌉ = 4):
	// the next in rendezvous order.
	e.up.inFlight[home].Store(10)
	c, _, _, reason = routed(t, e, 2, "/v1/chat/completions", body)
	if c.candidates[0] != cold.candidates[1] || reason != policy.ReasonConsistentHash {
		t.Fatalf("loaded home %d: went to %v, want %d first", home, c.candidates, cold.candidates[1])
	}
	if d := e.r.routeStats().Diverted; d != 1 {
		t.Fatalf("diverted %d", d)
	}
	// Nothing was learned from the spill: back under the bound, home.
	// (With 1 in flight, alone, it would still be over: ⌈1.25 × 2/4⌉ = 1.)
	e.up.inFlight[home].Store(0)
	if c, _, _, _ = routed(t, e, 0, "/v1/chat/completions", body); c.candidates[0] != home {
		t.Fatalf("after the spill: %d, want %d", c.candidates[0], home)
	}
	// Shorter than a block: the least loaded, reason fallback.
	e.up.inFlight[home].Store(0)
	for i := range 4 {
		if i != home {
			e.up.inFlight[i].Store(3)
		}
	}
	x := newExchange(0, "POST", "/v1/completions", `{"model":"m","prompt":"hi"}`)
	if c := e.serve(t, x); c == nil || c.candidates[0] != home || c.header(HeaderRoute) != "0/0 fallback" {
		t.Fatalf("no keys: %+v", c)
	}
	policyMetrics(t, e, policy.ReasonConsistentHash, 9)
}

// TestRouterPoliciesSkipTheTree: under the other policies a request whose
// prefix another loop owns is decided at once on its own loop, even while
// the owner is blocked: no lookup is posted.
func TestRouterPoliciesSkipTheTree(t *testing.T) {
	t.Parallel()
	for _, pol := range policy.Names()[1:] {
		if k, _ := policy.Parse(pol); k.UsesTree() {
			continue
		}
		t.Run(pol, func(t *testing.T) {
			t.Parallel()
			// Maintenance runs on each loop's tick, never posted: loop 1's
			// mailbox holds only what the request posted.
			e := newEnv(t, envOpts{loops: 2, backends: 3, policy: pol, maintain: time.Hour})
			var body string
			for f := int32(1); ; f += 100 {
				b, keys := idsBody(f, 40)
				if keys[0]%2 == 1 { // owned by loop 1
					body = b
					break
				}
			}
			release, blocked := make(chan struct{}), make(chan struct{})
			defer close(release)
			if !e.loops.post(1, func() { close(blocked); <-release }) {
				t.Fatal("cannot block loop 1")
			}
			<-blocked
			x := newExchange(0, "POST", "/v1/completions", body)
			e.loops.run(t, 0, func() { e.r.serve(x) })
			select {
			case c := <-e.up.calls:
				if m, tot, reason := parseRoute(t, c.header(HeaderRoute)); reason != pol || m != 0 || tot != 2 {
					t.Fatalf("route %d/%d %s", m, tot, reason)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not forwarded while the owner loop was blocked")
			}
			if s := e.r.routeStats(); s.MailboxOverflow != 0 || len(e.loops.qs[1]) != 0 {
				t.Fatalf("a message was posted: %+v", s)
			}
		})
	}
}

func TestExplainPolicies(t *testing.T) {
	t.Parallel()
	body := chatBody("system", systemA, "user", "Explain yourself")
	explain := func(e *env, wantReason string) policy.Decision {
		t.Helper()
		d, err := e.r.Explain([]byte(body), "/v1/chat/completions")
		if err != nil || d.Reason != wantReason || d.MatchedBlocks != 0 || d.TotalBlocks < 4 || len(d.Candidates) != 3 ||
			d.URL != e.up.backends[d.Backend].URL {
			t.Fatalf("explain: %+v %v", d, err)
		}
		return d
	}

	// round_robin: Explain shows the next turn and leaves it to the next
	// request (one loop, so every Explain asks the same cursor).
	e := newEnv(t, envOpts{loops: 1, backends: 3, tokenizer: true, policy: policy.RoundRobin.String()})
	for range 2 {
		if d := explain(e, policy.ReasonRoundRobin); d.Backend != 0 {
			t.Fatalf("explained %d, want 0", d.Backend)
		}
	}
	if c, _, _, _ := routed(t, e, 0, "/v1/chat/completions", body); c.candidates[0] != 0 {
		t.Fatalf("served on %d", c.candidates[0])
	}
	if d := explain(e, policy.ReasonRoundRobin); d.Backend != 1 {
		t.Fatalf("explained %d after a request, want 1", d.Backend)
	}
	select {
	case <-e.up.calls:
		t.Fatal("Explain forwarded")
	default:
	}

	e = newEnv(t, envOpts{loops: 2, backends: 3, tokenizer: true, policy: policy.LeastRequest.String()})
	e.up.inFlight[0].Store(5) // the most loaded loses any pair
	if d := explain(e, policy.ReasonLeastRequest); d.Backend == 0 || d.Candidates[2] != 0 {
		t.Fatalf("explained %+v", d)
	}

	e = newEnv(t, envOpts{loops: 3, backends: 4, tokenizer: true, policy: policy.ConsistentHash.String()})
	d := explain(e, policy.ReasonConsistentHash)
	if c, _, _, _ := routed(t, e, 1, "/v1/chat/completions", body); !slices.Equal(c.candidates, d.Candidates) {
		t.Fatalf("served to %v, explained %v", c.candidates, d.Candidates)
	}
}
