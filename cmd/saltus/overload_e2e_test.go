package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

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
			var urls []string
			for i := range 2 {
				s := startSim(t, func(c *vllmsim.Config) {
					c.Tokenizer, c.ChatTemplate = "", ""
					c.Speedup, c.MaxTokens, c.Seed = 20, 30, int64(i+1)
					c.MaxNumSeqs, c.MaxWaiting = 1, 1
				})
				urls = append(urls, s.URL())
			}
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
