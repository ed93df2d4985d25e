package backend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/reactor"
)

// testSet returns a Set with short timeouts, closed at the end of the test.
func testSet(t testing.TB, edit func(*Config)) (*Set, *metrics.Set) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ConnectTimeout = time.Second
	cfg.FirstByteTimeout = 5 * time.Second
	cfg.IdleConnTimeout = 200 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	ms := metrics.NewSet()
	s, err := NewSet(cfg, nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, ms
}

func upstream(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func mustAdd(t *testing.T, s *Set, url string) *Backend {
	t.Helper()
	b, err := s.Add(url)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// closedPort returns the URL of a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func chatReq(hdr ...reactor.Header) *reactor.Request {
	return &reactor.Request{Method: "POST", Path: "/v1/chat/completions", Query: "a=1", Header: hdr}
}

// outcome collects Done's outcome.
type outcome struct {
	ch        chan Outcome
	firstByte atomic.Int32
}

func newOutcome() *outcome { return &outcome{ch: make(chan Outcome, 1)} }

func (o *outcome) hooks() Hooks {
	return Hooks{
		FirstByte: func(*Backend, int) { o.firstByte.Add(1) },
		Done:      func(x Outcome) { o.ch <- x },
		Usage:     true,
	}
}

// Without Hooks.Usage the answer's body is not parsed for its usage.
func TestForwardUsageOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","usage":{"prompt_tokens":7}}`)
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	h := o.hooks()
	h.Usage = false
	if !s.Forward(chatReq(), []byte(`{}`), []*Backend{b}, sink, nil, h) {
		t.Fatal("Forward refused")
	}
	if x := o.wait(t); x.Status != 200 || x.Usage != nil {
		t.Errorf("outcome status %d usage %q; want 200 and no usage", x.Status, x.Usage)
	}
}

func (o *outcome) wait(t *testing.T) Outcome {
	t.Helper()
	select {
	case x := <-o.ch:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not run within 10 s")
		return Outcome{}
	}
}

func counter(ms *metrics.Set, name string) uint64 {
	return ms.GetOrCreateCounter(name).Get()
}

func TestForwardJSONPassThrough(t *testing.T) {
	t.Parallel()
	var got http.Header
	var gotURI, gotBody string
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		gotURI = r.URL.RequestURI()
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Custom", "yes")
		w.Header().Set("X-Private", "hop")
		w.Header().Set("Connection", "X-Private")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.WriteHeader(201)
		io.WriteString(w, `{"id":"x","usage":{"prompt_tokens":7,"completion_tokens":2}}`)
	})
	s, ms := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	req := chatReq(
		reactor.Header{Name: "Authorization", Value: "Bearer k"},
		reactor.Header{Name: "X-Request-ID", Value: "rid-1"},
		reactor.Header{Name: "Connection", Value: "keep-alive, X-Drop"},
		reactor.Header{Name: "X-Drop", Value: "1"},
		reactor.Header{Name: "Proxy-Authorization", Value: "secret"},
		reactor.Header{Name: "Content-Type", Value: "application/json"},
	)
	if !s.Forward(req, []byte(`{"model":"m"}`), []*Backend{b}, sink, []reactor.Header{{Name: "X-Saltus-Route", Value: "0/1 hash"}}, o.hooks()) {
		t.Fatal("Forward refused")
	}
	x := o.wait(t)
	sink.wait(t)
	if !sink.responded || sink.status != 201 || sink.body.String() != `{"id":"x","usage":{"prompt_tokens":7,"completion_tokens":2}}` {
		t.Fatalf("answer: responded=%v status=%d body=%q", sink.responded, sink.status, sink.body.String())
	}
	for name, want := range map[string]string{"X-Custom": "yes", "Content-Type": "application/json", "X-Request-ID": "rid-1",
		"X-Saltus-Backend": b.URL, "X-Saltus-Route": "0/1 hash"} {
		if v := sink.header(name); v != want {
			t.Errorf("answer header %s = %q, want %q", name, v, want)
		}
	}
	for _, name := range []string{"X-Private", "Connection", "Keep-Alive", "Proxy-Authenticate", "Content-Length", "Transfer-Encoding"} {
		if sink.hasHeader(name) {
			t.Errorf("answer has hop-by-hop (or framing) header %s", name)
		}
	}
	if got.Get("Authorization") != "Bearer k" || got.Get("X-Request-ID") != "rid-1" || got.Get("Content-Type") != "application/json" {
		t.Errorf("upstream got headers %v", got)
	}
	if got.Get("X-Drop") != "" || got.Get("Proxy-Authorization") != "" {
		t.Errorf("upstream got hop-by-hop headers %v", got)
	}
	if gotURI != "/v1/chat/completions?a=1" || gotBody != `{"model":"m"}` {
		t.Errorf("upstream got %q %q", gotURI, gotBody)
	}
	if x.Status != 201 || x.Err != nil || x.Backend != b || x.Retries != 0 || string(x.Usage) != `{"prompt_tokens":7,"completion_tokens":2}` {
		t.Errorf("outcome %+v usage %s", x, x.Usage)
	}
	if o.firstByte.Load() != 1 {
		t.Errorf("FirstByte ran %d times", o.firstByte.Load())
	}
	if b.InFlight() != 0 || s.inFlight.Load() != 0 {
		t.Errorf("in flight after the answer: backend %d, set %d", b.InFlight(), s.inFlight.Load())
	}
	if n := counter(ms, fmt.Sprintf(`saltus_backend_requests_total{backend=%q,code="201"}`, b.URL)); n != 1 {
		t.Errorf("requests_total{code=201} = %d", n)
	}
}

