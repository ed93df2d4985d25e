package reactor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// testHandler answers by path:
//
//	/echo          200, body "METHOD path?query|body"
//	/delay?ms=N    200 after N ms, from another goroutine, body = path+query
//	/stream?n=N&ms=M  N chunks "data: i\n\n", M ms apart, each written on the loop from another goroutine
//	/stream?n=N&gate=1  the same, each chunk after the test sends on next
//	/hold          200 once the test closes release (or the client leaves)
//	/big?n=N       N bytes streamed in 64 KiB loop writes from another goroutine, pausing
//	               while the connection owes over MaxOutboundBytes; its end (or error) goes to bigErr
//	/blob?n=N      N bytes answered whole in Serve; counts in blobs
//	/gone          never answers; closes goneSeen when Gone closes
//	/post?loop=i   answers from a function Posted to loop i, with the loop index seen
//	/remote        200, body = the client's address (Request.RemoteAddr)
//
// Every request's path goes to served as Serve starts it (dropped if 64
// are waiting), so a test waits for the server to have a request instead
// of sleeping.
type testHandler struct {
	s        *Server
	wg       sync.WaitGroup // the handler's goroutines
	blobs    atomic.Int64
	bigErr   chan error
	goneSeen chan struct{}
	served   chan string
	next     chan struct{} // /stream?gate=1: one chunk per receive
	release  chan struct{} // /hold: closed by the test

	ownMu sync.Mutex
	own   map[int]int // OwnAnswer's count by status
}

// OwnAnswer counts the reactor's own answers (OwnAnswers).
func (h *testHandler) OwnAnswer(status int, _, _ string) {
	h.ownMu.Lock()
	defer h.ownMu.Unlock()
	if h.own == nil {
		h.own = map[int]int{}
	}
	h.own[status]++
}

func (h *testHandler) ownCount(status int) int {
	h.ownMu.Lock()
	defer h.ownMu.Unlock()
	return h.own[status]
}

func newTestHandler() *testHandler {
	return &testHandler{bigErr: make(chan error, 16), goneSeen: make(chan struct{}, 16),
		served: make(chan string, 64), next: make(chan struct{}), release: make(chan struct{})}
}

// waitServed waits until the handler has started serving path.
func (h *testHandler) waitServed(t *testing.T, path string) {
	t.Helper()
	timeout := time.After(10 * time.Second) // a bound for a request that never comes, not a wait
	for {
		select {
		case p := <-h.served:
			if p == path {
				return
			}
		case <-timeout:
			t.Fatalf("the handler never started serving %s", path)
		}
	}
}

