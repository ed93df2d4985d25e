package shard

import (
	"regexp"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
)

var receiptRE = regexp.MustCompile(`^(\d+)/(\d+) (tree|hash|override|fallback) (\S+)=(\d+(\.\d)?)ms (\S+)=(\d+(\.\d)?)ms$`)

// The prefix policy's receipt names the winner and the runner-up with
// their estimates; Explain's table has a row per routable backend; the
// prefill a request adds is gone once it is answered.
func TestRouterPrefixReceiptAndExplain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3, tokenizer: true})
	body := chatBody("system", systemA, "user", "Receipts, please")
	x := newExchange(0, "POST", "/v1/chat/completions", body)
	c := e.serve(t, x)
	m := receiptRE.FindStringSubmatch(c.header(HeaderRoute))
	if m == nil || m[3] != policy.ReasonHash || m[1] != "0" {
		t.Fatalf("receipt %q", c.header(HeaderRoute))
	}
	if m[4] == m[7] {
		t.Fatalf("winner is its own runner-up: %q", c.header(HeaderRoute))
	}
	for _, b := range e.up.backends {
		if p := b.PendingPrefill(); p != 0 {
			t.Fatalf("backend %d still has %d pending tokens", b.ID, p)
		}
		if p := b.Pinned(); p != 0 {
			t.Fatalf("backend %d still has %d pinned tokens after the answer", b.ID, p)
		}
	}
	d, err := e.r.Explain([]byte(body), "/v1/chat/completions")
	if err != nil || d.Reason != policy.ReasonTree || len(d.Table) != 3 || d.RunnerUp < 0 || d.EstMS <= 0 || d.EstMS > d.RunnerUpMS {
		t.Fatalf("explain: %+v %v", d, err)
	}
	ranks := map[int]bool{}
	for _, row := range d.Table {
		ranks[row.Rank] = true
		if row.Backend == d.Backend && (row.Held != d.TotalBlocks || row.PrefillMS != 0 || !row.Eligible) {
			t.Fatalf("winner's row %+v", row)
		}
		if row.Backend != d.Backend && (row.Held != 0 || row.PrefillMS <= 0 || row.Eligible) {
			t.Fatalf("other row %+v (winner %d)", row, d.Backend)
		}
	}
	if len(ranks) != 3 {
		t.Fatalf("ranks %v", ranks)
	}

	// A streamed request unanswered (no hooks run) keeps its predicted
	// uncached tokens pending on its backend, and Explain shows them.
	e.up.status.Store(0)
	stream := strings.Replace(chatBody("system", systemB, "user", "Stream it"), `{`, `{"stream":true,`, 1)
	c = e.serve(t, newExchange(0, "POST", "/v1/chat/completions", stream))
	matched, total, _ := parseRoute(t, c.header(HeaderRoute))
	b := e.up.backends[c.candidates[0]]
	if want := int64((total - matched) * 16); b.PendingPrefill() != want || want == 0 {
		t.Fatalf("pending %d, want %d", b.PendingPrefill(), want)
	}
	// ...and pins its whole prompt there (the first of its group).
	if want := int64(total * 16); b.Pinned() != want {
		t.Fatalf("pinned %d, want %d", b.Pinned(), want)
	}
	d, err = e.r.Explain([]byte(body), "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range d.Table {
		if row.Backend == b.ID && (row.Pending != b.PendingPrefill() || row.Pinned != b.Pinned() || row.QueueMS <= 0) {
			t.Fatalf("row %+v, pending %d", row, b.PendingPrefill())
		}
	}
}

// With Config.SessionHeader, a session follows its first backend to a
// different (cold) prefix, reason override; another session does not.
func TestRouterSessionAffinity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 4, tokenizer: true,
		config: func(c *Config) { c.SessionHeader = "X-Session-ID" }})
	send := func(body, session string) (int, string) {
		t.Helper()
		x := newExchange(0, "POST", "/v1/chat/completions", body)
		if session != "" {
			x.req.Header = []reactor.Header{{Name: "x-session-id", Value: session}}
		}
		c := e.serve(t, x)
		_, _, reason := parseRoute(t, c.header(HeaderRoute))
		return c.candidates[0], reason
	}
	home, reason := send(chatBody("system", systemA, "user", "first turn"), "s1")
	if reason != policy.ReasonHash {
		t.Fatalf("first: %s", reason)
	}
	moved := 0
	for i := range 8 {
		b := chatBody("user", "a different opening, number "+string(rune('a'+i)), "user", "x")
		if d, err := e.r.Explain([]byte(b), "/v1/chat/completions"); err != nil {
			t.Fatal(err)
		} else if d.Backend != home {
			moved++ // without the session, it would go elsewhere
		}
		if got, reason := send(b, "s1"); got != home || reason != policy.ReasonOverride {
			t.Fatalf("session went to %d %s, want %d override", got, reason, home)
		}
	}
	if moved == 0 {
		t.Fatal("every cold prefix hashed to the session's backend: the test proves nothing")
	}
}
