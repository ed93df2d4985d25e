package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeTokenBudget: through the real serving path on one shard, a chat
// with a 4 MiB prompt of one letter is tokenized only up to its budget cut
// (the pool's counters: one cut, and the worker encoded less than the
// budget's worth of one letter, 8 KiB), then routed on byte-block keys
// past the cut; a short request sent right behind it is served too.
func TestServeTokenBudget(t *testing.T) {
	ups := []*upstream{newUpstream(t, "a")}
	s := startServeWith(t, ups, func(c *serveConfig) { c.Reactor.Loops = 1 })
	metric := func(re string) int {
		t.Helper()
		var m bytes.Buffer
		s.set.WritePrometheus(&m)
		g := regexp.MustCompile(`(?m)^` + re + ` (\d+)$`).FindStringSubmatch(m.String())
		if g == nil {
			t.Fatalf("no %s in\n%s", re, m.String())
		}
		n, _ := strconv.Atoi(g[1])
		return n
	}
	// Under the pool's MaxJobBytes (4 MiB), which would bail out at once.
	big := chatJSON(false, "system", sysA, "user", "Repeat: "+strings.Repeat("a", 4<<20-64<<10))
	type res struct {
		a answer
		d time.Duration
	}
	bigc := make(chan res, 1)
	go func() {
		t0 := time.Now()
		a := post(t, s.addr, "/v1/chat/completions", big)
		bigc <- res{a, time.Since(t0)}
	}()
	// The short request goes once the big one has reached the tokenizer.
	waitFor(t, func() bool { return metric(`saltus_tokenizer_requests_total`) >= 1 })
	t0 := time.Now()
	small := post(t, s.addr, "/v1/chat/completions", chatJSON(false, "user", "Port of Rotterdam?"))
	smallD := time.Since(t0)
	b := <-bigc
	if b.a.status != 200 || small.status != 200 {
		t.Fatalf("big: %d %s; small: %d %s", b.a.status, b.a.body, small.status, small.body)
	}
	// Not asserted (wall clock): what `go test -run TestServeTokenBudget -v` shows.
	t.Logf("big %v, small behind it %v", b.d, smallD)

	if n := metric(`saltus_tokenizer_budget_exceeded_total`); n != 1 {
		t.Errorf("budget_exceeded_total %d, want 1", n)
	}
	// The system prompt, the headers and "Repeat:" of the big request
	// plus the short one: far below a budget's worth of one letter.
	if n := metric(`saltus_tokenizer_encoded_bytes_total\{path="worker"\}`) + metric(`saltus_tokenizer_encoded_bytes_total\{path="local"\}`); n == 0 || n > 8<<10 {
		t.Errorf("encoded %d bytes, want 1..8192", n)
	}
}