func (h *testHandler) goAnswer(fn func()) {
	h.wg.Add(1)
	// A test's stand-in for the proxy goroutines; joined by h.wg.
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

func (h *testHandler) Serve(x *Exchange) {
	r := x.Request()
	q := r.Query
	arg := func(name string) int {
		for kv := range strings.SplitSeq(q, "&") {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	select {
	case h.served <- r.Path:
	default: // nobody waits for so many
	}
	switch r.Path {
	case "/remote":
		x.Respond(200, nil, []byte(r.RemoteAddr))
	case "/hold":
		h.goAnswer(func() {
			select {
			case <-h.release:
			case <-x.Gone():
			}
			x.Respond(200, nil, []byte(r.Path))
		})
	case "/echo":
		body := fmt.Sprintf("%s %s?%s|%s", r.Method, r.Path, r.Query, r.Body)
		x.Respond(200, []Header{{"Content-Type", "text/plain"}, {"X-Loop", strconv.Itoa(x.Loop().Index())}}, []byte(body))
	case "/delay":
		ms := arg("ms")
		h.goAnswer(func() {
			time.Sleep(time.Duration(ms) * time.Millisecond)
			x.Respond(200, nil, []byte(r.Path+"?"+r.Query))
		})
	case "/stream":
		n, ms, gate := arg("n"), arg("ms"), arg("gate") == 1
		h.goAnswer(func() {
			if err := h.onLoop(x, func() error {
				_, err := x.WriteHeaderLoop(200, []Header{{"Content-Type", "text/event-stream"}})
				return err
			}); err != nil {
				return
			}
			for i := range n {
				if gate {
					select {
					case <-h.next:
					case <-x.Gone():
						return
					}
				}
				if err := h.onLoop(x, func() error {
					_, err := x.WriteLoop(fmt.Appendf(nil, "data: %d\n\n", i))
					return err
				}); err != nil {
					return
				}
				time.Sleep(time.Duration(ms) * time.Millisecond)
			}
			_ = h.onLoop(x, x.EndLoop)
		})
	case "/big":
		n := arg("n")
		h.goAnswer(func() {
			piece := bytes.Repeat([]byte("x"), 64<<10)
			max := int64(h.s.cfg.MaxOutboundBytes)
			var owed int64
			err := h.onLoop(x, func() (err error) {
				owed, err = x.WriteHeaderLoop(200, nil)
				return err
			})
			for sent := 0; err == nil && sent < n; {
				if owed > max {
					// The bound is the writer's (a loop cannot wait):
					// look again once the client may have read some.
					select {
					case <-x.Gone():
						err = ErrClientGone
					case <-time.After(time.Millisecond):
						err = h.onLoop(x, func() error { owed = x.c.owed(); return nil })
					}
					continue
				}
				err = h.onLoop(x, func() (err error) {
					owed, err = x.WriteLoop(piece)
					return err
				})
				sent += len(piece)
			}
			if err == nil {
				err = h.onLoop(x, x.EndLoop)
			}
			h.bigErr <- err
		})
	case "/blob":
		h.blobs.Add(1)
		x.Respond(200, nil, bytes.Repeat([]byte("b"), arg("n")))
	case "/abort":
		h.goAnswer(func() {
			_ = h.onLoop(x, func() error {
				if _, err := x.WriteHeaderLoop(200, []Header{{"Content-Length", "100"}}); err != nil {
					return err
				}
				_, err := x.WriteLoop([]byte("partial"))
				return err
			})
			time.Sleep(20 * time.Millisecond)
			x.Abort()
		})
	case "/gone":
		h.goAnswer(func() {
			<-x.Gone()
			h.goneSeen <- struct{}{}
		})
	case "/post":
		loop := arg("loop")
		h.goAnswer(func() {
			done := make(chan int, 1)
			if !h.s.Loops()[loop].Post(func() { done <- loop }) {
				x.Respond(503, nil, []byte("full"))
				return
			}
			x.Respond(200, nil, []byte(strconv.Itoa(<-done)))
		})
	default:
		x.Respond(404, nil, []byte("not found"))
	}
}

// onLoop runs fn on x's loop (a streamed answer is written there) and
// returns its error, ErrClientGone if the loop never ran it.
func (h *testHandler) onLoop(x *Exchange, fn func() error) error {
	done := make(chan error, 1)
	x.Loop().Poster()(func() { done <- fn() })
	select {
	case err := <-done:
		return err
	case <-x.Gone():
		return ErrClientGone
	}
}

// startServer starts a server on 127.0.0.1:0 with cfg's changes; the
// cleanup shuts it down and joins the handler's goroutines.
func startServer(t testing.TB, change func(*Config)) (*Server, *testHandler, *metrics.Set) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Loops = 2
	if change != nil {
		change(&cfg)
	}
	h := newTestHandler()
	set := metrics.NewSet()
	s, err := NewServer(cfg, h, slog.New(slog.NewTextHandler(io.Discard, nil)), set)
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx) // some tests leave exchanges open on purpose
		h.wg.Wait()
	})
	return s, h, set
}

func dial(t *testing.T, s *Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc, bufio.NewReader(nc)
}

func send(t *testing.T, nc net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(nc, s); err != nil {
		t.Fatal(err)
	}
}

type resp struct {
	status int
	body   string
	hdr    http.Header
	close  bool
}

func read(t *testing.T, br *bufio.Reader, method string) resp {
	t.Helper()
	r, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp{r.StatusCode, string(b), r.Header, r.Close}
}

// expectClosed asserts the server closes nc (EOF) with nothing more sent.
func expectClosed(t *testing.T, br *bufio.Reader) {
	t.Helper()
	b, err := io.ReadAll(br)
	if len(b) != 0 || (err != nil && !isReset(err)) {
		t.Fatalf("want the connection closed, got %q, %v", b, err)
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "reset by peer") }

func counter(set *metrics.Set, name string) string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			return v
		}
	}
	return "absent"
}

// waitCounter waits until the counter name is above 0: the event a test
// needs before its next step (polled every millisecond; the 10 s bound
// is for an event that never comes, not a wait).
func waitCounter(t *testing.T, set *metrics.Set, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for v := counter(set, name); v == "0" || v == "absent"; v = counter(set, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed %s", name, v)
		}
		time.Sleep(time.Millisecond)
	}
}