func TestForwardGeneratesRequestID(t *testing.T) {
	t.Parallel()
	ids := make(chan string, 2)
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		ids <- r.Header.Get("X-Request-ID")
		io.WriteString(w, "ok")
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	var seen []string
	for range 2 {
		sink := newSink()
		s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, Hooks{})
		sink.wait(t)
		up := <-ids
		if up == "" || sink.header("X-Request-ID") != up {
			t.Fatalf("generated id: upstream %q, client %q", up, sink.header("X-Request-ID"))
		}
		seen = append(seen, up)
	}
	if seen[0] == seen[1] {
		t.Errorf("two requests got the same generated id %q", seen[0])
	}
}

// sseUpstream sends each event only after the previous one reached the
// sink (the test releases it), so the order proves no batching.
func TestForwardSSEEventByEvent(t *testing.T) {
	t.Parallel()
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
		": comment\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n",
		"data: [DONE]\n\n",
	}
	next := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i, ev := range events {
			if i > 0 {
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			// Split each event in two writes: the relay must join them.
			io.WriteString(w, ev[:len(ev)/2])
			w.(http.Flusher).Flush()
			io.WriteString(w, ev[len(ev)/2:])
			w.(http.Flusher).Flush()
		}
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), []byte(`{"stream":true}`), []*Backend{b}, sink, nil, o.hooks())
	for i, ev := range events {
		select {
		case w := <-sink.wrote:
			if w != ev {
				t.Fatalf("write %d = %q, want event %q", i, w, ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d did not arrive before the upstream sent the next one", i)
		}
		if i < len(events)-1 {
			next <- struct{}{}
		}
	}
	x := o.wait(t)
	sink.wait(t)
	if !sink.ended || sink.aborted || sink.status != 200 || sink.hasHeader("Content-Length") {
		t.Errorf("ended=%v aborted=%v status=%d", sink.ended, sink.aborted, sink.status)
	}
	if sink.flushes < len(events) {
		t.Errorf("%d flushes for %d events", sink.flushes, len(events))
	}
	if x.Err != nil || string(x.Usage) != `{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}` {
		t.Errorf("outcome err %v usage %s", x.Err, x.Usage)
	}
	if b.InFlight() != 0 {
		t.Errorf("in flight %d", b.InFlight())
	}
}

func TestForwardRetriesThen502(t *testing.T) {
	t.Parallel()
	s, ms := testSet(t, nil)
	var bs []*Backend
	for range 4 {
		bs = append(bs, mustAdd(t, s, closedPort(t)))
	}
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), []byte("{}"), bs, sink, nil, o.hooks())
	x := o.wait(t)
	sink.wait(t)
	if sink.status != 502 || !strings.Contains(sink.body.String(), `"code":"bad_gateway"`) || !strings.HasPrefix(sink.body.String(), `{"error":{"message":`) {
		t.Fatalf("status %d body %s", sink.status, sink.body.String())
	}
	if x.Status != 502 || x.Retries != 2 || x.Err == nil || x.Backend != bs[2] || o.firstByte.Load() != 0 {
		t.Errorf("outcome %+v", x)
	}
	if n := counter(ms, "saltus_retries_total"); n != 2 {
		t.Errorf("retries_total = %d, want 2", n)
	}
	for i, b := range bs {
		want := uint64(1)
		if i == 3 {
			want = 0 // MaxRetries = 2: the fourth is never tried
		}
		if n := counter(ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="connect"}`, b.URL)); n != want {
			t.Errorf("backend %d connect errors = %d, want %d", i, n, want)
		}
		if b.InFlight() != 0 {
			t.Errorf("backend %d in flight %d", i, b.InFlight())
		}
	}
}

func TestForwardRetryReachesNextCandidate(t *testing.T) {
	t.Parallel()
	// A listener that accepts and closes at once: a refusal before the
	// first byte.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // test stand-in server, joined below
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	good := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fine") })
	s, ms := testSet(t, nil)
	dead := mustAdd(t, s, closedPort(t))
	refusing := mustAdd(t, s, "http://"+ln.Addr().String())
	ok := mustAdd(t, s, good.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), []byte("{}"), []*Backend{dead, refusing, ok}, sink, nil, o.hooks())
	x := o.wait(t)
	sink.wait(t)
	if sink.status != 200 || sink.body.String() != "fine" || x.Retries != 2 || x.Backend != ok || sink.header("X-Saltus-Backend") != ok.URL {
		t.Fatalf("status %d body %q outcome %+v", sink.status, sink.body.String(), x)
	}
	if n := counter(ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="reset"}`, refusing.URL)); n != 1 {
		t.Errorf("refusing backend: reset errors = %d, want 1", n)
	}
}

