package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/openai/openaitest"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/upstream/backend"
)

func TestRouterDirectAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 2})
	f := func(method, path, body string, wantStatus int, wantCode, wantParam, wantAllow string) {
		t.Helper()
		x := newExchange(1, method, path, body)
		if c := e.serve(t, x); c != nil {
			t.Fatalf("%s %s: forwarded", method, path)
		}
		if x.status != wantStatus || x.header("Allow") != wantAllow || x.header("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d Allow %q, want %d %q", method, path, x.status, x.header("Allow"), wantStatus, wantAllow)
		}
		if id := x.header("X-Request-ID"); id == "" || x.header("Retry-After") != "" {
			t.Fatalf("%s %s: X-Request-ID %q, Retry-After %q", method, path, id, x.header("Retry-After"))
		}
		openaitest.CheckErrorBody(t, x.body, "", wantCode, wantParam)
	}
	f("POST", "/v1/chat/completions", `{"model":`, 400, "", "", "")
	f("POST", "/v1/chat/completions", `{"model":"m"}`, 400, "", "messages", "")
	f("POST", "/v1/completions", `{"model":"m","prompt":[true]}`, 400, "", "prompt", "")
	f("GET", "/v1/chat/completions", ``, 405, "method_not_allowed", "", "POST")
	f("PUT", "/v1/completions", ``, 405, "method_not_allowed", "", "POST")
	f("POST", "/v1/models", ``, 405, "method_not_allowed", "", "GET, HEAD")
	f("GET", "/v1/embeddings", ``, 405, "method_not_allowed", "", "POST")
	f("GET", "/", ``, 404, "not_found", "", "")
	f("POST", "/v2/chat/completions", `{}`, 404, "not_found", "", "")

	// mistral-style role errors come from the template; none renders
	// anything, so an empty message list is the decoding error here.
	x := newExchange(0, "GET", "/v1/models", "")
	x.req.Header = []reactor.Header{{Name: "X-Request-ID", Value: "mine"}}
	if e.serve(t, x) != nil || x.status != 200 || string(x.body) != string(e.up.models) || x.header("X-Request-ID") != "mine" {
		t.Fatalf("models: %d %v %s", x.status, x.hdr, x.body)
	}

	// OPTIONS *: what the server supports, counted under route none; the
	// reactor's own answers are counted there too.
	x = newExchange(0, "OPTIONS", "*", "")
	if e.serve(t, x) != nil || x.status != 200 || x.header("Allow") != "GET, HEAD, POST, OPTIONS" || x.header("X-Request-ID") == "" {
		t.Fatalf("OPTIONS *: %d %v", x.status, x.hdr)
	}
	e.r.OwnAnswer(431, "", "")
	if n, m := e.r.m.requests[routeNone][200].Load(), e.r.m.requests[routeNone][431].Load(); n != 1 || m != 1 {
		t.Fatalf("route none: %d 200s, %d 431s counted", n, m)
	}

	// Non-routed endpoints, and pooling bodies saltus does not key: least
	// loaded, reason fallback, nothing learned.
	e.up.inFlight[0].Store(3)
	long := strings.Repeat("x", 500)
	for _, tc := range []struct{ path, body string }{
		{"/tokenize", `{"model":"m","prompt":"` + long + `"}`},
		{"/v1/rerank", `{"model":"m","input":"` + long + `"}`}, // no query
		{"/v1/embeddings", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`},
		{"/pooling", `not json`},
	} {
		x = newExchange(0, "POST", tc.path, tc.body)
		c := e.serve(t, x)
		if c == nil || c.candidates[0] != 1 || c.header(HeaderRoute) != "0/0 fallback" {
			t.Fatalf("%s: %+v", tc.path, c)
		}
	}
	if s := e.r.routeStats(); s.Learned != 0 || s.Nodes != 0 {
		t.Fatalf("non-routed requests taught the tree: %+v", s)
	}
	if n := e.r.m.unkeyed.Get(); n != 3 {
		t.Fatalf("unkeyed pooling requests: %d counted, want 3", n)
	}

	// Forward refusing (its proxy pool full) is counted as a 503.
	e.up.refuse.Store(true)
	x = newExchange(0, "POST", "/v1/completions", `{"model":"m","prompt":"hello"}`)
	if e.serve(t, x) != nil || x.status != 503 {
		t.Fatalf("refused: %d", x.status)
	}
	e.loops.settle(t) // Done runs on the loop after the answer the test saw
	if got := e.r.m.requests[routeCompletions][503].Load(); got != 1 {
		t.Fatalf("503s counted: %d", got)
	}
	if got := e.r.m.requests[routeChat][400].Load(); got != 2 {
		t.Fatalf("chat 400s counted: %d", got)
	}
}

func TestRouterClientGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2})
	x := newExchange(0, "POST", "/v1/completions", `{"model":"m","prompt":"hello"}`)
	close(x.gone)
	e.loops.run(t, 0, func() { e.r.serve(x) })
	e.loops.settle(t)
	select {
	case <-e.up.calls:
		t.Fatal("forwarded for a client that left")
	default:
	}
	if e.r.m.clientGone.Get() != 1 {
		t.Fatal("not counted")
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 3, backends: 4, tokenizer: true})
	body := chatBody("system", systemA, "user", "Explain yourself")
	d, err := e.r.Explain([]byte(body), "/v1/chat/completions")
	if err != nil || d.Reason != policy.ReasonHash || d.MatchedBlocks != 0 || d.TotalBlocks < 4 || len(d.Candidates) != 3 {
		t.Fatalf("cold explain: %+v %v", d, err)
	}
	select {
	case <-e.up.calls:
		t.Fatal("Explain forwarded")
	default:
	}
	c, _, total, _ := routed(t, e, 0, "/v1/chat/completions", body)
	if c.candidates[0] != d.Backend || total != d.TotalBlocks {
		t.Fatalf("served to %d (%d blocks), explained %+v", c.candidates[0], total, d)
	}
	d, err = e.r.Explain([]byte(body), "/v1/chat/completions")
	if err != nil || d.Reason != policy.ReasonTree || d.MatchedBlocks != d.TotalBlocks || d.Backend != c.candidates[0] ||
		d.URL != e.up.backends[d.Backend].URL {
		t.Fatalf("warm explain: %+v %v", d, err)
	}
	if _, err = e.r.Explain([]byte(`{"model":"m"}`), "/v1/chat/completions"); err == nil || !strings.Contains(err.Error(), "messages: missing") {
		t.Fatalf("bad body: %v", err)
	}
	if _, err = e.r.Explain([]byte(body), "/v1/embeddings"); err == nil {
		t.Fatal("explained a non-routed path")
	}
	for i := range 4 {
		e.up.down[i].Store(true)
	}
	if _, err = e.r.Explain([]byte(body), "/v1/chat/completions"); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("no backend: %v", err)
	}
}

func TestMaintainForgetsRemovedBackends(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3})
	body, _ := idsBody(7, 64)
	c, _, _, _ := routed(t, e, 0, "/v1/completions", body)
	home := c.candidates[0]
	// The Set drops the home; maintenance (every 10 ms here) removes it
	// from the trees, whose nodes then empty and go.
	rest := append(e.up.backends[:home:home], e.up.backends[home+1:]...)
	e.up.snap.Store(&rest)
	deadline := time.Now().Add(10 * time.Second)
	for e.r.routeStats().Nodes != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("tree still holds %+v", e.r.routeStats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.BlockSize, c.LoadFactor, c.Policy, c.MaxCandidates = 0, 0.5, "random", 0
	c.Body.MaxDepth, c.OffloopBytes, c.DecodeWorkers, c.DecodeQueue = openai.MaxScanDepth+1, -1, 0, 0
	c.PriorityModels = []string{"ok", ""}
	err := c.Validate()
	for _, field := range []string{"BlockSize", "LoadFactor", "Policy", "MaxCandidates",
		"Body: MaxDepth", "OffloopBytes", "DecodeWorkers", "DecodeQueue", "PriorityModels[1]"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("error %v does not name %s", err, field)
		}
	}
}

// TestRouterConcurrent drives four loops from many goroutines at once,
// with the hooks on proxy goroutines, under the race detector: every
// request is forwarded once, every learn lands, and conversations that
// share a system prompt end up on one backend.
func TestRouterConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 4, backends: 5, tokenizer: true})
	e.up.async.Store(true)
	const convs, turns = 8, 6
	// Teach one conversation's system prompt first, then let the rest run
	// at once.
	systems := []string{systemA, systemB}
	for _, s := range systems {
		routed(t, e, 0, "/v1/chat/completions", chatBody("system", s, "user", "warm up"))
	}
	e.up.proxies.Wait()
	e.loops.settle(t)
	done := make(chan struct{})
	// Test-side clients, joined through done below.
	for c := range convs {
		go func() {
			defer func() { done <- struct{}{} }()
			msgs := []string{"system", systems[c%2]}
			for turn := range turns {
				msgs = append(msgs, "user", fmt.Sprintf("conversation %d, question %d: what next?", c, turn))
				x := newExchange((c+turn)%4, "POST", "/v1/chat/completions", chatBody(msgs...))
				for !e.loops.post(x.loop, func() { e.r.serve(x) }) {
					time.Sleep(time.Millisecond)
				}
				msgs = append(msgs, "assistant", "the answer to "+strconv.Itoa(turn))
			}
		}()
	}
	for range convs {
		<-done
	}
	byBackend := map[string]int{}
	for range convs * turns {
		select {
		case c := <-e.up.calls:
			_, _, reason := parseRoute(t, c.header(HeaderRoute))
			if reason != policy.ReasonTree {
				t.Errorf("a request sharing a learned system prompt went by %s", reason)
			}
			byBackend[c.header(HeaderBackend)]++
		case <-time.After(10 * time.Second):
			t.Fatal("requests lost")
		}
	}
	e.up.proxies.Wait()
	e.loops.settle(t)
	if s := e.r.routeStats(); s.Learned+s.LearnSkipped != convs*turns+2 || s.MailboxOverflow != 0 {
		t.Fatalf("stats %+v", s)
	}
	if len(byBackend) > 2 {
		t.Fatalf("two system prompts spread over %d backends: %v", len(byBackend), byBackend)
	}
	// Requests decided on their owner's loop and sent from another count
	// as in flight between the two, and no longer once sent.
	for _, b := range e.r.up.Snapshot() {
		if n := b.Decided(); n != 0 {
			t.Fatalf("%s: %d decided requests never sent", b.Name, n)
		}
	}
}

func TestRouterRoleErrorAndModelsError(t *testing.T) {
	t.Parallel()
	tmpl, err := chat.New(chat.Mistral, nil, chat.Config{BOS: "<s>", EOS: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	loops := newFakeLoops(1, 64)
	defer loops.stop()
	up := newFakeUpstream(2)
	r, err := newRouter(DefaultConfig(), nil, tmpl, up, up.state, loops.post, loops.poster, 1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	x := newExchange(0, "POST", "/v1/chat/completions", chatBody("user", "a", "user", "b"))
	loops.run(t, 0, func() { r.serve(x) })
	<-x.done
	if x.status != 400 || !strings.Contains(string(x.body), "alternate") {
		t.Fatalf("role error: %d %s", x.status, x.body)
	}
	up.modelsErr = errors.New("all backends down")
	x = newExchange(0, "GET", "/v1/models", "")
	loops.run(t, 0, func() { r.serve(x) })
	select {
	case <-x.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	if x.status != 502 || !strings.Contains(string(x.body), "all backends down") {
		t.Fatalf("models error: %d %s", x.status, x.body)
	}
}

// TestRouterHarmonyFieldError: a field harmony refuses, as vLLM does, is
// the 400's param.
func TestRouterHarmonyFieldError(t *testing.T) {
	t.Parallel()
	tmpl, err := chat.New(chat.Harmony, nil, chat.Config{})
	if err != nil {
		t.Fatal(err)
	}
	loops := newFakeLoops(1, 64)
	defer loops.stop()
	up := newFakeUpstream(1)
	r, err := newRouter(DefaultConfig(), nil, tmpl, up, up.state, loops.post, loops.poster, 1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	x := newExchange(0, "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"reasoning_effort":"none"}`)
	loops.run(t, 0, func() { r.serve(x) })
	<-x.done
	if x.status != 400 || !strings.Contains(string(x.body), `"param":"reasoning_effort"`) {
		t.Fatalf("reasoning_effort none: %d %s", x.status, x.body)
	}
}

