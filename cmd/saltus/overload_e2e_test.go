package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/admin"
	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// smallSims starts n simulated engines that run 1 request at once and
// queue maxWaiting (then refuse), each answer 30 tokens at speedup 20, and
// returns their URLs.
func smallSims(t *testing.T, n, maxWaiting int) []string {
	t.Helper()
	var urls []string
	for i := range n {
		s := startSim(t, func(c *vllmsim.Config) {
			c.Tokenizer, c.ChatTemplate = "", ""
			c.Speedup, c.MaxTokens, c.Seed = 20, 30, int64(i+1)
			c.MaxNumSeqs, c.MaxWaiting = 1, maxWaiting
		})
		urls = append(urls, s.URL())
	}
	return urls
}

// TestServeFullEngines (issue 30, items 1, 2 and 5): engines that run 1
// request and queue 1 refuse the rest of a burst; saltus tries another
// engine, and what none can take waits in the pool's gateway queue until
// a slot frees: every request of the burst is answered 200. With a queue
// of 1, what it cannot hold gets saltus's own 429 with Retry-After, never
// an engine's own refusal body.
func TestServeFullEngines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		maxEntries int
	}{{"queue", 1024}, {"queue of 1", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			urls := smallSims(t, 2, 1)
			s := startServeWith(t, nil, func(c *serveConfig) {
				c.Tokenizer = ""
				c.Backends = urls
				c.Router.Queue.MaxEntries = tc.maxEntries
			})
			const clients = 12
			type result struct {
				status           int
				retryAfter, body string
				backend          string
			}
			results := make([]result, clients)
			var wg sync.WaitGroup
			for i := range clients {
				wg.Add(1)
				go func() { // bounded: one request each
					defer wg.Done()
					body, _ := json.Marshal(map[string]any{"model": "llama3", "max_tokens": 30, "messages": []map[string]string{
						{"role": "user", "content": fmt.Sprintf("Client %d asks a question long enough to be a prompt of several blocks.", i)}}})
					a := s.chat(t, string(body))
					results[i] = result{a.status, a.header.Get("Retry-After"), a.body, a.backend}
				}()
			}
			wg.Wait()
			ok := map[string]int{}
			refused := 0
			for i, r := range results {
				switch {
				case r.status == 200:
					ok[r.backend]++
				case r.status == 429 && r.retryAfter != "" && strings.Contains(r.body, `"code":"overloaded"`):
					refused++
				default:
					t.Errorf("client %d: %d (Retry-After %q) %s", i, r.status, r.retryAfter, r.body)
				}
			}
			t.Logf("%d answered %v, %d refused by saltus with Retry-After", clients-refused, ok, refused)
			if len(ok) != 2 {
				t.Errorf("answered by %v: want both engines serving", ok)
			}
			if tc.maxEntries > clients && refused > 0 {
				t.Errorf("%d refused with a queue of %d: want every request of the burst answered", refused, tc.maxEntries)
			}
			if tc.maxEntries == 1 && refused == 0 {
				t.Errorf("none refused with a queue of 1")
			}
			m := s.metrics(t)
			queued := m[`saltus_queue_requests_total{model="llama3",result="queued"}`]
			if m["saltus_engine_refusals_total"] < 1 || queued < 1 {
				t.Errorf("engine refusals %v, queued %v", m["saltus_engine_refusals_total"], queued)
			}
			if d := metricSum(m, "saltus_queue_depth"); d != 0 {
				t.Errorf("queue depth %v after the burst", d)
			}
			// Every queued request left the queue: dispatched (its wait
			// observed), or refused as expired; the full ones were never
			// queued. Each refusal of saltus's own is counted by reason.
			dispatched := m[`saltus_queue_requests_total{model="llama3",result="dispatched"}`]
			waits := metricSum(m, "saltus_queue_wait_seconds_count", `model="llama3"`)
			if dispatched < 1 || waits != dispatched+m[`saltus_queue_requests_total{model="llama3",result="expired"}`] {
				t.Errorf("queued %v, dispatched %v, waits observed %v", queued, dispatched, waits)
			}
			if full := m[`saltus_pool_refused_total{model="llama3",reason="queue_full"}`]; full != float64(refused) {
				t.Errorf("queue_full refusals %v, want the %d refused", full, refused)
			}
			if n := m[`saltus_engine_refusal_outcomes_total{outcome="requeued"}`]; n < 1 {
				t.Errorf("engine refusals requeued %v, want some", n)
			}
			t.Logf("engine refusals: retried %v, requeued %v, refused %v; queue: queued %v, dispatched %v, full %v",
				m[`saltus_engine_refusal_outcomes_total{outcome="retried"}`], m[`saltus_engine_refusal_outcomes_total{outcome="requeued"}`],
				m[`saltus_engine_refusal_outcomes_total{outcome="refused"}`], queued, dispatched, m[`saltus_queue_requests_total{model="llama3",result="full"}`])
		})
	}
}

