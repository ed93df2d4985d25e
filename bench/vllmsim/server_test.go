package vllmsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHTTPTTFT: an idle 4,096-token prompt through HTTP, timed on the
// simulated clock (the TTFT histogram) and by the client (real time ×
// speedup, which adds HTTP and scheduling latency). The bounds are the
// profile's (TestProfileTTFT has them exactly) plus a little for the
// scheduler's wake-up, which the simulated clock counts too.
func TestHTTPTTFT(t *testing.T) {
	t.Parallel()
	const speedup = 2
	for _, tc := range []struct {
		profile           string
		missLo, missHi    time.Duration
		hitHi, clientSlop time.Duration
	}{
		{"a100-13b", 400 * time.Millisecond, 600 * time.Millisecond, 40 * time.Millisecond, 30 * time.Millisecond},
		{"h100-8b", 100 * time.Millisecond, 250 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			t.Parallel()
			s := startSim(t, func(c *Config) { c.Profile, c.Speedup = Profiles[tc.profile], speedup })
			body := `{"model":"m","stream":true,"max_tokens":4,"prompt":"` + text("ttft", 4*4096) + `"}`
			simTTFT := func() time.Duration {
				before := metric(t, s, "vllm:time_to_first_token_seconds_sum")
				st := stream(t, s, "/v1/completions", body)
				if st.status != http.StatusOK || !st.done {
					t.Fatalf("status %d, done %v, err %v", st.status, st.done, st.readErr)
				}
				sim := time.Duration((metric(t, s, "vllm:time_to_first_token_seconds_sum") - before) * float64(time.Second))
				t.Logf("%s: simulated TTFT %v, client TTFT × speedup %v", tc.profile, sim.Round(10*time.Microsecond), (st.ttft * speedup).Round(10*time.Microsecond))
				if st.ttft*speedup < sim {
					t.Errorf("the client saw the first token after %v × %d, before the simulated %v", st.ttft, speedup, sim)
				}
				return sim
			}
			miss := simTTFT()
			if miss < tc.missLo || miss > tc.missHi {
				t.Errorf("miss TTFT %v, want %v to %v", miss, tc.missLo, tc.missHi)
			}
			// A hit skips the prefill: the profile's bound, or, on a
			// machine so loaded that the scheduler's wake-up (which the
			// simulated clock counts) took longer, a third of the miss:
			// still far below a miss, as a broken cache would give.
			if hit := simTTFT(); hit > max(tc.hitHi, miss/3) {
				t.Errorf("hit TTFT %v, want at most %v (miss %v)", hit, max(tc.hitHi, miss/3), miss)
			}
		})
	}
}

// TestCachedTokens: usage.prompt_tokens_details.cached_tokens is exactly
// the leading full blocks a prompt shares with what the engine computed
// before (at most the blocks within its first prompt-1 tokens), for
// identical, extended and branched prompts. Byte-block mode: 4 bytes a
// token, 64 bytes a block.
func TestCachedTokens(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	base := text("base", 1000)     // 250 tokens, 15 full blocks
	ext := base + text("ext", 600) // 400 tokens, 25 full blocks
	branch := base[:700] + text("branch", 300)
	for _, tc := range []struct {
		name           string
		prompt         string
		tokens, cached int
	}{
		{"first", base, 250, 0},
		{"identical", base, 250, 15 * 16},
		{"extended", ext, 400, 15 * 16},          // base's full blocks; block 15 mixes base's tail and new text
		{"extended again", ext, 400, 24 * 16},    // 25 blocks cached, hits within the first 399 tokens
		{"branched", branch, 250, 700 / 64 * 16}, // the blocks before the branch point
	} {
		c := complete(t, s, "/v1/completions", prompt(tc.prompt, 1))
		if c.Usage.PromptTokens != tc.tokens || c.Usage.Details.CachedTokens != tc.cached {
			t.Errorf("%s: prompt_tokens %d, cached_tokens %d; want %d, %d", tc.name, c.Usage.PromptTokens, c.Usage.Details.CachedTokens, tc.tokens, tc.cached)
		}
	}
	// Chat without a tokenizer renders each message's content alone
	// (template none), so a shared system prompt is a shared prefix.
	sys := text("system", 640) // 10 blocks
	chat := func(user string) string {
		return fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, sys, user)
	}
	if c := complete(t, s, "/v1/chat/completions", chat(text("u1", 300))); c.Usage.Details.CachedTokens != 0 {
		t.Errorf("first conversation: %d cached", c.Usage.Details.CachedTokens)
	}
	if c := complete(t, s, "/v1/chat/completions", chat(text("u2", 300))); c.Usage.Details.CachedTokens != 160 || c.Usage.PromptTokens != 235 {
		t.Errorf("second conversation: prompt %d cached %d, want 235 and the system prompt's 160", c.Usage.PromptTokens, c.Usage.Details.CachedTokens)
	}
	if st := s.Stats(); st.PrefixHits != 15*16+15*16+24*16+10*16+10*16 || st.PrefixQueries != 250*3+400*2+235*2 {
		t.Errorf("prefix cache counters: hits %d queries %d", st.PrefixHits, st.PrefixQueries)
	}
}

