package tracing

import (
	"testing"

	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/tracing/tracingtest"
)

// BenchmarkBegin is a loop's cost per forwarded request with tracing on:
// IDs, the sampling decision, the traceparent's text.
func BenchmarkBegin(b *testing.B) {
	l := Loop{rng: newPCG(), sampler: RatioSampler(0.01)}
	var buf [64]byte
	b.ReportAllocs()
	for b.Loop() {
		var c Context
		l.Begin(&c, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
		_ = c.AppendTraceparent(buf[:0])
	}
}

// BenchmarkLog is Log on a loop: a record not sampled (the common case
// at 1 %), and a sampled one whose queue is full (a dead collector).
func BenchmarkLog(b *testing.B) {
	url, release := tracingtest.Blackhole(b)
	defer release()
	b.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "600000")
	b.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.SampleRatio, cfg.QueueSize = url, 1, 1
	tr, err := New(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { release(); _ = tr.Close(b.Context()) }()
	l := tr.Loop()
	var c Context
	l.Begin(&c, "", "")
	rec := &reqlog.Record{Method: "POST", Path: "/v1/chat/completions", Model: "llama3", Status: 200,
		Trace: reqlog.Trace{ID: c.TraceID}, Span: c.SpanID, Backend: "http://127.0.0.1:8000", BackendURL: "http://127.0.0.1:8000",
		Policy: "prefix", RouteReason: "tree"}
	b.Run("not_sampled", func(b *testing.B) {
		rec.SpanSampled = false
		b.ReportAllocs()
		for b.Loop() {
			tr.Log(rec)
		}
	})
	b.Run("dropped", func(b *testing.B) {
		rec.SpanSampled = true
		b.ReportAllocs()
		for b.Loop() {
			tr.Log(rec)
		}
	})
}
