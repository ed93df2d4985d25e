package vllmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const llama3 = "../../tokenpool/testdata/models/llama3/tokenizer.json.gz"

// startSim serves a simulator until the test ends.
func startSim(t *testing.T, mutate func(*Config)) *Sim {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Speedup = 100
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func postJSON(t *testing.T, url string, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

type usageOut struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	Details          struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func chatBody(maxTokens int, stream bool, msgs ...string) string {
	var ms []map[string]string
	for i := 0; i+1 < len(msgs); i += 2 {
		ms = append(ms, map[string]string{"role": msgs[i], "content": msgs[i+1]})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": maxTokens, "stream": stream,
		"stream_options": map[string]bool{"include_usage": true}, "messages": ms})
	return string(b)
}

// complete sends a non-streamed chat request and returns its usage.
func complete(t *testing.T, s *Sim, msgs ...string) usageOut {
	t.Helper()
	resp, body := postJSON(t, s.URL()+"/v1/chat/completions", chatBody(3, false, msgs...))
	var out struct {
		Usage   usageOut `json:"usage"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	return out.Usage
}

// tokens asks /tokenize for a chat prompt's ids.
func tokens(t *testing.T, s *Sim, msgs ...string) []int {
	t.Helper()
	resp, body := postJSON(t, s.URL()+"/tokenize", chatBody(1, false, msgs...))
	var out struct {
		Tokens []int `json:"tokens"`
		Count  int   `json:"count"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil || out.Count != len(out.Tokens) {
		t.Fatalf("/tokenize: %d %s", resp.StatusCode, body)
	}
	return out.Tokens
}

// TestCachedTokens: identical, extended and branched prompts report as
// cached exactly the full blocks they share with what ran before.
func TestCachedTokens(t *testing.T) {
	for _, tok := range []string{"", llama3} {
		t.Run(fmt.Sprintf("tokenizer=%v", tok != ""), func(t *testing.T) {
			s := startSim(t, func(c *Config) { c.Tokenizer = tok })
			sys := "You are a careful harbour pilot. " + strings.Repeat("Report tides, winds and berths precisely. ", 30)
			conv := []string{"system", sys, "user", "When is high tide at Brest tomorrow?"}
			first := complete(t, s, conv...)
			ids := tokens(t, s, conv...)
			if first.PromptTokens != len(ids) || first.Details.CachedTokens != 0 || first.CompletionTokens != 3 {
				t.Fatalf("first: %+v (prompt %d tokens)", first, len(ids))
			}
			same := complete(t, s, conv...)
			if want := min(len(ids)/16*16, len(ids)-1); same.Details.CachedTokens != want {
				t.Fatalf("identical: cached %d, want %d", same.Details.CachedTokens, want)
			}
			shared := func(a, b []int) int { // leading full blocks of a that b shares
				n := 0
				for n < len(a) && n < len(b) && a[n] == b[n] {
					n++
				}
				return n / 16 * 16
			}
			ext := append(append([]string{}, conv...), "assistant", "At 06:12, 7.1 m.", "user", "And at Cherbourg?")
			extIDs := tokens(t, s, ext...)
			if got, want := complete(t, s, ext...).Details.CachedTokens, shared(ids, extIDs); got != want || want == 0 {
				t.Fatalf("extended: cached %d, want %d", got, want)
			}
			branch := []string{"system", sys, "user", "Which berth for a 300 m tanker?"}
			brIDs := tokens(t, s, branch...)
			// The branch shares the system prompt with both earlier prompts.
			want := max(shared(ids, brIDs), shared(extIDs, brIDs))
			if got := complete(t, s, branch...).Details.CachedTokens; got != want || want == 0 {
				t.Fatalf("branched: cached %d, want %d of %d", got, want, len(brIDs))
			}
		})
	}
}

// TestStreamFormat: chat chunks, a usage chunk when asked, [DONE].
func TestStreamFormat(t *testing.T) {
	s := startSim(t, nil)
	resp, body := postJSON(t, s.URL()+"/v1/chat/completions", chatBody(4, true, "user", "Count to four."))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var events []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, l)
		}
	}
	// role chunk, 4 tokens, usage, [DONE]
	if len(events) != 7 || events[6] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var content strings.Builder
	for i, e := range events[:6] {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Role, Content string
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usageOut `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("event %d %q: %v", i, e, err)
		}
		switch {
		case i == 0:
			if c.Choices[0].Delta.Role != "assistant" {
				t.Fatalf("first chunk %q", e)
			}
		case i == 5:
			if c.Usage == nil || c.Usage.CompletionTokens != 4 || len(c.Choices) != 0 {
				t.Fatalf("usage chunk %q", e)
			}
		default:
			content.WriteString(c.Choices[0].Delta.Content)
			if (i == 4) != (c.Choices[0].FinishReason != nil) {
				t.Fatalf("finish_reason on chunk %d: %q", i, e)
			}
		}
	}
	// Deterministic: the same prompt, the same words.
	_, again := postJSON(t, s.URL()+"/v1/chat/completions", chatBody(4, false, "user", "Count to four."))
	if !strings.Contains(again, fmt.Sprintf("%q", content.String())) {
		t.Fatalf("stream said %q, the same request unstreamed %s", content.String(), again)
	}
}

func TestCompletionsAndModels(t *testing.T) {
	s := startSim(t, nil)
	resp, body := postJSON(t, s.URL()+"/v1/completions", `{"model":"m","prompt":"Once upon a time","max_tokens":2}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"object":"text_completion"`) || !strings.Contains(body, `"completion_tokens":2`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = postJSON(t, s.URL()+"/v1/completions", `{"model":"m","prompt":[1,2,3,4,5],"max_tokens":1}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"prompt_tokens":5`) {
		t.Fatalf("token ids: %d %s", resp.StatusCode, body)
	}
	r, err := http.Get(s.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), `"id":"sim-llama"`) {
		t.Fatalf("models %s", b)
	}
}

func TestBadRequests(t *testing.T) {
	s := startSim(t, func(c *Config) { c.MaxBody = 1 << 10; c.KVTokens = 1024 })
	for _, tc := range []struct {
		path, body string
		status     int
		has        string
	}{
		{"/v1/chat/completions", `{bad`, 400, "not valid JSON"},
		{"/v1/chat/completions", `{"model":"m"}`, 400, `is required`},
		{"/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "must not be empty"},
		{"/v1/completions", `{"model":"m","prompt":{}}`, 400, "string or an array"},
		{"/v1/completions", `{"model":"m","prompt":"x","max_tokens":0}`, 400, "max_tokens"},
		{"/v1/completions", `{"model":"m","prompt":"x","max_tokens":5000}`, 400, "exceed the KV cache"},
		{"/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("x", 2000) + `"}`, 413, ""},
		{"/v1/nope", `{}`, 404, "no such endpoint"},
	} {
		resp, body := postJSON(t, s.URL()+tc.path, tc.body)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.has) {
			t.Errorf("%s %.40s: %d %s, want %d with %q", tc.path, tc.body, resp.StatusCode, body, tc.status, tc.has)
		}
	}
}

