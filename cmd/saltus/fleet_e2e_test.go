package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// waitLong is waitFor with room for a loaded machine: it waits for an
// event (a fetch round, a probe), polling, up to 60 s.
func waitLong(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(t0)
}

// mixedSims starts the fleet: org/alpha on engines 0-2 (the
// adapter alpha-tuned on 0 and 1), org/beta on 3 and 4.
func mixedSims(t *testing.T) ([]*vllmsim.Sim, []string) {
	t.Helper()
	var sims []*vllmsim.Sim
	var urls []string
	for i := range 5 {
		s := startSim(t, func(c *vllmsim.Config) {
			c.Tokenizer, c.ChatTemplate = "", ""
			c.Speedup, c.MaxTokens, c.Seed = 200, 4, int64(i+1)
			c.Model = "org/alpha"
			if i >= 3 {
				c.Model = "org/beta"
			}
			if i < 2 {
				c.LoRAModules = []vllmsim.LoRA{{Name: "alpha-tuned", Path: "/adapters/alpha-tuned"}}
			}
		})
		sims = append(sims, s)
		urls = append(urls, s.URL())
	}
	return sims, urls
}

func modelChatJSON(model, user string) string {
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 4, "messages": []map[string]string{
		{"role": "system", "content": sysA}, {"role": "user", "content": user}}})
	return string(b)
}

// listedIDs is GET /v1/models through saltus: id → parent.
func listedIDs(t *testing.T, addr string) map[string]string {
	t.Helper()
	a := do(t, "GET", "http://"+addr+"/v1/models", "")
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &list) != nil {
		t.Fatalf("GET /v1/models: %d %s", a.status, a.body)
	}
	out := map[string]string{}
	for _, m := range list.Data {
		out[m.ID] = ""
		if m.Parent != nil {
			out[m.ID] = *m.Parent
		}
	}
	return out
}

