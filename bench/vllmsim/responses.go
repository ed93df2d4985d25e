package vllmsim

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// The Responses API (POST /v1/responses, GET /v1/responses/{id}, POST
// /v1/responses/{id}/cancel), as vLLM's serving_responses serves it for a
// model without a reasoning or tool parser: the input rendered into chat
// messages (construct_input_messages), one output message of
// output_text, usage with input_tokens_details.cached_tokens, events
// streamed as `event: <type>` + `data: {…,"sequence_number":n}`. Rare
// next to chat completions in the benchmark: encoding/json is fine here.

// respObject is vLLM's ResponsesResponse (OpenAI's Response object).
type respObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *json.RawMessage   `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	MaxToolCalls       *int               `json:"max_tool_calls"`
	Metadata           json.RawMessage    `json:"metadata"`
	Model              string             `json:"model"`
	Output             []outputMessage    `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          *json.RawMessage   `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               json.RawMessage    `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopLogprobs        int                `json:"top_logprobs"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *respUsage         `json:"usage"`
	User               *string            `json:"user"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type outputMessage struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"` // message
	Role    string       `json:"role"` // assistant
	Status  string       `json:"status"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string            `json:"type"` // output_text
	Text        string            `json:"text"`
	Annotations []json.RawMessage `json:"annotations"`
	Logprobs    []json.RawMessage `json:"logprobs,omitempty"`
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// respEvent is one streamed event; the fields an event type lacks are
// left out.
type respEvent struct {
	Type           string         `json:"type"`
	SequenceNumber int            `json:"sequence_number"`
	Response       *respObject    `json:"response,omitempty"`
	OutputIndex    *int           `json:"output_index,omitempty"`
	ItemID         string         `json:"item_id,omitempty"`
	ContentIndex   *int           `json:"content_index,omitempty"`
	Item           *outputMessage `json:"item,omitempty"`
	Part           *outputText    `json:"part,omitempty"`
	Delta          *string        `json:"delta,omitempty"`
	Text           *string        `json:"text,omitempty"`
	Logprobs       *[]struct{}    `json:"logprobs,omitempty"`
	// An error event's.
	Code    string  `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}

// newID is prefix + 32 hex digits, random as vLLM's random_uuid: ids of
// several engines never collide, so a router may key a response by id.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(b[:])
}

// notFound is vLLM's _make_not_found_error.
func notFound(id string) *apiError {
	return &apiError{status: fasthttp.StatusNotFound, msg: fmt.Sprintf("Response with id '%.200s' not found.", id), param: "response_id"}
}

// responseByID serves GET /v1/responses/{id} and POST
// /v1/responses/{id}/cancel; path is what follows /v1/responses/.
func (s *Sim) responseByID(ctx *fasthttp.RequestCtx, path string) {
	if id, ok := strings.CutSuffix(path, "/cancel"); ok {
		if !s.method(ctx, fasthttp.MethodPost) {
			return
		}
		if s.store.get(id) == nil {
			s.answerError(ctx, notFound(id))
			return
		}
		// Every stored response has finished: the simulator runs no
		// background responses.
		s.answerError(ctx, badRequest("response_id", "Cannot cancel a synchronous response."))
		return
	}
	if !s.method(ctx, fasthttp.MethodGet) {
		return
	}
	st := s.store.get(path)
	if st == nil {
		s.answerError(ctx, notFound(path))
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(st.body)
}

// respAnswer is one response in the making.
type respAnswer struct {
	obj    respObject
	msgs   []chat.Message // the prompt's messages, to store
	itemID string
	text   []byte // the whole output
	ends   []int  // ends[i]: end of token i's text in text
	prompt int    // prompt tokens
	store  bool
}

// responses serves POST /v1/responses.
func (s *Sim) responses(ctx *fasthttp.RequestCtx) {
	reset, done := s.inject(ctx)
	if done {
		return
	}
	req, e := decodeResponsesRequest(ctx.PostBody())
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	m, e := s.served.resolve(req.model)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	if req.background {
		s.answerError(ctx, badRequest("background", "background: the simulator answers every response in the foreground"))
		return
	}
	// construct_input_messages: the instructions, the previous
	// conversation without its system messages (instructions do not
	// carry over), the previous output, the new input.
	var msgs []chat.Message
	if req.instructions != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: req.instructions})
	}
	if req.prevID != "" {
		prev := s.store.get(req.prevID)
		if prev == nil {
			s.answerError(ctx, notFound(req.prevID))
			return
		}
		for _, m := range prev.msgs {
			if m.Role != "system" {
				msgs = append(msgs, m)
			}
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: prev.output})
	}
	msgs = append(msgs, req.input...)
	t, e := s.p.encode(&request{kind: kindChat, msgs: msgs, opt: chat.Options{AddGenerationPrompt: true}}, m, s.cfg.KVEvents.Enable)
	if e != nil {
		e.param = "input"
		s.answerError(ctx, e)
		return
	}
	maxLen := s.cfg.maxModelLen()
	if t.n == 0 {
		s.answerError(ctx, badRequest("input", "input: the prompt has no tokens"))
		return
	}
	if t.n >= maxLen { // vLLM's _validate_generator_input
		s.answerError(ctx, badRequest("input", "The engine prompt length %d exceeds the max_model_len %d. Please reduce prompt.", t.n, maxLen))
		return
	}
	// get_max_tokens: what is asked for (or the default), within the
	// context left.
	maxTokens := s.cfg.MaxTokens
	if req.maxOutput > 0 {
		maxTokens = req.maxOutput
	}
	maxTokens = min(maxTokens, maxLen-t.n)
	sq := s.start(ctx, reset && !req.stream, m, t, maxTokens, req.priority)
	if sq == nil {
		return
	}
	a := s.newRespAnswer(&req, m.name, msgs, maxTokens, t.hash)
	a.prompt = t.n
	if !req.stream {
		if !s.awaitDone(ctx, sq) {
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(s.finishResp(a, sq.cached))
		return
	}
	var rc net.Conn
	if reset {
		s.injected.Inc()
		rc = ctx.Conn()
	}
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.ImmediateHeaderFlush = true
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) { s.streamResp(w, a, sq, rc) })
}