// TestCachedTokensLlama3: with a real tokenizer and chat template, the
// cached tokens of a conversation sharing a system prompt are exactly the
// leading full blocks of the token ids it shares with the first one.
func TestCachedTokensLlama3(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.Tokenizer = llama3Path })
	sys := strings.Repeat("You answer questions about ships, tides and harbors. ", 20)
	body := func(user string, withModel bool) string {
		b := fmt.Sprintf(`"max_tokens":1,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, sys, user)
		if withModel {
			return `{"model":"m",` + b
		}
		return "{" + b
	}
	ids := func(user string) []int32 {
		code, b := post(t, s, "/tokenize", body(user, false))
		var r struct {
			Tokens []int32 `json:"tokens"`
			Count  int     `json:"count"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &r) != nil || r.Count != len(r.Tokens) {
			t.Fatalf("/tokenize: %d %s", code, b)
		}
		return r.Tokens
	}
	a, b := ids("Where is the harbor?"), ids("When is high tide?")
	shared := 0
	for shared < min(len(a), len(b)) && a[shared] == b[shared] {
		shared++
	}
	complete(t, s, "/v1/chat/completions", body("Where is the harbor?", true))
	c := complete(t, s, "/v1/chat/completions", body("When is high tide?", true))
	if want := shared / 16 * 16; c.Usage.Details.CachedTokens != want || c.Usage.PromptTokens != len(b) {
		t.Fatalf("prompt %d tokens (tokenize: %d), cached %d; want %d (%d ids shared)", c.Usage.PromptTokens, len(b), c.Usage.Details.CachedTokens, want, shared)
	}
	if shared < 200 {
		t.Fatalf("only %d ids shared: the system prompt should be", shared)
	}
}

// TestCachedTokensConversation: a conversation that goes on (extended)
// and one that branches off after the system prompt report as cached
// exactly the leading full blocks of token ids they share with what ran
// before, in byte-block mode and with Llama-3.
func TestCachedTokensConversation(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", llama3Path} {
		t.Run(fmt.Sprintf("tokenizer=%v", tok != ""), func(t *testing.T) {
			t.Parallel()
			s := startSim(t, func(c *Config) { c.Tokenizer = tok })
			body := func(msgs ...string) string {
				var ms []map[string]string
				for i := 0; i+1 < len(msgs); i += 2 {
					ms = append(ms, map[string]string{"role": msgs[i], "content": msgs[i+1]})
				}
				b, err := json.Marshal(map[string]any{"model": "m", "max_tokens": 3, "messages": ms})
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			ids := func(msgs ...string) []int32 {
				code, b := post(t, s, "/tokenize", body(msgs...))
				var r struct{ Tokens []int32 }
				if code != http.StatusOK || json.Unmarshal(b, &r) != nil {
					t.Fatalf("/tokenize: %d %s", code, b)
				}
				return r.Tokens
			}
			// shared: the leading full blocks of b that a holds too,
			// within b's first len(b)-1 tokens (vLLM's hit rule).
			shared := func(a, b []int32) int {
				n := 0
				for n < len(a) && n < len(b) && a[n] == b[n] {
					n++
				}
				return min(n, len(b)-1) / 16 * 16
			}
			sys := "You are a careful harbour pilot. " + strings.Repeat("Report tides, winds and berths precisely. ", 30)
			conv := []string{"system", sys, "user", "When is high tide at Brest tomorrow?"}
			first, firstIDs := complete(t, s, "/v1/chat/completions", body(conv...)), ids(conv...)
			if first.Usage.PromptTokens != len(firstIDs) || first.Usage.Details.CachedTokens != 0 || first.Usage.CompletionTokens != 3 {
				t.Fatalf("first: %+v (prompt %d tokens)", first.Usage, len(firstIDs))
			}
			if got, want := complete(t, s, "/v1/chat/completions", body(conv...)).Usage.Details.CachedTokens, shared(firstIDs, firstIDs); got != want {
				t.Errorf("identical: cached %d, want %d", got, want)
			}
			ext := append(append([]string{}, conv...), "assistant", first.Choices[0].Message.Content, "user", "And at Cherbourg?")
			extIDs := ids(ext...)
			if got, want := complete(t, s, "/v1/chat/completions", body(ext...)).Usage.Details.CachedTokens, shared(firstIDs, extIDs); got != want || want == 0 {
				t.Errorf("extended: cached %d, want %d", got, want)
			}
			branch := []string{"system", sys, "user", "Which berth for a 300 m tanker?"}
			brIDs := ids(branch...)
			want := max(shared(firstIDs, brIDs), shared(extIDs, brIDs))
			if got := complete(t, s, "/v1/chat/completions", body(branch...)).Usage.Details.CachedTokens; got != want || want < 200 {
				t.Errorf("branched: cached %d, want %d of %d (the system prompt's blocks)", got, want, len(brIDs))
			}
		})
	}
}

