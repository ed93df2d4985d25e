package shard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/upstream/backend"
	"github.com/saltus-lb/saltus/upstream/fleet"
	"github.com/saltus-lb/saltus/upstream/queue"
)

// fullPool gives e two healthy backends (0 and 1, from a backend.Set: the
// fake's are never healthy) that serve model "m" and are full for an
// hour: a request for "m" waits in its gateway queue. free replaces them
// with two fresh backends, not full, so the queue dispatches.
func fullPool(t *testing.T, e *env) (free func()) {
	t.Helper()
	fresh := func() []*backend.Backend {
		s, err := backend.NewSet(backend.DefaultConfig(), nil, metrics.NewSet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		for i := range 2 {
			if _, err := s.Add(fmt.Sprintf("http://127.0.0.1:%d", 9001+i)); err != nil {
				t.Fatal(err)
			}
		}
		return s.Snapshot()
	}
	snap := fresh()
	for _, b := range snap {
		b.MarkFull(time.Now(), time.Hour)
	}
	e.up.snap.Store(&snap)
	e.up.down[0].Store(true) // the fake's state: neither has room
	e.up.down[1].Store(true)
	f := &fakeFleet{}
	f.ix.Store(fleet.NewIndex(snap, map[int][]fleet.Model{0: {card("m", "")}, 1: {card("m", "")}}))
	e.r.UseFleet(f)
	return func() {
		next := fresh()
		e.up.snap.Store(&next)
		e.up.down[0].Store(false)
		e.up.down[1].Store(false)
	}
}

// exposition is e's /metrics text (without metadata: the admin listener
// turns it on, and the e2e tests check the whole exposition's format).
func exposition(t *testing.T, e *env) string {
	t.Helper()
	var buf bytes.Buffer
	e.set.WritePrometheus(&buf)
	for _, f := range []string{"saltus_queue_depth", "saltus_queue_wait_seconds", "saltus_queue_requests_total", "saltus_queue_dispatched_to_holder_total", "saltus_pool_refused_total", "saltus_queue_pools_folded_total"} {
		if promtext.Help(f) == "" {
			t.Errorf("%s has no HELP text", f)
		}
	}
	return buf.String()
}

// sample returns the value of the series named exactly series in text (-1
// when absent).
func sample(text, series string) float64 {
	for l := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// waitUntil polls cond every millisecond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func chatAt(prio int, i int) string {
	return fmt.Sprintf(`{"model":"m","priority":%d,"messages":[{"role":"user","content":"question %d, long enough to be a few blocks of prompt"}]}`, prio, i)
}

// TestQueueMetricsMove: requests that wait in a pool's queue show in its
// depth by class, leave it when slots free (dispatched, with their waits
// in the histogram by class), and /metrics says so in a valid exposition.
func TestQueueMetricsMove(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 2})
	free := fullPool(t, e)
	prios := []int{-5, -1, 0, 0, 0, 7}
	var xs []*fakeExchange
	for i, p := range prios {
		x := newExchange(i%2, "POST", "/v1/chat/completions", chatAt(p, i))
		xs = append(xs, x)
		e.loops.run(t, x.loop, func() { e.r.serve(x) })
	}
	waitUntil(t, "6 queued", func() bool { return e.r.queued.Load() == int64(len(prios)) })
	text := exposition(t, e)
	for class, want := range map[string]float64{"high": 2, "normal": 3, "low": 1} {
		if got := sample(text, `saltus_queue_depth{model="m",class="`+class+`"}`); got != want {
			t.Errorf("depth of class %s: %v, want %v\n%s", class, got, want, text)
		}
	}
	if got := sample(text, `saltus_queue_requests_total{model="m",result="queued"}`); got != 6 {
		t.Errorf("queued %v, want 6", got)
	}
	if got := sample(text, `saltus_queue_depth{model="(other)",class="normal"}`); got != 0 {
		t.Errorf("(other) depth %v, want 0", got)
	}
	// The admin API's view: depth by class, and the oldest wait once a
	// tick has published it.
	waitUntil(t, "an oldest wait published", func() bool {
		st, ok := e.r.QueueStatus("m")
		return ok && st.OldestWait > 0
	})
	if st, _ := e.r.QueueStatus("m"); st.Depth != [queue.NumBands]int64{2, 3, 1} || st.Queued != 6 || st.Dispatched != 0 {
		t.Errorf("QueueStatus %+v", st)
	}
	if _, ok := e.r.QueueStatus("nope"); ok {
		t.Error("QueueStatus of a model never counted: ok")
	}

	free()
	for i := range xs {
		select {
		case <-e.up.calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d not forwarded after the slots freed", i)
		}
	}
	waitUntil(t, "the queue empty", func() bool { return e.r.queued.Load() == 0 })
	text = exposition(t, e)
	for class, want := range map[string]float64{"high": 2, "normal": 3, "low": 1} {
		if got := sample(text, `saltus_queue_depth{model="m",class="`+class+`"}`); got != 0 {
			t.Errorf("depth of class %s after: %v", class, got)
		}
		if got := sample(text, `saltus_queue_wait_seconds_count{model="m",class="`+class+`"}`); got != want {
			t.Errorf("waits of class %s: %v, want %v\n%s", class, got, want, text)
		}
		if got := sample(text, `saltus_queue_wait_seconds_sum{model="m",class="`+class+`"}`); !(got > 0) {
			t.Errorf("wait sum of class %s: %v", class, got)
		}
	}
	if got := sample(text, `saltus_queue_requests_total{model="m",result="dispatched"}`); got != 6 {
		t.Errorf("dispatched %v, want 6", got)
	}
	if st, _ := e.r.QueueStatus("m"); st.Depth != [queue.NumBands]int64{} || st.OldestWait != 0 || st.Dispatched != 6 {
		t.Errorf("QueueStatus after: %+v", st)
	}
}

