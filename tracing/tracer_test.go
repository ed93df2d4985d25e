package tracing

import (
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/tracing/tracingtest"
)

// Not parallel: the SDK reads the environment (t.Setenv).

func newTracer(t *testing.T, cfg Config) (*Tracer, *metrics.Set) {
	t.Helper()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: the test waits for the export, not 5 s
	set := metrics.NewSet()
	tr, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), set)
	if err != nil || tr == nil {
		t.Fatalf("New: %v, %v", tr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr, set
}

func TestTracerExports(t *testing.T) {
	col := tracingtest.New(t)
	cfg := DefaultConfig()
	cfg.Endpoint = col.URL // no path: /v1/traces
	cfg.SampleRatio = 1
	t.Setenv("OTEL_SERVICE_NAME", "lb-under-test")
	tr, set := newTracer(t, cfg)
	l := tr.Loop()

	start := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	var c Context
	l.Begin(&c, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x")
	rec := &reqlog.Record{Method: "POST", Path: "/v1/chat/completions", Model: "m1", Status: 200,
		Trace: reqlog.Trace{ID: c.TraceID, Parent: c.Parent, Flags: 1}, Span: c.SpanID, SpanSampled: c.Sampled, TraceState: c.State,
		Backend: "b0", BackendURL: "http://10.1.2.3:8000", Policy: "prefix", RouteReason: "tree",
		CachedPredicted: 32, HasPrediction: true, PromptTokens: 100, CompletionTokens: 7, HasUsage: true, Cached: 48, HasCached: true,
		Retries: 1, QueueWait: 1500 * time.Microsecond,
		Start: start, FirstByte: start.Add(100 * time.Millisecond), FirstData: start.Add(200 * time.Millisecond), End: start.Add(time.Second)}
	tr.Log(rec)
	rec.Reset() // Log kept copies
	// saltus's refusal, off the loops: Log chooses its context.
	tr.Log(&reqlog.Record{Method: "POST", Path: "/v1/completions", Model: "m2", Status: 503, Own: true,
		Start: start, End: start.Add(time.Millisecond)})
	tr.Log(&reqlog.Record{Status: 400, Own: true, Start: start, End: start}) // the reactor's own: no span

	spans := col.Wait(t, 2, 30*time.Second)
	chat := tracingtest.ByName(spans, "chat m1")
	if len(chat) != 1 {
		t.Fatalf("spans %+v, want one chat m1", spans)
	}
	s := chat[0]
	if s.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || s.ParentSpanID != "00f067aa0ba902b7" ||
		s.SpanID != hex.EncodeToString(c.SpanID[:]) || s.TraceState != "vendor=x" || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("chat span's IDs %+v, context %+v", s, c)
	}
	if !s.Start.Equal(start) || !s.End.Equal(start.Add(time.Second)) {
		t.Fatalf("chat span %v to %v, want %v and 1s", s.Start, s.End, start)
	}
	want := map[string]any{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1",
		"gen_ai.provider.name": "vllm", "gen_ai.usage.input_tokens": int64(100), "gen_ai.usage.output_tokens": int64(7),
		"gen_ai.usage.cache_read.input_tokens": int64(48), "http.request.method": "POST", "url.path": "/v1/chat/completions",
		"http.response.status_code": int64(200), "server.address": "10.1.2.3", "server.port": int64(8000),
		"saltus.policy": "prefix", "saltus.backend": "b0", "saltus.route_reason": "tree",
		"saltus.predicted_cached_tokens": int64(32), "saltus.queue_wait_ms": 1.5, "saltus.retries": int64(1),
	}
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("chat span %s = %#v, want %#v", k, s.Attrs[k], v)
		}
	}
	if len(s.Events) != 2 || s.Events[0].Name != "first_byte" || !s.Events[0].Time.Equal(start.Add(200*time.Millisecond)) ||
		s.Events[0].Attrs["saltus.ttft_ms"] != 200.0 || s.Events[1].Name != "end" {
		t.Errorf("chat span's events %+v", s.Events)
	}
	if s.StatusCode != tracepb.Status_STATUS_CODE_UNSET || s.Resource["service.name"] != "lb-under-test" {
		t.Errorf("chat span's status %v, resource %v", s.StatusCode, s.Resource)
	}

	r := tracingtest.ByName(spans, "text_completion m2")
	if len(r) != 1 || r[0].ParentSpanID != "" || len(r[0].TraceID) != 32 || r[0].TraceID == s.TraceID ||
		r[0].StatusCode != tracepb.Status_STATUS_CODE_ERROR || r[0].Attrs["error.type"] != "503" ||
		r[0].Attrs["gen_ai.usage.input_tokens"] != nil {
		t.Fatalf("the refused request's span %+v", r)
	}
	if err := tr.Close(context.Background()); err != nil { // the exporter has returned
		t.Fatal(err)
	}
	if got := set.GetOrCreateCounter("saltus_tracing_spans_exported_total").Get(); got != 2 || len(col.Spans()) != 2 {
		t.Errorf("exported %d (%d came), want 2", got, len(col.Spans()))
	}
}

