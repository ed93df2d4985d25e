package backend

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/reactor"
)

// benchSink answers into a channel; reused across iterations.
type benchSink struct {
	done chan int
	gone chan struct{}
}

func (b *benchSink) Respond(status int, _ []reactor.Header, _ []byte) { b.done <- status }
func (b *benchSink) WriteHeader(int, []reactor.Header) error          { return nil }
func (b *benchSink) Write([]byte) error                               { return nil }
func (b *benchSink) Flush() error                                     { return nil }
func (b *benchSink) End() error                                       { b.done <- 200; return nil }
func (b *benchSink) Abort()                                           { b.done <- -1 }
func (b *benchSink) Gone() <-chan struct{}                            { return b.gone }

// instantUpstream is a fasthttp server on 127.0.0.1 answering a small
// OpenAI-like JSON at once.
func instantUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1000,"completion_tokens":1}}`)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}
	done := make(chan struct{})
	go func() { // test stand-in server, joined in Cleanup
		defer close(done)
		_ = srv.Serve(ln)
	}()
	b.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return "http://" + ln.Addr().String()
}

// BenchmarkForward4K: one Forward of a 4 KiB chat request to an instant
// local upstream, end to end (proxy goroutine, fasthttp round trip,
// headers, Respond), one at a time.
func BenchmarkForward4K(b *testing.B) {
	s, _ := testSet(b, nil)
	be, err := s.Add(instantUpstream(b))
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 4096)
	req := chatReq(reactor.Header{Name: "Content-Type", Value: "application/json"},
		reactor.Header{Name: "Authorization", Value: "Bearer sk-test"})
	sink := &benchSink{done: make(chan int, 1), gone: make(chan struct{})}
	cands := []*Backend{be}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if !s.Forward(req, body, cands, sink, nil, Hooks{}) {
			b.Fatal("refused")
		}
		if st := <-sink.done; st != 200 {
			b.Fatalf("status %d", st)
		}
	}
}

// BenchmarkForward4KParallel: the same from GOMAXPROCS goroutines at once.
func BenchmarkForward4KParallel(b *testing.B) {
	s, _ := testSet(b, nil)
	be, err := s.Add(instantUpstream(b))
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 4096)
	req := chatReq(reactor.Header{Name: "Content-Type", Value: "application/json"})
	cands := []*Backend{be}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		sink := &benchSink{done: make(chan int, 1), gone: make(chan struct{})}
		for pb.Next() {
			if !s.Forward(req, body, cands, sink, nil, Hooks{}) {
				b.Fatal("refused")
			}
			if st := <-sink.done; st != 200 {
				b.Fatalf("status %d", st)
			}
		}
	})
}

// BenchmarkRespParser: one 600-byte JSON answer, whole in one read, as
// the loop path parses it (head, Content-Length body).
func BenchmarkRespParser(b *testing.B) {
	body := `{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", 400) + `"}}],"usage":{"prompt_tokens":1000,"completion_tokens":10}}`
	resp := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	p := newRespParser(maxLoopHead, DefaultConfig().MaxResponseBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(resp)))
	for b.Loop() {
		p.reset(false, 3)
		if n, err := p.feed(resp); err != nil || n != len(resp) || !p.done() {
			b.Fatal(n, err)
		}
	}
}