const llama3Path = "../../tokenpool/testdata/models/llama3/tokenizer.json.gz"

// TestStreamFormat: chat and completions streams in OpenAI's chunk
// shapes, the usage chunk with include_usage, [DONE] last; the streamed
// text equals the non-streamed one for the same prompt and seed.
func TestStreamFormat(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	msgs := `"messages":[{"role":"user","content":"Tell me about the sea."}]`
	st := stream(t, s, "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,`+msgs+`}`)
	if st.status != http.StatusOK || !strings.HasPrefix(st.header.Get("Content-Type"), "text/event-stream") || !st.done || st.readErr != nil {
		t.Fatalf("status %d, content type %q, done %v, err %v", st.status, st.header.Get("Content-Type"), st.done, st.readErr)
	}
	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role    *string `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			Text         *string `json:"text"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	parse := func(events []string) []chunk {
		var out []chunk
		for _, e := range events {
			var c chunk
			if err := json.Unmarshal([]byte(e), &c); err != nil {
				t.Fatalf("event %q: %v", e, err)
			}
			out = append(out, c)
		}
		return out
	}
	cs := parse(st.events)
	if len(cs) != 7 { // role, 5 tokens, usage
		t.Fatalf("%d events, want 7: %q", len(cs), st.events)
	}
	var streamedText string
	for i, c := range cs {
		if c.ID != cs[0].ID || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion.chunk" || c.Model != "m" || c.Created == 0 {
			t.Errorf("event %d head: %+v", i, c)
		}
		switch {
		case i == 0:
			if len(c.Choices) != 1 || c.Choices[0].Delta.Role == nil || *c.Choices[0].Delta.Role != "assistant" || c.Choices[0].FinishReason != nil {
				t.Errorf("first event is not the assistant role: %s", st.events[i])
			}
		case i <= 5:
			ch := c.Choices[0]
			if ch.Delta.Content == nil || *ch.Delta.Content == "" || c.Usage != nil {
				t.Errorf("event %d has no content: %s", i, st.events[i])
			} else {
				streamedText += *ch.Delta.Content
			}
			if last := i == 5; last != (ch.FinishReason != nil && *ch.FinishReason == "length") {
				t.Errorf("event %d finish_reason %v", i, ch.FinishReason)
			}
		default:
			if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 5 || c.Usage.PromptTokens != 6 || c.Usage.TotalTokens != 11 {
				t.Errorf("usage event: %s", st.events[i])
			}
		}
	}
	whole := complete(t, s, "/v1/chat/completions", `{"model":"m","max_tokens":5,`+msgs+`}`)
	if whole.Object != "chat.completion" || whole.Choices[0].Message.Role != "assistant" || whole.Choices[0].Message.Content != streamedText ||
		whole.Choices[0].FinishReason != "length" || whole.Usage.CompletionTokens != 5 || len(strings.Fields(streamedText)) != 5 {
		t.Errorf("non-streamed answer %+v, streamed text %q", whole, streamedText)
	}

	// Completions, without include_usage: text chunks, no usage.
	st = stream(t, s, "/v1/completions", prompt("Once upon a time", 3)[:len(prompt("Once upon a time", 3))-1]+`,"stream":true}`)
	cs = parse(st.events)
	if len(cs) != 3 || !st.done {
		t.Fatalf("completions stream: %d events, done %v: %q", len(cs), st.done, st.events)
	}
	var ctext string
	for i, c := range cs {
		if c.Object != "text_completion" || !strings.HasPrefix(c.ID, "cmpl-") || c.Usage != nil || c.Choices[0].Text == nil {
			t.Errorf("completions event %d: %s", i, st.events[i])
		} else {
			ctext += *c.Choices[0].Text
		}
	}
	if w := complete(t, s, "/v1/completions", prompt("Once upon a time", 3)); w.Choices[0].Text != ctext || w.Object != "text_completion" {
		t.Errorf("completions: streamed %q, whole %q", ctext, w.Choices[0].Text)
	}

	// Another seed, another answer; the same seed, the same one.
	s2 := startSim(t, func(c *Config) { c.Seed = 2 })
	if w := complete(t, s2, "/v1/chat/completions", `{"model":"m","max_tokens":5,`+msgs+`}`); w.Choices[0].Message.Content == streamedText {
		t.Errorf("seed 2 answers like seed 1: %q", streamedText)
	}
	if w := complete(t, s, "/v1/chat/completions", `{"model":"m","max_completion_tokens":5,"max_tokens":9,`+msgs+`}`); w.Choices[0].Message.Content != streamedText {
		t.Errorf("same seed and prompt, another answer: %q vs %q", w.Choices[0].Message.Content, streamedText)
	}
}