func TestForwardTimeout504(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		select { // stall before the head
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s, ms := testSet(t, func(c *Config) { c.FirstByteTimeout = 100 * time.Millisecond })
	b := mustAdd(t, s, srv.URL)
	next := mustAdd(t, s, closedPort(t))
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b, next}, sink, nil, o.hooks())
	x := o.wait(t)
	sink.wait(t)
	if sink.status != 504 || !x.TimedOut || x.Status != 504 || x.Retries != 0 || x.Backend != b {
		t.Fatalf("status %d outcome %+v", sink.status, x)
	}
	if n := counter(ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="timeout"}`, b.URL)); n != 1 {
		t.Errorf("timeout errors = %d", n)
	}
	if b.InFlight() != 0 || next.InFlight() != 0 || s.inFlight.Load() != 0 {
		t.Errorf("in flight after 504: %d %d %d", b.InFlight(), next.InFlight(), s.inFlight.Load())
	}
}

// dieAfter answers with a head and one piece of body, then drops the
// connection.
func dieAfter(ctype, first string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(200)
		io.WriteString(w, first)
		w.(http.Flusher).Flush()
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}
}

func TestForwardMidstreamDeathSSE(t *testing.T) {
	t.Parallel()
	first := "data: {\"n\":1}\n\n"
	srv := upstream(t, dieAfter("text/event-stream", first+"data: {\"n\":"))
	s, ms := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks())
	x := o.wait(t)
	sink.wait(t)
	if len(sink.writes) != 2 || sink.writes[0] != first || !strings.HasPrefix(sink.writes[1], "event: error\ndata: {\"error\":") ||
		!strings.HasSuffix(sink.writes[1], "\n\n") {
		t.Fatalf("writes %q", sink.writes)
	}
	if strings.Contains(sink.body.String(), "[DONE]") || !sink.ended || sink.aborted {
		t.Errorf("body %q ended=%v aborted=%v", sink.body.String(), sink.ended, sink.aborted)
	}
	if !x.UpstreamDied || x.Err == nil || x.ClientGone {
		t.Errorf("outcome %+v", x)
	}
	if n := counter(ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="midstream"}`, b.URL)); n != 1 || b.InFlight() != 0 {
		t.Errorf("midstream errors %d, in flight %d", n, b.InFlight())
	}
}

