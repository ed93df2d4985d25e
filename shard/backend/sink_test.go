package backend

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m,
		// The benchmarks' fasthttp upstream: its worker pool's cleaner
		// sleeps 10 s before it sees Stop, and its Date updater runs for
		// the life of the process.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

var errFakeGone = errors.New("fake sink: client gone")

// fakeSink records everything a Forward writes.
type fakeSink struct {
	mu        sync.Mutex
	status    int
	hdr       []reactor.Header
	writes    []string
	body      bytes.Buffer
	responded bool
	ended     bool
	aborted   bool
	flushes   int

	gone     chan struct{}
	goneOnce sync.Once
	done     chan struct{} // closed on Respond, End or Abort
	doneOnce sync.Once
	wrote    chan string   // every Write, in order (buffered)
	block    chan struct{} // non-nil: Write waits for it to close (a slow client)
}

func newSink() *fakeSink {
	return &fakeSink{gone: make(chan struct{}), done: make(chan struct{}), wrote: make(chan string, 1<<12)}
}

func (f *fakeSink) finish() { f.doneOnce.Do(func() { close(f.done) }) }
func (f *fakeSink) leave()  { f.goneOnce.Do(func() { close(f.gone) }) }

func (f *fakeSink) Respond(status int, hdr []reactor.Header, body []byte) {
	f.mu.Lock()
	f.status, f.hdr, f.responded = status, hdr, true
	f.body.Write(body)
	f.mu.Unlock()
	f.finish()
}

func (f *fakeSink) WriteHeader(status int, hdr []reactor.Header) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.hdr = status, hdr
	return nil
}

func (f *fakeSink) Write(p []byte) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-f.gone:
		}
	}
	select {
	case <-f.gone:
		return errFakeGone
	default:
	}
	f.mu.Lock()
	f.writes = append(f.writes, string(p))
	f.body.Write(p)
	f.mu.Unlock()
	select {
	case f.wrote <- string(p):
	default:
	}
	return nil
}

func (f *fakeSink) Flush() error {
	f.mu.Lock()
	f.flushes++
	f.mu.Unlock()
	return nil
}

func (f *fakeSink) End() error {
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.finish()
	return nil
}

func (f *fakeSink) Abort() {
	f.mu.Lock()
	f.aborted = true
	f.mu.Unlock()
	f.finish()
}

func (f *fakeSink) Gone() <-chan struct{} { return f.gone }

// wait waits for the answer to finish.
func (f *fakeSink) wait(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer did not finish within 10 s")
	}
}

func (f *fakeSink) header(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.hdr {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

func (f *fakeSink) hasHeader(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.hdr {
		if strings.EqualFold(h.Name, name) {
			return true
		}
	}
	return false
}
