package shard

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/reqlog"
)

// recordSink keeps a copy of every record.
type recordSink struct {
	mu     sync.Mutex
	recs   []reqlog.Record
	tokens bool
}

func (s *recordSink) Log(r *reqlog.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, *r)
}

func (s *recordSink) Tokens() bool { return s.tokens }

func (s *recordSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// byStatus is recs by status, each status once: records come in the
// order their answers end, which for a forward (its Done) and the
// router's own answers on other loops is not the order they were sent.
func byStatus(t *testing.T, recs []reqlog.Record) map[int]reqlog.Record {
	t.Helper()
	m := map[int]reqlog.Record{}
	for _, r := range recs {
		if _, dup := m[r.Status]; dup {
			t.Fatalf("two records of status %d: %+v", r.Status, recs)
		}
		m[r.Status] = r
	}
	return m
}

func (s *recordSink) take() []reqlog.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs
	s.recs = nil
	return r
}

func TestRequestRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 3})
	sink := &recordSink{tokens: true}
	e.r.UseSinks(sink)
	e.up.status.Store(200)
	e.up.usage = []byte(`{"prompt_tokens":40,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}`)

	body := chatBody("system", strings.Repeat("You are a lighthouse keeper. ", 20), "user", "hi")
	x := newExchange(0, "POST", "/v1/chat/completions", body)
	x.req.RemoteAddr = "127.0.0.1:5555"
	x.req.Header = []reactor.Header{{Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	if c := e.serve(t, x); c == nil {
		t.Fatal("not forwarded")
	}
	x404 := newExchange(1, "GET", "/nope", "")
	if e.serve(t, x404) != nil {
		t.Fatal("forwarded an unknown path")
	}
	e.r.OwnAnswer(431, "127.0.0.1:6666", "")
	waitUntil(t, "3 records", func() bool { return sink.count() >= 3 })

	recs := byStatus(t, sink.take())
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(recs), recs)
	}
	r := recs[200]
	if r.Status != 200 || r.Model != model || r.Method != "POST" || r.Path != "/v1/chat/completions" ||
		r.Client != "127.0.0.1:5555" || r.Own || r.ClientGone || r.Backend == "" || r.RouteReason != "hash" ||
		r.BytesIn != int64(len(body)) || r.Start.IsZero() || r.End.Before(r.Start) || r.Duration < 0 {
		t.Fatalf("routed record %+v", r)
	}
	if !r.HasUsage || r.PromptTokens != 40 || r.CompletionTokens != 3 || !r.HasCached || r.Cached != 16 {
		t.Fatalf("tokens %+v", r)
	}
	if !r.HasPrediction || r.CachedPredicted != 0 { // a new prefix: hashed, nothing predicted
		t.Fatalf("prediction %+v", r)
	}
	if got := string(r.Trace.AppendID(nil)); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace %q", got)
	}
	r = recs[404]
	if r.Status != 404 || !r.Own || r.Path != "/nope" || r.RequestID == "" || r.RequestID != x404.header(reactor.RequestIDHeader) || r.BytesOut == 0 {
		t.Fatalf("404 record %+v (answer's id %q)", r, x404.header(reactor.RequestIDHeader))
	}
	if r = recs[431]; r.Status != 431 || !r.Own || r.Path != "" || r.Client != "127.0.0.1:6666" {
		t.Fatalf("reactor's record %+v", r)
	}

	// The second request of the prefix: the tree predicted it.
	x = newExchange(0, "POST", "/v1/chat/completions", body)
	if c := e.serve(t, x); c == nil {
		t.Fatal("not forwarded")
	}
	waitUntil(t, "the warm record", func() bool { return sink.count() >= 1 })
	warm := sink.take()
	if len(warm) != 1 || warm[0].RouteReason != "tree" || !warm[0].HasPrediction || warm[0].CachedPredicted != 40 {
		t.Fatalf("warm record %+v", warm)
	}
}

// TestRequestRecordsGone: a client gone before its forward has a record
// too.
func TestRequestRecordsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2})
	sink := &recordSink{}
	e.r.UseSinks(sink)
	x := newExchange(0, "POST", "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("x", 200)+`"}`)
	close(x.gone)
	e.loops.run(t, 0, func() { e.r.serve(x) })
	recs := sink.take()
	if len(recs) != 1 || recs[0].Status != 499 || !recs[0].ClientGone || recs[0].Own || recs[0].Model != "m" {
		t.Fatalf("records %+v", recs)
	}
}

// TestRequestRecordsQueued: a request that waited in its pool's gateway
// queue logs its wait; one whose client left while it waited logs 499.
func TestRequestRecordsQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2})
	sink := &recordSink{}
	e.r.UseSinks(sink)
	e.up.status.Store(200)
	free := fullPool(t, e)
	x1 := newExchange(0, "POST", "/v1/chat/completions", chatAt(0, 1))
	x2 := newExchange(0, "POST", "/v1/chat/completions", chatAt(0, 2))
	for _, x := range []*fakeExchange{x1, x2} {
		e.loops.run(t, 0, func() { e.r.serve(x) })
	}
	waitUntil(t, "2 queued", func() bool { return e.r.queued.Load() == 2 })
	close(x2.gone)
	free()
	select {
	case <-e.up.calls:
	case <-time.After(10 * time.Second):
		t.Fatal("not forwarded after the slots freed")
	}
	waitUntil(t, "the queue empty", func() bool { return e.r.queued.Load() == 0 })
	e.loops.settle(t)
	recs := sink.take()
	if len(recs) != 2 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	slices.SortFunc(recs, func(a, b reqlog.Record) int { return a.Status - b.Status })
	if r := recs[0]; r.Status != 200 || r.QueueWait <= 0 || r.Model != "m" || r.Backend == "" || r.Duration < r.QueueWait {
		t.Errorf("queued record %+v", r)
	}
	if r := recs[1]; r.Status != 499 || !r.ClientGone || r.Own || r.Backend != "" {
		t.Errorf("gone record %+v", r)
	}
}
