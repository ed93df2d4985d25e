package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/saltus-lb/saltus/tracing/tracingtest"
)

// OpenTelemetry tracing end to end (issue 35): a client span made with
// the SDK, its traceparent on a request to `saltus serve`, the engine (a
// simulated vLLM, which echoes the trace context it got) behind it, and
// one connected trace at a test collector. Not parallel: the SDK reads
// the environment (t.Setenv).

// clientTracer is the test client's SDK tracer, exporting each span to
// col as it ends.
func clientTracer(t *testing.T, col *tracingtest.Collector) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(col.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // spans already exported: nothing to report
	return tp
}

// tracedPost posts body with h's headers (a trace context among them)
// and returns the answer.
func tracedPost(t *testing.T, addr, body string, h http.Header) answer {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b), resp.Header.Get("X-Saltus-Backend"), resp.Header.Get("X-Saltus-Route")}
}

// splitTP splits a traceparent into trace id, parent id and flags.
func splitTP(t *testing.T, tp string) (string, string, string) {
	t.Helper()
	p := strings.Split(tp, "-")
	if len(p) != 4 || p[0] != "00" || len(p[1]) != 32 || len(p[2]) != 16 {
		t.Fatalf("the engine got traceparent %q", tp)
	}
	return p[1], p[2], p[3]
}

func TestTracingE2E(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10") // ms: the test waits for the export, not 5 s
	col := tracingtest.New(t)
	_, urls := startSims(t, 2, 100)
	logPath := filepath.Join(t.TempDir(), "access.log")
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tracing.Endpoint = col.URL // no path: /v1/traces
		c.Tracing.SampleRatio = 0.5  // a sampled client parent is sampled whatever the ratio
		c.AccessLog.Path = logPath   // the other sink, beside the tracer
	}, urls...)
	tp := clientTracer(t, col)
	tr := tp.Tracer("test-client")

	type sent struct {
		a      answer
		client string // the client span's id
		trace  string
	}
	var got []sent
	for _, stream := range []bool{false, true} {
		ctx, sp := tr.Start(context.Background(), "client-call")
		h := http.Header{}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
		h.Set("Tracestate", "vendor=abc,other=1")
		h.Set("Content-Type", "application/json")
		a := tracedPost(t, s.addr, chatJSON(stream, "system", sysA, "user", "Which port has the deepest berth?"), h)
		sp.End()
		if a.status != 200 {
			t.Fatalf("stream %v: status %d: %s", stream, a.status, a.body)
		}
		sc := sp.SpanContext()
		got = append(got, sent{a, sc.SpanID().String(), sc.TraceID().String()})
	}
	spans := col.Wait(t, 4, 30*time.Second) // two client spans, two of saltus's
	for i, g := range got {
		traceID, parent, flags := splitTP(t, g.a.header.Get("X-Sim-Traceparent"))
		if traceID != g.trace || flags != "01" || parent == g.client {
			t.Fatalf("request %d: the engine got traceparent %q; client trace %s span %s", i, g.a.header.Get("X-Sim-Traceparent"), g.trace, g.client)
		}
		if ts := g.a.header.Get("X-Sim-Tracestate"); ts != "vendor=abc,other=1" {
			t.Errorf("request %d: the engine got tracestate %q", i, ts)
		}
		var ours *tracingtest.Span
		for k := range spans {
			if spans[k].SpanID == parent {
				ours = &spans[k]
			}
		}
		if ours == nil {
			t.Fatalf("request %d: no exported span is the engine's parent %s: %+v", i, parent, spans)
		}
		if ours.TraceID != g.trace || ours.ParentSpanID != g.client || ours.Name != "chat llama3" ||
			ours.Kind != tracepb.Span_SPAN_KIND_SERVER || ours.TraceState != "vendor=abc,other=1" {
			t.Errorf("request %d: saltus's span %+v, want a child of %s in %s", i, ours, g.client, g.trace)
		}
		a := ours.Attrs
		for k, v := range map[string]any{
			"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama3", "gen_ai.provider.name": "vllm",
			"gen_ai.usage.output_tokens": int64(8), "http.request.method": "POST", "url.path": "/v1/chat/completions",
			"http.response.status_code": int64(200), "server.address": "127.0.0.1", "saltus.policy": "prefix",
			"saltus.backend": g.a.backend, "saltus.retries": int64(0),
		} {
			if a[k] != v {
				t.Errorf("request %d: %s = %#v, want %#v", i, k, a[k], v)
			}
		}
		if n, _ := a["gen_ai.usage.input_tokens"].(int64); n < 100 {
			t.Errorf("request %d: input tokens %v", i, a["gen_ai.usage.input_tokens"])
		}
		for _, k := range []string{"server.port", "saltus.route_reason", "saltus.predicted_cached_tokens", "saltus.queue_wait_ms", "gen_ai.usage.cache_read.input_tokens"} {
			if _, ok := a[k]; !ok {
				t.Errorf("request %d: no %s in %v", i, k, a)
			}
		}
		if !strings.Contains(g.a.route, a["saltus.route_reason"].(string)) {
			t.Errorf("request %d: route reason %v, X-Saltus-Route %q", i, a["saltus.route_reason"], g.a.route)
		}
		names := []string{}
		for _, e := range ours.Events {
			names = append(names, e.Name)
		}
		if strings.Join(names, ",") != "first_byte,end" || ours.StatusCode != tracepb.Status_STATUS_CODE_UNSET {
			t.Errorf("request %d: events %v, status %v", i, names, ours.StatusCode)
		}
	}
	if g := got[1]; g.a.header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Errorf("the second request was not streamed: %v", g.a.header)
	}
	// The access log names the same traces.
	var lines []string
	waitFor(t, func() bool {
		b, err := os.ReadFile(logPath)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return err == nil && len(lines) == len(got)
	})
	for i, g := range got {
		if !strings.Contains(lines[i], `"trace_id":"`+g.trace+`"`) {
			t.Errorf("access log line %d %s, want trace %s", i, lines[i], g.trace)
		}
	}
}