// TestServeMixedFleet is issue 29's fleet given only the backend URLs:
// every request goes to an engine of its model's pool, an unknown model
// is saltus's own 404, an adapter loaded on an engine behind saltus's back
// is routed to it alone, adapters load and unload through saltus, and a
// pool whose engines all die answers 503 while the others serve.
func TestServeMixedFleet(t *testing.T) {
	t.Parallel()
	sims, urls := mixedSims(t)
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = urls
		c.Fleet.Interval = 500 * time.Millisecond
		c.Backend.HealthInterval, c.Backend.HealthDownInterval = 100*time.Millisecond, 100*time.Millisecond
	})
	pools := map[string][]string{"org/alpha": urls[:3], "alpha-tuned": urls[:2], "org/beta": urls[3:]}
	// Every request for a known model or adapter is answered 200 by an
	// engine of its pool.
	for i := range 36 {
		model := []string{"org/alpha", "alpha-tuned", "org/beta"}[i%3]
		a := s.chat(t, modelChatJSON(model, fmt.Sprintf("Question %d: which berth is free at dawn, and for how long?", i)))
		if a.status != 200 || !slices.Contains(pools[model], a.backend) {
			t.Fatalf("%s: %d from %q (pool %v): %s", model, a.status, a.backend, pools[model], a.body)
		}
		var got struct{ Model string }
		if json.Unmarshal([]byte(a.body), &got) != nil || got.Model != model {
			t.Fatalf("%s: answered for model %q", model, got.Model)
		}
	}
	// An unknown model: saltus's own 404, nothing forwarded.
	a := s.chat(t, modelChatJSON("org/gamma", "Anyone?"))
	e := errorOf(t, a.body)
	if a.status != 404 || e.Error.Code != "model_not_found" || a.backend != "" {
		t.Fatalf("unknown model: %d from %q: %s", a.status, a.backend, a.body)
	}
	if got, want := listedIDs(t, s.addr), map[string]string{"org/alpha": "", "alpha-tuned": "org/alpha", "org/beta": ""}; !mapsEqual(got, want) {
		t.Fatalf("GET /v1/models: %v, want %v", got, want)
	}

	// An adapter loaded on engine 3 behind saltus's back: routable, to
	// engine 3 alone, once its models are fetched again.
	if a := do(t, "POST", urls[3]+"/v1/load_lora_adapter", `{"lora_name":"beta-chat","lora_path":"/adapters/beta-chat"}`); a.status != 200 {
		t.Fatalf("load on engine 3: %d %s", a.status, a.body)
	}
	took := waitLong(t, "beta-chat in /v1/models", func() bool { _, ok := listedIDs(t, s.addr)["beta-chat"]; return ok })
	t.Logf("an adapter loaded behind saltus's back was routable after %v (models-interval 500ms)", took)
	for i := range 8 {
		for _, model := range []string{"beta-chat", "org/beta"} {
			a := s.chat(t, modelChatJSON(model, fmt.Sprintf("Beta question %d?", i)))
			want := pools[model]
			if model == "beta-chat" {
				want = urls[3:4]
			}
			if a.status != 200 || !slices.Contains(want, a.backend) {
				t.Fatalf("%s: %d from %q, want one of %v: %s", model, a.status, a.backend, want, a.body)
			}
		}
	}

	// Through saltus: a load goes to the base model's engines, routable
	// when the answer comes; an unload from every engine that lists it.
	a = post(t, s.addr, "/v1/load_lora_adapter", `{"lora_name":"beta-two","lora_path":"/adapters/beta-two","base_model":"org/beta"}`)
	if a.status != 200 || !strings.Contains(a.body, `"lora_adapter.load"`) {
		t.Fatalf("load through saltus: %d %s", a.status, a.body)
	}
	seen := map[string]bool{}
	for i := range 12 {
		a := s.chat(t, modelChatJSON("beta-two", fmt.Sprintf("Two %d?", i)))
		if a.status != 200 || !slices.Contains(pools["org/beta"], a.backend) {
			t.Fatalf("beta-two right after its load: %d from %q: %s", a.status, a.backend, a.body)
		}
		seen[a.backend] = true
	}
	for _, u := range urls[3:] {
		if a := do(t, "GET", u+"/v1/models/beta-two", ""); a.status != 200 {
			t.Fatalf("engine %s does not list beta-two after the load through saltus: %d", u, a.status)
		}
	}
	if a := post(t, s.addr, "/v1/unload_lora_adapter", `{"lora_name":"beta-two"}`); a.status != 200 {
		t.Fatalf("unload through saltus: %d %s", a.status, a.body)
	}
	if a := s.chat(t, modelChatJSON("beta-two", "Still there?")); a.status != 404 || a.backend != "" {
		t.Fatalf("beta-two after its unload: %d from %q: %s", a.status, a.backend, a.body)
	}

	// The beta pool loses its engines: 503 with Retry-After for beta, the
	// alpha pool untouched.
	for _, sim := range sims[3:] {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := sim.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	waitLong(t, "the beta engines marked down", func() bool {
		for _, b := range s.backends(t) {
			if slices.Contains(urls[3:], b.URL) && b.Healthy {
				return false
			}
		}
		return true
	})
	a = s.chat(t, modelChatJSON("org/beta", "Anyone left?"))
	if e := errorOf(t, a.body); a.status != 503 || a.header.Get("Retry-After") == "" || e.Error.Code != "no_backend" {
		t.Fatalf("beta with its pool down: %d (Retry-After %q): %s", a.status, a.header.Get("Retry-After"), a.body)
	}
	for _, model := range []string{"org/alpha", "alpha-tuned"} {
		if a := s.chat(t, modelChatJSON(model, "Still serving?")); a.status != 200 || !slices.Contains(pools[model], a.backend) {
			t.Fatalf("%s while beta is down: %d from %q", model, a.status, a.backend)
		}
	}
	if n := s.metric(t, `saltus_pool_refused_total{model="org/beta",reason="no_backend"}`); n < 1 {
		t.Fatalf("no_backend refusals counted %v", n)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