// TestTokenize: vLLM's /tokenize, in byte-block mode and with Llama-3.
func TestTokenize(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	l3 := startSim(t, func(c *Config) { c.Tokenizer = llama3Path })
	le := func(s string) int32 { return int32(s[0]) | int32(s[1])<<8 | int32(s[2])<<16 | int32(s[3])<<24 }
	for _, tc := range []struct {
		s      *Sim
		body   string
		tokens []int32
	}{
		{s, `{"model":"m","prompt":"abcdefgh"}`, []int32{le("abcd"), le("efgh")}},
		{s, `{"prompt":"abcdefghi"}`, []int32{le("abcd"), le("efgh"), 'i'}},
		{s, `{"messages":[{"role":"user","content":"abcd"},{"role":"assistant","content":"efgh"}]}`, []int32{le("abcd"), le("efgh")}},
		{s, `{"prompt":[5,6,7]}`, []int32{5, 6, 7}},
		{l3, `{"model":"m","prompt":"Hello world"}`, []int32{128000, 9906, 1917}},
		{l3, `{"prompt":"Hello world","add_special_tokens":false}`, []int32{9906, 1917}},
		{l3, `{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}`, []int32{128000, 128006, 882, 128007, 271, 13347, 128009}},
		{l3, `{"messages":[{"role":"user","content":"Hi"}]}`, []int32{128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271}},
	} {
		code, b := post(t, tc.s, "/tokenize", tc.body)
		var r struct {
			Count       int     `json:"count"`
			MaxModelLen int     `json:"max_model_len"`
			Tokens      []int32 `json:"tokens"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &r) != nil || r.Count != len(tc.tokens) || !slices.Equal(r.Tokens, tc.tokens) || r.MaxModelLen != 16384 {
			t.Errorf("/tokenize %s: %d %s, want tokens %v", tc.body, code, b, tc.tokens)
		}
	}
	// The prompt /tokenize counts is the one a completion is charged for.
	msgs := `"messages":[{"role":"user","content":"How deep is the harbor?"}]`
	_, b := post(t, l3, "/tokenize", `{`+msgs+`}`)
	var r struct{ Count int }
	if err := json.Unmarshal(b, &r); err != nil || r.Count < 10 {
		t.Fatalf("/tokenize: %s", b)
	}
	if c := complete(t, l3, "/v1/chat/completions", `{"model":"m","max_tokens":1,`+msgs+`}`); c.Usage.PromptTokens != r.Count {
		t.Errorf("chat prompt_tokens %d, /tokenize count %d", c.Usage.PromptTokens, r.Count)
	}
	if code, b := post(t, s, "/tokenize", `{"model":"m"}`); code != http.StatusBadRequest || !strings.Contains(string(b), `"param":"prompt"`) {
		t.Errorf("/tokenize without a prompt: %d %s", code, b)
	}
}

// TestErrors: bad input gets OpenAI-style error bodies with the right
// status.
func TestErrors(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.MaxBody = 4 << 10 })
	type apiErr struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		typ, msg           string
	}{
		{"POST", "/v1/chat/completions", `{"model":`, 400, "invalid_request_error", "not valid JSON"},
		{"POST", "/v1/chat/completions", `[]`, 400, "invalid_request_error", "must be a JSON object"},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "invalid_request_error", "messages: empty"},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "invalid_request_error", "max_tokens: want an integer of at least 1"},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, 400, "invalid_request_error", "stream: want true or false"},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}`, 400, "invalid_request_error", "one choice per request"},
		{"POST", "/v1/completions", `{"model":"m","prompt":["a","b"]}`, 400, "invalid_request_error", "one prompt per request"},
		{"POST", "/v1/completions", `{"model":"m","prompt":""}`, 400, "invalid_request_error", "the prompt has no tokens"},
		{"POST", "/v1/completions", `{"model":"m","prompt":[1,-2]}`, 400, "invalid_request_error", "prompt[1]: want an integer token id"},
		{"POST", "/v1/completions", `{"model":"m","prompt":"x","max_tokens":16384}`, 400, "invalid_request_error", "maximum context length is 16384 tokens. However, you requested 16385 tokens (1 in the prompt, 16384 in the completion)"},
		{"POST", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "invalid_request_error", "larger than 4096 bytes"},
		{"GET", "/v1/chat/completions", ``, 405, "invalid_request_error", "use POST"},
		{"POST", "/v1/models", ``, 405, "invalid_request_error", "use GET"},
		{"GET", "/nope", ``, 404, "invalid_request_error", "no such endpoint: /nope"},
		{"POST", "/v1/completions", `{"model":"m","prompt":"x"}`, 400, "invalid_request_error", "X-Sim-Fail: want 503, reset or stall"},
	} {
		req, err := http.NewRequest(tc.method, s.URL()+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.msg == "X-Sim-Fail: want 503, reset or stall" {
			req.Header.Set("X-Sim-Fail", "later")
		}
		resp, err := client().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		var e apiErr
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || err != nil || e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.msg) ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %.60s: status %d (want %d), err %v, body %+v, want message with %q", tc.method, tc.path, tc.body, resp.StatusCode, tc.status, err, e, tc.msg)
		}
	}
}