// TestRouterModelsNoBackend: GET /v1/models with no routable backend is
// 503 with Retry-After (issue 15), not an empty list, which would tell
// the client its model does not exist.
func TestRouterModelsNoBackend(t *testing.T) {
	t.Parallel()
	loops := newFakeLoops(1, 64)
	defer loops.stop()
	up := newFakeUpstream(0)
	up.modelsErr = fmt.Errorf("%w: every backend is down", backend.ErrNoCandidate)
	r, err := newRouter(DefaultConfig(), nil, nil, up, up.state, loops.post, loops.poster, 1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	x := newExchange(0, "GET", "/v1/models", "")
	loops.run(t, 0, func() { r.serve(x) })
	select {
	case <-x.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	retry := ""
	for _, h := range x.hdr {
		if h.Name == "Retry-After" {
			retry = h.Value
		}
	}
	if x.status != 503 || !strings.Contains(string(x.body), `"no_backend"`) || retry != "1" {
		t.Fatalf("models with no backend: %d %s, Retry-After %q; want 503 no_backend, Retry-After 1", x.status, x.body, retry)
	}
}

// TestCompletionWaitsForFullLoop: a tokenizer completion that finds its
// loop's queue full waits (the poster never refuses) until the loop
// drains, and is not dropped.
func TestCompletionWaitsForFullLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2, tokenizer: true, queue: 2, maintain: time.Hour})
	x := newExchange(0, "POST", "/v1/chat/completions", chatBody("user", "a question no cache has seen yet"))
	e.loops.run(t, 0, func() {
		for range 2 {
			if !e.loops.post(0, func() {}) {
				t.Error("cannot fill the queue")
			}
		}
		e.r.serve(x) // a miss: the job goes to the worker
		// Hold the loop until the worker's completion has found the
		// queue full (the event, not a duration), so the wait is what
		// this test exercises.
		deadline := time.Now().Add(10 * time.Second)
		for e.loops.waited.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if e.loops.waited.Load() == 0 {
			t.Error("the completion never met the full queue")
		}
	})
	select {
	case c := <-e.up.calls:
		if c.x != x {
			t.Fatal("another exchange")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the completion was lost")
	}
	if s := e.r.shards[0].tok.Stats(); s.OwnJobs != 1 {
		t.Fatalf("the request did not go to the worker: %+v", s)
	}
}
