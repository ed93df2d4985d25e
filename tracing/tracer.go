package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	// v1.40.0: the last semconv package of the otel module (v1.47.0)
	// that holds the gen_ai attributes; later ones dropped them.
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/rules"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_tracing_spans_dropped_total":  "Sampled request spans dropped before export because the queue from the event loops to the tracing goroutine was full (--otel-endpoint; a slow or unreachable collector fills it).",
		"saltus_tracing_spans_exported_total": "Request spans the OpenTelemetry collector accepted (OTLP/HTTP).",
		"saltus_tracing_spans_failed_total":   "Request spans lost in exports that failed (collector unreachable, refusing or too slow); logged at most every 10s.",
		"saltus_tracing_queue_depth":          "Sampled request spans waiting for the tracing goroutine to build them (at most 2048; over it they are dropped and counted in saltus_tracing_spans_dropped_total).",
	})
}

// span is what Log keeps of one finished, sampled request: its trace
// context and what its span says, all copies (Log's Record is reused,
// its strings may view a loop's buffers).
type span struct {
	ctx                   Context
	method, path          string
	model                 string // "" unknown
	status                int
	own, clientGone       bool
	backend, backendURL   string // "" none tried
	policy, routeReason   string // "" not routed
	predicted, cached     int64  // -1 unknown
	prompt, completion    int64  // -1 unknown
	retries, requeues     int
	queueWait             time.Duration
	start, firstByte, end time.Time // firstByte zero: none
}

// maxAttr bounds each string a span keeps (a path or a model is the
// client's), so the queue's memory is bounded too: about 2 KiB a span.
const maxAttr = 256

// clip is a copy of s, at most maxAttr bytes of it.
func clip(s string) string {
	if len(s) > maxAttr {
		s = s[:maxAttr]
	}
	return strings.Clone(s)
}

// Tracer exports request spans: it is a reqlog.Sink whose Log takes the
// sampled requests' records on the loops, and one goroutine builds and
// ends their spans into the SDK's batch processor. Safe for concurrent
// use.
type Tracer struct {
	sampler Sampler
	queue   chan *span // bounded (Config.QueueSize); overflow dropped, counted
	tp      *sdktrace.TracerProvider
	tr      trace.Tracer
	group   *rules.Group
	logger  *slog.Logger

	closed                    atomic.Bool
	dropped, exported, failed *metrics.Counter
	throttle                  throttle // the failed exports' log
}

// New starts the Tracer cfg and the environment ask for, or returns nil
// (tracing off) when neither names a collector or OTEL_SDK_DISABLED is
// true or OTEL_TRACES_EXPORTER none. The exporter (OTLP/HTTP, protobuf)
// reads the other OTEL_EXPORTER_OTLP_* variables itself: headers,
// timeout, compression, TLS; the resource OTEL_SERVICE_NAME (default
// saltus) and OTEL_RESOURCE_ATTRIBUTES; the batch processor OTEL_BSP_*.
// set receives its metrics. Any goroutine.
func New(cfg Config, logger *slog.Logger, set *metrics.Set) (*Tracer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "tracing")
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	switch {
	case cfg.Endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(endpointURL(cfg.Endpoint)))
	case os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "":
		return nil, nil
	}
	sampler := RatioSampler(cfg.SampleRatio)
	if cfg.SampleRatio < 0 {
		var err error
		if sampler, err = SamplerFromEnv(os.Getenv); err != nil {
			logger.Warn("tracing: bad sampler in the environment", "err", err)
		}
	}
	// The SDK hands its errors (an export's, a bad OTEL_* value's) to
	// the global handler, which otherwise prints each to stderr.
	t := &Tracer{sampler: sampler, logger: logger, queue: make(chan *span, cfg.QueueSize)}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(t.sdkError))
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, opts...) // dials nothing until the first export
	if err != nil {
		return nil, fmt.Errorf("tracing: cannot make the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("saltus")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv()) // last: OTEL_SERVICE_NAME wins
	if err != nil {
		logger.Warn("tracing: resource attributes", "err", err) // usable all the same: what could be read
	}
	if set == nil {
		set = metrics.NewSet()
	}
	t.dropped = set.GetOrCreateCounter("saltus_tracing_spans_dropped_total")
	t.exported = set.GetOrCreateCounter("saltus_tracing_spans_exported_total")
	t.failed = set.GetOrCreateCounter("saltus_tracing_spans_failed_total")
	set.GetOrCreateGauge("saltus_tracing_queue_depth", func() float64 { return float64(len(t.queue)) })
	t.tp = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		// Every span that reaches the SDK was sampled on its loop (Log
		// keeps only those); its tracestate is its parent's.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(idGenerator{}),
		// Blocking: the tracing goroutine waits for room, so spans are
		// dropped (and counted) only at Log's queue.
		sdktrace.WithBatcher(countingExporter{SpanExporter: exp, t: t}, sdktrace.WithBlocking()))
	t.tr = t.tp.Tracer("github.com/saltus-lb/saltus", trace.WithSchemaURL(semconv.SchemaURL))
	t.group = rules.NewGroup(ctx)
	t.group.Go("tracing.spans", t.run)
	endpoint := cfg.Endpoint
	if endpoint == "" { // the exporter's order: the traces' own first
		if endpoint = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); endpoint == "" {
			endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
	}
	logger.Info("tracing on", "endpoint", endpoint, "sampler", sampler.String())
	return t, nil
}

