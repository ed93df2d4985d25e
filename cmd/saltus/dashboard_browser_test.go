package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The dashboard in a real browser (issue 14): `saltus serve` with an
// admin token in front of three simulated vLLM engines, a few chat
// requests, then headless Chromium loads /dashboard#token=… and the
// numbers it shows are compared with /metrics. Skipped without a Chromium
// binary; scripts/browser-test.sh (make browser-test) installs Debian's
// and runs it. SALTUS_SCREENSHOT_DIR, when set, receives the screenshots
// (the script: bench/results/issue14-dashboard).

// chromium returns the browser's path: $SALTUS_CHROMIUM, else the first
// of the usual names on PATH; "" when there is none.
func chromium() string {
	if p := os.Getenv("SALTUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// runChromium runs the headless browser with args until it exits or ctx
// ends, then kills its whole process group (the renderer and helper
// processes it forked), and returns its stdout.
func runChromium(ctx context.Context, t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		// Helpers left behind by a browser that exited on its own.
		if kerr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			t.Logf("kill chromium's process group: %v", kerr)
		}
	}
	if err != nil {
		t.Fatalf("chromium %v: %v (ctx: %v)\nstderr:\n%s", args, err, ctx.Err(), tail(stderr.String(), 3000))
	}
	return stdout.Bytes()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// domValue is the data-value of the element with id in the dumped DOM.
func domValue(t *testing.T, dom, id string) (float64, bool) {
	t.Helper()
	m := regexp.MustCompile(`<[^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(dom)
	if m == "" {
		t.Fatalf("the page has no element %s", id)
	}
	v := regexp.MustCompile(`data-value="([^"]*)"`).FindStringSubmatch(m)
	if v == nil || v[1] == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v[1], 64)
	if err != nil {
		t.Fatalf("%s: data-value %q: %v", id, v[1], err)
	}
	return f, true
}