// TestTracingNotSampled: at ratio 0 the engine gets a traceparent whose
// sampled flag is off (a new trace, or the client's with saltus's span as
// the parent) and nothing is exported, but for a sampled client's
// request (parent-based).
func TestTracingNotSampled(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	col := tracingtest.New(t)
	_, urls := startSims(t, 1, 100)
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tracing.Endpoint = col.URL
		c.Tracing.SampleRatio = 0
	}, urls...)
	body := chatJSON(false, "system", sysB, "user", "A haiku about tides.")
	json := http.Header{"Content-Type": {"application/json"}}

	a := tracedPost(t, s.addr, body, json)
	traceID, _, flags := splitTP(t, a.header.Get("X-Sim-Traceparent"))
	if flags != "00" || a.header.Get("X-Sim-Tracestate") != "" {
		t.Fatalf("no client trace: the engine got %q", a.header.Get("X-Sim-Traceparent"))
	}
	const client = "4bf92f3577b34da6a3ce929d0e0e4736"
	h := http.Header{"Content-Type": {"application/json"}, "Traceparent": {"00-" + client + "-00f067aa0ba902b7-00"}, "Tracestate": {"k=v"}}
	a = tracedPost(t, s.addr, body, h)
	tid, parent, flags := splitTP(t, a.header.Get("X-Sim-Traceparent"))
	if tid != client || parent == "00f067aa0ba902b7" || flags != "00" || tid == traceID || a.header.Get("X-Sim-Tracestate") != "k=v" {
		t.Fatalf("a not-sampled client: the engine got %q, %q", a.header.Get("X-Sim-Traceparent"), a.header.Get("X-Sim-Tracestate"))
	}
	// An invalid traceparent starts a new trace; its tracestate is dropped.
	h = http.Header{"Content-Type": {"application/json"}, "Traceparent": {"00-XYZ"}, "Tracestate": {"k=v"}}
	a = tracedPost(t, s.addr, body, h)
	if tid, _, _ := splitTP(t, a.header.Get("X-Sim-Traceparent")); tid == client || a.header.Get("X-Sim-Tracestate") != "" {
		t.Fatalf("an invalid client traceparent: the engine got %q, %q", a.header.Get("X-Sim-Traceparent"), a.header.Get("X-Sim-Tracestate"))
	}
	// The sampled one, last: once it is exported, the others would have
	// been before it (one queue, in order).
	h = http.Header{"Content-Type": {"application/json"}, "Traceparent": {"00-" + client + "-00f067aa0ba902b7-01"}}
	a = tracedPost(t, s.addr, body, h)
	if _, _, flags := splitTP(t, a.header.Get("X-Sim-Traceparent")); flags != "01" {
		t.Fatalf("a sampled client: the engine got %q", a.header.Get("X-Sim-Traceparent"))
	}
	spans := col.Wait(t, 1, 30*time.Second)
	if len(spans) != 1 || spans[0].ParentSpanID != "00f067aa0ba902b7" {
		t.Fatalf("exported %+v, want the sampled request's span only", spans)
	}
}

// TestTracingDeadCollector: a collector that never answers costs the
// requests nothing: their spans are dropped and counted.
func TestTracingDeadCollector(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
	// Longer than the test: no export ends before release.
	t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "600000")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")
	_, urls := startSims(t, 1, 100)
	url, release := tracingtest.Blackhole(t)
	defer release() // before serve's shutdown (Cleanup): the held export fails
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tracing.Endpoint = url
		c.Tracing.SampleRatio = 1
		c.Tracing.QueueSize = 2
	}, urls...)
	body := chatJSON(false, "system", sysB, "user", "A haiku about fog.")
	const n = 40
	start := time.Now()
	for i := range n {
		if a := post(t, s.addr, "/v1/chat/completions", body); a.status != 200 {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	took := time.Since(start)
	// 2 queued, one on the tracing goroutine (waiting for the
	// processor), 2 in the processor's queue, one being exported: the
	// rest were dropped.
	dropped := s.set.GetOrCreateCounter("saltus_tracing_spans_dropped_total").Get()
	if dropped < n-6 {
		t.Fatalf("dropped %d of %d spans", dropped, n)
	}
	t.Logf("%d requests in %v with a dead collector, %d spans dropped", n, took, dropped)
}
