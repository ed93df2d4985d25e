package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// sseServer answers every POST with the SSE body its test gives.
func sseServer(t *testing.T, status int, ctype string, write func(w io.Writer, flush func())) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("X-Saltus-Backend", "http://b1")
		w.WriteHeader(status)
		write(w, w.(http.Flusher).Flush)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestClientStream(t *testing.T) {
	url := sseServer(t, 200, "text/event-stream", func(w io.Writer, flush func()) {
		// A role-only first chunk (no content) must not count as TTFT.
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}`+"\n\n")
		flush()
		time.Sleep(30 * time.Millisecond)
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":" world"}}]}`+"\r\n\r\n")
		io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":4100,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4096}}}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	})
	c := NewClient(2)
	defer c.Close()
	o := c.Do(context.Background(), url, []byte(`{"stream":true}`))
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if o.Text != "Hello world" || o.Backend != "http://b1" || o.Incomplete {
		t.Fatalf("outcome %+v", o)
	}
	if o.PromptTokens != 4100 || o.CompletionTokens != 2 || o.CachedTokens != 4096 {
		t.Fatalf("usage %d %d %d", o.PromptTokens, o.CompletionTokens, o.CachedTokens)
	}
	if o.TTFT < 30*time.Millisecond || o.TTFT > o.Latency {
		t.Fatalf("TTFT %v (latency %v): the role-only chunk must not count", o.TTFT, o.Latency)
	}
}

func TestClientCompletionsText(t *testing.T) {
	url := sseServer(t, 200, "text/event-stream", func(w io.Writer, flush func()) {
		io.WriteString(w, `data: {"choices":[{"index":0,"text":"abc"}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"index":0,"text":"def"}],"usage":{"prompt_tokens":10,"completion_tokens":2}}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	})
	c := NewClient(1)
	defer c.Close()
	o := c.Do(context.Background(), url, []byte(`{}`))
	if o.Err != nil || o.Text != "abcdef" || o.CachedTokens != 0 || o.PromptTokens != 10 {
		t.Fatalf("outcome %+v", o)
	}
}

func TestClientFailures(t *testing.T) {
	cases := []struct {
		name, ctype string
		status      int
		body        string
		incomplete  bool
		errHas      string
	}{
		{"no done", "text/event-stream", 200, `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n", true, "without [DONE]"},
		{"error event", "text/event-stream", 200, `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\nevent: error\ndata: {\"error\":{}}\n\n", true, "error event"},
		{"503", "application/json", 503, `{"error":{"message":"busy"}}`, false, "status 503"},
		{"not sse", "application/json", 200, `{}`, false, "want an SSE answer"},
		{"bad json", "text/event-stream", 200, "data: {nope\n\n", true, "bad SSE data"},
	}
	c := NewClient(1)
	defer c.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := sseServer(t, tc.status, tc.ctype, func(w io.Writer, _ func()) { io.WriteString(w, tc.body) })
			o := c.Do(context.Background(), url, []byte(`{}`))
			if o.Err == nil || !strings.Contains(o.Err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want it to mention %q", o.Err, tc.errHas)
			}
			if o.Incomplete != tc.incomplete || (tc.status != 200 && o.Status != tc.status) {
				t.Fatalf("incomplete %v status %d", o.Incomplete, o.Status)
			}
		})
	}
}

func TestClientContextEnds(t *testing.T) {
	url := sseServer(t, 200, "text/event-stream", func(w io.Writer, flush func()) {
		io.WriteString(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
		flush()
		time.Sleep(2 * time.Second)
	})
	c := NewClient(1)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	o := c.Do(ctx, url, []byte(`{}`))
	if o.Err == nil || !o.Incomplete || o.Latency > time.Second {
		t.Fatalf("outcome %+v: want a quick incomplete error", o)
	}
}
