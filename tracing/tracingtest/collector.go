// Package tracingtest is an OTLP/HTTP trace collector for tests: it
// listens on 127.0.0.1, decodes each ExportTraceServiceRequest with the
// OpenTelemetry protocol's generated types and keeps the spans. Safe for
// concurrent use.
package tracingtest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its IDs in lower-case hex.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	TraceState                    string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Start, End                    time.Time
	Attrs                         map[string]any // string, int64, float64 or bool
	Events                        []Event
	StatusCode                    tracepb.Status_StatusCode
	StatusMessage                 string
	Resource                      map[string]any
}

// Event is a span's event.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]any
}

// Collector receives spans at URL (POST /v1/traces).
type Collector struct {
	URL string

	mu      sync.Mutex // guards the fields below
	spans   []Span
	exports int
	changed chan struct{} // closed and replaced at each export
}

// New starts a collector, closed when t ends.
func New(t testing.TB) *Collector {
	c := &Collector{changed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId), TraceState: s.TraceState, Name: s.Name, Kind: s.Kind,
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
					Attrs: attrs(s.Attributes), StatusCode: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(),
					Resource: res}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, Event{Name: e.Name, Time: time.Unix(0, int64(e.TimeUnixNano)), Attrs: attrs(e.Attributes)})
				}
				got = append(got, sp)
			}
		}
	}
	out, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.exports++
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out) // the exporter reads it or not: nothing to do about an error
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = v.BoolValue
		default:
			m[kv.Key] = kv.GetValue().String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Exports returns how many export requests came.
func (c *Collector) Exports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports
}

// Wait waits until n spans came, and returns them; after limit (a bound
// for a broken test, not a synchronization) it fails t.
func (c *Collector) Wait(t testing.TB, n int, limit time.Duration) []Span {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		got, ch := len(c.spans), c.changed
		c.mu.Unlock()
		if got >= n {
			return c.Spans()
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("tracingtest: %d spans after %v, want %d", got, limit, n)
		}
	}
}

// ByName returns the spans named name.
func ByName(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Blackhole is a dead collector: it accepts connections on 127.0.0.1
// and never answers, until release closes them and the listener (an
// exporter then fails at once: connection refused). It returns its URL
// and release, which t's end calls too; call it before anything that
// waits for the exporter (a shutdown).
func Blackhole(t testing.TB) (url string, release func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
		once  sync.Once
	)
	wg.Add(1)
	//saltus:allow R1 a test helper's accept loop, joined by release
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			//saltus:allow R1 a test helper's reader, joined by release (which closes c)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c) // read what comes, answer nothing
			}()
		}
	}()
	release = func() {
		once.Do(func() {
			_ = ln.Close() // ends the accept loop
			mu.Lock()
			for _, c := range conns {
				_ = c.Close() // its reader ends either way; nothing to report
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(release)
	return "http://" + ln.Addr().String(), release
}