// TestQueueFull: with one running slot and one waiting place, a third
// request is refused at once with OverloadStatus (429 by default, or
// 503) in vLLM's error JSON, without Retry-After, and counted; the
// running and waiting ones were taken (200, streaming).
func TestQueueFull(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int // OverloadStatus; 0: the default
		code   int
		body   string
	}{
		{0, 429, `{"error":{"message":"waiting requests queue is full","type":"RateLimitError","param":null,"code":429}}`},
		{503, 503, `{"error":{"message":"waiting requests queue is full","type":"ServiceUnavailableError","param":null,"code":503}}`},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			t.Parallel()
			s := startSim(t, func(c *Config) {
				c.MaxNumSeqs, c.MaxWaiting, c.MaxBatchedTokens, c.Speedup = 1, 1, 2048, 10
				if tc.status != 0 {
					c.OverloadStatus = tc.status
				}
			})
			// Two long streams: the first runs, then the second waits
			// (sent once the first is running: both sent at once could
			// both be in the queue before the scheduler takes one), until
			// the test cancels them (their next write fails and the
			// engine drops them).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			heads := make([]int, 2)
			headed := make(chan struct{}, len(heads)) // a head (or an error) came
			for i := range heads {
				wg.Add(1)
				go func() { // test clients
					defer wg.Done()
					body := `{"model":"m","prompt":"` + text(fmt.Sprint(i), 400) + `","max_tokens":10000,"stream":true}`
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/completions", strings.NewReader(body))
					if err != nil {
						panic(err)
					}
					resp, err := client().Do(req)
					if err != nil {
						headed <- struct{}{}
						return // no head: heads[i] stays 0
					}
					heads[i] = resp.StatusCode
					headed <- struct{}{}
					_, _ = io.Copy(io.Discard, resp.Body) // until cancelled
					resp.Body.Close()
				}()
				deadline := time.Now().Add(10 * time.Second)
				for st := s.Stats(); st.Running != 1 || st.Waiting != i; st = s.Stats() {
					if time.Now().After(deadline) {
						t.Fatalf("request %d: running %d, waiting %d, want 1 and %d", i, st.Running, st.Waiting, i)
					}
					time.Sleep(time.Millisecond)
				}
			}
			resp, err := client().Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(prompt("third", 1)))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.code || string(b) != tc.body || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("third request: %d %s (%v), want %d %s", resp.StatusCode, b, err, tc.code, tc.body)
			}
			if ra := resp.Header.Get("Retry-After"); ra != "" {
				t.Errorf("Retry-After %q on the refusal: vLLM sends none", ra)
			}
			if st := s.Stats(); st.Rejected != 1 || metric(t, s, "vllmsim_rejected_total") != 1 {
				t.Errorf("rejected: stats %d", st.Rejected)
			}
			// Both heads came before the refusal's answer (vLLM sends a
			// stream's head at once, waiting or not); wait for the client
			// goroutines to see them before cancelling.
			for range heads {
				select {
				case <-headed:
				case <-time.After(10 * time.Second):
					t.Error("a streamed request's head did not come within 10 s")
				}
			}
			cancel()
			wg.Wait()
			if heads[0] != http.StatusOK || heads[1] != http.StatusOK {
				t.Errorf("running and waiting requests: %v, want 200 heads", heads)
			}
		})
	}
}

