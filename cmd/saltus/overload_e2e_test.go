package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

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
			if m["saltus_engine_refusals_total"] < 1 || m[`saltus_queue_requests_total{result="queued"}`] < 1 {
				t.Errorf("engine refusals %v, queued %v", m["saltus_engine_refusals_total"], m[`saltus_queue_requests_total{result="queued"}`])
			}
			if d := m["saltus_queue_depth"]; d != 0 {
				t.Errorf("queue depth %v after the burst", d)
			}
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
	sim := startSim(t, func(c *vllmsim.Config) {
		c.Tokenizer, c.ChatTemplate = "", ""
		c.Speedup, c.MaxTokens = 1, 200 // slow: the engine stays full while the test runs
		c.MaxNumSeqs, c.MaxWaiting = 1, 1
	})
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = []string{sim.URL()}
	})
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"llama3","max_tokens":200,"messages":[{"role":"user","content":"Request %d, long enough for a few blocks of prompt."}]}`, i)
	}
	req := func(i int) string {
		b := body(i)
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	}
	// Fill the engine (1 running, 1 waiting), then one more: refused by
	// the engine, it waits in saltus's queue.
	var conns []*rawConn
	for i := range 3 {
		c := dialRaw(t, s.addr)
		c.send(t, req(i))
		conns = append(conns, c)
		if i < 2 {
			waitLong(t, "the engine to take it", func() bool { st := sim.Stats(); return st.Running+st.Waiting >= i+1 })
		}
	}
	waitLong(t, "a request queued", func() bool { return s.metric(t, "saltus_queue_depth") == 1 })
	before := sim.Stats()
	conns[2].Close()
	waitLong(t, "the queued client's removal", func() bool {
		return s.metric(t, `saltus_queue_requests_total{result="gone"}`) == 1 && s.metric(t, "saltus_queue_depth") == 0
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
	// Two long requests take both engines first: the burst then waits.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.chat(t, fmt.Sprintf(`{"model":"llama3","max_tokens":30,"messages":[{"role":"user","content":"Warm-up %d takes the engine."}]}`, i))
		}()
	}
	waitLong(t, "both engines taken", func() bool { return s.metric(t, "saltus_proxy_in_flight") == 2 })
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
	waitLong(t, "the burst queued", func() bool { return s.metric(t, "saltus_queue_depth") == clients })
	wg.Wait()
	close(order)
	lowFirst := 0
	rank := 0
	for i := range order {
		if rank < clients/2 && i%2 == 1 {
			lowFirst++
		}
		rank++
	}
	if lowFirst > 1 {
		t.Errorf("%d of the first %d answers were priority 10: want the -10 class first", lowFirst, clients/2)
	}
}
