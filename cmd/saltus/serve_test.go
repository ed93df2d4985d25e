package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/admin"
	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

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

// fakeData is a dataPlane. Start and StopAccepting ask the admin
// listener's /ready and record its answer, to show that /ready says 503
// until the data plane listens and flips to 503 before the data listener
// closes. Shutdown waits for release or its context.
type fakeData struct {
	rec       *recorder
	startErr  error
	admin     interface{ Addr() string } // whose /ready is asked; nil: none
	release   chan struct{}              // nil: Shutdown returns at once
	deadline  time.Duration              // Shutdown's context's time left, as seen on entry
	shutdownC chan struct{}              // closed when Shutdown is entered
}

func (f *fakeData) Start() error {
	f.rec.add("data.Start" + f.ready())
	return f.startErr
}

func (f *fakeData) Addr() string { return "127.0.0.1:1" }

func (f *fakeData) StopAccepting() { f.rec.add("data.StopAccepting" + f.ready()) }

// ready returns " (ready: <status> <body>)" from the admin's /ready.
func (f *fakeData) ready() string {
	if f.admin == nil {
		return ""
	}
	code, body := getReady(f.admin.Addr())
	return fmt.Sprintf(" (ready: %d %s)", code, body)
}

func getReady(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
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
	data := &fakeData{rec: rec}
	serving := new(atomic.Bool)
	cfg := admin.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Ready = readiness(serving, &servingPath{data: data, backends: oneBackend{}, routes: noRoutes{}})
	srv, err := admin.New(cfg, oneBackend{}, noRoutes{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	data.admin = srv
	if logs == nil {
		logs = io.Discard
	}
	l := lifecycle{
		serving: serving,
		admin:   recAdmin{srv, rec},
		data:    data,
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
	// A bound, not a pace: a saltus under the race detector on a loaded
	// machine took over 5 s to start listening.
	deadline := time.Now().Add(30 * time.Second)
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
	addr := ""
	waitFor(t, func() bool {
		addr = l.admin.Addr()
		code, _ := getReady(addr)
		return code == 200
	})
	data.release = make(chan struct{})
	data.shutdownC = make(chan struct{})
	signals <- syscall.SIGTERM
	<-data.shutdownC
	// Draining: the data plane waits for its requests; /ready says 503.
	if code, body := getReady(addr); code != 503 || body != "draining" {
		t.Errorf("/ready while draining: %d %q", code, body)
	}
	close(data.release)
	if c := <-code; c != 0 {
		t.Errorf("exit code %d, want 0", c)
	}
	want := []string{
		"admin.Start", "data.Start (ready: 503 starting)",
		"admin.SetDraining", "data.StopAccepting (ready: 503 draining)", "data.Shutdown",
		"admin.Shutdown", "closeRest",
	}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
	if data.deadline <= 2*time.Second || data.deadline > 3*time.Second {
		t.Errorf("Shutdown's context had %v left, want about the drain timeout, 3s", data.deadline)
	}
	if code, _ := getReady(addr); code != 0 {
		t.Errorf("admin listener still up after the lifecycle ended: /ready %d", code)
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
	signals <- syscall.SIGINT // before the start: kept by the buffer
	// The requests never end: only the drain timeout lets run return. The
	// bound is for a drain that ignores it, not a measurement.
	select {
	case c := <-runAsync(l, signals):
		if c != 0 {
			t.Errorf("exit code %d, want 0", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not end at its 50ms timeout")
	}
	want := []string{
		"admin.Start", "data.Start (ready: 503 starting)",
		"admin.SetDraining", "data.StopAccepting (ready: 503 draining)", "data.Shutdown",
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
	signals <- syscall.SIGTERM
	// The drain would take the hour; the bound is for a second signal that
	// is ignored, not a measurement.
	select {
	case c := <-code:
		if c != 1 {
			t.Errorf("exit code %d, want 1", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second signal did not end the drain")
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
		if got, want := rec.get(), []string{"admin.Start", "data.Start (ready: 503 starting)", "admin.Shutdown", "closeRest"}; !slices.Equal(got, want) {
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

// fakeAdmin is a controlPlane that only records.
type fakeAdmin struct{ rec *recorder }

func (a fakeAdmin) Start() error                       { a.rec.add("admin.Start"); return nil }
func (a fakeAdmin) Addr() string                       { return "127.0.0.1:2" }
func (a fakeAdmin) SetDraining()                       { a.rec.add("admin.SetDraining") }
func (a fakeAdmin) Shutdown(ctx context.Context) error { a.rec.add("admin.Shutdown"); return nil }

// TestLifecycleDrainTime checks on synctest's clock how long a drain
// takes: as long as the requests in flight, at most the drain timeout;
// the steps after it get closeTimeout.
func TestLifecycleDrainTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		requests time.Duration // until the requests in flight end
		want     time.Duration
		calls    []string
	}{
		{"requests end first", 7 * time.Second, 7 * time.Second, []string{
			"admin.Start", "data.Start", "admin.SetDraining", "data.StopAccepting", "data.Shutdown",
			"admin.Shutdown", "closeRest",
		}},
		{"timeout first", time.Hour, 30 * time.Second, []string{
			"admin.Start", "data.Start", "admin.SetDraining", "data.StopAccepting", "data.Shutdown",
			"data.Shutdown: context deadline exceeded", "admin.Shutdown", "closeRest",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				data := &fakeData{rec: rec, release: make(chan struct{})}
				var closeLeft time.Duration
				l := lifecycle{
					admin: fakeAdmin{rec},
					data:  data,
					closeRest: func(ctx context.Context) error {
						d, _ := ctx.Deadline()
						closeLeft = time.Until(d)
						rec.add("closeRest")
						return nil
					},
					drainTimeout: 30 * time.Second,
					logger:       slog.New(slog.DiscardHandler),
				}
				signals := make(chan os.Signal, 1)
				signals <- syscall.SIGTERM
				start := time.Now()
				// A bare goroutine in the bubble: the requests in
				// flight; it ends with the test (stop).
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					select {
					case <-time.After(tc.requests):
						close(data.release)
					case <-stop:
					}
				}()
				if code := l.run(signals); code != 0 {
					t.Errorf("exit code %d, want 0", code)
				}
				if got := time.Since(start); got != tc.want {
					t.Errorf("drain took %v, want %v", got, tc.want)
				}
				if closeLeft != closeTimeout {
					t.Errorf("closeRest's context had %v, want %v", closeLeft, closeTimeout)
				}
				if got := rec.get(); !slices.Equal(got, tc.calls) {
					t.Errorf("calls\n got %q\nwant %q", got, tc.calls)
				}
			})
		})
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	var serving atomic.Bool
	b := &listBackends{}
	sp := &servingPath{backends: b}
	ready := readiness(&serving, sp)
	check := func(want error) {
		t.Helper()
		if got := ready(); got != want {
			t.Errorf("readiness() = %v, want %v", got, want)
		}
	}
	b.list = []admin.BackendInfo{{ID: 0, Healthy: true}}
	check(errStarting)
	serving.Store(true)
	check(nil)
	b.list[0].Draining = true
	check(errNoBackend)
	b.list = append(b.list, admin.BackendInfo{ID: 1, Healthy: true})
	check(nil)
	// The serving path's own readiness wins over the list.
	routable := false
	sp.ready = func() bool { return routable }
	check(errNoBackend)
	routable = true
	check(nil)
}

// listBackends is a Backends over a plain list (one goroutine).
type listBackends struct{ list []admin.BackendInfo }

func (b *listBackends) List() []admin.BackendInfo { return b.list }
func (b *listBackends) Add(string) (admin.BackendInfo, error) {
	return admin.BackendInfo{}, errors.ErrUnsupported
}
func (b *listBackends) Remove(int) error { return admin.ErrNotFound }
func (b *listBackends) Drain(int) error  { return admin.ErrNotFound }

// TestServeWith runs the glue of `saltus serve` after buildDataPlane: the
// admin listener built from the config (address, token, readiness), the
// lifecycle, and the close of the serving path.
func TestServeWith(t *testing.T) {
	t.Parallel()
	cfg := defaultServeConfig()
	cfg.Reactor.Listen, cfg.Admin.Listen, cfg.Admin.BearerToken = "127.0.0.1:0", "127.0.0.1:0", "tok"
	cfg.DrainTimeout = time.Second
	rec := &recorder{}
	data := &fakeData{rec: rec}
	closed := make(chan struct{})
	sp := &servingPath{data: data, backends: oneBackend{}, routes: noRoutes{}, close: func(context.Context) error {
		close(closed)
		return nil
	}}
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))
	set := metricsSetWith(t, "saltus_fake_total 1")
	signals := make(chan os.Signal, 2)
	code := make(chan int, 1)
	// A bare goroutine: it stands for main's, joined through code.
	go func() { code <- serveWith(cfg, nil, sp, set, logger, nil, signals) }()

	var addr string
	waitFor(t, func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		m := regexp.MustCompile(`msg=serving component=serve listen=127.0.0.1:1 admin=(\S+)\n`).FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if c, _ := get("/ready", ""); c != 401 {
		t.Errorf("/ready without the token: %d, want 401", c)
	}
	if c, b := get("/ready", "tok"); c != 200 || b != "ok\n" {
		t.Errorf("/ready: %d %q", c, b)
	}
	if c, b := get("/health", ""); c != 200 || b != "ok\n" {
		t.Errorf("/health: %d %q", c, b)
	}
	if c, b := get("/metrics", "tok"); c != 200 || !strings.Contains(b, "saltus_fake_total 1\n") {
		t.Errorf("/metrics: %d, lacks the set's metric", c)
	}
	signals <- syscall.SIGTERM
	if c := <-code; c != 0 {
		t.Errorf("exit code %d", c)
	}
	<-closed
	logMu.Lock()
	text := logs.String()
	logMu.Unlock()
	for _, want := range []string{
		`level=WARN msg="no backends configured: /ready answers 503 until one is added with POST /admin/backends" component=serve`,
		`level=INFO msg="admin listening" component=admin addr=` + addr + " auth=true",
		`msg=stopped component=serve`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("logs lack %q:\n%s", want, text)
		}
	}

	// A serving path the admin listener cannot take is closed, exit 1.
	closed = make(chan struct{})
	sp.backends = nil
	if c := serveWith(cfg, nil, sp, nil, logger, nil, signals); c != 1 {
		t.Errorf("nil backends: exit code %d, want 1", c)
	}
	<-closed
}

func metricsSetWith(t *testing.T, line string) *metrics.Set {
	t.Helper()
	set := metrics.NewSet()
	name, _, _ := strings.Cut(line, " ")
	set.NewCounter(name).Inc()
	return set
}

func TestHeapFloor(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 1 << 20} {
		set := metrics.NewSet()
		b := heapFloor(n, set)
		var out bytes.Buffer
		set.WritePrometheus(&out)
		if int64(len(b)) != n || !strings.Contains(out.String(), fmt.Sprintf("saltus_gc_heap_floor_bytes %d\n", n)) {
			t.Errorf("heapFloor(%d): %d bytes, metrics %q", n, len(b), out.String())
		}
	}
}