// TestQueueFirstCome: a request that arrives while others wait in its
// pool's queue waits behind them, though a slot is free at that moment
// (the slot an answer freed belongs to the queue's next, whose dispatch
// is on its way): it goes through the queue, after them. Without it, a
// steady stream of arrivals took every freed slot, and requests requeued
// behind them waited minutes at saturation.
func TestQueueFirstCome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 2})
	free := fullPool(t, e)
	gl := e.r.gateLoop("m") // the queue's loop: nothing dispatches while a function runs there
	for i := range 3 {
		x := newExchange(gl, "POST", "/v1/chat/completions", chatAt(0, i))
		e.loops.run(t, gl, func() { e.r.serve(x) })
	}
	waitUntil(t, "3 queued", func() bool { return e.r.queued.Load() == 3 })
	late := newExchange(gl, "POST", "/v1/chat/completions", chatAt(0, 3))
	e.loops.run(t, gl, func() {
		free() // room now, and the queue still holds the three
		e.r.serve(late)
	})
	for i := range 4 {
		select {
		case <-e.up.calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d not forwarded after the slots freed", i)
		}
	}
	text := exposition(t, e)
	if got := sample(text, `saltus_queue_requests_total{model="m",result="queued"}`); got != 4 {
		t.Errorf("queued %v, want 4: the late request went past the queue", got)
	}
	if got := sample(text, `saltus_queue_requests_total{model="m",result="dispatched"}`); got != 4 {
		t.Errorf("dispatched %v, want 4", got)
	}
}

// TestRequeueKeepsPlace: a request dispatched from its pool's queue that
// every engine refused as full goes back to its place, ahead of the
// requests that arrived after it (it used to go to the queue's end).
func TestRequeueKeepsPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2}) // one loop: its posts run in order
	free := fullPool(t, e)
	var xs []*fakeExchange // a, b, c
	for i := range 3 {
		x := newExchange(0, "POST", "/v1/chat/completions", chatAt(0, i))
		xs = append(xs, x)
		e.loops.run(t, 0, func() { e.r.serve(x) })
	}
	waitUntil(t, "3 queued", func() bool { return e.r.queued.Load() == 3 })
	e.up.requeue.Store(1) // a's dispatch: every engine full
	e.loops.run(t, 0, func() {
		free() // two slots: a and b go; a comes back, b is answered, then a and c go
		e.r.kickGate("m")
	})
	var order []int
	for range 3 {
		select {
		case c := <-e.up.calls:
			order = append(order, slices.Index(xs, c.x.(*fakeExchange)))
		case <-time.After(10 * time.Second):
			t.Fatalf("forwarded %v, want 3", order)
		}
	}
	if !slices.Equal(order, []int{1, 0, 2}) {
		t.Errorf("forwarded in the order %v, want [1 0 2]: the requeued request (0) ahead of the later one (2)", order)
	}
	text := exposition(t, e)
	if got := sample(text, `saltus_queue_requests_total{model="m",result="dispatched"}`); got != 4 {
		t.Errorf("dispatched %v, want 4 (a twice)", got)
	}
}