// record is a finished request whose context l chose for a client's
// traceparent tp.
func record(l *Loop, tp string) *reqlog.Record {
	var c Context
	l.Begin(&c, tp, "")
	now := time.Now()
	return &reqlog.Record{Method: "POST", Path: "/v1/completions", Status: 200, Start: now, End: now,
		Trace: reqlog.Trace{ID: c.TraceID, Parent: c.Parent}, Span: c.SpanID, SpanSampled: c.Sampled}
}

// TestTracerNotSampled: a span whose client's parent was not sampled,
// or that the ratio left out, is never exported.
func TestTracerNotSampled(t *testing.T) {
	col := tracingtest.New(t)
	cfg := DefaultConfig()
	cfg.Endpoint = col.URL + "/v1/traces"
	cfg.SampleRatio = 0
	tr, _ := newTracer(t, cfg)
	l := tr.Loop()
	for i := range 100 {
		tp := ""
		if i%2 == 0 {
			tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
		}
		r := record(&l, tp)
		if r.SpanSampled {
			t.Fatalf("sampled at ratio 0: %+v", r)
		}
		tr.Log(r)
	}
	// parent-based: the client's sampled parent wins over ratio 0
	tr.Log(record(&l, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	if spans := col.Wait(t, 1, 30*time.Second); len(spans) != 1 || spans[0].ParentSpanID != "00f067aa0ba902b7" {
		t.Fatalf("spans %+v, want the sampled client's only", spans)
	}
}

// TestTracerDeadCollector: a collector that never answers costs Log
// nothing: the spans past the queues are dropped and counted.
func TestTracerDeadCollector(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
	// Longer than the test: no export ends before release.
	t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "600000")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")
	url, release := tracingtest.Blackhole(t)
	cfg := DefaultConfig()
	cfg.Endpoint = url
	cfg.SampleRatio = 1
	cfg.QueueSize = 16
	tr, set := newTracer(t, cfg)
	defer release() // before Close (Cleanup): the held export fails
	l := tr.Loop()
	const n = 5000
	recs := make([]*reqlog.Record, n)
	for i := range recs {
		recs[i] = record(&l, "")
	}
	start := time.Now()
	for _, r := range recs {
		tr.Log(r)
	}
	took := time.Since(start)
	// 16 queued, one on the tracing goroutine (waiting for the
	// processor), 8 in the processor's queue, a batch of 4 being
	// exported: the rest were dropped.
	if d := set.GetOrCreateCounter("saltus_tracing_spans_dropped_total").Get(); d < n-29 {
		t.Fatalf("dropped %d of %d", d, n)
	}
	t.Logf("%d spans logged in %v (%v each) to a dead collector", n, took, took/n)
	if strings.Contains(metricsText(set), "saltus_tracing_spans_exported_total 1") {
		t.Fatal("a dead collector accepted spans")
	}
}

func metricsText(set *metrics.Set) string {
	var b strings.Builder
	set.WritePrometheus(&b)
	return b.String()
}

// TestTracerFromEnv: the environment alone turns tracing on, as the
// SDK reads it; without it, or with the SDK disabled, New returns nil.
func TestTracerFromEnv(t *testing.T) {
	col := tracingtest.New(t)
	cfg := DefaultConfig()
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	if tr, err := New(cfg, nil, nil); tr != nil || err != nil {
		t.Fatalf("no endpoint: %v, %v", tr, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL) // a base URL: /v1/traces appended
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tr, err := New(cfg, nil, nil); tr != nil || err != nil {
		t.Fatalf("OTEL_SDK_DISABLED: %v, %v", tr, err)
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	tr, _ := newTracer(t, cfg)
	l := tr.Loop()
	tr.Log(record(&l, ""))                                                        // always_off: not sampled
	tr.Log(record(&l, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")) // always_off is not parent-based either
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(col.Spans()); n != 0 {
		t.Fatalf("always_off exported %d spans", n)
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
	tr, _ = newTracer(t, cfg)
	l = tr.Loop()
	tr.Log(record(&l, ""))
	tr.Log(record(&l, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")) // the sampled parent decides
	if spans := col.Wait(t, 1, 30*time.Second); len(spans) != 1 || spans[0].ParentSpanID != "00f067aa0ba902b7" {
		t.Fatalf("parentbased_always_off exported %+v", spans)
	}
}
