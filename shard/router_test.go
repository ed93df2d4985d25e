package shard

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/tree"
)

const model = "meta-llama/Meta-Llama-3-8B-Instruct"

var (
	systemA = "You are a meticulous assistant for the lighthouse keepers' guild. Answer every question about tides, " +
		"lamps, fog signals and the maintenance of Fresnel lenses with care, cite the guild's handbook where you can, " +
		"and never invent a regulation. Keep answers short unless asked for detail."
	systemB = "You are a cheerful cooking assistant. Suggest recipes from what is in the fridge, list the steps " +
		"clearly, and warn about allergens such as nuts, gluten and shellfish whenever they appear in a recipe."
)

func chatBody(msgs ...string) string {
	type m struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []m
	for i := 0; i < len(msgs); i += 2 {
		ms = append(ms, m{msgs[i], msgs[i+1]})
	}
	b, err := json.Marshal(map[string]any{"model": model, "messages": ms, "stream": true})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// parseRoute splits X-Saltus-Route "<matched>/<total> <reason>".
func parseRoute(t *testing.T, v string) (matched, total int, reason string) {
	t.Helper()
	frac, reason, ok := strings.Cut(v, " ")
	m, tot, ok2 := strings.Cut(frac, "/")
	var err1, err2 error
	matched, err1 = strconv.Atoi(m)
	total, err2 = strconv.Atoi(tot)
	if !ok || !ok2 || err1 != nil || err2 != nil {
		t.Fatalf("bad X-Saltus-Route %q", v)
	}
	reason, _, _ = strings.Cut(reason, " ") // the prefix policy's receipt follows
	return matched, total, reason
}

// routed serves a chat and checks the headers agree with the call.
func routed(t *testing.T, e *env, loop int, path, body string) (c *forwardCall, matched, total int, reason string) {
	t.Helper()
	x := newExchange(loop, "POST", path, body)
	c = e.serve(t, x)
	if c == nil {
		t.Fatalf("not forwarded: %d %s", x.status, x.body)
	}
	matched, total, reason = parseRoute(t, c.header(HeaderRoute))
	if want := e.up.backends[c.served].URL; c.served >= 0 && c.header(HeaderBackend) != want {
		t.Fatalf("X-Saltus-Backend %q, want %q", c.header(HeaderBackend), want)
	}
	return c, matched, total, reason
}

func TestRouterAffinity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 4, backends: 4, tokenizer: true})
	first := chatBody("system", systemA, "user", "When should the lamp be lit?")
	c, matched, total, reason := routed(t, e, 0, "/v1/chat/completions", first)
	if reason != policy.ReasonHash || matched != 0 || total < 5 {
		t.Fatalf("cold request: %d/%d %s", matched, total, reason)
	}
	home := c.candidates[0]

	// The same request, from another connection's loop: the whole chain.
	c, matched, total2, reason := routed(t, e, 2, "/v1/chat/completions", first)
	if reason != policy.ReasonTree || c.candidates[0] != home || matched != total || total2 != total {
		t.Fatalf("repeat: backend %d (home %d) %d/%d %s", c.candidates[0], home, matched, total2, reason)
	}

	// The next turn of the conversation stays, matching at least the
	// first turn's chain up to its last message boundary.
	second := chatBody("system", systemA, "user", "When should the lamp be lit?",
		"assistant", "At sunset, and whenever fog rolls in.", "user", "And the fog signal?")
	c, matched, total3, reason := routed(t, e, 1, "/v1/chat/completions", second)
	if reason != policy.ReasonTree || c.candidates[0] != home || matched < total-1 || total3 <= total {
		t.Fatalf("second turn: backend %d (home %d) %d/%d %s (first turn %d blocks)", c.candidates[0], home, matched, total3, reason, total)
	}

	// A branch from the system prompt reuses the system prompt's route:
	// it matches up to the system message's end, a learned boundary.
	branch := chatBody("system", systemA, "user", "How do I clean a Fresnel lens without scratching it?")
	c, matchedB, totalB, reason := routed(t, e, 3, "/v1/chat/completions", branch)
	if reason != policy.ReasonTree || c.candidates[0] != home || matchedB == 0 || matchedB >= totalB || matchedB >= total {
		t.Fatalf("branch: backend %d (home %d) %d/%d %s", c.candidates[0], home, matchedB, totalB, reason)
	}

	// Another system prompt shares nothing: cold again.
	_, matched, _, reason = routed(t, e, 0, "/v1/chat/completions", chatBody("system", systemB, "user", "Eggs and spinach?"))
	if reason != policy.ReasonHash || matched != 0 {
		t.Fatalf("other prompt: %d %s", matched, reason)
	}

	s := e.r.routeStats()
	// No answer had anything to teach: each new chain was recorded when
	// it was decided (a pending route, confirmed by the 2xx without a
	// message), the repeated one was held already.
	if s.Learned != 0 || s.LearnSkipped != 5 || s.Decisions[policy.ReasonTree] != 3 || s.Decisions[policy.ReasonHash] != 2 || s.Nodes == 0 || s.Blocks < int64(total3) {
		t.Fatalf("stats %+v", s)
	}
	var out bytes.Buffer
	e.set.WritePrometheus(&out)
	for _, want := range []string{
		`saltus_requests_total{route="chat",code="200"} 5`,
		`saltus_route_decisions_total{reason="tree"} 3`,
		`saltus_router_prefix_match_ratio_count 5`,
		`saltus_router_prefix_match_ratio_bucket{le="0"} 2`,
		`saltus_shard_mailbox_overflow_total 0`,
		`saltus_tree_nodes `,
		`saltus_tokenizer_requests_total 5`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, out.String())
		}
	}
}

func TestRouterLoadSkipLearnsServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3, tokenizer: true, policy: policy.Ranvier.String()})
	body := chatBody("system", systemA, "user", "Tides today?")
	c, _, total, _ := routed(t, e, 0, "/v1/chat/completions", body)
	home := c.candidates[0]

	// The home is far above the median: the least loaded serves.
	e.up.inFlight[home].Store(50)
	least := -1
	for i := range 3 {
		if i != home && least < 0 {
			least = i
		}
	}
	c, matched, _, reason := routed(t, e, 1, "/v1/chat/completions", body)
	if c.candidates[0] != least || reason != policy.ReasonTree || matched != 0 {
		t.Fatalf("loaded home %d: went to %d (want %d), %d %s", home, c.candidates[0], least, matched, reason)
	}
	// That backend served, so it was learned beside the home: with the
	// home's load back under the floor, the two hold the prefix equally
	// deep and the one with fewer in flight wins.
	e.up.inFlight[home].Store(2)
	c, matched, _, reason = routed(t, e, 0, "/v1/chat/completions", body)
	if c.candidates[0] != least || matched != total || reason != policy.ReasonTree {
		t.Fatalf("after spill: went to %d (want %d), %d/%d %s", c.candidates[0], least, matched, total, reason)
	}
	e.up.inFlight[home].Store(0)
	e.up.inFlight[least].Store(1)
	if c, _, _, _ = routed(t, e, 1, "/v1/chat/completions", body); c.candidates[0] != home {
		t.Fatalf("went to %d, want the home %d", c.candidates[0], home)
	}

	// A retry: the second candidate answered, and is learned.
	e.up.serveIdx.Store(1)
	body2 := chatBody("system", systemB, "user", "Tides today?")
	c, _, _, _ = routed(t, e, 0, "/v1/chat/completions", body2)
	served := c.served
	e.up.serveIdx.Store(0)
	if c, _, _, reason = routed(t, e, 1, "/v1/chat/completions", body2); c.candidates[0] != served || reason != policy.ReasonTree {
		t.Fatalf("after a retry: went to %d, want %d (%s)", c.candidates[0], served, reason)
	}
}

func TestRouterUnroutableHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3, tokenizer: true})
	body := chatBody("system", systemA, "user", "Fog?")
	c, _, _, _ := routed(t, e, 0, "/v1/chat/completions", body)
	home := c.candidates[0]
	e.up.down[home].Store(true)
	c, matched, _, reason := routed(t, e, 0, "/v1/chat/completions", body)
	if c.candidates[0] == home || slices.Contains(c.candidates, home) || reason != policy.ReasonHash || matched != 0 {
		t.Fatalf("down home %d: candidates %v %d %s", home, c.candidates, matched, reason)
	}
	// Nothing routable: 503.
	for i := range 3 {
		e.up.down[i].Store(true)
	}
	x := newExchange(0, "POST", "/v1/chat/completions", body)
	if e.serve(t, x) != nil || x.status != 503 || !strings.Contains(string(x.body), `"no_backend"`) ||
		x.header("Retry-After") != "1" || x.header("X-Request-ID") == "" {
		t.Fatalf("got %d %v %s", x.status, x.hdr, x.body)
	}
}