// TestRefusedFirstWaitsFromItsSend: a request every engine refused as full
// before it ever waited goes to its pool's queue ahead of the requests
// that were queued after it was sent (it used to go behind them).
func TestRefusedFirstWaitsFromItsSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2})
	fullPool(t, e)() // room: a goes to the engines
	e.up.requeue.Store(1)
	e.up.hold.Store(true) // a's refusal comes when the test says
	a := newExchange(0, "POST", "/v1/chat/completions", chatAt(0, 0))
	e.loops.run(t, 0, func() { e.r.serve(a) })
	waitUntil(t, "a sent", func() bool {
		e.up.heldMu.Lock()
		defer e.up.heldMu.Unlock()
		return len(e.up.held) == 1
	})
	free := fullPool(t, e) // full now: b waits
	b := newExchange(0, "POST", "/v1/chat/completions", chatAt(0, 1))
	e.loops.run(t, 0, func() { e.r.serve(b) })
	waitUntil(t, "b queued", func() bool { return e.r.queued.Load() == 1 })
	e.loops.run(t, 0, func() { e.up.held[0]() }) // every engine refused a
	waitUntil(t, "a queued", func() bool { return e.r.queued.Load() == 2 })
	e.loops.run(t, 0, func() {
		free()
		e.r.kickGate("m")
	})
	var order []*fakeExchange
	for range 2 {
		select {
		case c := <-e.up.calls:
			order = append(order, c.x.(*fakeExchange))
		case <-time.After(10 * time.Second):
			t.Fatalf("forwarded %d, want 2", len(order))
		}
	}
	if order[0] != a {
		t.Errorf("b went first: a, refused before b came, waits behind it")
	}
}