// TestServePriority (issue 30, item 3): vLLM's "priority" orders saltus's
// queue and reaches only engines configured to run priority scheduling:
// under saturation, clients at -10 and 10 are all answered by fcfs
// engines (which refuse a non-zero priority: it is removed), the -10
// class first; an engine named in --backend-priority gets the field.
func TestServePriority(t *testing.T) {
	t.Parallel()
	urls := smallSims(t, 2, 1)
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = urls
	})
	const clients = 16
	status := make([]int, clients)
	order := make(chan int, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() { // bounded: one request each
			defer wg.Done()
			prio := map[bool]int{true: -10, false: 10}[i%2 == 0]
			body, _ := json.Marshal(map[string]any{"model": "llama3", "max_tokens": 30, "priority": prio, "messages": []map[string]string{
				{"role": "user", "content": fmt.Sprintf("Client %d asks a question long enough to be a prompt of several blocks.", i)}}})
			a := s.chat(t, string(body))
			status[i] = a.status
			if a.status != 200 {
				t.Errorf("client %d (priority %d): %d %s", i, prio, a.status, a.body)
			}
			order <- i
		}()
	}
	wg.Wait()
	close(order)
	var highRank, lowRank, rank int
	for i := range order {
		if i%2 == 0 {
			highRank += rank
		} else {
			lowRank += rank
		}
		rank++
	}
	t.Logf("mean finishing rank: priority -10 %.1f, priority 10 %.1f (of %d)", float64(highRank)/8, float64(lowRank)/8, clients)

	// Misconfigured on purpose: an fcfs engine named as running priority
	// scheduling gets the field, and refuses it as vLLM does.
	s2 := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = urls[:1]
		c.PriorityBackends = urls[:1]
	})
	a := s2.chat(t, `{"model":"llama3","max_tokens":2,"priority":5,"messages":[{"role":"user","content":"Passed on?"}]}`)
	if a.status != 400 || !strings.Contains(a.body, "Priority scheduling is not enabled") {
		t.Fatalf("priority to a backend named in --backend-priority: %d %s", a.status, a.body)
	}
	// The same by pool (--model-priority): the engines serving llama3 get
	// the field; a model not named keeps it stripped.
	s3 := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = urls[:1]
		c.Router.PriorityModels = []string{"llama3", "not-served"}
	})
	a = s3.chat(t, `{"model":"llama3","max_tokens":2,"priority":5,"messages":[{"role":"user","content":"Passed on by pool?"}]}`)
	if a.status != 400 || !strings.Contains(a.body, "Priority scheduling is not enabled") {
		t.Fatalf("priority to a pool named in --model-priority: %d %s", a.status, a.body)
	}
	s4 := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = urls[:1]
		c.Router.PriorityModels = []string{"not-served"}
	})
	if a = s4.chat(t, `{"model":"llama3","max_tokens":2,"priority":5,"messages":[{"role":"user","content":"Stripped?"}]}`); a.status != 200 {
		t.Fatalf("priority to a pool not named in --model-priority: %d %s", a.status, a.body)
	}
}

// TestServeQueuedClientLeaves: a client that leaves while its request
// waits in the gateway queue is taken out of it, and nothing is sent
// upstream for it.
func TestServeQueuedClientLeaves(t *testing.T) {
	t.Parallel()
	sim := startSlowOneSeatSim(t)
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = []string{sim.URL()}
	})
	// Fill the engine (1 running, 1 waiting), then one more: refused by
	// the engine, it waits in saltus's queue.
	conns := fillOneSeat(t, s, sim)
	c := dialRaw(t, s.addr)
	c.send(t, queuedChat(2, 0))
	conns = append(conns, c)
	waitLong(t, "a request queued", func() bool { return metricSum(s.metrics(t), "saltus_queue_depth") == 1 })
	before := sim.Stats()
	conns[2].Close()
	waitLong(t, "the queued client's removal", func() bool {
		m := s.metrics(t)
		return m[`saltus_queue_requests_total{model="llama3",result="gone"}`] == 1 && metricSum(m, "saltus_queue_depth") == 0
	})
	// Nothing more reached the engine: still its two, no new refusal.
	if st := sim.Stats(); st.Running+st.Waiting != 2 || st.Rejected != before.Rejected {
		t.Errorf("engine after the queued client left: %+v (before %+v)", st, before)
	}
}