func TestForwardMidstreamDeathChunkedAborts(t *testing.T) {
	t.Parallel()
	srv := upstream(t, dieAfter("application/octet-stream", "part"))
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks())
	x := o.wait(t)
	sink.wait(t)
	if !sink.aborted || sink.ended || sink.body.String() != "part" || !x.UpstreamDied || b.InFlight() != 0 {
		t.Fatalf("aborted=%v ended=%v body=%q outcome %+v", sink.aborted, sink.ended, sink.body.String(), x)
	}
}

func TestForwardClientGoneCancelsUpstream(t *testing.T) {
	t.Parallel()
	upstreamSawClose := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // net/http cancels it when the connection closes
		close(upstreamSawClose)
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks())
	if w := <-sink.wrote; w != "data: 1\n\n" {
		t.Fatalf("first write %q", w)
	}
	if b.InFlight() != 1 || s.inFlight.Load() != 1 {
		t.Errorf("in flight while streaming: %d %d", b.InFlight(), s.inFlight.Load())
	}
	sink.leave()
	select {
	case <-upstreamSawClose:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream did not see its connection close")
	}
	x := o.wait(t)
	if !x.ClientGone || x.UpstreamDied || b.InFlight() != 0 || s.inFlight.Load() != 0 {
		t.Errorf("outcome %+v, in flight %d %d", x, b.InFlight(), s.inFlight.Load())
	}
}

func TestForwardMaxInFlight503(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "late")
	})
	s, ms := testSet(t, func(c *Config) { c.MaxInFlight = 1 })
	b := mustAdd(t, s, srv.URL)
	first, o1 := newSink(), newOutcome()
	if !s.Forward(chatReq(), nil, []*Backend{b}, first, nil, o1.hooks()) {
		t.Fatal("first Forward refused")
	}
	second, o2 := newSink(), newOutcome()
	if s.Forward(chatReq(), nil, []*Backend{b}, second, nil, o2.hooks()) {
		t.Fatal("second Forward accepted over MaxInFlight = 1")
	}
	if x := o2.wait(t); second.status != 503 || x.Status != 503 || x.Err != ErrOverloaded {
		t.Errorf("refused: status %d outcome %+v", second.status, x)
	}
	if counter(ms, "saltus_backend_overload_total") != 1 {
		t.Error("overload not counted")
	}
	close(release)
	o1.wait(t)
	if first.status != 200 || first.body.String() != "late" || s.inFlight.Load() != 0 || b.InFlight() != 0 {
		t.Errorf("first: %d %q, in flight %d", first.status, first.body.String(), s.inFlight.Load())
	}
	// No candidates: 503 too.
	third, o3 := newSink(), newOutcome()
	if s.Forward(chatReq(), nil, nil, third, nil, o3.hooks()) || o3.wait(t).Err != ErrNoCandidate || third.status != 503 {
		t.Error("Forward without candidates did not answer 503")
	}
}

