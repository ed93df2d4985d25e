package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEngine streams "ok <n>" and reports the whole prompt cached when it
// has seen the same first message before.
type fakeEngine struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string]bool
	hits atomic.Int64
}

func newFakeEngine(t *testing.T) *fakeEngine {
	e := &fakeEngine{seen: map[string]bool{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []Message `json:"messages"`
			Stream   bool      `json:"stream"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil || !req.Stream || len(req.Messages) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		key := req.Messages[0].Content
		e.mu.Lock()
		cached := 0
		if e.seen[key] {
			cached = 100
			e.hits.Add(1)
		}
		e.seen[key] = true
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Saltus-Backend", e.srv.URL)
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok %d\"}}]}\n\n", len(req.Messages))
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", cached)
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(e.srv.Close)
	return e
}

type closerFunc func(context.Context) error

func (f closerFunc) Close(ctx context.Context) error { return f(ctx) }

type fakeFleet struct {
	t       *testing.T
	engines []*fakeEngine
	starts  atomic.Int64
}

func (f *fakeFleet) StartEngines(n int) ([]string, Closer, error) {
	f.starts.Add(1)
	var urls []string
	for range n {
		e := newFakeEngine(f.t)
		f.engines = append(f.engines, e)
		urls = append(urls, e.srv.URL)
	}
	return urls, closerFunc(func(context.Context) error { return nil }), nil
}

// StartRouter "routes" everything to the first engine, 20 ms late.
func (f *fakeFleet) StartRouter(policy string, backends []string) ([]string, Closer, error) {
	target, _ := url.Parse(backends[0])
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		rp.ServeHTTP(w, r)
	}))
	return []string{srv.URL}, closerFunc(func(context.Context) error { srv.Close(); return nil }), nil
}

// chatWorkload: every user repeats one system prompt and appends replies.
type chatWorkload struct{ replies atomic.Int64 }

func (w *chatWorkload) Name() string     { return "repeat" }
func (w *chatWorkload) Describe() string { return "one system prompt, repeated" }
func (w *chatWorkload) NewUser(id int) User {
	return &chatUser{w: w, msgs: []Message{{Role: "system", Content: "shared system prompt"}, {Role: "user", Content: fmt.Sprint("hi from ", id)}}}
}

type chatUser struct {
	w    *chatWorkload
	msgs []Message
}

func (u *chatUser) Next() (Request, bool) {
	return Request{Messages: append([]Message(nil), u.msgs...), MaxTokens: 1, Tag: "chat", Think: time.Millisecond}, true
}

func (u *chatUser) Reply(text string) {
	if !strings.HasPrefix(text, "ok ") {
		panic("reply " + text)
	}
	u.w.replies.Add(1)
	u.msgs = append(u.msgs[:2:2], Message{Role: "assistant", Content: text})
}

func TestRunAgainstFakeFleet(t *testing.T) {
	f := &fakeFleet{t: t}
	wl := &chatWorkload{}
	cfg := RunConfig{Backends: 2, Users: 3, Duration: 400 * time.Millisecond, Policies: []string{"a", "b"},
		Workloads: []Workload{wl}, Model: "m", OverheadPairs: 5, Log: io.Discard}
	rep, err := Run(context.Background(), cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	if f.starts.Load() != 2 || len(rep.Runs) != 2 || len(rep.Samples) != 2 {
		t.Fatalf("starts %d runs %d", f.starts.Load(), len(rep.Runs))
	}
	for i, s := range rep.Runs {
		if s.Requests < 10 || s.Errors != 0 {
			t.Fatalf("run %d: %+v", i, s)
		}
		// Every answer a 200, no priority or key: nothing to say of
		// overload, the requests cut at the end notwithstanding.
		if s.Overload != nil {
			t.Fatalf("run %d: overload summary %+v (%d cut)", i, s.Overload, s.Cut)
		}
		// The first request of the run is the only miss (fresh engines).
		want := float64(s.Requests-1) / float64(s.Requests)
		if s.TokenHitRatio != want {
			t.Fatalf("run %d hit ratio %v, want %v", i, s.TokenHitRatio, want)
		}
		if len(s.PerBackend) != 2 || s.LoadSpread != 2 {
			t.Fatalf("run %d per backend %v spread %v", i, s.PerBackend, s.LoadSpread)
		}
	}
	// The fake router adds 20 ms before proxying.
	if oh := rep.Runs[0].RouterOverhead; oh.P50 < 15 || oh.P50 > 200 {
		t.Fatalf("router overhead %+v, want p50 about 20 ms", oh)
	}
	if got := wl.replies.Load(); got < int64(rep.Runs[0].Requests) {
		t.Fatalf("replies %d < requests %d", got, rep.Runs[0].Requests)
	}
}

func TestRunConfigValidate(t *testing.T) {
	err := RunConfig{}.Validate()
	for _, s := range []string{"backends", "users", "duration", "policies", "workloads"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Fatalf("Validate() = %v, want it to name %s", err, s)
		}
	}
}

func TestRequestBody(t *testing.T) {
	path, b := requestBody(Request{Prompt: "hello", MaxTokens: 5}, "m")
	if path != "/v1/completions" || string(b) != `{"model":"m","prompt":"hello","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}` {
		t.Fatalf("%s %s", path, b)
	}
	path, b = requestBody(Request{Messages: []Message{{Role: "user", Content: "x"}}}, "m")
	if path != "/v1/chat/completions" || string(b) != `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}` {
		t.Fatalf("%s %s", path, b)
	}
}