// inject applies X-Sim-Fail and FailRate (doc.go, Failure injection) to
// a completion request: done says it was answered; reset asks for a
// reset once the request is taken.
func (s *Sim) inject(ctx *fasthttp.RequestCtx) (reset, done bool) {
	switch v := ctx.Request.Header.Peek(failHeader); string(v) {
	case "":
	case "503":
		s.injected.Inc()
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: "injected failure (" + failHeader + ": 503)", code: "injected_failure"})
		return false, true
	case "reset":
		reset = true
	case "stall":
		s.stall(ctx)
		return false, true
	default:
		s.answerError(ctx, badRequest("", "%s: want 503, reset or stall, got %.40q", failHeader, v))
		return false, true
	}
	if s.failDraw() {
		s.injected.Inc()
		s.answerError(ctx, &apiError{status: fasthttp.StatusServiceUnavailable, msg: "injected failure (fail-rate)", code: "injected_failure"})
		return false, true
	}
	return reset, false
}

func (s *Sim) newRespAnswer(req *respRequest, model string, msgs []chat.Message, maxTokens int, hash uint64) *respAnswer {
	a := &respAnswer{msgs: msgs, itemID: newID("msg_"), store: req.store, ends: make([]int, maxTokens)}
	out := newOutput(s.cfg.Seed, hash)
	for i := range maxTokens {
		a.text = out.appendNext(a.text, i == 0)
		a.ends[i] = len(a.text)
	}
	o := &a.obj
	*o = respObject{
		ID: newID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Metadata: req.metadata, Model: model, Output: []outputMessage{}, ParallelToolCalls: true,
		ServiceTier: "auto", Store: req.store, Temperature: req.temperature, TopP: req.topP,
		Text: json.RawMessage(`{"format":{"type":"text"}}`), ToolChoice: req.toolChoice, Tools: req.tools,
		Truncation: "disabled",
	}
	if req.instructions != "" {
		o.Instructions = &req.instructions
	}
	if req.maxOutput > 0 {
		o.MaxOutputTokens = &req.maxOutput
	}
	if req.prevID != "" {
		o.PreviousResponseID = &req.prevID
	}
	return a
}

// finishResp completes a's response object (output, status, usage),
// stores it if asked and returns its JSON.
func (s *Sim) finishResp(a *respAnswer, cached int) []byte {
	o := &a.obj
	o.Output = []outputMessage{a.message(string(a.text), "completed")}
	// Every answer runs to max_tokens (doc.go, Limits): vLLM reports a
	// "length" finish as incomplete.
	o.Status = "incomplete"
	o.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	u := &respUsage{InputTokens: a.prompt, OutputTokens: len(a.ends)}
	u.InputTokensDetails.CachedTokens = cached
	u.TotalTokens = u.InputTokens + u.OutputTokens
	o.Usage = u
	b, err := json.Marshal(o)
	if err != nil {
		panic("BUG: cannot encode a response: " + err.Error())
	}
	if a.store {
		s.store.put(o.ID, &stored{msgs: a.msgs, output: string(a.text), body: b})
	}
	return b
}

