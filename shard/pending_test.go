package shard

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tokenpool"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// heldCall is a Forward the test answers later, through its hooks.
type heldCall struct {
	cands []*backend.Backend
	hdr   []reactor.Header
	h     backend.Hooks
}

func (c heldCall) route(t *testing.T) (matched, total int, reason string) {
	t.Helper()
	for _, h := range c.hdr {
		if h.Name == HeaderRoute {
			return parseRoute(t, h.Value)
		}
	}
	t.Fatal("no X-Saltus-Route")
	return
}

// answer runs the hooks as a Forward whose answer came from b (nil: no
// backend answered) with status, usage and ttfb: the time to its first
// event (a 2xx stream's head comes at once, its first event after ttfb).
func (c heldCall) answer(b *backend.Backend, status int, usage string, ttfb time.Duration) {
	if b != nil {
		headCame(c.h, b, status)
	}
	o := backend.Outcome{Backend: b, Status: status, TTFB: ttfb}
	if b != nil && status >= 200 && status < 300 {
		o.TTFB, o.FirstData = time.Millisecond, ttfb
		dataCame(c.h)
	}
	if usage != "" {
		o.Usage = []byte(usage)
	}
	endCame(c.h, o)
}

// holdUpstream is fakeUpstream whose Forward holds the call for the test
// to answer, so that several requests are decided before any answers.
type holdUpstream struct {
	*fakeUpstream
	held chan heldCall
}

func (u *holdUpstream) Forward(_ *reactor.Request, _ []byte, cands []*backend.Backend, _ backend.LoopSink, hdr []reactor.Header, h backend.Hooks) bool {
	u.held <- heldCall{cands: slices.Clone(cands), hdr: slices.Clone(hdr), h: h}
	return true
}

// Loop: the held Forward on every loop.
func (u *holdUpstream) Loop(int) upstreamLoop { return heldLoop{u} }

type heldLoop struct{ u *holdUpstream }

func (l heldLoop) ForwardOnLoop(req *reactor.Request, body []byte, cands []*backend.Backend, sink backend.LoopSink, hdr []reactor.Header, h backend.Hooks) bool {
	return l.u.Forward(req, body, cands, sink, hdr, h)
}

func (heldLoop) Tick(time.Time) {}

type ttftSample struct {
	backend, uncached int
	ttfb              time.Duration
}

type holdEnv struct {
	*env
	hu *holdUpstream

	mu    sync.Mutex
	ttfts []ttftSample
	posts atomic.Int64 // the Router's messages to loops
}

func newHoldEnv(t *testing.T, loops, backends int) *holdEnv {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Pool.CacheBytes = 8 << 20
	cfg.Tree.MaxBlocks = 100_000
	cfg.MaintainInterval = time.Hour // no Maintain during the test
	tok, tmpl := loadLlama3(t)
	var enc tokenpool.Encoder = tok
	e := &env{loops: newFakeLoops(loops, 4096), up: newFakeUpstream(backends)}
	e.set = metrics.NewSet()
	hu := &holdUpstream{fakeUpstream: e.up, held: make(chan heldCall, 64)}
	he := &holdEnv{env: e, hu: hu}
	post := func(i int, fn func()) bool {
		ok := e.loops.post(i, fn)
		if ok {
			he.posts.Add(1)
		}
		return ok
	}
	r, err := newRouter(cfg, enc, tmpl, hu, e.up.state, post, e.loops.poster, loops, slog.New(slog.DiscardHandler), e.set)
	if err != nil {
		e.loops.stop()
		t.Fatal(err)
	}
	e.r = r
	r.fb.observe = func(b *backend.Backend, uncached int, ttfb time.Duration) {
		he.mu.Lock()
		he.ttfts = append(he.ttfts, ttftSample{b.ID, uncached, ttfb})
		he.mu.Unlock()
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
		e.loops.stop()
	})
	return he
}

// send serves body from loop and returns its held Forward.
func (e *holdEnv) send(t *testing.T, loop int, body string) heldCall {
	t.Helper()
	x := newExchange(loop, "POST", "/v1/chat/completions", body)
	for !e.loops.post(loop, func() { e.r.serve(x) }) {
		time.Sleep(time.Millisecond)
	}
	select {
	case c := <-e.hu.held:
		return c
	case <-x.done:
		t.Fatalf("answered by the router: %d %s", x.status, x.body)
	case <-time.After(10 * time.Second):
		t.Fatal("no Forward within 10 s")
	}
	return heldCall{}
}