// Loop returns a loop's part of tracing: its own random source (seeded
// here, from the global one) and the sampler. Any goroutine; the Loop is
// then its loop's.
func (t *Tracer) Loop() Loop {
	if t == nil {
		return Loop{}
	}
	return Loop{rng: newPCG(), sampler: t.sampler}
}

// Log keeps a sampled request's span for export, without waiting: when
// the queue is full it is dropped and counted. A record whose trace
// context no loop chose (saltus's answers off the loops: /v1/models,
// refusals of off-loop decodes) gets one here, from the global random
// source (lock-free), and without the client's tracestate; the
// reactor's own answers (no request parsed) get no span. Any goroutine
// (a loop).
func (t *Tracer) Log(r *reqlog.Record) {
	if r.Path == "" {
		return
	}
	c := Context{TraceID: r.Trace.ID, SpanID: r.Span, Parent: r.Trace.Parent, Sampled: r.SpanSampled, State: r.TraceState, began: true}
	if r.Span == [8]byte{} {
		c = Context{}
		begin(&c, r.Trace, "", t.sampler, globalRand{})
	}
	if !c.Sampled {
		return
	}
	s := &span{ctx: c, method: clip(r.Method), path: clip(r.Path), model: clip(r.Model),
		status: r.Status, own: r.Own, clientGone: r.ClientGone,
		backend: clip(r.Backend), backendURL: clip(r.BackendURL),
		policy: clip(r.Policy), routeReason: clip(r.RouteReason),
		predicted: -1, cached: -1, prompt: -1, completion: -1,
		retries: r.Retries, requeues: r.Requeues, queueWait: r.QueueWait,
		start: r.Start, firstByte: r.FirstByte, end: r.End}
	s.ctx.State = strings.Clone(LimitState(s.ctx.State))
	if r.FirstData.After(r.Start) {
		s.firstByte = r.FirstData // a stream's first token
	}
	if r.HasPrediction {
		s.predicted = int64(r.CachedPredicted)
	}
	if r.HasCached {
		s.cached = int64(r.Cached)
	}
	if r.HasUsage {
		s.prompt, s.completion = int64(r.PromptTokens), int64(r.CompletionTokens)
	}
	select {
	case t.queue <- s:
	default:
		t.dropped.Inc()
	}
}

// run builds the spans handed to the Tracer until the group stops, then
// those still queued.
func (t *Tracer) run(ctx context.Context) {
	for {
		select {
		case s := <-t.queue:
			t.export(s)
		case <-ctx.Done():
			for {
				select {
				case s := <-t.queue:
					t.export(s)
				default:
					return
				}
			}
		}
	}
}

// Close stops the tracing goroutine once it has built the spans queued,
// and flushes the batch processor (a dead collector: until ctx ends or
// its export timeout). Again, it does nothing. Any goroutine but a
// loop.
func (t *Tracer) Close(ctx context.Context) error {
	if t == nil || t.closed.Swap(true) {
		return nil
	}
	t.group.Stop()
	gerr := t.group.Wait(ctx)
	if gerr != nil {
		gerr = fmt.Errorf("tracing: goroutines still running (%v): %w", t.group.Running(), gerr)
	}
	return errors.Join(gerr, t.tp.Shutdown(ctx))
}

// ctxKey is the context key of a span's Context, for idGenerator.
type ctxKey struct{}

// idGenerator gives the SDK the IDs the loop chose (the context's
// Context), so the exported span is the one the forwarded traceparent
// names.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	c, _ := ctx.Value(ctxKey{}).(*Context)
	if c == nil {
		panic("BUG: tracing: a span started without its Context")
	}
	return c.TraceID, c.SpanID
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	c, _ := ctx.Value(ctxKey{}).(*Context)
	if c == nil {
		panic("BUG: tracing: a span started without its Context")
	}
	return c.SpanID
}

