package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestServeKVEventsTruth (issue 31, item 2: engine truth supersedes the
// guess): four simulated engines publish their KV events. A prefix
// routed through saltus to engine A that A takes and never computes
// (X-Sim-Fail: stall: its pending route stays, a guess A's events never
// confirm) stops attracting the prefix once the guess is older than
// --kv-events-bridge: another engine that holds a shorter part of it
// (confirmed by its events) wins, where the deeper guess would win for
// an hour (the route TTL) without the truth. A prefix A confirmed by its
// events keeps going to A.
func TestServeKVEventsTruth(t *testing.T) {
	t.Parallel()
	const (
		n      = 4
		bridge = 300 * time.Millisecond
	)
	e := startEvented(t, n, nil, func(c *serveConfig, _ *evented) { c.Router.KVEventsBridge = bridge })
	s, sims, names, byURL := e.s, e.sims, e.names, e.byURL
	blocks := func(i int) float64 { return e.blocks(t, i) }
	direct := func(i int, ids []int) { t.Helper(); e.direct(t, i, ids) }
	// Every subscription is up (TestServeKVEvents: ZMQ's late joiner),
	// and every backend evented, once its view has seen a batch.
	e.warm(t)
	explain := func(ids []int) (backend, matched int) {
		t.Helper()
		a := s.adm(t, "POST", "/admin/explain?path=/v1/completions", idPrompt(t, ids))
		var d struct {
			URL           string `json:"url"`
			MatchedBlocks int    `json:"matched_blocks"`
		}
		if a.status != 200 || json.Unmarshal([]byte(a.body), &d) != nil {
			t.Fatalf("explain: %d %s", a.status, a.body)
		}
		i, ok := byURL[strings.TrimSuffix(d.URL, "/")]
		if !ok {
			t.Fatalf("explain chose %q, not an engine", d.URL)
		}
		return i, d.MatchedBlocks
	}

	// A prefix of 32 blocks goes through saltus to engine A, which takes
	// it and never computes it: A's pending route is a guess.
	const prefixBlocks = 32
	p := idRange(500, prefixBlocks*16)
	body := idPrompt(t, p)
	stall := dialRaw(t, s.addr)
	t0 := time.Now()
	stall.send(t, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Sim-Fail: stall\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	A := -1
	waitLong(t, "an engine to take the stalled request", func() bool {
		for i, sim := range sims {
			if sim.Stats().Injected > 0 {
				A = i
			}
		}
		return A >= 0
	})
	sibling := func(k int) []int { return append(append([]int(nil), p...), idRange(600+k, 20)...) }
	if b, m := explain(sibling(0)); time.Since(t0) < bridge/2 {
		// Within the bridge the guess counts (a check only when the
		// machine was quick enough to ask within it).
		if b != A || m != prefixBlocks {
			t.Errorf("within the bridge: engine %d, %d blocks matched, want %d and %d (the pending guess)", b, m, A, prefixBlocks)
		}
	}
	// Engine B holds the first 24 blocks, placed directly: its events
	// confirm them.
	B := (A + 1) % n
	before := blocks(B)
	direct(B, p[:24*16])
	waitLong(t, "engine B's 24 blocks in its view", func() bool { return blocks(B) >= before+24 })
	// Past the bridge, A's guess (32 blocks, deeper than B's 24) no
	// longer counts: the prefix goes to B.
	waitLong(t, "the prefix to go to the engine that holds it", func() bool {
		b, m := explain(sibling(0))
		return b == B && m == 24
	})
	for k := range 5 {
		a := do(t, "POST", "http://"+s.addr+"/v1/completions", idPrompt(t, sibling(k)))
		if a.status != 200 {
			t.Fatalf("sibling %d through saltus: %d %s", k, a.status, a.body)
		}
		if got := byURL[a.backend]; got != B {
			t.Errorf("sibling %d went to engine %d, want %d (A=%d holds only a stale guess)", k, got, B, A)
		}
	}
	if got := s.metrics(t)["saltus_kvview_guesses_ignored_total"]; got < 1 {
		t.Errorf("saltus_kvview_guesses_ignored_total %v, want ≥ 1", got)
	}
	// A prefix A's events confirm goes to A, its request stalled there
	// or not.
	holder := make([]int, 1)
	holder[0] = A
	placeAndRoute(t, s, sims, names, byURL, holder)
}