// explain returns the decision body would get now (no pending insert).
func (e *holdEnv) explain(t *testing.T, body string) policy.Decision {
	t.Helper()
	e.loops.settle(t) // removals posted to owners have run
	d, err := e.r.Explain([]byte(body), "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *holdEnv) metric(t *testing.T, name string) string {
	t.Helper()
	var out bytes.Buffer
	e.set.WritePrometheus(&out)
	for line := range strings.Lines(out.String()) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestPendingSiblingsFollow(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	body := chatBody("system", systemA, "user", "When should the lamp be lit?")
	// Two requests of a new prefix, the second decided before the first
	// answers, on another loop: it finds the pending holder.
	c1 := e.send(t, 0, body)
	m1, total, r1 := c1.route(t)
	if m1 != 0 || r1 != policy.ReasonHash {
		t.Fatalf("first: %d/%d %s, want a cold hash decision", m1, total, r1)
	}
	c2 := e.send(t, 1, body)
	m2, _, r2 := c2.route(t)
	if c2.cands[0] != c1.cands[0] || r2 != policy.ReasonTree || m2 != total {
		t.Fatalf("sibling: backend %d %d/%d %s; want backend %d by the tree, all blocks", c2.cands[0].ID, m2, total, r2, c1.cands[0].ID)
	}
	c1.answer(c1.cands[0], 200, "", time.Millisecond)
	c2.answer(c2.cands[0], 200, "", time.Millisecond)
	if d := e.explain(t, body); d.Backend != c1.cands[0].ID || d.MatchedBlocks != total {
		t.Fatalf("after both answered: %+v", d)
	}
	if got := e.metric(t, "saltus_route_pending_total"); got != "1" {
		t.Errorf("pending_total %s, want 1 (the sibling found the chain held already)", got)
	}
	if got := e.metric(t, "saltus_route_pending_failed_total"); got != "0" {
		t.Errorf("pending_failed_total %s, want 0", got)
	}
}

func TestPendingFailedLeavesWhatWasHeld(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	first := chatBody("system", systemA, "user", "When should the lamp be lit?")
	c := e.send(t, 0, first)
	_, firstTotal, _ := c.route(t)
	home := c.cands[0]
	c.answer(home, 200, "", time.Millisecond)

	// The same system prompt, another question: home holds a part.
	second := chatBody("system", systemA, "user", "How often are Fresnel lenses cleaned, and with what?")
	c = e.send(t, 1, second)
	held, total, reason := c.route(t)
	if c.cands[0] != home || reason != policy.ReasonTree || held == 0 || held >= total || held > firstTotal {
		t.Fatalf("second: backend %d %d/%d %s", c.cands[0].ID, held, total, reason)
	}
	if d := e.explain(t, second); d.Backend != home.ID || d.MatchedBlocks != total {
		t.Fatalf("while pending: %+v, want backend %d holding %d", d, home.ID, total)
	}
	c.answer(home, 503, "", time.Millisecond)
	if d := e.explain(t, second); d.Backend != home.ID || d.MatchedBlocks != held {
		t.Fatalf("after the failure: %+v, want backend %d holding %d as before", d, home.ID, held)
	}
	if d := e.explain(t, first); d.Backend != home.ID || d.MatchedBlocks != firstTotal {
		t.Fatalf("the first chain: %+v, want it whole on %d", d, home.ID)
	}

	// A new prefix whose attempt fails before any head: no holder left.
	cold := chatBody("system", systemB, "user", "Something with leeks?")
	c = e.send(t, 0, cold)
	c.answer(nil, 502, "", 0)
	if d := e.explain(t, cold); d.MatchedBlocks != 0 || d.Reason != policy.ReasonHash {
		t.Fatalf("after a failed cold attempt: %+v, want no holder", d)
	}
	for name, want := range map[string]string{
		"saltus_route_pending_total":         "3",
		"saltus_route_pending_failed_total":  "2",
		"saltus_route_demote_dropped_total":  "0",
		"saltus_route_pending_removed_total": "",
	} {
		if got := e.metric(t, name); want != "" && got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if got := e.metric(t, "saltus_route_pending_removed_total"); got == "0" || got == "" {
		t.Errorf("pending_removed_total %q, want some holders", got)
	}
}

func TestPendingRetryMovesTheRoute(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	body := chatBody("system", systemB, "user", "Dinner from eggs and spinach?")
	c := e.send(t, 0, body)
	_, total, _ := c.route(t)
	if len(c.cands) < 2 {
		t.Fatalf("candidates %v", c.cands)
	}
	// The first pick failed before its head; the second answered: one
	// message to the owner learns the second and removes the first's
	// pending holder.
	before := e.posts.Load()
	c.answer(c.cands[1], 200, "", time.Millisecond)
	if n := e.posts.Load() - before; n != 1 {
		t.Errorf("%d messages to the owner for the retried answer, want 1", n)
	}
	d := e.explain(t, body)
	if d.Backend != c.cands[1].ID || d.MatchedBlocks != total {
		t.Fatalf("after the retry: %+v, want backend %d holding %d", d, c.cands[1].ID, total)
	}
	if got := e.metric(t, "saltus_route_pending_failed_total"); got != "1" {
		t.Errorf("pending_failed_total %s, want 1", got)
	}
}

func TestFeedbackMetricsAndDemotion(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	body := chatBody("system", systemA, "user", "Which fog signal is used at night?")
	usage := func(prompt, cached int) string {
		return fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":%d}}`, prompt, cached)
	}
	c := e.send(t, 0, body)
	_, total, _ := c.route(t)
	home := c.cands[0]
	prompt := total*16 + 5
	c.answer(home, 200, usage(prompt, 0), 40*time.Millisecond)

	// Predicted all blocks; the engine agrees (a block short, as vLLM).
	c = e.send(t, 1, body)
	if m, _, _ := c.route(t); m != total {
		t.Fatalf("second: %d/%d", m, total)
	}
	c.answer(home, 200, usage(prompt, (total-1)*16), 5*time.Millisecond)
	if d := e.explain(t, body); d.MatchedBlocks != total {
		t.Fatalf("after an agreeing answer: %+v", d)
	}

	// Predicted all blocks; the engine reports none: demoted at once.
	c = e.send(t, 0, body)
	c.answer(home, 200, usage(prompt, 0), 30*time.Millisecond)
	if d := e.explain(t, body); d.MatchedBlocks != 0 || d.Reason != policy.ReasonHash {
		t.Fatalf("after a contradiction: %+v, want no holder", d)
	}

	// Without usage the prefill model gets the predicted uncached count.
	c = e.send(t, 1, body)
	c.answer(home, 200, "", 20*time.Millisecond)
	e.loops.settle(t)

	pred := 2 * total * 16
	for name, want := range map[string]string{
		"saltus_route_predicted_cached_tokens_total":                           fmt.Sprint(pred),
		"saltus_route_actual_cached_tokens_total":                              fmt.Sprint((total - 1) * 16),
		"saltus_route_prompt_tokens_total":                                     fmt.Sprint(3 * prompt), // the three answers with cached_tokens
		"saltus_route_ttft_seconds_count":                                      "4",                    // every streamed 2xx answer
		`saltus_route_ttft_seconds_bucket{le="0.005"}`:                         "1",
		`saltus_route_ttft_seconds_bucket{le="0.025"}`:                         "2",
		`saltus_route_ttft_seconds_bucket{le="0.05"}`:                          "4",
		"saltus_route_ttft_seconds_sum":                                        "0.095",
		`saltus_route_cache_predictions_total{predicted="miss",actual="miss"}`: "1",
		`saltus_route_cache_predictions_total{predicted="hit",actual="hit"}`:   "1",
		`saltus_route_cache_predictions_total{predicted="hit",actual="miss"}`:  "1",
		`saltus_route_cache_predictions_total{predicted="miss",actual="hit"}`:  "0",
		"saltus_route_contradicted_total":                                      "1",
		"saltus_route_usage_absent_total":                                      "1",
		"saltus_route_cached_error_blocks_count":                               "3",
		"saltus_route_cached_error_blocks_sum":                                 fmt.Sprint(-1 - total),
		`saltus_route_cached_error_blocks_bucket{le="-1"}`:                     "2",
		`saltus_route_cached_error_blocks_bucket{le="0"}`:                      "3",
	} {
		if got := e.metric(t, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := e.metric(t, "saltus_route_demoted_total"); got == "0" || got == "" {
		t.Errorf("demoted_total %q, want the holder's nodes", got)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	want := []ttftSample{
		{home.ID, prompt, 40 * time.Millisecond},
		{home.ID, prompt - (total-1)*16, 5 * time.Millisecond},
		{home.ID, prompt, 30 * time.Millisecond},
		{home.ID, total * 16, 20 * time.Millisecond}, // cold again after the demotion: predicted uncached all
	}
	if !slices.Equal(e.ttfts, want) {
		t.Fatalf("ObserveTTFT calls %v, want %v", e.ttfts, want)
	}
}

// The KV a backend's requests in flight pin (footprint.go): the first of
// a group pins its whole prompt, a sibling its tail; the base goes with
// the group's last request, and a failed attempt releases what it added.
func TestPinnedFollowsRequests(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 4)
	first := chatBody("system", systemA, "user", "When should the lamp be lit?")
	c1 := e.send(t, 0, first)
	_, total1, _ := c1.route(t)
	home := c1.cands[0]
	if got, want := home.Pinned(), int64(total1*16); got != want {
		t.Fatalf("first in flight: pinned %d, want %d", got, want)
	}
	second := chatBody("system", systemA, "user", "How often are Fresnel lenses cleaned, and with what?")
	c2 := e.send(t, 1, second)
	held2, total2, _ := c2.route(t)
	if c2.cands[0] != home || held2 == 0 {
		t.Fatalf("sibling went to %d holding %d", c2.cands[0].ID, held2)
	}
	both := int64(total1*16 + (total2-held2)*16)
	if got := home.Pinned(); got != both {
		t.Fatalf("siblings in flight: pinned %d, want %d", got, both)
	}
	c1.answer(home, 200, "", time.Millisecond)
	if got := home.Pinned(); got != both {
		t.Fatalf("first answered, sibling in flight: pinned %d, want the base kept, %d", got, both)
	}
	c2.answer(home, 503, "", time.Millisecond)
	if got := home.Pinned(); got != 0 {
		t.Fatalf("all ended: pinned %d", got)
	}
	cold := chatBody("system", systemB, "user", "Something with leeks?")
	c := e.send(t, 0, cold)
	c.answer(nil, 502, "", 0)
	for _, b := range e.up.backends {
		if b.Pinned() != 0 {
			t.Fatalf("backend %d: pinned %d after a failed attempt", b.ID, b.Pinned())
		}
	}
}

// A slot is held from the prefill's start to the last byte: a streamed
// answer's wait before its prefill (in its first token's time) is not
// counted; an answer read whole counts whole.
func TestSlotHold(t *testing.T) {
	t.Parallel()
	b := &backend.Backend{} // the default prefill model: 20 ms + 8,000 tokens/s
	j := &job{}
	j.prefill.b, j.prefill.tokens = b, 800 // a prefill of 120 ms
	for _, c := range []struct {
		total, first, want time.Duration
	}{
		{3 * time.Second, 2 * time.Second, 1120 * time.Millisecond}, // waited 1.88 s for a slot
		{3 * time.Second, 50 * time.Millisecond, 3 * time.Second},   // the first token beat the model: all of it
		{3 * time.Second, 0, 3 * time.Second},                       // read whole
	} {
		o := backend.Outcome{Backend: b, Total: c.total, FirstData: c.first}
		if got := j.slotHold(o); got != c.want {
			t.Errorf("total %v, first token %v: hold %v, want %v", c.total, c.first, got, c.want)
		}
	}
	other := &backend.Backend{} // retried elsewhere: no prediction there, the base only
	if got := j.slotHold(backend.Outcome{Backend: other, Total: 3 * time.Second, FirstData: 2 * time.Second}); got != 1020*time.Millisecond {
		t.Errorf("another backend: hold %v, want 1.02s", got)
	}
}

// The queue factor learns only from requests sent with a free slot: one
// that waited for a slot waited for an answer to end (the slot wait), not
// for the prefill ahead.
func TestQueuedNeedsFreeSlot(t *testing.T) {
	t.Parallel()
	b := &backend.Backend{}
	o := backend.Outcome{Backend: b, Status: 200, Total: time.Second, FirstData: 500 * time.Millisecond}
	var p pendingPrefill
	p.add(policy.Decision{Backend: 0, TotalBlocks: 10}, []*backend.Backend{b}, 16)
	if !p.slot {
		t.Fatal("no slot limit learned: the slot counts as free")
	}
	p.ahead = 1000
	if !p.queued(o) {
		t.Error("sent behind pending prefill with a free slot: not a sample")
	}
	p.slot = false
	if p.queued(o) {
		t.Error("sent with every slot taken: a sample")
	}
	for range 3 { // the engine runs 1 while requests wait: its limit
		b.SetEngine(backend.EngineLoad{Running: 1, Waiting: 1, KVUsage: 0.1, Until: time.Now().Add(time.Hour)})
	}
	if b.Slots() != 1 {
		t.Fatalf("slots %d, want 1", b.Slots())
	}
	var q pendingPrefill
	q.add(policy.Decision{Backend: 0, TotalBlocks: 10}, []*backend.Backend{b}, 16)
	if !q.slot {
		t.Error("nothing in flight under a limit of 1: the slot counts as taken")
	}
}