func TestDashboardBrowser(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium binary (chromium, chromium-browser, google-chrome on PATH, or SALTUS_CHROMIUM): " +
			"`make browser-test` installs Debian's and runs this test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second) // the whole browser part
	defer cancel()

	const token = "dash-e2e-Token"
	_, urls := startSims(t, 3, 50)
	// Registered after the sims' cleanups, so it runs before them.
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Admin.BearerToken = token
		c.Backend.ScrapeInterval = 200 * time.Millisecond
	}, urls...)

	traffic := func(n int, tag string) {
		for i := range n {
			sys := sysA
			if i%3 == 2 {
				sys = sysB
			}
			body := chatJSON(i%2 == 1, "system", sys, "user", fmt.Sprintf("%s question %d about the tides?", tag, i%4))
			if a := s.chat(t, body); a.status != 200 {
				t.Fatalf("chat %d: %d %s", i, a.status, a.body)
			}
		}
	}
	traffic(12, "first")
	// The loop path's status counters and the feedback counters come
	// through a flusher: wait until /metrics has every answer.
	waitFor(t, func() bool {
		m := s.metrics(t)
		n := 0.0
		for k, v := range m {
			if strings.HasPrefix(k, "saltus_backend_requests_total{") {
				n += v
			}
		}
		return n == 12
	})
	waitFor(t, func() bool { // the engine scrape has read every engine
		for _, b := range s.backends(t) {
			if b.Engine == nil {
				return false
			}
		}
		return true
	})

	page := "http://" + s.admin + "/dashboard#token=" + token

	// Without traffic, the page's numbers and /metrics must agree exactly.
	dom := string(runChromium(ctx, t, bin, "--virtual-time-budget=4000", "--dump-dom", page))
	m := s.metrics(t)
	if !strings.Contains(dom, `data-state="ok"`) {
		t.Fatalf("the page did not load its data (body state): %s", tail(dom, 4000))
	}
	if strings.Contains(dom, token) {
		t.Error("the token is still in the page (its URL)")
	}
	sum := func(family string) float64 {
		v := 0.0
		for k, x := range m {
			if k == family || strings.HasPrefix(k, family+"{") {
				v += x
			}
		}
		return v
	}
	backends := s.backends(t)
	healthy := 0
	for _, b := range backends {
		if b.Healthy {
			healthy++
		}
	}
	for id, want := range map[string]float64{
		"kpi-req-total":        sum("saltus_requests_total"),
		"kpi-backends":         float64(len(backends)),
		"kpi-backends-healthy": float64(healthy),
		"kpi-inflight":         sum("saltus_backend_in_flight"),
		"kpi-routes":           sum("saltus_tree_nodes"),
		"kpi-blocks":           sum("saltus_tree_blocks"),
		"kpi-evictions":        sum("saltus_tree_evictions_total"),
		"kpi-tok-entries":      sum("saltus_tokenizer_cache_entries"),
		"kpi-tok-bytes":        sum("saltus_tokenizer_cache_bytes"),
	} {
		got, ok := domValue(t, dom, id)
		if !ok || got != want {
			t.Errorf("%s shows %v (set %v), /metrics says %v", id, got, ok, want)
		}
	}
	if sum("saltus_requests_total") != 12 || len(backends) != 3 || healthy != 3 || sum("saltus_tree_nodes") == 0 {
		t.Errorf("/metrics: %v requests, %d backends (%d healthy), %v route nodes; want 12, 3 (3), some",
			sum("saltus_requests_total"), len(backends), healthy, sum("saltus_tree_nodes"))
	}
	// The token hit ratio: the engines' cached tokens over prompt tokens,
	// since start (no answer in the page's last minute... all of them are
	// older than its first poll, so "since start").
	if prompt := sum("saltus_route_prompt_tokens_total"); prompt > 0 {
		want := sum("saltus_route_actual_cached_tokens_total") / prompt
		if got, ok := domValue(t, dom, "kpi-hit"); !ok || abs(got-want) > 1e-9 || want <= 0 {
			t.Errorf("kpi-hit shows %v (set %v), /metrics says %v", got, ok, want)
		}
	}
	if got, ok := domValue(t, dom, "kpi-ttfb-p50"); !ok || got <= 0 {
		t.Errorf("kpi-ttfb-p50: %v (set %v)", got, ok)
	}
	if n := strings.Count(dom, `data-healthy="true"`); n != 3 {
		t.Errorf("the backends table shows %d healthy backends, want 3", n)
	}
	for _, u := range urls {
		if !strings.Contains(dom, u) {
			t.Errorf("the backends table lacks %s", u)
		}
	}
	// The pools table: the engines' one model (their GET /v1/models), its
	// backends and requests as /metrics counts them; each backend lists it.
	tr := regexp.MustCompile(`<tr[^>]*\bdata-pool="llama3"[^>]*>`).FindString(dom)
	if tr == "" {
		t.Errorf("the pools table has no row for llama3: %s", tail(dom, 3000))
	}
	attr := func(name string) float64 {
		m := regexp.MustCompile(`\bdata-` + name + `="([^"]*)"`).FindStringSubmatch(tr)
		if m == nil {
			return -1
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return -1
		}
		return v
	}
	for name, family := range map[string]string{"backends": "saltus_pool_backends", "routable": "saltus_pool_routable_backends", "requests": "saltus_pool_requests_total"} {
		want, ok := m[family+`{model="llama3"}`]
		if got := attr(name); !ok || got != want {
			t.Errorf("the pools table's llama3 %s: %v, /metrics %s: %v (%v)", name, got, family, want, ok)
		}
	}
	// Its gateway queue: what /metrics has waiting (nothing: the fleet
	// is not saturated here; the queue's numbers are the e2e tests').
	if got, want := attr("queued"), metricSum(m, "saltus_queue_depth", `model="llama3"`); got != want {
		t.Errorf("the pools table's llama3 queued: %v, /metrics saltus_queue_depth: %v", got, want)
	}
	if attr("backends") != 3 || attr("requests") != 12 {
		t.Errorf("the pools table's llama3: %v backends, %v requests; want 3, 12", attr("backends"), attr("requests"))
	}
	if n := strings.Count(dom, `data-models="llama3"`); n != 3 {
		t.Errorf("the backends table shows llama3 as the models of %d backends, want 3", n)
	}

	// A wrong token: the page says so, and shows no data.
	dom = string(runChromium(ctx, t, bin, "--virtual-time-budget=3000", "--dump-dom", "http://"+s.admin+"/dashboard#token=wrong"))
	if !strings.Contains(dom, `data-state="unauthorized"`) || !strings.Contains(dom, "The admin token was refused (401)") ||
		regexp.MustCompile(`<section id="auth"[^>]*hidden`).MatchString(dom) {
		t.Errorf("with a wrong token the page does not show the 401: %s", tail(dom, 3000))
	}
	if v, ok := domValue(t, dom, "kpi-req-total"); ok {
		t.Errorf("with a wrong token the page shows %v requests", v)
	}

	// Screenshots, with traffic going on while the page polls.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // joined below
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Four tenants' system prompts: their prefixes spread over the engines.
			sys := fmt.Sprintf("Tenant %d. %s", i%4, []string{sysA, sysB}[i%2])
			body := chatJSON(i%2 == 0, "system", sys, "user", fmt.Sprintf("later question %d?", i%7))
			// Not do: it may call t.Fatal, which only the test's goroutine may.
			resp, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("background chat: %v", err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil {
				t.Errorf("background chat: %d %v", resp.StatusCode, err)
				return
			}
		}
	}()
	dir := t.TempDir()
	shots := map[string]string{"dashboard.png": "1366,900", "dashboard-1920.png": "1920,1080"}
	if drv := chromedriver(); drv != "" {
		// Through WebDriver the page polls in real time, so its charts
		// show a history; the command line's virtual time runs its
		// timers ahead of the server's clock.
		screenshotsLive(ctx, t, drv, bin, page, dir, shots)
	} else {
		t.Log("no chromedriver: screenshots from chromium --screenshot, with a few polls of history")
		for name, size := range shots {
			runChromium(ctx, t, bin, "--virtual-time-budget=6000", "--window-size="+size, "--screenshot="+filepath.Join(dir, name), page)
		}
	}
	close(stop)
	<-done
	for name, size := range shots {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if w := strconv.Itoa(img.Bounds().Dx()); !strings.HasPrefix(size, w+",") || len(b) < 20_000 {
			t.Errorf("%s: %v, %d bytes; want %s wide and not empty", name, img.Bounds(), len(b), size)
		}
		if out := os.Getenv("SALTUS_SCREENSHOT_DIR"); out != "" {
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s", filepath.Join(out, name))
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// chromedriver returns chromedriver's path ($SALTUS_CHROMEDRIVER, else on
// PATH), or "".
func chromedriver() string {
	if p := os.Getenv("SALTUS_CHROMEDRIVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromedriver")
	if err != nil {
		return ""
	}
	return p
}

// portWriter is chromedriver's stdout: it sends the port it reports
// listening on, once.
type portWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	port chan string // buffered, 1
	sent bool
}

func (w *portWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := regexp.MustCompile(`started successfully on port (\d+)`).FindSubmatch(w.buf.Bytes()); m != nil && !w.sent {
		w.sent = true
		w.port <- string(m[1])
	}
	return len(p), nil
}

// screenshotsLive opens page in Chromium through chromedriver (W3C
// WebDriver over HTTP), waits until the page has polled 15 times (about
// 15 s of history), and saves a screenshot at each window size into dir.
func screenshotsLive(ctx context.Context, t *testing.T, drv, bin, page, dir string, shots map[string]string) {
	t.Helper()
	out := &portWriter{port: make(chan string, 1)}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, drv, "--port=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromedriver: %v", err)
	}
	defer func() {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Logf("kill chromedriver's process group: %v", err)
		}
		_ = cmd.Wait() // killed: its error says so
	}()
	var base string
	select {
	case p := <-out.port:
		base = "http://127.0.0.1:" + p
	case <-ctx.Done():
		t.Fatalf("chromedriver did not start: %s", stderr.String())
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path string, body any) json.RawMessage {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("WebDriver %s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var v struct {
			Value json.RawMessage `json:"value"`
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || json.Unmarshal(b, &v) != nil || resp.StatusCode != 200 {
			t.Fatalf("WebDriver %s %s: %d %v: %s", method, path, resp.StatusCode, err, tail(string(b), 2000))
		}
		return v.Value
	}
	w, h, _ := strings.Cut(shots["dashboard.png"], ",")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=" + w + "," + h}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(call("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome", "goog:chromeOptions": map[string]any{"binary": bin, "args": args},
	}}}), &sess); err != nil || sess.SessionID == "" {
		t.Fatalf("WebDriver session: %v", err)
	}
	s := "/session/" + sess.SessionID
	defer call("DELETE", s, nil)
	call("POST", s+"/url", map[string]string{"url": page})
	polls := func() int {
		var n string
		if err := json.Unmarshal(call("POST", s+"/execute/sync", map[string]any{"script": "return document.body.dataset.polls", "args": []any{}}), &n); err != nil {
			t.Fatal(err)
		}
		v, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("data-polls %q", n)
		}
		return v
	}
	// The page's own polls are the events waited for; ctx bounds it.
	for n := polls(); n < 15; n = polls() {
		select {
		case <-ctx.Done():
			t.Fatalf("the page polled %d times before the deadline", n)
		case <-time.After(250 * time.Millisecond):
		}
	}
	for _, name := range []string{"dashboard.png", "dashboard-1920.png"} {
		w, h, _ := strings.Cut(shots[name], ",")
		wi, _ := strconv.Atoi(w) // the test's own constants
		hi, _ := strconv.Atoi(h) // the test's own constants
		call("POST", s+"/window/rect", map[string]int{"width": wi, "height": hi})
		n := polls()
		for polls() < n+2 { // redrawn at the new size, with a new point
			select {
			case <-ctx.Done():
				t.Fatal("the page stopped polling")
			case <-time.After(250 * time.Millisecond):
			}
		}
		var b64 string
		if err := json.Unmarshal(call("GET", s+"/screenshot", nil), &b64); err != nil {
			t.Fatal(err)
		}
		png, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