// idsBody is a completion by token ids whose first key's owner is known.
func idsBody(first int32, n int) (string, []uint64) {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = first + int32(i)
	}
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": ids})
	return string(b), tree.BlockKeys(nil, tree.ModelSeed(model), ids, 16)
}

func TestRouterMailboxOverflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 4, queue: 1}) // each loop's mailbox holds one message
	// Find a prompt owned by loop 1, and send it from loop 0.
	var body string
	for f := int32(1); ; f += 100 {
		b, keys := idsBody(f, 40)
		if keys[0]%2 == 1 {
			body = b
			break
		}
	}
	// Block loop 1, running a message (its mailbox is empty again).
	release, blocked := make(chan struct{}), make(chan struct{})
	if !e.loops.post(1, func() { close(blocked); <-release }) {
		t.Fatal("cannot block loop 1")
	}
	<-blocked
	// The first lookup waits in loop 1's mailbox (1 of 1); the second
	// overflows and goes without the tree, at once.
	x1 := newExchange(0, "POST", "/v1/completions", body)
	e.loops.run(t, 0, func() { e.r.serve(x1) })
	x2 := newExchange(0, "POST", "/v1/completions", body)
	e.loops.run(t, 0, func() { e.r.serve(x2) })
	var c forwardCall
	select {
	case c = <-e.up.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the overflowing request was not forwarded")
	}
	if c.x != x2 {
		t.Fatal("the first request overtook the blocked loop")
	}
	m, tot, reason := parseRoute(t, c.header(HeaderRoute))
	if reason != policy.ReasonFallback || m != 0 || tot != 2 {
		t.Fatalf("overflow: %d/%d %s", m, tot, reason)
	}
	close(release)
	select {
	case c1 := <-e.up.calls:
		if c1.x != x1 {
			t.Fatal("unexpected exchange")
		}
		// The fallback is the rendezvous pick: the same backend as the
		// hash would choose.
		if _, _, r := parseRoute(t, c1.header(HeaderRoute)); r != policy.ReasonHash || c1.candidates[0] != c.candidates[0] {
			t.Fatalf("first: %s to %d, fallback went to %d", r, c1.candidates[0], c.candidates[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued request was not forwarded")
	}
	if s := e.r.routeStats(); s.MailboxOverflow < 1 || s.Decisions[policy.ReasonFallback] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRouterTokenIDsAndByteBlocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 3, backends: 4}) // no tokenizer: byte-block mode
	f := func(path, body string, wantMatched, wantTotal int, wantReason string) {
		t.Helper()
		_, m, tot, reason := routed(t, e, 0, path, body)
		if m != wantMatched || tot != wantTotal || reason != wantReason {
			t.Fatalf("%s: %d/%d %s, want %d/%d %s", body[:min(60, len(body))], m, tot, reason, wantMatched, wantTotal, wantReason)
		}
	}
	ids, _ := idsBody(1000, 70) // 4 blocks
	f("/v1/completions", ids, 0, 4, policy.ReasonHash)
	f("/v1/completions", ids, 4, 4, policy.ReasonTree)
	b, _ := json.Marshal(map[string]any{"model": model, "prompt_token_ids": []int{1000, 1001}})
	f("/v1/completions", string(b), 0, 0, policy.ReasonFallback) // shorter than a block

	// Byte blocks: 64 bytes each, of the rendered (none) text.
	long := strings.Repeat("0123456789abcdef", 16) // 256 bytes
	chat := chatBody("user", long)
	f("/v1/chat/completions", chat, 0, 4, policy.ReasonHash)
	f("/v1/chat/completions", chat, 4, 4, policy.ReasonTree)
	p, _ := json.Marshal(map[string]any{"model": model, "prompt": []string{long + long, "other"}})
	// A completion whose prompt starts with the chat's rendered text
	// shares its first four byte blocks.
	f("/v1/completions", string(p), 4, 8, policy.ReasonTree)
}