// TestServeBackendCap (issue 30, item 1's cap): with each engine capped at
// what it runs at once, saltus holds the rest of a burst in its queue,
// where priority orders it: the -10 class is served before the 10 class
// (but for what went at once), and every request is answered.
func TestServeBackendCap(t *testing.T) {
	t.Parallel()
	urls := smallSims(t, 2, 100) // never refuse: only the cap holds requests back
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = urls
		c.BackendMaxConcurrency = []string{urls[0] + "=1", urls[1] + "=1"}
	})
	// Two requests the engines hold until their clients leave (the sim's
	// stall) take both engines first: the burst waits while the test
	// looks at the queue, then goes when they leave.
	var holders []*rawConn
	for i := range 2 {
		b := fmt.Sprintf(`{"model":"llama3","max_tokens":30,"messages":[{"role":"user","content":"Holder %d takes the engine."}]}`, i)
		c := dialRaw(t, s.addr)
		c.send(t, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Sim-Fail: stall\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b))
		holders = append(holders, c)
	}
	waitLong(t, "both engines taken", func() bool { return s.metric(t, "saltus_proxy_in_flight") == 2 })
	var wg sync.WaitGroup
	const clients = 12
	order := make(chan int, clients)
	for i := range clients {
		wg.Add(1)
		go func() { // bounded: one request each
			defer wg.Done()
			prio := map[bool]int{true: -10, false: 10}[i%2 == 0]
			a := s.chat(t, fmt.Sprintf(`{"model":"llama3","max_tokens":30,"priority":%d,"messages":[{"role":"user","content":"Client %d asks."}]}`, prio, i))
			if a.status != 200 {
				t.Errorf("client %d: %d %s", i, a.status, a.body)
			}
			order <- i
		}()
	}
	// The queue by class while the burst waits: half at -10 (high), half
	// at 10 (low), in /metrics and in GET /admin/pools, whose oldest wait
	// grows from the loop's next tick.
	waitLong(t, "the burst queued", func() bool { return metricSum(s.metrics(t), "saltus_queue_depth") == clients })
	m := s.metrics(t)
	for class, want := range map[string]float64{"high": clients / 2, "normal": 0, "low": clients / 2} {
		if got := m[`saltus_queue_depth{model="llama3",class="`+class+`"}`]; got != want {
			t.Errorf("queue depth of class %s: %v, want %v", class, got, want)
		}
	}
	var q *admin.PoolQueue
	waitLong(t, "the admin API's queue", func() bool {
		q = poolOf(t, s.pools(t), "llama3").Queue
		return q != nil && q.Depth == clients && q.OldestWaitMS > 0
	})
	if q.ByClass["high"] != clients/2 || q.ByClass["low"] != clients/2 || q.ByClass["normal"] != 0 || q.Queued < clients {
		t.Errorf("GET /admin/pools queue: %+v", q)
	}
	for _, c := range holders {
		c.Close() // their slots free: the burst goes, -10 first
	}
	wg.Wait()
	close(order)
	// Every one of them waited, and its wait is in its class's histogram.
	m = s.metrics(t)
	for _, class := range []string{"high", "low"} {
		if got := m[`saltus_queue_wait_seconds_count{model="llama3",class="`+class+`"}`]; got < clients/2 {
			t.Errorf("waits observed in class %s: %v, want at least %d", class, got, clients/2)
		}
		if got := m[`saltus_queue_wait_seconds_sum{model="llama3",class="`+class+`"}`]; !(got > 0) {
			t.Errorf("wait sum of class %s: %v", class, got)
		}
	}
	if q := poolOf(t, s.pools(t), "llama3").Queue; q.Depth != 0 || q.Dispatched < clients {
		t.Errorf("GET /admin/pools queue after the burst: %+v", q)
	}
	lowFirst := 0
	rank := 0
	var seen []int
	defer func() {
		if lowFirst > 1 {
			t.Logf("answer order (client index; odd: priority 10): %v", seen)
		}
	}()
	for i := range order {
		seen = append(seen, i)
		if rank < clients/2 && i%2 == 1 {
			lowFirst++
		}
		rank++
	}
	if lowFirst > 1 {
		t.Errorf("%d of the first %d answers were priority 10: want the -10 class first", lowFirst, clients/2)
	}
}