// TestPriorityField: vLLM's "priority". Under fcfs a non-zero one gets
// vLLM's 400 (after the model's 404), 0 or none is served; a value that
// is not an integer is a 400 naming the field under either policy; the
// priority policy serves any integer; /tokenize ignores the field.
func TestPriorityField(t *testing.T) {
	t.Parallel()
	fcfs := startSim(t, nil)
	prio := startSim(t, func(c *Config) { c.SchedulingPolicy = PolicyPriority })
	const refused = `{"error":{"message":"Got priority 5 but Priority scheduling is not enabled.","type":"BadRequestError","param":null,"code":400}}`
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1` + extra + `}`
	}
	for _, tc := range []struct {
		s          *Sim
		path, body string
		code       int
		want       string // the exact body; "" for any
		param      string // a 400 of the simulator's own: the field it names
	}{
		{fcfs, "/v1/chat/completions", chat(`,"priority":5`), 400, refused, ""},
		{fcfs, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"priority":5}`, 400, refused, ""},
		{fcfs, "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":1,"priority":5}`, 400, refused, ""},
		{fcfs, "/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"hi"}],"priority":5}`, 404, "", ""},
		{fcfs, "/v1/chat/completions", chat(`,"priority":0`), 200, "", ""},
		{fcfs, "/v1/chat/completions", chat(``), 200, "", ""},
		{fcfs, "/tokenize", `{"model":"m","prompt":"hi","priority":5}`, 200, "", ""},
		{fcfs, "/v1/chat/completions", chat(`,"priority":"5"`), 400, "", "priority"},
		{fcfs, "/v1/chat/completions", chat(`,"priority":1.5`), 400, "", "priority"},
		{prio, "/v1/chat/completions", chat(`,"priority":null`), 400, "", "priority"},
		{prio, "/v1/responses", `{"model":"m","input":"hi","priority":[1]}`, 400, "", "priority"},
		{prio, "/v1/chat/completions", chat(`,"priority":5`), 200, "", ""},
		{prio, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"priority":-3}`, 200, "", ""},
		{prio, "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":1,"priority":7}`, 200, "", ""},
	} {
		code, b := post(t, tc.s, tc.path, tc.body)
		var e struct {
			Error struct{ Param *string } `json:"error"`
		}
		switch {
		case code != tc.code || (tc.want != "" && string(b) != tc.want):
			t.Errorf("%s %s (%s): %d %s, want %d %s", tc.path, tc.body, tc.s.cfg.SchedulingPolicy, code, b, tc.code, tc.want)
		case tc.param != "" && (json.Unmarshal(b, &e) != nil || e.Error.Param == nil || *e.Error.Param != tc.param):
			t.Errorf("%s %s: %s, want the error to name %s", tc.path, tc.body, b, tc.param)
		}
	}
}

// TestQueueingHTTP: six requests at once, two running at most: /metrics
// shows requests waiting, and the last ones' TTFT grows by the time the
// earlier ones take.
func TestQueueingHTTP(t *testing.T) {
	t.Parallel()
	const speedup = 20
	s := startSim(t, func(c *Config) { c.MaxNumSeqs, c.Speedup = 2, speedup })
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		ttfts       []time.Duration
		peakWaiting float64
		peakRunning float64
	)
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { // the test's /metrics poller
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			peakWaiting = max(peakWaiting, metric(t, s, "vllm:num_requests_waiting"))
			peakRunning = max(peakRunning, metric(t, s, "vllm:num_requests_running"))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for i := range 6 {
		wg.Add(1)
		go func() { // test clients
			defer wg.Done()
			st := stream(t, s, "/v1/completions", `{"model":"m","stream":true,"max_tokens":20,"prompt":"`+text(fmt.Sprint("q", i), 4*1024)+`"}`)
			if !st.done {
				t.Errorf("request %d: status %d, err %v", i, st.status, st.readErr)
			}
			mu.Lock()
			ttfts = append(ttfts, st.ttft*speedup)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	<-polled
	slices.Sort(ttfts)
	t.Logf("TTFTs (real × speedup): %v", ttfts)
	if peakWaiting < 1 || peakRunning != 2 {
		t.Errorf("peak num_requests_waiting %v, running %v: want some waiting, 2 running", peakWaiting, peakRunning)
	}
	// The last two start after two rounds of 20 tokens (~28 ms a step at
	// batch 2) and their own prefill.
	if ttfts[5] < ttfts[0]+2*19*28*time.Millisecond {
		t.Errorf("the last TTFT %v is not two rounds after the first %v", ttfts[5], ttfts[0])
	}
}

// TestEvictionHTTP: a 4,096-token cache filled with distinct 1,000-token
// prompts forgets the first; the last stays cached.
func TestEvictionHTTP(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.KVTokens = 4096 })
	prompts := make([]string, 6)
	for i := range prompts {
		prompts[i] = text(fmt.Sprint("evict", i), 4000)
		complete(t, s, "/v1/completions", prompt(prompts[i], 1))
	}
	if c := complete(t, s, "/v1/completions", prompt(prompts[5], 1)); c.Usage.Details.CachedTokens != 62*16 {
		t.Errorf("the last prompt: %d cached, want %d", c.Usage.Details.CachedTokens, 62*16)
	}
	if c := complete(t, s, "/v1/completions", prompt(prompts[0], 1)); c.Usage.Details.CachedTokens != 0 {
		t.Errorf("the first prompt after five others: %d cached, want 0 (evicted)", c.Usage.Details.CachedTokens)
	}
}