// TestQueueRefusalsCounted: a full queue and an expired wait are refused
// with 429 and Retry-After in OpenAI's shape, counted by model and reason
// (and the expired one's wait observed); an unknown model's 404 counts
// under (other).
func TestQueueRefusalsCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2, config: func(c *Config) {
		c.Queue.MaxEntries = 2
		c.Queue.MaxWait = 100 * time.Millisecond
	}})
	fullPool(t, e)
	var xs []*fakeExchange
	for i := range 3 {
		x := newExchange(0, "POST", "/v1/chat/completions", chatAt(0, i))
		xs = append(xs, x)
		e.loops.run(t, 0, func() { e.r.serve(x) })
	}
	for i, x := range xs {
		select {
		case <-x.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d not answered", i)
		}
		var body struct {
			Error struct {
				Message, Type string
				Code          *string
				Param         *string
			}
		}
		if err := json.Unmarshal(x.body, &body); err != nil || x.status != 429 || x.header("Retry-After") == "" ||
			body.Error.Code == nil || *body.Error.Code != "overloaded" || body.Error.Message == "" {
			t.Errorf("request %d: %d %s (Retry-After %q)", i, x.status, x.body, x.header("Retry-After"))
		}
	}
	x := newExchange(0, "POST", "/v1/chat/completions", `{"model":"gone-model","messages":[{"role":"user","content":"hi"}]}`)
	e.loops.run(t, 0, func() { e.r.serve(x) })
	<-x.done
	text := exposition(t, e)
	for series, want := range map[string]float64{
		`saltus_pool_refused_total{model="m",reason="queue_full"}`:                  1,
		`saltus_pool_refused_total{model="m",reason="queue_expired"}`:               2,
		`saltus_queue_requests_total{model="m",result="full"}`:                      1,
		`saltus_queue_requests_total{model="m",result="expired"}`:                   2,
		`saltus_queue_wait_seconds_count{model="m",class="normal"}`:                 2,
		`saltus_queue_wait_seconds_bucket{model="m",class="normal",le="0.05"}`:      0, // waited about MaxWait (from when it was queued: the expiry counts from its admission, before its keying, so le="0.1" may count it)
		`saltus_pool_refused_total{model="(other)",reason="model_not_found"}`:       1,
		`saltus_pool_refused_total{model="m",reason="model_not_found"}`:             0,
		`saltus_queue_depth{model="m",class="normal"}`:                              0,
		`saltus_queue_wait_seconds_bucket{model="m",class="normal",le="+Inf"}`:      2,
		`saltus_queue_requests_total{model="(other)",result="queued"}`:              0,
		`saltus_pool_refused_total{model="(other)",reason="shutting_down"}`:         0,
		`saltus_queue_wait_seconds_count{model="m",class="high"}`:                   -1, // never observed: not written
		`saltus_queue_pools_folded_total`:                                           0,
		`saltus_pool_refused_total{model="m",reason="engines_full"}`:                0,
		`saltus_queue_requests_total{model="m",result="queued"}`:                    2,
		`saltus_queue_requests_total{model="m",result="dispatched"}`:                0,
		`saltus_queue_requests_total{model="m",result="shutdown"}`:                  0,
		`saltus_queue_requests_total{model="m",result="gone"}`:                      0,
		`saltus_pool_refused_total{model="m",reason="no_backend"}`:                  0,
		`saltus_pool_refused_total{model="m",reason="queue_busy"}`:                  0,
		`saltus_pool_refused_total{model="(other)",reason="queue_full"}`:            0,
		`saltus_queue_depth{model="(other)",class="low"}`:                           0,
		`saltus_queue_requests_total{model="(other)",result="expired"}`:             0,
		`saltus_pool_refused_total{model="(other)",reason="no_backend"}`:            0,
		`saltus_queue_depth{model="m",class="high"}`:                                0,
		`saltus_queue_depth{model="m",class="low"}`:                                 0,
		`saltus_pool_refused_total{model="(other)",reason="engines_full"}`:          0,
		`saltus_pool_refused_total{model="(other)",reason="queue_expired"}`:         0,
		`saltus_pool_refused_total{model="(other)",reason="queue_busy"}`:            0,
		`saltus_queue_requests_total{model="(other)",result="dispatched"}`:          0,
		`saltus_queue_requests_total{model="(other)",result="full"}`:                0,
		`saltus_queue_requests_total{model="(other)",result="gone"}`:                0,
		`saltus_queue_requests_total{model="(other)",result="shutdown"}`:            0,
		`saltus_queue_depth{model="(other)",class="high"}`:                          0,
		`saltus_queue_depth{model="(other)",class="normal"}`:                        0,
		`saltus_pool_refused_total{model="m",reason="shutting_down"}`:               0,
		`saltus_queue_wait_seconds_bucket{model="m",class="normal",le="600"}`:       2,
		`saltus_queue_wait_seconds_bucket{model="m",class="normal",le="0.0025"}`:    0,
		`saltus_queue_wait_seconds_bucket{model="(other)",class="normal",le="600"}`: -1,
	} {
		if got := sample(text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestStopQueues: when saltus stops, every queued request is answered at
// once with 503 shutting_down and Retry-After, counted; a request that
// would wait from then on is refused the same way.
func TestStopQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 2})
	fullPool(t, e)
	var xs []*fakeExchange
	for i := range 5 {
		x := newExchange(i%2, "POST", "/v1/chat/completions", chatAt(i-2, i))
		xs = append(xs, x)
		e.loops.run(t, x.loop, func() { e.r.serve(x) })
	}
	waitUntil(t, "5 queued", func() bool { return e.r.queued.Load() == 5 })
	e.r.StopQueues()
	late := newExchange(1, "POST", "/v1/chat/completions", chatAt(0, 99))
	e.loops.run(t, 1, func() { e.r.serve(late) })
	for i, x := range append(xs, late) {
		select {
		case <-x.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d not answered after StopQueues", i)
		}
		var body struct {
			Error struct {
				Message, Type, Code string
				Param               *string
			}
		}
		if err := json.Unmarshal(x.body, &body); err != nil || x.status != 503 || x.header("Retry-After") != "1" ||
			body.Error.Code != "shutting_down" || body.Error.Type != "server_error" || body.Error.Message == "" {
			t.Errorf("request %d: %d %s (Retry-After %q)", i, x.status, x.body, x.header("Retry-After"))
		}
	}
	waitUntil(t, "the queue empty", func() bool { return e.r.queued.Load() == 0 })
	text := exposition(t, e)
	for series, want := range map[string]float64{
		`saltus_queue_requests_total{model="m",result="shutdown"}`:          5,
		`saltus_pool_refused_total{model="m",reason="shutting_down"}`:       6,
		`saltus_queue_depth{model="m",class="high"}`:                        0,
		`saltus_queue_requests_total{model="m",result="dispatched"}`:        0,
		`saltus_queue_requests_total{model="m",result="queued"}`:            5,
		`saltus_pool_refused_total{model="(other)",reason="shutting_down"}`: 0,
	} {
		if got := sample(text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// TestQueueMetricsPoolsBounded: pools past maxMetricPools are counted
// under (other), and the fold is counted.
func TestQueueMetricsPoolsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 1})
	var models []fleet.Model
	for i := range maxMetricPools + 2 {
		models = append(models, card(fmt.Sprintf("lora-%03d", i), ""))
	}
	f := &fakeFleet{}
	f.ix.Store(fleet.NewIndex(e.up.Snapshot(), map[int][]fleet.Model{0: models}))
	e.r.UseFleet(f)
	for _, m := range models {
		e.r.refusedFor(m.ID, refusedNoBackend)
	}
	e.r.refusedFor("not-listed", refusedNotFound)
	text := exposition(t, e)
	for series, want := range map[string]float64{
		`saltus_pool_refused_total{model="lora-000",reason="no_backend"}`:     1,
		`saltus_pool_refused_total{model="lora-099",reason="no_backend"}`:     1,
		`saltus_pool_refused_total{model="lora-100",reason="no_backend"}`:     -1,
		`saltus_pool_refused_total{model="(other)",reason="no_backend"}`:      2,
		`saltus_pool_refused_total{model="(other)",reason="model_not_found"}`: 1,
		`saltus_queue_pools_folded_total`:                                     2,
	} {
		if got := sample(text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if n := len(*e.r.pm.pools.Load()); n != maxMetricPools {
		t.Errorf("%d pools with series, want %d", n, maxMetricPools)
	}
}

// TestQueueAffinity: when the engine that frees a slot holds a queued
// request's prefix, that request goes ahead of an earlier one
// (Config.QueueAffinity), and the metric counts it; with affinity 0 the
// queue is first come.
func TestQueueAffinity(t *testing.T) {
	t.Parallel()
	doc := strings.Repeat("the shared document that a conversation keeps asking about. ", 8)
	first := `{"model":"m","messages":[{"role":"user","content":"` + doc + `"}]}`
	next := `{"model":"m","messages":[{"role":"user","content":"` + doc + `"},{"role":"assistant","content":"ok"},{"role":"user","content":"and then?"}]}`
	other := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("an unrelated prompt of its own. ", 16) + `"}]}`
	for _, affinity := range []int{8, 0} {
		t.Run(fmt.Sprint("affinity ", affinity), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{loops: 1, backends: 2, config: func(c *Config) { c.QueueAffinity = affinity }})
			free := fullPool(t, e)
			full := func(id int) { // on the loop: nothing dispatches between
				(*e.up.snap.Load())[id].MarkFull(time.Now(), time.Hour)
				e.up.down[id].Store(true)
			}
			e.loops.run(t, 0, free)
			c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", first)) // learned: its holder
			holder := c.candidates[0]
			e.loops.run(t, 0, func() { full(0); full(1) })
			a := newExchange(0, "POST", "/v1/chat/completions", other)
			b := newExchange(0, "POST", "/v1/chat/completions", next)
			e.loops.run(t, 0, func() { e.r.serve(a) })
			waitUntil(t, "a queued", func() bool { return e.r.queued.Load() == 1 })
			e.loops.run(t, 0, func() { e.r.serve(b) })
			waitUntil(t, "b queued", func() bool { return e.r.queued.Load() == 2 })
			e.loops.run(t, 0, func() {
				free() // the holder's slot only
				full(1 - holder)
				e.r.kickGate("m")
			})
			want := b
			if affinity == 0 {
				want = a
			}
			select {
			case c := <-e.up.calls:
				if c.x.(*fakeExchange) != want || c.candidates[0] != holder {
					t.Fatalf("forwarded %v to %d first, want %v to %d (the holder)", c.x == b, c.candidates[0], want == b, holder)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("nothing forwarded after the holder's slot freed")
			}
			if got := sample(exposition(t, e), `saltus_queue_dispatched_to_holder_total{model="m"}`); affinity > 0 && got < 1 {
				t.Errorf("dispatched to holder %v, want at least 1", got)
			}
		})
	}
}