// A slow client stops the upstream: with the sink's Write blocked, the
// upstream cannot finish writing 32 MiB; once it unblocks, all of it
// arrives.
func TestForwardSlowClientPausesUpstream(t *testing.T) {
	t.Parallel()
	const total = 32 << 20
	var written atomic.Int64
	upDone := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(upDone)
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := make([]byte, 64<<10)
		for written.Load() < total {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			written.Add(int64(len(chunk)))
		}
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	sink.block = make(chan struct{})
	s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks())
	// Wait until the upstream's writes stall (socket buffers full).
	var last int64 = -1
	for {
		time.Sleep(50 * time.Millisecond)
		n := written.Load()
		if n == last {
			break
		}
		last = n
	}
	select {
	case <-upDone:
		t.Fatal("the upstream finished while the client read nothing")
	default:
	}
	if last >= total/2 {
		t.Fatalf("the upstream wrote %d bytes while the client read nothing", last)
	}
	close(sink.block)
	o.wait(t)
	if sink.body.Len() != total || !sink.ended {
		t.Errorf("relayed %d of %d bytes, ended=%v", sink.body.Len(), total, sink.ended)
	}
}

func TestForwardAfterClose(t *testing.T) {
	t.Parallel()
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	s.Close()
	sink, o := newSink(), newOutcome()
	if s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks()) || o.wait(t).Err != ErrClosed || sink.status != 503 {
		t.Errorf("Forward after Close: status %d", sink.status)
	}
}

func TestCloseCancelsStreams(t *testing.T) {
	t.Parallel()
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks())
	<-sink.wrote
	s.Close() // joins the proxy goroutine
	select {
	case x := <-o.ch:
		if x.Err != ErrClosed || !sink.aborted || b.InFlight() != 0 {
			t.Errorf("outcome %+v aborted=%v", x, sink.aborted)
		}
	default:
		t.Fatal("Close returned before the proxy goroutine ended")
	}
}

func TestCloseCancelsWaitForHead(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	upstreamSawClose := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // never answers
		close(upstreamSawClose)
	})
	s, _ := testSet(t, func(c *Config) { c.FirstByteTimeout = time.Hour })
	b := mustAdd(t, s, srv.URL)
	next := mustAdd(t, s, closedPort(t))
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b, next}, sink, nil, o.hooks())
	<-arrived
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }() // test stand-in, joined below
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a head that never comes")
	}
	<-upstreamSawClose
	x := o.wait(t)
	if x.Err != ErrClosed || x.Status != 503 || sink.status != 503 || x.Retries != 0 || b.InFlight() != 0 || next.InFlight() != 0 {
		t.Errorf("outcome %+v, sink status %d", x, sink.status)
	}
}

// An event longer than the relay buffer goes out in pieces, byte for byte.
func TestForwardSSELongEvent(t *testing.T) {
	t.Parallel()
	stream := "data: " + strings.Repeat("x", 3*relayBufSize) + "\n\ndata: short\n\ndata: [DONE]\n\n"
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		io.WriteString(w, stream)
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b}, sink, nil, o.hooks())
	if x := o.wait(t); x.Err != nil {
		t.Fatal(x.Err)
	}
	if sink.body.String() != stream || !sink.ended {
		t.Fatalf("relayed %d bytes (ended=%v), want the upstream's %d unchanged", sink.body.Len(), sink.ended, len(stream))
	}
	if last := sink.writes[len(sink.writes)-2:]; last[0] != "data: short\n\n" || last[1] != "data: [DONE]\n\n" {
		t.Errorf("the events after the long one: %q", last)
	}
}

// Every connection to a backend busy: the request goes to the next
// candidate, and the busy backend's breaker does not count it.
func TestForwardAllConnsBusy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	busy := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	})
	good := upstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	s, ms := testSet(t, func(c *Config) { c.MaxConnsPerBackend, c.ConnectTimeout, c.BreakerFails = 1, 50*time.Millisecond, 1 })
	b := mustAdd(t, s, busy.URL)
	g := mustAdd(t, s, good.URL)
	first, o1 := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b}, first, nil, o1.hooks())
	<-arrived
	second, o2 := newSink(), newOutcome()
	s.Forward(chatReq(), nil, []*Backend{b, g}, second, nil, o2.hooks())
	x := o2.wait(t)
	if second.status != 200 || x.Backend != g || x.Retries != 1 || !b.Healthy() {
		t.Errorf("outcome %+v, busy backend healthy=%v", x, b.Healthy())
	}
	if n := counter(ms, fmt.Sprintf(`saltus_upstream_errors_total{backend=%q,kind="connect"}`, b.URL)); n != 1 {
		t.Errorf("connect errors %d", n)
	}
	close(release)
	o1.wait(t)
}