// metricSum sums the series of family in m (served.metrics) that have
// every one of labels (`name="value"`); a family's bare series counts too
// when no label is asked.
func metricSum(m map[string]float64, family string, labels ...string) float64 {
	sum := 0.0
	for k, v := range m {
		name, rest, _ := strings.Cut(k, "{")
		if name != family {
			continue
		}
		have := strings.Split(strings.TrimSuffix(rest, "}"), ",")
		ok := true
		for _, l := range labels {
			ok = ok && slices.Contains(have, l)
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// poolOf is model's pool in GET /admin/pools.
func poolOf(t *testing.T, info admin.PoolsInfo, model string) admin.PoolInfo {
	t.Helper()
	for _, p := range info.Pools {
		if p.Model == model {
			return p
		}
	}
	t.Fatalf("GET /admin/pools has no pool %s: %+v", model, info)
	return admin.PoolInfo{}
}

// TestServeShutdownAnswersQueued (issue 30, item 5): when saltus stops,
// the requests waiting in a gateway queue are answered at once with 503
// shutting_down and Retry-After in OpenAI's error shape, not held until
// the drain ends or cut; counted by model and reason.
func TestServeShutdownAnswersQueued(t *testing.T) {
	t.Parallel()
	sim := startSlowOneSeatSim(t)
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = []string{sim.URL()}
		c.DrainTimeout = time.Second // the engine's two are cut then
	})
	// Fill the engine (1 running, 1 waiting), then queue four more.
	fillOneSeat(t, s, sim)
	const queued = 4
	var conns []*rawConn
	for i := range queued {
		c := dialRaw(t, s.addr)
		c.send(t, queuedChat(10+i, i%2*-5))
		conns = append(conns, c)
		waitLong(t, "the request queued", func() bool { return metricSum(s.metrics(t), "saltus_queue_depth") == float64(i+1) })
	}
	rejected := sim.Stats().Rejected
	t0 := time.Now()
	s.term()
	for i, c := range conns {
		resp, body := c.answer(t, "POST")
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    string  `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" ||
			e.Error.Code != "shutting_down" || e.Error.Type != "server_error" || e.Error.Message == "" ||
			!strings.Contains(body, `"param":null`) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("queued request %d at shutdown: %d (Retry-After %q) %s", i, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if d := time.Since(t0); d > 900*time.Millisecond {
		t.Errorf("the queued requests were answered %v after SIGTERM: want at once, before the 1 s drain ends", d)
	}
	// Counted (the admin listener stops with the drain: its Set read
	// directly), and nothing more reached the engine.
	var buf bytes.Buffer
	s.set.WritePrometheus(&buf)
	for series, want := range map[string]string{
		`saltus_queue_requests_total{model="llama3",result="shutdown"}`:    "4",
		`saltus_pool_refused_total{model="llama3",reason="shutting_down"}`: "4",
		`saltus_queue_depth{model="llama3",class="high"}`:                  "0",
		`saltus_queue_depth{model="llama3",class="normal"}`:                "0",
	} {
		if !strings.Contains(buf.String(), "\n"+series+" "+want+"\n") {
			t.Errorf("/metrics: want %s %s", series, want)
		}
	}
	if st := sim.Stats(); st.Rejected != rejected {
		t.Errorf("the engine refused %d more after SIGTERM", st.Rejected-rejected)
	}
}

// startSlowOneSeatSim is an engine that runs one request and queues one,
// each slow enough (200 tokens at speedup 1) to stay full while a test
// queues more in saltus.
func startSlowOneSeatSim(t *testing.T) *vllmsim.Sim {
	t.Helper()
	return startSim(t, func(c *vllmsim.Config) {
		c.Tokenizer, c.ChatTemplate = "", ""
		c.Speedup, c.MaxTokens = 1, 200
		c.MaxNumSeqs, c.MaxWaiting = 1, 1
	})
}

// queuedChat is raw request i of a long chat with vLLM's priority prio
// (0: none).
func queuedChat(i, prio int) string {
	p := ""
	if prio != 0 {
		p = fmt.Sprintf(`"priority":%d,`, prio)
	}
	b := fmt.Sprintf(`{"model":"llama3","max_tokens":200,%s"messages":[{"role":"user","content":"Request %d, long enough for a few blocks of prompt."}]}`, p, i)
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
}

// fillOneSeat sends the one-seat engine behind s its running and its
// waiting request, each once the engine holds the one before, and
// returns their connections.
func fillOneSeat(t *testing.T, s *served, sim *vllmsim.Sim) []*rawConn {
	t.Helper()
	var conns []*rawConn
	for i := range 2 {
		c := dialRaw(t, s.addr)
		c.send(t, queuedChat(i, 0))
		conns = append(conns, c)
		waitLong(t, "the engine to take it", func() bool { st := sim.Stats(); return st.Running+st.Waiting >= i+1 })
	}
	return conns
}
