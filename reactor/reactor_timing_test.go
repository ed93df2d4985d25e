package reactor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// A chat completion request as an OpenAI client sends it, ~1.2 KB.
var benchRequest = []byte("POST /v1/chat/completions HTTP/1.1\r\n" +
	"Host: 127.0.0.1:8080\r\nUser-Agent: OpenAI/Python 1.54.0\r\nAccept: application/json\r\n" +
	"Content-Type: application/json\r\nAuthorization: Bearer sk-0123456789abcdef\r\n" +
	"X-Request-ID: 5f0c8a3e-7b9d-4c1e-a2f3-1234567890ab\r\nContent-Length: 900\r\n\r\n" +
	`{"model":"llama-3-8b","stream":true,"messages":[{"role":"system","content":"` +
	strings.Repeat("You are a helpful assistant. ", 28) + `"}]}`)

func BenchmarkParse(b *testing.B) {
	// Pad the body to its Content-Length.
	req := append([]byte(nil), benchRequest...)
	head := strings.Index(string(req), "\r\n\r\n") + 4
	for len(req)-head < 900 {
		req = append(req, ' ')
	}
	req = req[:head+900]
	lim := limits{maxHead: 64 << 10, maxBody: 16 << 20}
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		var p progress
		r, n, err := parse(req, lim, &p)
		if r == nil || n != len(req) || err != nil {
			b.Fatal(n, err)
		}
	}
}

type okHandler struct{}

var okBody = []byte("ok")

func (okHandler) Serve(x *Exchange) { x.Respond(200, nil, okBody) }

// BenchmarkServerGET: a tiny keep-alive GET answered at once, one request
// in flight per connection, b.RunParallel connections (client and server
// share the machine's cores).
func BenchmarkServerGET(b *testing.B) {
	for _, loops := range []int{1, 2} {
		for _, lock := range []bool{false, true} {
			b.Run(fmt.Sprintf("loops=%d/lock=%v", loops, lock), func(b *testing.B) { benchServerGET(b, loops, lock) })
		}
	}
}

// startBenchServer starts a server of okHandler on 127.0.0.1:0 with
// loops loops (lock: LockOSThread), shut down when the benchmark ends.
func startBenchServer(b *testing.B, loops int, lock bool) *Server {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Loops, cfg.LockOSThread = loops, lock
	s, err := NewServer(cfg, okHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewSet())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

func benchServerGET(b *testing.B, loops int, lock bool) {
	s := startBenchServer(b, loops, lock)
	benchGET(b, s.Addr(), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
}

// BenchmarkNetHTTPGET is the baseline: the same client against net/http
// in the same process, so the number above can be read on a shared
// machine.
func BenchmarkNetHTTPGET(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Date"] = nil
		w.Header()["Content-Type"] = nil
		_, _ = w.Write(okBody)
	})}
	done := make(chan struct{})
	// The baseline server's goroutine; joined through done.
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	defer func() {
		_ = srv.Close()
		<-done
	}()
	benchGET(b, ln.Addr().String(), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
}

func benchGET(b *testing.B, addr, answer string) {
	req := []byte("GET /ok HTTP/1.1\r\nHost: a\r\n\r\n")
	var n atomic.Int64
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		buf := make([]byte, len(answer))
		for pb.Next() {
			if _, err := nc.Write(req); err != nil {
				b.Error(err)
				return
			}
			if _, err := io.ReadFull(br, buf); err != nil || string(buf) != answer {
				b.Errorf("answer %q, %v", buf, err)
				return
			}
			n.Add(1)
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "req/s")
}

// BenchmarkPost: Loop.Post from another goroutine to a loop, each
// function run (so the mailbox bound is never hit).
func BenchmarkPost(b *testing.B) {
	s := startBenchServer(b, 1, false)
	var ran atomic.Int64
	fn := func() { ran.Add(1) }
	b.ReportAllocs()
	posted := int64(0)
	for b.Loop() {
		for !s.Loops()[0].Post(fn) {
			time.Sleep(time.Microsecond) // mailbox full: let the loop catch up
		}
		posted++
	}
	for ran.Load() < posted {
		time.Sleep(time.Microsecond)
	}
}

// BenchmarkPostRoundTrip: at idle (2 ms between round trips, so both loops
// are asleep in epoll_wait), a function posted to loop 0 posts to loop 1,
// which posts back to loop 0: the two wake-ups a request pays when its
// prompt's owner shard is the other loop. Reports the p50 and p90 round
// trip in µs (-cpu sets GOMAXPROCS; docs/BENCHMARKS.md compares 2 and 4).
func BenchmarkPostRoundTrip(b *testing.B) {
	s := startBenchServer(b, 2, false)
	var rtts []time.Duration
	done := make(chan time.Duration, 1)
	for b.Loop() {
		for range 50 {
			time.Sleep(2 * time.Millisecond)
			ok := s.Loops()[0].Post(func() {
				t0 := time.Now()
				if !s.Loops()[1].Post(func() {
					if !s.Loops()[0].Post(func() { done <- time.Since(t0) }) {
						done <- -1
					}
				}) {
					done <- -1
				}
			})
			if !ok {
				b.Fatal("Post refused")
			}
			d := <-done
			if d < 0 {
				b.Fatal("Post refused")
			}
			rtts = append(rtts, d)
		}
	}
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(rtts[len(rtts)*9/10].Nanoseconds())/1e3, "p90-us")
	b.ReportMetric(0, "ns/op")
}