// export builds s's span and ends it into the batch processor. On the
// tracing goroutine.
func (t *Tracer) export(s *span) {
	ctx := context.WithValue(context.Background(), ctxKey{}, &s.ctx)
	if s.ctx.HasParent() {
		ts, err := trace.ParseTraceState(s.ctx.State)
		if err != nil {
			ts = trace.TraceState{} // W3C: an invalid tracestate is dropped, the trace kept
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: s.ctx.TraceID, SpanID: s.ctx.Parent, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true}))
	}
	op := Operation(s.path)
	name := s.method + " " + s.path
	if op != "" {
		name = op
		if s.model != "" {
			name += " " + s.model
		}
	}
	attrs := make([]attribute.KeyValue, 0, 24)
	attrs = append(attrs,
		semconv.HTTPRequestMethodKey.String(s.method),
		semconv.URLPath(s.path),
		semconv.GenAIProviderNameKey.String("vllm"))
	if op != "" {
		attrs = append(attrs, semconv.GenAIOperationNameKey.String(op))
	}
	if s.model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(s.model))
	}
	if s.status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(s.status))
	}
	if host, port := hostPort(s.backendURL); host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
	}
	for _, n := range [...]struct {
		k attribute.Key
		v int64
	}{
		{semconv.GenAIUsageInputTokensKey, s.prompt},
		{semconv.GenAIUsageOutputTokensKey, s.completion},
		{semconv.GenAIUsageCacheReadInputTokensKey, s.cached},
		{"saltus.predicted_cached_tokens", s.predicted},
	} {
		if n.v >= 0 {
			attrs = append(attrs, n.k.Int64(n.v))
		}
	}
	for _, a := range [...]struct{ k, v string }{
		{"saltus.policy", s.policy}, {"saltus.backend", s.backend}, {"saltus.route_reason", s.routeReason},
	} {
		if a.v != "" {
			attrs = append(attrs, attribute.String(a.k, a.v))
		}
	}
	attrs = append(attrs,
		attribute.Float64("saltus.queue_wait_ms", float64(s.queueWait.Microseconds())/1000),
		attribute.Int("saltus.retries", s.retries))
	if s.requeues > 0 {
		attrs = append(attrs, attribute.Int("saltus.requeues", s.requeues))
	}
	if s.clientGone {
		attrs = append(attrs, attribute.Bool("saltus.client_gone", true))
	}
	// Error: a 5xx, or any error answer saltus gave itself (its
	// refusals: no backend, queue full, a key's limit, a bad body);
	// a 4xx the engine answered is the client's, as HTTP server spans
	// have it.
	failed := s.status >= 500 || (s.own && s.status >= 400)
	if failed {
		attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(s.status)))
	}
	_, sp := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(s.start), trace.WithAttributes(attrs...))
	if !s.firstByte.IsZero() {
		sp.AddEvent("first_byte", trace.WithTimestamp(s.firstByte),
			trace.WithAttributes(attribute.Float64("saltus.ttft_ms", float64(s.firstByte.Sub(s.start).Microseconds())/1000)))
	}
	sp.AddEvent("end", trace.WithTimestamp(s.end))
	switch {
	case s.own && failed:
		sp.SetStatus(codes.Error, "refused by saltus: HTTP "+strconv.Itoa(s.status))
	case failed:
		sp.SetStatus(codes.Error, "HTTP "+strconv.Itoa(s.status))
	}
	sp.End(trace.WithTimestamp(s.end))
}

// endpointURL is Config.Endpoint with /v1/traces when it has no path:
// WithEndpointURL (v1.47.0) posts to a path-less URL's root.
func endpointURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint // Validate parsed it; a path is used as is
	}
	u.Path = "/v1/traces"
	return u.String()
}

// Operation is a path's gen_ai.operation.name; "" for a path that is no
// GenAI operation.
func Operation(path string) string {
	switch path {
	case "/v1/chat/completions", "/v1/responses":
		return "chat"
	case "/v1/completions":
		return "text_completion"
	case "/v1/embeddings":
		return "embeddings"
	}
	return ""
}

// hostPort is rawURL's host and port (0 when absent).
func hostPort(rawURL string) (string, int) {
	if rawURL == "" {
		return "", 0
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", 0
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return u.Host, 0
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return host, 0 // a bad port: none
	}
	return host, p
}

// countingExporter counts what the collector accepted and what failed;
// a failure is logged here (throttled), not handed back to the batch
// processor, which would only pass it to otel.Handle.
type countingExporter struct {
	sdktrace.SpanExporter
	t *Tracer
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.t.failed.Add(len(spans))
		if n, ok := e.t.throttle.allow(); ok {
			e.t.logger.Warn("tracing: export failed; spans lost", "spans", len(spans), "suppressed", n, "err", err)
		}
		return nil
	}
	e.t.exported.Add(len(spans))
	return nil
}

// sdkError logs an error the SDK reports (a bad OTEL_* value, an export
// the processor could not run), throttled.
func (t *Tracer) sdkError(err error) {
	if n, ok := t.throttle.allow(); ok {
		t.logger.Warn("tracing: OpenTelemetry SDK error", "suppressed", n, "err", err)
	}
}

// throttle lets one event through per 10 s and counts the others.
type throttle struct {
	last       atomic.Int64 // unix nanoseconds of the last event let through
	suppressed atomic.Int64
}

func (t *throttle) allow() (int64, bool) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if last != 0 && now-last < int64(10*time.Second) || !t.last.CompareAndSwap(last, now) {
		t.suppressed.Add(1)
		return 0, false
	}
	return t.suppressed.Swap(0), true
}
