package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// The official OpenAI Go SDK against `saltus serve` in front of simulated
// vLLM engines (in-process, the llama3 tokenizer on both sides): what a
// client written for OpenAI or vLLM sees through saltus.

// sdkFleet is saltus in front of n simulated engines, and an SDK client
// for it.
type sdkFleet struct {
	s      *served
	sims   []*vllmsim.Sim
	client openai.Client
}

// startSim starts a simulated llama3 engine (8 tokens an answer) whose
// config mod changes (nil: none), closed at the end of the test.
func startSim(t *testing.T, mod func(*vllmsim.Config)) *vllmsim.Sim {
	t.Helper()
	cfg := vllmsim.DefaultConfig()
	cfg.Model = "llama3"
	cfg.Tokenizer, cfg.ChatTemplate = llama3, "llama3"
	cfg.MaxTokens = 8
	if mod != nil {
		mod(&cfg)
	}
	sim, err := vllmsim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sim.Close(ctx); err != nil {
			t.Errorf("sim close: %v", err)
		}
	})
	return sim
}

// startSims starts n simulated engines (startSim) at speedup and returns
// them and their URLs.
func startSims(t *testing.T, n int, speedup float64) ([]*vllmsim.Sim, []string) {
	t.Helper()
	var (
		sims []*vllmsim.Sim
		urls []string
	)
	for range n {
		sim := startSim(t, func(c *vllmsim.Config) { c.Speedup = speedup })
		sims = append(sims, sim)
		urls = append(urls, sim.URL())
	}
	return sims, urls
}

func startSDKFleet(t *testing.T, n int, speedup float64) *sdkFleet {
	t.Helper()
	return startSDKFleetWith(t, n, speedup, nil)
}

// startSDKFleetWith is startSDKFleet with serve's test config changed by
// mod (nil: none).
func startSDKFleetWith(t *testing.T, n int, speedup float64, mod func(*serveConfig)) *sdkFleet {
	t.Helper()
	f := &sdkFleet{}
	var urls []string
	f.sims, urls = startSims(t, n, speedup)
	// Registered after the sims' cleanups, so it runs before them: saltus
	// drains before its engines go. Every SDK test runs with the access
	// log on (issue 35): before saltus stops, every answer it counted has
	// its line, none dropped.
	f.s = startServeWith(t, nil, func(c *serveConfig) {
		c.AccessLog.Path = filepath.Join(t.TempDir(), "access.log")
		if mod != nil {
			mod(c)
		}
	}, urls...)
	t.Cleanup(func() { checkAccessLogged(t, f.s) })
	f.client = openai.NewClient(
		option.WithBaseURL("http://"+f.s.addr+"/v1/"),
		option.WithAPIKey("test"),
		option.WithMaxRetries(0), // a failure must show, not be retried away
		// No keep-alive: no transport goroutine outlives a test (leakcheck).
		option.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}),
	)
	return f
}

// checkAccessLogged waits until the access log has written a line for
// every answer s counted (saltus_requests_total: both count at an
// answer's end), and fails if a line was dropped or the counts part.
func checkAccessLogged(t *testing.T, s *served) {
	t.Helper()
	if s.cfg.AccessLog.Path == "" || s.cfg.AccessLog.Sample < 1 {
		return
	}
	var answers, lines, dropped float64
	waitLong(t, "a line for every answer", func() bool {
		m := s.setMetrics(t) // from the process: a test may have stopped saltus already
		answers, lines = metricSum(m, "saltus_requests_total"), metricSum(m, "saltus_access_log_lines_total")
		dropped = metricSum(m, "saltus_access_log_dropped_total")
		return lines+dropped >= answers
	})
	if dropped > 0 || lines != answers {
		t.Errorf("access log: %v lines and %v dropped for %v answers", lines, dropped, answers)
	}
}

// simOf is the engine behind a response's X-Saltus-Backend.
func (f *sdkFleet) simOf(t *testing.T, resp *http.Response) int {
	t.Helper()
	if resp == nil {
		t.Fatal("no HTTP response captured")
	}
	b := resp.Header.Get("X-Saltus-Backend")
	for i, s := range f.sims {
		if s.URL() == b {
			return i
		}
	}
	t.Fatalf("X-Saltus-Backend %q names no engine", b)
	return -1
}

func chatParams(user string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "llama3",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(sysA), openai.UserMessage(user)},
		MaxTokens: openai.Int(maxTokens),
	}
}

