package shard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/tracing"
	"github.com/saltus-lb/saltus/tracing/tracingtest"
	"github.com/saltus-lb/saltus/upstream/fleet"
)

// BenchmarkServeChat4K is the loop-side cost of one 4 KB chat request
// whose segments are all in the tokenizer cache and whose prefix the tree
// knows: decode, render (llama3), tokenize (cache hits), block keys, tree
// match, decision and the Forward call (a no-op fake: no network). It runs
// on the one fake loop, which owns the prefix, so the lookup is inline.
//
// Sub-benchmark pool: the same with model pools (pools.go): 8 backends in
// two pools of 4, the request's model one of them: the pool's admission
// and the views of its backends alone. Sub-benchmark log: "all" with a
// request sink (reqlog.go).
func BenchmarkServeChat4K(b *testing.B) {
	b.Run("all", func(b *testing.B) { benchServeChat4K(b, false, false) })
	b.Run("pool", func(b *testing.B) { benchServeChat4K(b, true, false) })
	b.Run("log", func(b *testing.B) { benchServeChat4K(b, false, true) })
}

// benchServeChat4K: pooled, with model pools; log, with a request sink
// (reqlog.go; the end's own cost is BenchmarkRequestEnd's).
func benchServeChat4K(b *testing.B, pooled, log bool) {
	e := newEnv(b, envOpts{loops: 1, backends: 8, tokenizer: true, maintain: time.Hour})
	if log {
		e.r.UseSinks(nopSink{tokens: true})
	}
	if pooled {
		listed := map[int][]fleet.Model{}
		for i := range 8 {
			listed[i] = []fleet.Model{card([]string{model, "other"}[i%2], "")}
		}
		f := &fakeFleet{}
		f.ix.Store(fleet.NewIndex(e.up.Snapshot(), listed))
		e.r.UseFleet(f)
	}
	body := chat4K()
	x := newExchange(0, "POST", "/v1/chat/completions", body)
	if c := e.serve(b, x); c == nil {
		b.Fatal("not forwarded")
	}
	x = newExchange(0, "POST", "/v1/chat/completions", body)
	c := e.serve(b, x)
	if c == nil || len(strings.Fields(c.header(HeaderRoute))) < 2 || strings.Fields(c.header(HeaderRoute))[1] != policy.ReasonTree {
		b.Fatalf("warm request not routed by the tree: %+v", c)
	}
	e.up.quiet.Store(true)
	misses := e.r.shards[0].tok.Stats().CacheMisses
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	e.loops.run(b, 0, func() {
		b.ResetTimer()
		for range b.N {
			e.r.serve(x)
		}
		b.StopTimer()
	})
	if s := e.r.shards[0].tok.Stats(); s.CacheMisses != misses {
		b.Fatalf("%d cache misses during the benchmark", s.CacheMisses-misses)
	}
}

// BenchmarkServeTraced is BenchmarkServeChat4K's request served to its
// end (the fake forward reports a 200 through Hooks.Events.Done at once), with
// and without tracing: "off" no tracer and no record; "ratio_0.01" and
// "ratio_1" a tracer (exporting to a test collector) sampling 1 % and
// every request: the record, the trace IDs, the traceparent header, and
// for a sampled request its copy handed to the tracer's queue (full at
// ratio 1: dropped and counted, as with a collector that cannot keep up).
func BenchmarkServeTraced(b *testing.B) {
	for _, ratio := range []float64{-2, 0.01, 1} {
		name := "off"
		if ratio >= 0 {
			name = fmt.Sprintf("ratio_%g", ratio)
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, envOpts{loops: 1, backends: 8, tokenizer: true, maintain: time.Hour})
			if ratio >= 0 {
				col := tracingtest.New(b)
				cfg := tracing.DefaultConfig()
				cfg.Endpoint, cfg.SampleRatio = col.URL, ratio
				tr, err := tracing.New(cfg, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = tr.Close(context.Background()) }) // errors: none the benchmark can act on
				e.r.UseTracer(tr)
				e.r.UseSinks(tr)
			}
			body := chat4K()
			for range 2 {
				if c := e.serve(b, newExchange(0, "POST", "/v1/chat/completions", body)); c == nil {
					b.Fatal("not forwarded")
				}
			}
			e.up.quiet.Store(true)
			e.up.quietDone.Store(true)
			x := newExchange(0, "POST", "/v1/chat/completions", body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			e.loops.run(b, 0, func() {
				b.ResetTimer()
				for range b.N {
					e.r.serve(x)
				}
				b.StopTimer()
			})
		})
	}
}