// markFresh skips the learn only for a whole-chain, local, recently
// refreshed route of the chosen backend.
func TestMarkFresh(t *testing.T) {
	t.Parallel()
	sec := int64(time.Second)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		hit  tree.Hit
		want bool
	}{
		{"fresh", time.Hour, tree.Hit{Backend: 2, Blocks: 5, Origin: tree.Local, Used: 10 * sec}, true},
		{"stale", time.Hour, tree.Hit{Backend: 2, Blocks: 5, Origin: tree.Local, Used: 9 * sec}, false},
		{"partial", time.Hour, tree.Hit{Backend: 2, Blocks: 4, Origin: tree.Local, Used: 10 * sec}, false},
		{"remote", time.Hour, tree.Hit{Backend: 2, Blocks: 5, Origin: tree.Remote, Used: 10 * sec}, false},
		{"other backend", time.Hour, tree.Hit{Backend: 3, Blocks: 5, Origin: tree.Local, Used: 10 * sec}, false},
		{"half a short TTL", time.Second, tree.Hit{Backend: 2, Blocks: 5, Origin: tree.Local, Used: 10*sec - sec/4}, false},
	} {
		cfg := DefaultConfig()
		cfg.Tree.TTL = tc.ttl
		j := &job{r: &Router{cfg: cfg}, keys: make([]uint64, 5)}
		j.markFresh(policy.Decision{Backend: 2}, []tree.Hit{tc.hit}, 10*sec+sec/2)
		if j.fresh != tc.want || (tc.want && j.freshID != 2) {
			t.Errorf("%s: fresh %v (id %d), want %v", tc.name, j.fresh, j.freshID, tc.want)
		}
	}
}

// A request waiting for the tokenizer keeps its own copy of the loop's
// scratch views (job.own): the next request on the same loop reuses the
// loop's parser and chat.Scratch at once, and must not change what the
// first one learns, its message boundaries included.
func TestScratchReuseWhileTokenizing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 4, tokenizer: true})
	first := chatBody("system", systemA, "user", "Which lamp oil burns cleanest in a Fresnel lens?")
	other := chatBody("user", "Tell me a short story about a lighthouse cat, in two sentences, please.")
	xa, xb := newExchange(0, "POST", "/v1/chat/completions", first), newExchange(0, "POST", "/v1/chat/completions", other)
	e.loops.run(t, 0, func() {
		e.r.serve(xa) // misses the cold tokenizer cache: goes to a worker
		e.r.serve(xb) // overwrites the loop's scratch before that completes
	})
	for range 2 {
		select {
		case <-e.up.calls:
		case <-time.After(10 * time.Second):
			t.Fatal("no Forward within 10 s")
		}
	}
	e.loops.settle(t)
	for _, body := range []string{first, other} {
		_, matched, total, reason := routed(t, e, 1, "/v1/chat/completions", body)
		if reason != policy.ReasonTree || matched != total {
			t.Errorf("repeat of %.40q: %d/%d %s, want the whole chain from the tree", body, matched, total, reason)
		}
	}
	// first's system-message boundary was learned: a branch matches it.
	branch := chatBody("system", systemA, "user", "How often are the brass fittings polished?")
	if _, matched, total, reason := routed(t, e, 1, "/v1/chat/completions", branch); reason != policy.ReasonTree || matched == 0 || matched >= total {
		t.Errorf("branch: %d/%d %s, want a partial tree match", matched, total, reason)
	}
}

// own copies every view a job holds into the loop's decodeScratch.
func TestJobOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 1, tokenizer: true})
	var ds decodeScratch
	j := &job{r: e.r, route: routeChat}
	body := chatBody("system", systemA, "user", "Which lamp oil burns cleanest?")
	if err := j.prepare([]byte(body), &ds); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, t := range j.texts {
		texts = append(texts, strings.Clone(t))
	}
	ends := slices.Clone(j.msgEnd)
	j.own()
	// The loop's next request: other texts, other message ends.
	k := &job{r: e.r, route: routeChat}
	if err := k.prepare([]byte(chatBody("user", strings.Repeat("x", len(body)))), &ds); err != nil {
		t.Fatal(err)
	}
	for i := range ds.msgEnd {
		ds.msgEnd[i] = !ds.msgEnd[i]
	}
	if !slices.Equal(j.texts, texts) || !slices.Equal(j.msgEnd, ends) || j.d.Messages != nil {
		t.Errorf("after own and another request: texts %q ends %v, want %q %v", j.texts, j.msgEnd, texts, ends)
	}
}