func TestFailureInjection(t *testing.T) {
	s := startSim(t, nil)
	url := s.URL() + "/v1/chat/completions"
	if resp, body := postJSON(t, url, chatBody(2, false, "user", "x"), "X-Sim-Fail", "503"); resp.StatusCode != 503 || !strings.Contains(body, "injected") {
		t.Fatalf("503: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", url, strings.NewReader(chatBody(2, false, "user", "x")))
	req.Header.Set("X-Sim-Fail", "reset")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("reset: got an answer %d", resp.StatusCode)
	}
	// A streamed reset: a few chunks, then the connection ends, no [DONE]
	// (the reset may drop chunks still in flight).
	req, _ = http.NewRequest("POST", url, strings.NewReader(chatBody(20, true, "user", "x")))
	req.Header.Set("X-Sim-Fail", "reset")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "[DONE]") || strings.Count(string(b), "data: ") >= 20 {
		t.Fatalf("streamed reset: %q", b)
	}
	// Stall: no head until the client gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(chatBody(2, false, "user", "x")))
	req.Header.Set("X-Sim-Fail", "stall")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("stall answered")
	}
	// --fail-rate 1: everything fails.
	s2 := startSim(t, func(c *Config) { c.FailRate = 1 })
	if resp, _ := postJSON(t, s2.URL()+"/v1/chat/completions", chatBody(2, false, "user", "x")); resp.StatusCode != 503 {
		t.Fatalf("fail-rate 1: %d", resp.StatusCode)
	}
}

// TestQueueFull503: one slot, one waiting place: a third request at once
// gets 503.
func TestQueueFull503(t *testing.T) {
	s := startSim(t, func(c *Config) { c.Speedup, c.MaxNumSeqs, c.MaxBatchedTokens, c.MaxWaiting = 1, 1, 2048, 1 })
	url := s.URL() + "/v1/chat/completions"
	codes := make(chan int, 3)
	for i := range 3 {
		go func() {
			resp, _ := postJSON(t, url, chatBody(8, false, "user", fmt.Sprint("request ", i)))
			codes <- resp.StatusCode
		}()
		time.Sleep(50 * time.Millisecond)
	}
	got := map[int]int{}
	for range 3 {
		got[<-codes]++
	}
	if got[200] != 2 || got[503] != 1 {
		t.Fatalf("status counts %v, want two 200 and one 503", got)
	}
}

// TestMetricsNames: vLLM's metric names with the model label.
func TestMetricsNames(t *testing.T) {
	s := startSim(t, nil)
	complete(t, s, "user", "hello")
	complete(t, s, "user", "hello")
	r, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, m := range []string{`vllm:num_requests_running{model_name="sim-llama"} 0`, `vllm:num_requests_waiting{model_name="sim-llama"} 0`,
		`vllm:kv_cache_usage_perc{model_name="sim-llama"}`, `vllm:prefix_cache_queries_total{model_name="sim-llama"}`,
		`vllm:prefix_cache_hits_total{model_name="sim-llama"}`, `vllm:time_to_first_token_seconds_bucket{model_name="sim-llama",le=`,
		`vllm:time_to_first_token_seconds_count{model_name="sim-llama"} 2`} {
		if !strings.Contains(string(b), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// FuzzDecode: any body decodes or is refused with an error; never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, `{"prompt":[1,2,3]}`, `{"prompt":"x","max_tokens":3,"stream":true}`, `[]`, `{`} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	s, err := New(DefaultConfig(), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, isChat bool) {
		r, err := s.decode(body, isChat)
		if err == nil && (len(r.ids) == 0 || r.maxTokens <= 0) {
			t.Fatalf("accepted %q with %d ids, max_tokens %d", body, len(r.ids), r.maxTokens)
		}
	})
}