func (a *respAnswer) message(text, status string) outputMessage {
	m := outputMessage{ID: a.itemID, Type: "message", Role: "assistant", Status: status, Content: []outputText{}}
	if text != "" || status == "completed" {
		m.Content = append(m.Content, outputText{Type: "output_text", Text: text, Annotations: []json.RawMessage{}})
	}
	return m
}

// respWriter writes SSE events with their sequence numbers.
type respWriter struct {
	buf []byte
	seq int
}

func (w *respWriter) add(ev *respEvent) {
	ev.SequenceNumber = w.seq
	w.seq++
	b, err := json.Marshal(ev)
	if err != nil {
		panic("BUG: cannot encode an event: " + err.Error())
	}
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, ev.Type...)
	w.buf = append(w.buf, "\ndata: "...)
	w.buf = append(w.buf, b...)
	w.buf = append(w.buf, "\n\n"...)
}

// streamResp writes a streamed response as the scheduler produces it,
// in vLLM's order: response.created, response.in_progress, then with
// the first token response.output_item.added and
// response.content_part.added, one response.output_text.delta per token,
// and at the end response.output_text.done, response.content_part.done,
// response.output_item.done, response.completed. It runs on fasthttp's
// stream-writer goroutine; it must not touch the RequestCtx.
func (s *Sim) streamResp(w *bufio.Writer, a *respAnswer, sq *seq, reset net.Conn) {
	finished := false
	defer func() {
		if !finished {
			sq.cancelled.Store(true)
		}
	}()
	zero := 0
	var ew respWriter
	initial := a.obj // in_progress, no output, no usage
	ew.add(&respEvent{Type: "response.created", Response: &initial})
	ew.add(&respEvent{Type: "response.in_progress", Response: &initial})
	flush := func() bool {
		_, err := w.Write(ew.buf)
		ew.buf = ew.buf[:0]
		return err == nil && w.Flush() == nil
	}
	if !flush() {
		return
	}
	noLogprobs := &[]struct{}{}
	sent := 0
	for {
		state := sq.state.Load()
		if p := int(sq.produced.Load()); p > sent {
			for ; sent < p; sent++ {
				if sent == 0 {
					item := a.message("", "in_progress")
					ew.add(&respEvent{Type: "response.output_item.added", OutputIndex: &zero, Item: &item})
					ew.add(&respEvent{Type: "response.content_part.added", OutputIndex: &zero, ItemID: a.itemID, ContentIndex: &zero,
						Part: &outputText{Type: "output_text", Text: "", Annotations: []json.RawMessage{}, Logprobs: []json.RawMessage{}}})
				}
				start := 0
				if sent > 0 {
					start = a.ends[sent-1]
				}
				d := string(a.text[start:a.ends[sent]])
				ew.add(&respEvent{Type: "response.output_text.delta", OutputIndex: &zero, ItemID: a.itemID, ContentIndex: &zero, Delta: &d, Logprobs: noLogprobs})
				if reset != nil && sent+1 == min(resetAfter, len(a.ends)) {
					s.resetStream(w, reset, ew.buf)
					return
				}
			}
			if !flush() {
				return // the client left: the deferred cancel tells the scheduler
			}
		}
		if state != seqActive {
			break
		}
		<-sq.notify
	}
	if sq.state.Load() != seqDone {
		// The engine closed: an error event, no response.completed.
		ew.add(&respEvent{Type: "error", Code: "shutting_down", Message: errClosed.Error()})
		_ = flush() // the stream ends either way
		return
	}
	finished = true
	text := string(a.text)
	ew.add(&respEvent{Type: "response.output_text.done", OutputIndex: &zero, ItemID: a.itemID, ContentIndex: &zero, Text: &text, Logprobs: noLogprobs})
	ew.add(&respEvent{Type: "response.content_part.done", OutputIndex: &zero, ItemID: a.itemID, ContentIndex: &zero,
		Part: &outputText{Type: "output_text", Text: text, Annotations: []json.RawMessage{}}})
	item := a.message(text, "completed")
	ew.add(&respEvent{Type: "response.output_item.done", OutputIndex: &zero, Item: &item})
	s.finishResp(a, sq.cached) // sets a.obj
	final := a.obj
	ew.add(&respEvent{Type: "response.completed", Response: &final})
	_ = flush() // a client gone now has its whole answer but the end
}