func TestSDKChatCompletions(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 100)
	ctx := t.Context()

	var r1, r2 *http.Response
	p := chatParams("Which berth is free at dawn?", 6)
	c1, err := f.client.Chat.Completions.New(ctx, p, option.WithResponseInto(&r1))
	if err != nil {
		t.Fatal(err)
	}
	if len(c1.Choices) != 1 || c1.Choices[0].Message.Role != "assistant" || len(strings.Fields(c1.Choices[0].Message.Content)) != 6 ||
		c1.Choices[0].FinishReason != "length" || c1.Object != "chat.completion" || c1.Model != "llama3" {
		t.Fatalf("answer: %+v", c1)
	}
	if c1.Usage.PromptTokens < 100 || c1.Usage.CompletionTokens != 6 || c1.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("first usage: %+v", c1.Usage)
	}
	// The same request again: routed to the engine that holds its prefix,
	// which reports it cached.
	c2, err := f.client.Chat.Completions.New(ctx, p, option.WithResponseInto(&r2))
	if err != nil {
		t.Fatal(err)
	}
	if f.simOf(t, r1) != f.simOf(t, r2) {
		t.Errorf("identical requests on engines %d and %d", f.simOf(t, r1), f.simOf(t, r2))
	}
	if c := c2.Usage.PromptTokensDetails.CachedTokens; c < c1.Usage.PromptTokens-16 || c%16 != 0 {
		t.Errorf("second usage: cached %d of %d prompt tokens, want all but the last block", c, c2.Usage.PromptTokens)
	}
	if c2.Choices[0].Message.Content != c1.Choices[0].Message.Content {
		t.Errorf("equal prompts, different answers: %q vs %q", c1.Choices[0].Message.Content, c2.Choices[0].Message.Content)
	}

	// Streamed, with usage (the role, 6 tokens, the usage): the accumulator
	// rebuilds the same answer.
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := f.client.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for st.Next() {
		acc.AddChunk(st.Current())
		chunks++
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Error(err)
	}
	if chunks != 1+6+1 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != c1.Choices[0].Message.Content {
		t.Errorf("stream: %d chunks, %+v", chunks, acc.Choices)
	}
	if acc.Usage.CompletionTokens != 6 || acc.Usage.PromptTokens != c1.Usage.PromptTokens || acc.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("stream usage: %+v", acc.Usage)
	}
}

func TestSDKCompletions(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 100)
	ctx := t.Context()
	p := openai.CompletionNewParams{
		Model:     "llama3",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(sysB + " The first haiku:")},
		MaxTokens: openai.Int(5),
	}
	c, err := f.client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || len(strings.Fields(c.Choices[0].Text)) != 5 || c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 5 || c.Usage.PromptTokens < 50 {
		t.Fatalf("completion: %+v", c)
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := f.client.Completions.NewStreaming(ctx, p)
	var text strings.Builder
	var cached int64 = -1
	for st.Next() {
		ch := st.Current()
		for _, choice := range ch.Choices {
			text.WriteString(choice.Text)
		}
		if ch.Usage.PromptTokens > 0 {
			cached = ch.Usage.PromptTokensDetails.CachedTokens
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	_ = st.Close() // read to its end: nothing left to fail
	if text.String() != c.Choices[0].Text || cached <= 0 {
		t.Errorf("stream: %q (whole: %q), cached %d", text.String(), c.Choices[0].Text, cached)
	}
}

// TestSDKTools: tools reach the engine unchanged. The simulator ignores
// them when answering chat completions (its Limits) and echoes them in a
// Responses answer, which shows what it got.
func TestSDKTools(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 100)
	ctx := t.Context()
	params := map[string]any{"type": "object", "properties": map[string]any{"pier": map[string]any{"type": "string", "description": "north or south"}}, "required": []any{"pier"}}
	p := chatParams("What is the tide at the north pier?", 4)
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "tide", Description: openai.String("the tide at a pier"), Parameters: params,
	})}
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	c, err := f.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Content == "" {
		t.Fatalf("answer with tools: %+v", c)
	}
	r, err := f.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "llama3",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the tide at the north pier?")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
			Name: "tide", Description: openai.String("the tide at a pier"), Parameters: params, Strict: openai.Bool(true),
		}}},
		MaxOutputTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tools) != 1 {
		t.Fatalf("tools echoed: %+v", r.Tools)
	}
	ft := r.Tools[0].AsFunction()
	if ft.Name != "tide" || ft.Description != "the tide at a pier" || !ft.Strict || ft.Parameters["required"] == nil {
		t.Errorf("tool echoed: %+v", ft)
	}
}

// TestSDKErrors: errors saltus or the engine answer surface as the
// SDK's *openai.Error with their status and param.
func TestSDKErrors(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 100)
	ctx := t.Context()
	check := func(err error, status int, param string) {
		t.Helper()
		var e *openai.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T %v, want *openai.Error", err, err)
		}
		if e.StatusCode != status || e.Param != param || e.Type != "invalid_request_error" || e.Message == "" {
			t.Errorf("error: status %d param %q type %q message %q, want %d and %q", e.StatusCode, e.Param, e.Type, e.Message, status, param)
		}
	}
	// saltus refuses it.
	_, err := f.client.Chat.Completions.New(ctx, chatParams("hi", 2), option.WithJSONSet("stream_options", 5))
	check(err, 400, "stream_options")
	// The engine refuses it (vLLM's context-length error), through saltus.
	_, err = f.client.Chat.Completions.New(ctx, chatParams("hi", 1<<20))
	check(err, 400, "messages")
	// An unknown previous response: vLLM's 404.
	_, err = f.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "llama3", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		PreviousResponseID: openai.String("resp_00000000000000000000000000000000"),
	})
	check(err, 404, "response_id")
}

