package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/saltus-lb/saltus/shard/admin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder keeps the order of the lifecycle's calls.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// fakeData is a dataPlane. StopAccepting asks the admin listener's /ready
// and records its status, to show that /ready flips before the data
// listener closes. Shutdown waits for release or its context.
type fakeData struct {
	rec       *recorder
	startErr  error
	readyURL  string        // asked at StopAccepting
	release   chan struct{} // nil: Shutdown returns at once
	deadline  time.Duration // Shutdown's context's time left, as seen on entry
	shutdownC chan struct{} // closed when Shutdown is entered
}

func (f *fakeData) Start() error {
	f.rec.add("data.Start")
	return f.startErr
}

func (f *fakeData) Addr() string { return "127.0.0.1:1" }

func (f *fakeData) StopAccepting() {
	code := "?"
	if resp, err := http.Get(f.readyURL); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code = resp.Status[:3] + " " + strings.TrimSpace(string(body))
	}
	f.rec.add("data.StopAccepting (ready: " + code + ")")
}

func (f *fakeData) Shutdown(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		f.deadline = time.Until(d)
	}
	f.rec.add("data.Shutdown")
	if f.shutdownC != nil {
		close(f.shutdownC)
	}
	if f.release == nil {
		return nil
	}
	select {
	case <-f.release:
		return nil
	case <-ctx.Done():
		f.rec.add("data.Shutdown: " + ctx.Err().Error())
		return ctx.Err()
	}
}

// recAdmin wraps the real admin server, recording calls.
type recAdmin struct {
	*admin.Server
	rec *recorder
}

func (a recAdmin) Start() error {
	a.rec.add("admin.Start")
	return a.Server.Start()
}

func (a recAdmin) SetDraining() {
	a.rec.add("admin.SetDraining")
	a.Server.SetDraining()
}

func (a recAdmin) Shutdown(ctx context.Context) error {
	a.rec.add("admin.Shutdown")
	return a.Server.Shutdown(ctx)
}

type oneBackend struct{}

func (oneBackend) List() []admin.BackendInfo {
	return []admin.BackendInfo{{ID: 0, URL: "http://127.0.0.1:1", Healthy: true}}
}
func (oneBackend) Add(string) (admin.BackendInfo, error) {
	return admin.BackendInfo{}, errors.ErrUnsupported
}
func (oneBackend) Remove(int) error { return admin.ErrNotFound }
func (oneBackend) Drain(int) error  { return admin.ErrNotFound }

type noRoutes struct{}

func (noRoutes) RouteStats() any                     { return nil }
func (noRoutes) Explain([]byte, string) (any, error) { return nil, errors.ErrUnsupported }

