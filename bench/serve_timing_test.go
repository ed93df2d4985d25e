package bench

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/dataplane"
)

const llama3 = "../tokenpool/testdata/models/llama3/tokenizer.json.gz"

// benchFleet starts an instant upstream and a saltus over it (Llama-3
// tokenizer, 2 shards); the upstream's streamed answers are 16 events,
// each its own chunk.
func benchFleet(b *testing.B, mutate func(*dataplane.Config)) (*Upstream, *Saltus) {
	b.Helper()
	up, err := StartUpstreamEvents("127.0.0.1:0", 16)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = up.Close(context.Background()) })
	cfg := dataplane.DefaultConfig()
	cfg.Reactor.Listen = "127.0.0.1:0"
	cfg.Backends = []string{"http://" + up.Addr}
	cfg.Tokenizer = llama3
	cfg.Reactor.Loops = 2
	cfg.Backend.HealthInterval = time.Hour
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := StartSaltus(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return up, s
}

// BenchmarkAddedLatency: one connection, 4 KB chat requests, whole
// (non-streamed) and streamed (16 SSE events, each its own chunk: the
// latency is to the last byte), warm tokenizer cache (the same body every
// time), alternating a request straight to the instant upstream and one
// through saltus. Reports the p50 and p99 of each and the p50 saltus adds
// (target ≤ 150 µs).
func BenchmarkAddedLatency(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "whole"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) { benchAddedLatency(b, stream) })
	}
}

func benchAddedLatency(b *testing.B, stream bool) {
	up, s := benchFleet(b, nil)
	ctx := context.Background()
	measure := func(target string, n int) []time.Duration {
		res, err := Load(ctx, LoadConfig{Target: target, Conns: 1, Duration: time.Minute, Requests: n,
			Request: ChatRequest(target, 4096, stream)})
		if err != nil || res.Non2xx > 0 {
			b.Fatalf("%s: %v %v", target, err, res)
		}
		return []time.Duration{res.P50, res.P99}
	}
	measure(s.Addr, 200) // warm: tokenizer cache, routes, pooled connections
	measure(up.Addr, 200)
	var direct50, direct99, via50, via99 []time.Duration
	b.ResetTimer()
	for b.Loop() {
		d := measure(up.Addr, 500)
		v := measure(s.Addr, 500)
		direct50, direct99 = append(direct50, d[0]), append(direct99, d[1])
		via50, via99 = append(via50, v[0]), append(via99, v[1])
	}
	us := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / float64(time.Microsecond)
	}
	b.ReportMetric(us(direct50), "direct-p50-us")
	b.ReportMetric(us(direct99), "direct-p99-us")
	b.ReportMetric(us(via50), "saltus-p50-us")
	b.ReportMetric(us(via99), "saltus-p99-us")
	b.ReportMetric(us(via50)-us(direct50), "added-p50-us")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelay: requests/s of 4 KB non-streamed chat requests over 32
// keep-alive connections for 2 s per iteration, to an instant upstream
// through saltus; with SALTUS_NGINX=host:port also through that nginx (a
// round-robin proxy to the same kind of upstream), alternating, and the
// ratio. bench/nginx-compare.sh sets it up.
func BenchmarkRelay(b *testing.B) {
	_, s := benchFleet(b, nil)
	nginx := os.Getenv("SALTUS_NGINX")
	ctx := context.Background()
	rps := func(target string) float64 {
		res, err := Load(ctx, LoadConfig{Target: target, Conns: 32, Duration: 2 * time.Second,
			Request: ChatRequest(target, 4096, false)})
		if err != nil || res.Non2xx > 0 {
			b.Fatalf("%s: %v %v", target, err, res)
		}
		return res.RPS
	}
	rps(s.Addr) // warm
	var sal, ngx []float64
	for b.Loop() {
		sal = append(sal, rps(s.Addr))
		if nginx != "" {
			ngx = append(ngx, rps(nginx))
		}
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(med(sal), "saltus-req/s")
	if nginx != "" {
		b.ReportMetric(med(ngx), "nginx-req/s")
		b.ReportMetric(med(sal)/med(ngx), "saltus/nginx")
	}
	b.ReportMetric(0, "ns/op")
}