// A stream's head comes before its prefill, its first event after:
// FirstData runs once, after FirstByte and only when body bytes came, and
// Outcome.FirstData (the time to first token) is at least TTFB.
func TestForwardFirstData(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush() // the head alone, as vLLM sends it
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
	})
	s, _ := testSet(t, nil)
	b := mustAdd(t, s, srv.URL)
	sink, o := newSink(), newOutcome()
	head := make(chan struct{})
	var firstData atomic.Int32
	h := o.hooks()
	h.FirstByte = func(*Backend, int) { close(head) }
	h.FirstData = func() { firstData.Add(1) }
	s.Forward(chatReq(), []byte(`{"stream":true}`), []*Backend{b}, sink, nil, h)
	select {
	case <-head:
	case <-time.After(10 * time.Second):
		t.Fatal("no head")
	}
	if n := firstData.Load(); n != 0 {
		t.Fatalf("FirstData ran %d times before any body byte", n)
	}
	close(release)
	x := o.wait(t)
	sink.wait(t)
	if n := firstData.Load(); n != 1 {
		t.Fatalf("FirstData ran %d times, want 1", n)
	}
	if x.FirstData <= 0 || x.FirstData < x.TTFB {
		t.Fatalf("FirstData %v, TTFB %v", x.FirstData, x.TTFB)
	}
}

// TestForwardStaleConnRetried: on the goroutine path, a pooled
// connection the upstream closes with the next request unanswered is
// retried once on a fresh connection of the same backend, not counted as
// a retry; a fresh connection the upstream resets is not retried there
// (each send of a POST may be a whole generation): the request goes to
// the next candidate.
func TestForwardStaleConnRetried(t *testing.T) {
	t.Parallel()
	var resets atomic.Int64
	up := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		for i := 0; ; i++ {
			if _, _, ok := readReq(br); !ok {
				return
			}
			if n == 1 && i == 1 {
				return // the second request on the first connection: closed unanswered
			}
			answerOK(c, n, `{}`)
		}
	})
	reset := newRawUpstream(t, func(c net.Conn, br *bufio.Reader, n int) {
		if _, _, ok := readReq(br); ok {
			resets.Add(1)
		}
	})
	s, ms := testSet(t, func(c *Config) { c.IdleConnTimeout = time.Minute })
	b := mustAdd(t, s, up.url())
	r := mustAdd(t, s, reset.url())
	for i := range 3 {
		sink, o := newSink(), newOutcome()
		if !s.Forward(chatReq(), []byte(`{}`), []*Backend{b}, sink, nil, o.hooks()) {
			t.Fatal("Forward refused")
		}
		x := o.wait(t)
		sink.wait(t)
		if sink.status != 200 || x.Retries != 0 {
			t.Fatalf("request %d: %d, outcome %+v", i, sink.status, x)
		}
		if want := map[int]string{0: "1", 1: "2", 2: "2"}[i]; sink.header("X-Up") != want {
			t.Errorf("request %d served by connection %s, want %s", i, sink.header("X-Up"), want)
		}
	}
	sink, o := newSink(), newOutcome()
	if !s.Forward(chatReq(), []byte(`{}`), []*Backend{r, b}, sink, nil, o.hooks()) {
		t.Fatal("Forward refused")
	}
	x := o.wait(t)
	sink.wait(t)
	if sink.status != 200 || x.Retries != 1 || resets.Load() != 1 {
		t.Errorf("after a reset: %d, %d retries, %d sends to the resetting backend; want 200, 1, 1", sink.status, x.Retries, resets.Load())
	}
	if n := counter(ms, "saltus_retries_total"); n != 1 {
		t.Errorf("retries_total = %d, want 1", n)
	}
}
