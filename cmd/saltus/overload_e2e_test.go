package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// TestServeFullEngines (issue 30, items 1 and 5): engines that run 1
// request and queue 1 refuse the rest of a burst; saltus tries another
// engine, and what no engine can take gets saltus's own refusal with
// Retry-After, never an engine's own refusal body.
func TestServeFullEngines(t *testing.T) {
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
		case (r.status == 429 || r.status == 503) && r.retryAfter != "" && strings.Contains(r.body, `"code":"overloaded"`):
			refused++
		default:
			t.Errorf("client %d: %d (Retry-After %q) %s", i, r.status, r.retryAfter, r.body)
		}
	}
	if len(ok) != 2 || refused == 0 {
		t.Errorf("answered by %v, %d refused by saltus; want both engines serving and the rest refused", ok, refused)
	}
	if n := s.metric(t, "saltus_engine_refusals_total"); n < 1 {
		t.Errorf("engine refusals counted %v", n)
	}
	t.Logf("%d answered %v, %d refused by saltus with Retry-After", clients-refused, ok, refused)
}
