package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hijacked answers a POST by writing raw bytes on its connection: an
// upstream that misbehaves below HTTP. act gets the connection after the
// request body was read; the connection is closed when act returns.
func hijacked(act func(c net.Conn, rw *bufio.ReadWriter, stream bool)) func(u *upstream, w http.ResponseWriter, r *http.Request) {
	return func(u *upstream, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		act(c, rw, strings.Contains(string(body), `"stream":true`))
		_ = rw.Flush()
	}
}

// TestServeUpstreamScenarios: one table of upstream behaviours, each run
// against both upstream paths, streamed and not: what the client gets,
// and how many sends the upstream saw (--max-retries 0: one).
func TestServeUpstreamScenarios(t *testing.T) {
	t.Parallel()
	const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	const jsonHead100 = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
	type want struct {
		status int
		has    []string // in the body
		hasNot []string
		header map[string]string
	}
	for _, sc := range []struct {
		name          string
		act           func(c net.Conn, rw *bufio.ReadWriter, stream bool)
		whole, stream want
	}{
		{
			name: "reset before the head",
			act:  func(net.Conn, *bufio.ReadWriter, bool) {},
			whole: want{status: 502, has: []string{"no backend answered (1 tried)", "connection closed before the response head"},
				header: map[string]string{"Retry-After": "1"}},
			stream: want{status: 502, has: []string{"no backend answered (1 tried)"}, header: map[string]string{"Retry-After": "1"}},
		},
		{
			name: "garbage",
			act: func(_ net.Conn, rw *bufio.ReadWriter, _ bool) {
				_, _ = rw.WriteString("NOT HTTP AT ALL\r\n\r\n")
			},
			whole:  want{status: 502, has: []string{"no backend answered (1 tried)"}},
			stream: want{status: 502, has: []string{"no backend answered (1 tried)"}},
		},
		{
			name: "reset mid-answer",
			act: func(_ net.Conn, rw *bufio.ReadWriter, stream bool) {
				if stream {
					_, _ = rw.WriteString(sseHead + chunk("data: {\"tok\":1}\n\n"))
					return
				}
				_, _ = rw.WriteString(jsonHead100 + `{"partial":`)
			},
			whole: want{status: 502, has: []string{"upstream failed in its response body"}},
			stream: want{status: 200, has: []string{"data: {\"tok\":1}\n\nevent: error\ndata: ", "upstream connection lost mid-stream"},
				hasNot: []string{"[DONE]"}},
		},
		{
			name: "stall after the head",
			act: func(c net.Conn, rw *bufio.ReadWriter, stream bool) {
				if stream {
					_, _ = rw.WriteString(sseHead + chunk("data: {\"tok\":1}\n\n"))
				} else {
					_, _ = rw.WriteString(jsonHead100 + `{"partial":`)
				}
				_ = rw.Flush()
				_, _ = io.Copy(io.Discard, c) // until saltus closes it
			},
			whole: want{status: 504, has: []string{"timed out in its response body"}},
			stream: want{status: 200, has: []string{"data: {\"tok\":1}\n\nevent: error\ndata: ", "the stream idle timeout"},
				hasNot: []string{"[DONE]"}},
		},
		{
			name: "429 with a body and Retry-After",
			act: func(_ net.Conn, rw *bufio.ReadWriter, _ bool) {
				b := `{"error":{"message":"slow down","type":"rate_limit"}}`
				_, _ = fmt.Fprintf(rw, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 7\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			},
			// A full engine is a signal (issue 30): with no other
			// candidate the request waits in saltus's queue, here for
			// --queue-max-wait 300ms, then saltus's own 429.
			whole:  want{status: 429, has: []string{`"code":"overloaded"`}, header: map[string]string{"Retry-After": "1"}},
			stream: want{status: 429, has: []string{`"code":"overloaded"`}, header: map[string]string{"Retry-After": "1"}},
		},
		{
			name: "503 with a body",
			act: func(_ net.Conn, rw *bufio.ReadWriter, _ bool) {
				b := `{"error":{"message":"engine overloaded"}}`
				_, _ = fmt.Fprintf(rw, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			},
			whole:  want{status: 429, has: []string{`"code":"overloaded"`}, header: map[string]string{"Retry-After": "1"}},
			stream: want{status: 429, has: []string{`"code":"overloaded"`}, header: map[string]string{"Retry-After": "1"}},
		},
		{
			name: "an answer over max-response-body",
			act: func(_ net.Conn, rw *bufio.ReadWriter, stream bool) {
				if stream {
					_, _ = rw.WriteString(sseHead)
					for range 40 {
						_, _ = rw.WriteString(chunk("data: " + strings.Repeat("x", 64<<10) + "\n\n"))
					}
					_, _ = rw.WriteString(chunk("data: [DONE]\n\n") + "0\r\n\r\n")
					return
				}
				b := `{"big":"` + strings.Repeat("x", 2<<20) + `"}`
				_, _ = fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			},
			// A stream is never buffered whole: it passes; a whole answer
			// outgrows the buffer and is relayed as it comes (spilled).
			whole:  want{status: 200, has: []string{`{"big":"xxx`, `xxx"}`}},
			stream: want{status: 200, has: []string{"data: [DONE]"}},
		},
	} {
		for _, mode := range upstreamModes {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/stream=%v", sc.name, mode, stream), func(t *testing.T) {
					t.Parallel()
					w := sc.whole
					if stream {
						w = sc.stream
					}
					up := newUpstreamFunc(t, "a", hijacked(sc.act))
					s := startServeWith(t, []*upstream{up}, func(c *serveConfig) {
						c.Tokenizer, c.UpstreamIO, c.Backend.MaxRetries = "", mode, 0
						c.Backend.FirstByteTimeout = 500 * time.Millisecond
						c.Backend.StreamIdleTimeout = 300 * time.Millisecond
						c.Backend.MaxResponseBody = 1 << 20
						c.Router.Queue.MaxWait = 300 * time.Millisecond // a full engine's request waits this long
					})
					a := s.chat(t, chatJSON(stream, "system", sysA, "user", "Hello?"))
					if a.status != w.status {
						t.Errorf("status %d, want %d (body %.300q)", a.status, w.status, a.body)
					}
					for _, s := range w.has {
						if !strings.Contains(a.body, s) {
							t.Errorf("body %.300q lacks %q", a.body, s)
						}
					}
					for _, s := range w.hasNot {
						if strings.Contains(a.body, s) {
							t.Errorf("body %.300q has %q", a.body, s)
						}
					}
					for k, v := range w.header {
						if got := a.header.Get(k); got != v {
							t.Errorf("%s: %q, want %q", k, got, v)
						}
					}
					if n := up.calls.Load(); n != 1 {
						t.Errorf("%d sends, want 1", n)
					}
				})
			}
		}
	}
}

