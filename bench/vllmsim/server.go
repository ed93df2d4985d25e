package vllmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/rules"
)

// Sim is one simulated engine.
type Sim struct {
	cfg    Config
	log    *slog.Logger
	p      *prompter
	eng    *engine
	set    *metrics.Set
	ttft   *metrics.PrometheusHistogram
	failed *metrics.Counter
	full   *metrics.Counter

	srv     *fasthttp.Server
	ln      net.Listener
	group   *rules.Group
	stop    context.CancelFunc
	done    chan struct{} // closed by Close: stalls end
	reqSeq  atomic.Uint64
	parsers fastjson.ParserPool
	rnd     atomic.Uint64 // fail-rate draws
}

// New builds a simulated engine; Start serves it.
func New(cfg Config, logger *slog.Logger) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p, err := newPrompter(cfg)
	if err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, log: logger.With("component", "vllmsim"), p: p, eng: newEngine(cfg), set: metrics.NewSet(), done: make(chan struct{})}
	s.rnd.Store(uint64(cfg.Seed))
	lbl := fmt.Sprintf(`{model_name=%q}`, cfg.Model)
	s.set.NewGauge("vllm:num_requests_running"+lbl, func() float64 { r, _, _, _, _ := s.eng.stats(); return float64(r) })
	s.set.NewGauge("vllm:num_requests_waiting"+lbl, func() float64 { _, w, _, _, _ := s.eng.stats(); return float64(w) })
	s.set.NewGauge("vllm:kv_cache_usage_perc"+lbl, func() float64 { _, _, u, _, _ := s.eng.stats(); return u })
	s.set.NewGauge("vllm:prefix_cache_queries_total"+lbl, func() float64 { _, _, _, q, _ := s.eng.stats(); return float64(q) })
	s.set.NewGauge("vllm:prefix_cache_hits_total"+lbl, func() float64 { _, _, _, _, h := s.eng.stats(); return float64(h) })
	s.ttft = s.set.NewPrometheusHistogramExt("vllm:time_to_first_token_seconds"+lbl,
		[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640})
	s.failed = s.set.NewCounter("vllm_sim:injected_failures_total" + lbl)
	s.full = s.set.NewCounter("vllm_sim:queue_full_total" + lbl)
	return s, nil
}

// Start listens on addr ("127.0.0.1:0" picks a port) and serves.
func (s *Sim) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.ln = ln
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.group = rules.NewGroup(ctx)
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "vllmsim",
		MaxRequestBodySize:    s.cfg.MaxBody,
		MaxIdleWorkerDuration: 100 * time.Millisecond, // Close's goroutines end soon after Shutdown
		CloseOnShutdown:       true,
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if errors.Is(err, fasthttp.ErrBodyTooLarge) {
				apiError(ctx, fasthttp.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", s.cfg.MaxBody))
				return
			}
			apiError(ctx, fasthttp.StatusBadRequest, "malformed HTTP request: "+err.Error())
		},
		Logger: discardLogger{},
	}
	s.group.Go("vllmsim.scheduler", s.eng.run)
	s.group.Go("vllmsim.server", func(context.Context) { _ = s.srv.Serve(ln) })
	s.log.Info("simulated engine listening", "addr", ln.Addr().String(), "profile", s.cfg.Name, "speedup", s.cfg.Speedup)
	return nil
}

// discardLogger drops fasthttp's per-connection error logs (a client
// leaving mid-stream is normal here).
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// Addr is the address listened on.
func (s *Sim) Addr() string { return s.ln.Addr().String() }

// URL is the engine's base URL.
func (s *Sim) URL() string { return "http://" + s.Addr() }

// Close stops the scheduler (requests left end without more tokens),
// the server, and waits for every goroutine, or ctx.
func (s *Sim) Close(ctx context.Context) error {
	close(s.done)
	s.stop()
	err := s.srv.ShutdownWithContext(ctx)
	s.group.Stop()
	return errors.Join(err, s.group.Wait(ctx))
}

// apiError answers an OpenAI-style error.
func apiError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(reactor.ErrorBody(status, "", "", msg, ""))
}

