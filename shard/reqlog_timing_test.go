package shard

import (
	"context"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/accesslog"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// nopSink keeps nothing: BenchmarkRequestEnd/record is the record's own
// cost.
type nopSink struct{ tokens bool }

func (nopSink) Log(*reqlog.Record) {}
func (s nopSink) Tokens() bool     { return s.tokens }

// BenchmarkRequestEnd is what a routed request's end costs the loop with a
// sink: the record built from the job and the outcome (usage parsed), and
// handed to the sink: nothing (record), or the access log's line
// formatted and queued (its writer goroutine writes to /dev/null).
// BenchmarkServeChat4K/log is the serving side's part (the job's
// exchange wrapper, its start time, the model read where no decode does).
func BenchmarkRequestEnd(b *testing.B) {
	for _, tc := range []struct {
		name   string
		format string // "": nopSink
	}{{"record", ""}, {"json", accesslog.FormatJSON}, {"logfmt", accesslog.FormatLogfmt}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, envOpts{loops: 1, backends: 2, maintain: time.Hour})
			var sink reqlog.Sink = nopSink{tokens: true}
			if tc.format != "" {
				c := accesslog.DefaultConfig()
				c.Path, c.Format = "/dev/null", tc.format
				l, err := accesslog.Open(c, nil, metrics.NewSet())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = l.Close(context.Background()) })
				sink = l
			}
			e.r.UseSinks(sink)
			body := chat4K()
			x := newExchange(0, "POST", "/v1/chat/completions", body)
			x.req.RemoteAddr = "127.0.0.1:40000"
			x.req.Header = []reactor.Header{{Name: reactor.RequestIDHeader, Value: "bench-1"},
				{Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
			j := &job{r: e.r, req: x.req, route: routeChat, loop: 0, start: e.r.now()}
			j.x = &keyedExchange{exchange: x, j: j}
			j.d.Model = model
			j.hdrArr[0] = reactor.Header{Name: HeaderRoute, Value: "12/14 tree"}
			b0 := e.up.Snapshot()[0]
			j.fb = routeFeedback{decided: true, backend: b0.ID, matched: 12, total: 14}
			now := time.Now()
			o := backend.Outcome{Backend: b0, Status: 200, RequestID: "bench-1", Sent: now, TTFB: time.Millisecond,
				FirstData: 2 * time.Millisecond, Total: 30 * time.Millisecond, BytesOut: 2048,
				Usage: []byte(`{"prompt_tokens":1000,"total_tokens":1100,"completion_tokens":100,"prompt_tokens_details":{"cached_tokens":192}}`)}
			b.ReportAllocs()
			e.loops.run(b, 0, func() {
				b.ResetTimer()
				for range b.N {
					e.r.logEnd(0, j.x, &o, openai.ReadUsage(o.Usage), o.Status, 0, "")
				}
				b.StopTimer()
			})
		})
	}
}