// TestServeUpstreamRefused: the scenario table's first row, a backend
// that refuses the connection: with no retry left, 503 (nothing listens) naming it and
// why, with Retry-After; with one, the next backend answers, and the
// refused one got nothing. Whole and streamed alike.
func TestServeUpstreamRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			s := startServeWith(t, nil, func(c *serveConfig) { c.Tokenizer, c.Backend.MaxRetries = "", 0 }, refused)
			a := s.chat(t, chatJSON(stream, "system", sysA, "user", "Hello?"))
			if a.status != 503 || !strings.Contains(a.body, "no backend answered (1 tried)") || !strings.Contains(a.body, "connection refused") ||
				a.header.Get("Retry-After") != "1" {
				t.Errorf("%d %v %.300q", a.status, a.header, a.body)
			}
			up := newUpstream(t, "b")
			s2 := startServeWith(t, []*upstream{up}, func(c *serveConfig) { c.Tokenizer, c.Backend.MaxRetries, c.Router.Policy = "", 1, "round_robin" }, refused)
			for i := range 4 { // round robin: the refused backend is first for half of them
				if a := s2.chat(t, chatJSON(stream, "system", sysA, "user", fmt.Sprintf("Hello %d?", i))); a.status != 200 || a.backend != up.srv.URL {
					t.Errorf("with a retry, request %d: %d from %q %.200q", i, a.status, a.backend, a.body)
				}
			}
			if n := up.calls.Load(); n != 4 {
				t.Errorf("the live backend got %d requests, want 4", n)
			}
		})
	}
}