func (s *Sim) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch {
	case path == "/health":
		ctx.SetStatusCode(fasthttp.StatusOK)
	case path == "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4")
		s.set.WritePrometheus(ctx)
	case path == "/v1/models":
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"vllmsim","max_model_len":%d}]}`, s.cfg.Model, s.cfg.KVTokens)
	case path == "/tokenize" && ctx.IsPost():
		s.tokenize(ctx)
	case (path == "/v1/chat/completions" || path == "/v1/completions") && ctx.IsPost():
		s.complete(ctx, path == "/v1/chat/completions")
	case path == "/v1/chat/completions" || path == "/v1/completions" || path == "/tokenize":
		apiError(ctx, fasthttp.StatusMethodNotAllowed, "use POST")
	default:
		apiError(ctx, fasthttp.StatusNotFound, "no such endpoint: "+path)
	}
}

// tokenize answers vLLM's POST /tokenize.
func (s *Sim) tokenize(ctx *fasthttp.RequestCtx) {
	ps := s.parsers.Get()
	defer s.parsers.Put(ps)
	v, err := ps.ParseBytes(ctx.PostBody())
	if err != nil || v.Type() != fastjson.TypeObject {
		apiError(ctx, fasthttp.StatusBadRequest, "body must be a JSON object")
		return
	}
	ids, err := s.p.promptIDs(v, v.Get("messages") != nil)
	if err != nil {
		apiError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	b, _ := json.Marshal(map[string]any{"tokens": ids, "count": len(ids), "max_model_len": s.cfg.KVTokens})
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// request is a decoded completion request.
type request struct {
	chat         bool
	stream       bool
	includeUsage bool
	maxTokens    int
	ids          []int32
}

func (s *Sim) decode(body []byte, isChat bool) (request, error) {
	ps := s.parsers.Get()
	defer s.parsers.Put(ps)
	r := request{chat: isChat, maxTokens: s.cfg.MaxTokens}
	v, err := ps.ParseBytes(body)
	if err != nil {
		return r, fmt.Errorf("body is not valid JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return r, errors.New("body must be a JSON object")
	}
	if sv := v.Get("stream"); sv != nil {
		r.stream = sv.Type() == fastjson.TypeTrue
	}
	if so := v.Get("stream_options"); so != nil {
		r.includeUsage = so.GetBool("include_usage")
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if mv := v.Get(k); mv != nil && mv.Type() != fastjson.TypeNull {
			n, err := mv.Int()
			if err != nil || n <= 0 {
				return r, fmt.Errorf("%s must be a positive integer", k)
			}
			r.maxTokens = n
		}
	}
	if r.ids, err = s.p.promptIDs(v, isChat); err != nil {
		return r, err
	}
	if len(r.ids) == 0 {
		return r, errors.New("the prompt is empty")
	}
	return r, nil
}

// failDraw reports whether this request draws an injected failure.
func (s *Sim) failDraw() bool {
	if s.cfg.FailRate <= 0 {
		return false
	}
	x := s.rnd.Add(0x9e3779b97f4a7c15)
	return rand.New(rand.NewPCG(x, x>>7)).Float64() < s.cfg.FailRate
}

func (s *Sim) complete(ctx *fasthttp.RequestCtx, isChat bool) {
	fail := string(ctx.Request.Header.Peek("X-Sim-Fail"))
	if fail == "503" || s.failDraw() {
		s.failed.Inc()
		apiError(ctx, fasthttp.StatusServiceUnavailable, "injected failure")
		return
	}
	if fail == "stall" {
		s.failed.Inc()
		select { // no client-gone signal in fasthttp before the answer: until Close, or a minute
		case <-s.done:
		case <-time.After(time.Minute):
		}
		ctx.SetConnectionClose()
		return
	}
	req, err := s.decode(ctx.PostBody(), isChat)
	if err != nil {
		apiError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if fail == "reset" && !req.stream {
		s.failed.Inc()
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) { _ = c.Close() })
		return
	}
	bs := s.cfg.BlockSize
	if need := (len(req.ids) + req.maxTokens + bs - 1) / bs; need > s.cfg.KVTokens/bs {
		apiError(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("prompt (%d tokens) plus max_tokens (%d) exceed the KV cache (%d tokens)",
			len(req.ids), req.maxTokens, s.cfg.KVTokens))
		return
	}
	keys := s.p.keys(req.ids)
	sq := &seq{keys: keys, prompt: len(req.ids), maxTokens: req.maxTokens,
		tokens: make(chan int, req.maxTokens), gone: make(chan struct{})}
	start := time.Now()
	if err := s.eng.submit(sq); err != nil {
		s.full.Inc()
		apiError(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	id := strconv.FormatUint(s.reqSeq.Add(1), 10)
	out := newOutput(s.cfg.Seed, promptHash(req.ids))
	created := time.Now().Unix()
	if !req.stream {
		var text []byte
		n := 0
		for i := range sq.tokens {
			if i == 0 {
				s.observeTTFT(start, sq.first)
			}
			text = append(text, out.next(i)...)
			n++
		}
		if n == 0 {
			apiError(ctx, fasthttp.StatusServiceUnavailable, "the engine is shutting down")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(s.whole(req, id, created, string(text), n, sq.cached))
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			select {
			case <-sq.gone:
			default:
				close(sq.gone) // the scheduler drops it if it still runs
			}
		}()
		n := 0
		if isChat {
			s.writeChunk(w, req, id, created, `{"role":"assistant","content":""}`, "", nil)
			if w.Flush() != nil {
				return
			}
		}
		for i := range sq.tokens {
			if i == 0 {
				s.observeTTFT(start, sq.first)
			}
			n++
			finish := ""
			if n == req.maxTokens {
				finish = "length"
			}
			piece, _ := json.Marshal(out.next(i))
			s.writeChunk(w, req, id, created, string(piece), finish, nil)
			if w.Flush() != nil {
				return // the client left: the deferred close tells the scheduler
			}
			if fail == "reset" && n == 2 {
				s.failed.Inc()
				_ = ctx.Conn().Close()
				return
			}
		}
		if n < req.maxTokens {
			return // cut by Close: no [DONE], the stream just ends
		}
		if req.includeUsage {
			u := usage(len(req.ids), n, sq.cached)
			s.writeChunk(w, req, id, created, "", "", u)
		}
		_, _ = w.WriteString("data: [DONE]\n\n")
		_ = w.Flush()
	})
}

func (s *Sim) observeTTFT(start, first time.Time) {
	if !first.IsZero() {
		s.ttft.Update(first.Sub(start).Seconds() * s.cfg.Speedup) // simulated seconds
	}
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	Details          struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usage(prompt, completion, cached int) *usageJSON {
	u := &usageJSON{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.Details.CachedTokens = cached
	return u
}

// writeChunk writes one SSE event: a delta (chat: the delta object's JSON;
// completions: the text's JSON string), or, with u, the usage chunk.
func (s *Sim) writeChunk(w *bufio.Writer, req request, id string, created int64, piece, finish string, u *usageJSON) {
	obj, choice := "text_completion", ""
	if req.chat {
		obj = "chat.completion.chunk"
	}
	fin := "null"
	if finish != "" {
		fin = strconv.Quote(finish)
	}
	switch {
	case u != nil:
		choice = ""
	case req.chat && piece != "" && piece[0] == '{':
		choice = `{"index":0,"delta":` + piece + `,"finish_reason":` + fin + `}`
	case req.chat:
		choice = `{"index":0,"delta":{"content":` + piece + `},"finish_reason":` + fin + `}`
	default:
		choice = `{"index":0,"text":` + piece + `,"finish_reason":` + fin + `}`
	}
	fmt.Fprintf(w, `data: {"id":"cmpl-%s","object":%q,"created":%d,"model":%q,"choices":[%s]`, id, obj, created, s.cfg.Model, choice)
	if u != nil {
		b, _ := json.Marshal(u)
		fmt.Fprintf(w, `,"usage":%s`, b)
	}
	_, _ = w.WriteString("}\n\n")
}

// whole is a non-streamed answer.
func (s *Sim) whole(req request, id string, created int64, text string, n, cached int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type choice struct {
		Index        int    `json:"index"`
		Message      *msg   `json:"message,omitempty"`
		Text         string `json:"text,omitempty"`
		FinishReason string `json:"finish_reason"`
	}
	c := choice{FinishReason: "length"}
	obj := "text_completion"
	if req.chat {
		obj, c.Message = "chat.completion", &msg{"assistant", text}
	} else {
		c.Text = text
	}
	b, _ := json.Marshal(map[string]any{"id": "cmpl-" + id, "object": obj, "created": created, "model": s.cfg.Model,
		"choices": []choice{c}, "usage": usage(len(req.ids), n, cached)})
	return b
}

// promptHash seeds a request's output from its prompt.
func promptHash(ids []int32) uint64 {
	h := uint64(14695981039346656037)
	for _, id := range ids {
		h ^= uint64(uint32(id))
		h *= 1099511628211
	}
	return h
}