// newLifecycle returns a lifecycle over a real admin listener on a free
// loopback port and a fakeData.
func newLifecycle(t *testing.T, drain time.Duration, logs io.Writer) (lifecycle, *fakeData, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := admin.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	srv, err := admin.New(cfg, oneBackend{}, noRoutes{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := &fakeData{rec: rec}
	if logs == nil {
		logs = io.Discard
	}
	l := lifecycle{
		admin: recAdmin{srv, rec},
		data:  data,
		closeRest: func(context.Context) error {
			rec.add("closeRest")
			return nil
		},
		drainTimeout: drain,
		logger:       slog.New(slog.NewTextHandler(logs, nil)),
	}
	return l, data, rec
}

// runAsync runs l in a goroutine and returns its exit code's channel.
func runAsync(l lifecycle, signals chan os.Signal) <-chan int {
	code := make(chan int, 1)
	// A bare goroutine: it stands for main's, and the test joins it
	// through code.
	go func() { code <- l.run(signals) }()
	return code
}

// waitFor polls cond until it holds, for at most 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLifecycleDrain(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var logMu sync.Mutex
	l, data, rec := newLifecycle(t, 3*time.Second, lockedWriter{&logs, &logMu})
	signals := make(chan os.Signal, 2)
	code := runAsync(l, signals)
	waitFor(t, func() bool { return len(rec.get()) == 2 })
	addr := l.admin.Addr()
	data.readyURL = "http://" + addr + "/ready"
	resp, err := http.Get(data.readyURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/ready while serving: %d", resp.StatusCode)
	}
	data.release = make(chan struct{})
	data.shutdownC = make(chan struct{})
	signals <- syscall.SIGTERM
	<-data.shutdownC
	// Draining: the data plane waits for its requests; /ready says 503.
	resp, err = http.Get(data.readyURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/ready while draining: %d", resp.StatusCode)
	}
	close(data.release)
	if c := <-code; c != 0 {
		t.Errorf("exit code %d, want 0", c)
	}
	want := []string{
		"admin.Start", "data.Start",
		"admin.SetDraining", "data.StopAccepting (ready: 503 draining)", "data.Shutdown",
		"admin.Shutdown", "closeRest",
	}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
	if data.deadline <= 2*time.Second || data.deadline > 3*time.Second {
		t.Errorf("Shutdown's context had %v left, want about the drain timeout, 3s", data.deadline)
	}
	if _, err := http.Get(data.readyURL); err == nil {
		t.Error("admin listener still up after the lifecycle ended")
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, want := range []string{`msg=serving listen=127.0.0.1:1 admin=` + addr, `msg=draining signal=terminated drain_timeout=3s`, `msg=drained`, `msg=stopped`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}

// TestLifecycleDrainTimeout: requests that outlive the drain timeout are
// cut, the rest still closes, and the exit code is 0.
func TestLifecycleDrainTimeout(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var logMu sync.Mutex
	l, data, rec := newLifecycle(t, 50*time.Millisecond, lockedWriter{&logs, &logMu})
	data.release = make(chan struct{}) // never closed: requests that never end
	signals := make(chan os.Signal, 2)
	start := time.Now()
	signals <- syscall.SIGINT // before the start: kept by the buffer
	if c := <-runAsync(l, signals); c != 0 {
		t.Errorf("exit code %d, want 0", c)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v with a 50ms drain timeout", d)
	}
	want := []string{
		"admin.Start", "data.Start",
		"admin.SetDraining", "data.StopAccepting (ready: ?)", "data.Shutdown",
		"data.Shutdown: context deadline exceeded", "admin.Shutdown", "closeRest",
	}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), `level=WARN msg="drain timed out; requests still in flight were cut"`) {
		t.Errorf("no drain timeout warning:\n%s", logs.String())
	}
}

// TestLifecycleSecondSignal: a second signal during the drain exits at
// once with 1.
func TestLifecycleSecondSignal(t *testing.T) {
	t.Parallel()
	l, data, rec := newLifecycle(t, time.Hour, nil)
	data.release = make(chan struct{}) // the drain would take the whole hour
	data.shutdownC = make(chan struct{})
	signals := make(chan os.Signal, 2)
	code := runAsync(l, signals)
	signals <- syscall.SIGTERM
	<-data.shutdownC
	start := time.Now()
	signals <- syscall.SIGTERM
	if c := <-code; c != 1 {
		t.Errorf("exit code %d, want 1", c)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second signal took %v to exit", d)
	}
	// The abandoned drain ends with its context (cancelled on return)
	// and still closes the admin listener: goleak sees no goroutine left.
	waitFor(t, func() bool { return slices.Contains(rec.get(), "closeRest") })
	if got := rec.get(); !slices.Contains(got, "data.Shutdown: context canceled") {
		t.Errorf("calls %q: the drain's context was not cancelled", got)
	}
}

func TestLifecycleStartErrors(t *testing.T) {
	t.Parallel()
	t.Run("data", func(t *testing.T) {
		t.Parallel()
		l, data, rec := newLifecycle(t, time.Second, nil)
		data.startErr = errors.New("address in use")
		if c := l.run(make(chan os.Signal)); c != 1 {
			t.Errorf("exit code %d, want 1", c)
		}
		if got, want := rec.get(), []string{"admin.Start", "data.Start", "admin.Shutdown", "closeRest"}; !slices.Equal(got, want) {
			t.Errorf("calls %q, want %q", got, want)
		}
	})
	t.Run("admin", func(t *testing.T) {
		t.Parallel()
		l, _, rec := newLifecycle(t, time.Second, nil)
		// Take the admin's port first.
		first, _, _ := newLifecycle(t, time.Second, nil)
		if err := first.admin.Start(); err != nil {
			t.Fatal(err)
		}
		defer first.admin.Shutdown(context.Background())
		cfg := admin.DefaultConfig()
		cfg.Listen = first.admin.Addr()
		srv, err := admin.New(cfg, oneBackend{}, noRoutes{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.admin = recAdmin{srv, rec}
		if c := l.run(make(chan os.Signal)); c != 1 {
			t.Errorf("exit code %d, want 1", c)
		}
		if got, want := rec.get(), []string{"admin.Start", "closeRest"}; !slices.Equal(got, want) {
			t.Errorf("calls %q, want %q (the data plane must not start)", got, want)
		}
	})
}

// TestServeNotWired: until the lead wires buildDataPlane, `saltus serve`
// says so and exits 1, and listens on nothing.
func TestServeNotWired(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, nil, &out, &errb); code != 1 ||
		!strings.HasPrefix(errb.String(), "saltus serve: serving path not wired yet") {
		t.Errorf("serve: %d, stderr %q", code, errb.String())
	}
}

func TestServeHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--help"}, nil, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "Usage: saltus serve") ||
		!strings.Contains(errb.String(), "  --drain-timeout duration\n") {
		t.Errorf("serve --help: %d, stderr %q", code, errb.String())
	}
	if code := run([]string{"serve", "--nope"}, nil, &out, &errb); code != 2 {
		t.Errorf("serve --nope: %d", code)
	}
	errb.Reset()
	if code := run([]string{"serve", "stray"}, nil, &out, &errb); code != 2 ||
		errb.String() != "saltus serve: unexpected argument \"stray\" (flags start with --)\n" {
		t.Errorf("serve stray: %d %q", code, errb.String())
	}
	out.Reset()
	if run([]string{"help"}, nil, &out, &errb); !strings.Contains(out.String(), "\n  serve ") {
		t.Errorf("help does not list serve:\n%s", out.String())
	}
}

func TestLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := newLogger(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	c := componentLogger(l, "admin")
	c.Info("hidden")
	c.Warn("shown", "n", 3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("one JSON record expected: %v: %q", err, buf.String())
	}
	if rec["msg"] != "shown" || rec["component"] != "admin" || rec["level"] != "WARN" || rec["n"] != 3.0 {
		t.Errorf("record %v", rec)
	}
	buf.Reset()
	l, _ = newLogger(&buf, "text", "DEBUG")
	componentLogger(l, "shard").Debug("d")
	if !strings.Contains(buf.String(), "level=DEBUG msg=d component=shard\n") {
		t.Errorf("text record %q", buf.String())
	}
	if _, err := newLogger(&buf, "xml", "info"); err == nil || err.Error() != `config: log-format: must be "text" or "json", got "xml"` {
		t.Errorf("bad format: %v", err)
	}
	if _, err := newLogger(&buf, "text", "verbose"); err == nil || err.Error() != `config: log-level: want debug, info, warn or error, got "verbose"` {
		t.Errorf("bad level: %v", err)
	}
}

// lockedWriter serializes writes to a buffer shared with the test.
type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