// TestMetrics: /metrics has vLLM's names with a model_name label and
// counts what happened.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.Model = "org/Model-7B" })
	body := strings.Replace(prompt(text("m", 400), 3), `"model":"m"`, `"model":"org/Model-7B"`, 1)
	complete(t, s, "/v1/completions", body)
	complete(t, s, "/v1/completions", body)
	// The answer can reach the client before the engine's step that
	// finished it publishes its counts: wait for that step.
	idle := func() bool { st := s.Stats(); return st.Running == 0 && st.KVUsage == 0 }
	for deadline := time.Now().Add(10 * time.Second); !idle() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	for name, want := range map[string]float64{
		"vllm:num_requests_running":              0,
		"vllm:num_requests_waiting":              0,
		"vllm:kv_cache_usage_perc":               0,
		"vllm:prefix_cache_queries_total":        200,
		"vllm:prefix_cache_hits_total":           96, // 6 blocks within 99 tokens
		"vllm:prompt_tokens_total":               200,
		"vllm:generation_tokens_total":           6,
		"vllm:request_success_total":             2,
		"vllm:time_to_first_token_seconds_count": 2,
	} {
		if got := metric(t, s, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	_, b := get(t, s, "/metrics")
	if !strings.Contains(string(b), `vllm:time_to_first_token_seconds_bucket{model_name="org/Model-7B",le="0.04"}`) {
		t.Errorf("no TTFT histogram bucket in:\n%s", b)
	}
}

// TestModelsHealth: GET /v1/models and /health.
func TestModelsHealth(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.Profile = Profiles["h100-8b"] })
	if code, b := get(t, s, "/health"); code != http.StatusOK || len(b) != 0 {
		t.Errorf("/health: %d %q", code, b)
	}
	code, b := get(t, s, "/v1/models")
	var r struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &r) != nil || r.Object != "list" || len(r.Data) != 1 || r.Data[0].ID != "m" || r.Data[0].MaxModelLen != 32768 {
		t.Errorf("/v1/models: %d %s", code, b)
	}
}