// TestSDKModels: the model list, and one model by id (GET
// /v1/models/{id}: routed by saltus since branch responses).
func TestSDKModels(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 100)
	ctx := t.Context()
	page, err := f.client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) == 0 || page.Data[0].ID != "llama3" || page.Data[0].Object != "model" {
		t.Errorf("models: %+v", page.Data)
	}
	m, err := f.client.Models.Get(ctx, "llama3")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "llama3" || m.Object != "model" || m.OwnedBy != "vllm" {
		t.Errorf("model: %+v", m)
	}
}

// TestSDKResponsesConversation: three turns chained by
// previous_response_id stay on the engine that stored the first, which
// finds each earlier turn's prompt cached; the other engine sees none of
// it.
func TestSDKResponsesConversation(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 100)
	ctx := t.Context()
	instr := sysA
	var prev string
	var prevInput int64
	home := -1
	for turn, q := range []string{"Which berth is free at dawn?", "And at dusk?", "Thanks, and tomorrow?"} {
		p := responses.ResponseNewParams{
			Model:           "llama3",
			Instructions:    openai.String(instr),
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(q)},
			MaxOutputTokens: openai.Int(6),
		}
		if prev != "" {
			p.PreviousResponseID = openai.String(prev)
		}
		var hr *http.Response
		var r *responses.Response
		if turn < 2 {
			var err error
			if r, err = f.client.Responses.New(ctx, p, option.WithResponseInto(&hr)); err != nil {
				t.Fatalf("turn %d: %v", turn+1, err)
			}
		} else { // the last turn streamed
			st := f.client.Responses.NewStreaming(ctx, p, option.WithResponseInto(&hr))
			var deltas strings.Builder
			for st.Next() {
				switch ev := st.Current(); ev.Type {
				case "response.output_text.delta":
					deltas.WriteString(ev.Delta)
				case "response.completed":
					done := ev.AsResponseCompleted().Response
					r = &done
				}
			}
			if err := st.Err(); err != nil {
				t.Fatalf("turn 3 stream: %v", err)
			}
			_ = st.Close() // read to its end: nothing left to fail
			if r == nil || deltas.String() != r.OutputText() {
				t.Fatalf("turn 3 stream: deltas %q, completed %+v", deltas.String(), r)
			}
		}
		on := f.simOf(t, hr)
		if home < 0 {
			home = on
		} else if on != home {
			t.Fatalf("turn %d on engine %d, the conversation is on %d", turn+1, on, home)
		}
		if len(strings.Fields(r.OutputText())) != 6 || r.Usage.OutputTokens != 6 || r.Model != "llama3" {
			t.Errorf("turn %d: %q, %+v", turn+1, r.OutputText(), r.Usage)
		}
		cached := r.Usage.InputTokensDetails.CachedTokens
		switch {
		case turn == 0 && cached != 0:
			t.Errorf("turn 1: %d tokens cached", cached)
		case turn > 0 && (r.Usage.InputTokens <= prevInput || cached < prevInput-16):
			t.Errorf("turn %d: %d input, %d cached, want the previous turn's %d input cached", turn+1, r.Usage.InputTokens, cached, prevInput)
		}
		prev, prevInput = r.ID, r.Usage.InputTokens
	}
	// GET by id, from the engine that stored it.
	got, err := f.client.Responses.Get(ctx, prev, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != prev || got.Usage.InputTokens != prevInput {
		t.Errorf("GET: %+v", got)
	}
	if other := f.sims[1-home].Stats(); other.PrefixQueries != 0 {
		t.Errorf("the other engine computed %d prompt tokens of the conversation", other.PrefixQueries)
	}
}

// TestSDKCancelStream: a client that cancels its context mid-stream
// ends the request everywhere: saltus's in-flight gauges and the
// engine's running count return to 0.
func TestSDKCancelStream(t *testing.T) {
	t.Parallel()
	f := startSDKFleet(t, 2, 10) // 2.5 ms a token: 8,000 tokens outlast the test
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var hr *http.Response
	st := f.client.Chat.Completions.NewStreaming(ctx, chatParams("Write a very long saga.", 8000), option.WithResponseInto(&hr))
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	sim := f.sims[f.simOf(t, hr)]
	gauges := func() []float64 {
		m := f.s.metrics(t)
		return []float64{m["saltus_proxy_in_flight"], m[`saltus_backend_in_flight{backend="`+sim.URL()+`"}`], float64(sim.Stats().Running)}
	}
	if g := gauges(); g[0] != 1 || g[1] != 1 || g[2] != 1 {
		t.Errorf("during the stream: %v (proxy, backend, engine running), want 1 each", g)
	}
	cancel()
	for st.Next() { // the SDK stops at the cancel
	}
	if err := st.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("stream error %v, want context.Canceled", err)
	}
	_ = st.Close() // cancelled already
	var g []float64
	waitUntil(t, 10*time.Second, "in-flight counts back to 0", func() bool {
		g = gauges()
		return g[0] == 0 && g[1] == 0 && g[2] == 0
	})
	if g[0] != 0 || g[1] != 0 || g[2] != 0 {
		t.Errorf("after the cancel: %v", g)
	}
}