// TestFailureInjection: X-Sim-Fail and FailRate.
func TestFailureInjection(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}]}`
	streamBody := `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"x"}]}`
	t.Run("503", func(t *testing.T) {
		t.Parallel()
		s := startSim(t, nil)
		code, b := post(t, s, "/v1/chat/completions", body, "X-Sim-Fail", "503")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(b), `"type":"server_error"`) || s.Stats().Injected != 1 {
			t.Errorf("%d %s, injected %d", code, b, s.Stats().Injected)
		}
	})
	t.Run("reset", func(t *testing.T) {
		t.Parallel()
		s := startSim(t, nil)
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Sim-Fail", "reset")
		if resp, err := client().Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("reset: got an answer, status %d", resp.StatusCode)
		}
		st := stream(t, s, "/v1/chat/completions", streamBody, "X-Sim-Fail", "reset")
		if st.status != http.StatusOK || st.done || st.readErr == nil || len(st.events) < 2 || len(st.events) > 3 {
			t.Errorf("reset stream: status %d, %d events %q, done %v, err %v: want the role and a chunk or two, then a broken connection", st.status, len(st.events), st.events, st.done, st.readErr)
		}
		if s.Stats().Injected != 2 {
			t.Errorf("injected %d, want 2", s.Stats().Injected)
		}
		// The engine is unharmed.
		complete(t, s, "/v1/chat/completions", body)
	})
	t.Run("stall", func(t *testing.T) {
		t.Parallel()
		s := startSim(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Sim-Fail", "stall")
		start := time.Now()
		if resp, err := client().Do(req); err == nil || !errors.Is(err, context.DeadlineExceeded) {
			if err == nil {
				resp.Body.Close()
			}
			t.Fatalf("stall: %v after %v, want the client's deadline", err, time.Since(start))
		}
		// The client left: the stalled connection is let go.
		deadline := time.Now().Add(5 * time.Second)
		for {
			s.mu.Lock()
			n := s.stalling
			s.mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d stalled connections after the client left", n)
			}
			time.Sleep(time.Millisecond)
		}
		// A stalled client still waiting when the engine closes sees its
		// connection close.
		errc := make(chan error, 1)
		go func() { // a test client
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(streamBody))
			req.Header.Set("X-Sim-Fail", "stall")
			resp, err := client().Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("stall answered %d", resp.StatusCode)
			}
			errc <- err
		}()
		for s.Stats().Injected < 2 {
			time.Sleep(time.Millisecond)
		}
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelClose()
		start = time.Now()
		// A Close that waited for the stall would run out of closeCtx's
		// 5 s and return its error: no wall-clock bound needed.
		if err := s.Close(closeCtx); err != nil {
			t.Errorf("Close with a stalled request: %v after %v", err, time.Since(start))
		}
		if err := <-errc; err == nil || strings.Contains(err.Error(), "answered") {
			t.Errorf("stalled client at Close: %v, want a closed connection", err)
		}
	})
	t.Run("fail-rate", func(t *testing.T) {
		t.Parallel()
		s := startSim(t, func(c *Config) { c.FailRate, c.Speedup = 0.25, 1000 })
		failed := 0
		for range 200 {
			code, _ := post(t, s, "/v1/completions", prompt("x", 1))
			switch code {
			case http.StatusServiceUnavailable:
				failed++
			case http.StatusOK:
			default:
				t.Fatalf("status %d", code)
			}
		}
		// Binomial(200, 0.25): mean 50, sd 6.1.
		if failed < 25 || failed > 75 || s.Stats().Injected != uint64(failed) {
			t.Errorf("%d of 200 failed (injected %d), want about 50", failed, s.Stats().Injected)
		}
	})
}

// TestCloseFailsRequests: Close fails a waiting non-streamed request with
// 503 and ends a running stream with an error event and no [DONE], then
// refuses connections.
func TestCloseFailsRequests(t *testing.T) {
	t.Parallel()
	s := startSim(t, func(c *Config) { c.MaxNumSeqs, c.MaxBatchedTokens, c.Speedup = 1, 2048, 1 })
	streamed := make(chan streamed, 1)
	go func() { // a test client
		streamed <- stream(t, s, "/v1/completions", `{"model":"m","stream":true,"max_tokens":1000,"prompt":"long"}`)
	}()
	for s.Stats().Running == 0 {
		time.Sleep(time.Millisecond)
	}
	waiting := make(chan int, 1)
	go func() { // a test client
		code, _ := post(t, s, "/v1/completions", prompt("behind", 1))
		waiting <- code
	}()
	for s.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if code := <-waiting; code != http.StatusServiceUnavailable {
		t.Errorf("waiting request at Close: %d, want 503", code)
	}
	st := <-streamed
	if st.done || len(st.events) == 0 || !strings.Contains(st.events[len(st.events)-1], `"error":{"message":"the engine is shutting down"`) {
		t.Errorf("running stream at Close: done %v, events %q", st.done, st.events)
	}
	if _, err := client().Get(s.URL() + "/health"); err == nil {
		t.Error("the listener is still open after Close")
	}
}

// TestLifecycle: Start and Close misuse, and New's validation.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != "" {
		t.Errorf("Addr before Start: %q", s.Addr())
	}
	if err := s.Start("127.0.0.1:-1"); err == nil {
		t.Error("Start on a bad address succeeded")
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("a second Start succeeded")
	}
	ctx := context.Background()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Close succeeded")
	}
	unstarted, _ := New(cfg, nil)
	if err := unstarted.Close(ctx); err != nil {
		t.Errorf("Close before Start: %v", err)
	}

	cfg.KVTokens, cfg.Speedup, cfg.Model, cfg.BlockSize = 0, 0, `a"b`, 32
	cfg.OverloadStatus, cfg.SchedulingPolicy = 500, "lifo"
	_, err = New(cfg, nil)
	for _, field := range []string{"kv-tokens", "speedup", "model", "block-size: must be 16 without a tokenizer",
		"overload-status: must be 429 or 503, got 500", `scheduling-policy: must be fcfs or priority, got "lifo"`} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("New with bad fields: %v, want it to name %s", err, field)
		}
	}
	cfg = DefaultConfig()
	cfg.Tokenizer = "/nonexistent/tokenizer.json"
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Errorf("New with a missing tokenizer: %v", err)
	}
}

// TestCacheSalt: a salted prompt hits only what the same prompt computed
// under the same salt (vLLM's cache_salt); a bad salt is vLLM's 400.
func TestCacheSalt(t *testing.T) {
	t.Parallel()
	s := startSim(t, nil)
	base := text("salt", 1000) // 250 tokens, 15 full blocks
	salted := func(salt string) string {
		b, err := json.Marshal(map[string]any{"model": "m", "prompt": base, "max_tokens": 1, "cache_salt": salt})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, body string
		cached     int
	}{
		{"unsalted", prompt(base, 1), 0},
		{"salt a, first", salted("a"), 0},
		{"salt b, first", salted("b"), 0},
		{"salt a again", salted("a"), 15 * 16},
		{"unsalted again", prompt(base, 1), 15 * 16},
	} {
		if c := complete(t, s, "/v1/completions", tc.body); c.Usage.Details.CachedTokens != tc.cached {
			t.Errorf("%s: cached_tokens %d, want %d", tc.name, c.Usage.Details.CachedTokens, tc.cached)
		}
	}
	for _, bad := range []string{`""`, `7`} {
		if code, b := post(t, s, "/v1/completions", `{"model":"m","prompt":"hi","cache_salt":`+bad+`}`); code != http.StatusBadRequest {
			t.Errorf("cache_salt %s: %d %s, want 400", bad, code, b)
		}
	}
}
