package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ctlUpstream is a test engine whose behaviour the request picks with
// X-Test: "stream" (10 SSE events 50 ms apart, then [DONE]), "hang" (one
// event, then nothing until the client side goes away; cancelled records
// it), "slowhead" (1.5 s before the head). Anything else: a JSON answer.
type ctlUpstream struct {
	srv       *httptest.Server
	calls     atomic.Int64
	cancelled chan struct{} // one value per "hang" request whose context ended
}

func newCtlUpstream(t *testing.T) *ctlUpstream {
	t.Helper()
	u := &ctlUpstream{cancelled: make(chan struct{}, 16)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.Method != "POST" {
			io.WriteString(w, "ok")
			return
		}
		u.calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.Header.Get("X-Test") {
		case "stream", "hang":
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			io.WriteString(w, "data: {\"tok\":0}\n\n")
			fl.Flush()
			if r.Header.Get("X-Test") == "hang" {
				select {
				case <-r.Context().Done():
					u.cancelled <- struct{}{}
				case <-time.After(10 * time.Second):
				}
				return
			}
			for i := 1; i < 10; i++ {
				time.Sleep(50 * time.Millisecond)
				fmt.Fprintf(w, "data: {\"tok\":%d}\n\n", i)
				fl.Flush()
			}
			io.WriteString(w, "data: [DONE]\n\n")
		case "slowhead":
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-r.Context().Done():
			}
			io.WriteString(w, `{"late":true}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"served_by":%q}`, u.srv.URL)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// adminDo sends an admin request with an optional bearer token.
func adminDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
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

func backendsInFlight(t *testing.T, admin string) map[string]int64 {
	t.Helper()
	code, body := adminDo(t, "GET", "http://"+admin+"/admin/backends", "", "")
	if code != 200 {
		t.Fatalf("GET /admin/backends: %d %s", code, body)
	}
	var list []struct {
		URL      string `json:"url"`
		InFlight int64  `json:"in_flight"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("GET /admin/backends: %v: %s", err, body)
	}
	out := map[string]int64{}
	for _, b := range list {
		out[b.URL] = b.InFlight
	}
	return out
}

// TestServeDrainInFlightStream: SIGTERM while a stream is in flight: /ready
// answers 503 at once, new connections are refused, the stream finishes
// with its [DONE], and serve exits 0 (checked when the test ends).
func TestServeDrainInFlightStream(t *testing.T) {
	up := newCtlUpstream(t)
	sv := startServeWith(t, nil, nil, up.srv.URL)
	resp, err := http.DefaultClient.Do(mustReq(t, "http://"+sv.addr+"/v1/chat/completions",
		chatJSON(true, "system", sysA, "user", "Stream please."), "X-Test", "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	sv.signals <- syscall.SIGTERM
	waitFor(t, func() bool {
		code, _ := adminDo(t, "GET", "http://"+sv.admin+"/ready", "", "")
		return code == 503
	})
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", sv.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || strings.Count(string(rest), "data: ") != 10 {
		t.Fatalf("stream after SIGTERM: %v %q", err, rest)
	}
	select {
	case c := <-sv.code:
		if c != 0 {
			t.Fatalf("exit code %d", c)
		}
		sv.exited(0)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit after the drain")
	}
}

// TestServeClientAbortCancelsUpstream: a client that leaves mid-stream
// gets its upstream request cancelled and the in-flight count back to 0.
func TestServeClientAbortCancelsUpstream(t *testing.T) {
	up := newCtlUpstream(t)
	sv := startServeWith(t, nil, nil, up.srv.URL)
	nc, err := net.Dial("tcp", sv.addr)
	if err != nil {
		t.Fatal(err)
	}
	body := chatJSON(true, "system", sysB, "user", "Hang.")
	fmt.Fprintf(nc, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Test: hang\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(nc)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "data: ") {
			break
		}
	}
	if got := backendsInFlight(t, sv.admin)[up.srv.URL]; got != 1 {
		t.Fatalf("in flight while streaming = %d, want 1", got)
	}
	nc.Close()
	select {
	case <-up.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	waitFor(t, func() bool { return backendsInFlight(t, sv.admin)[up.srv.URL] == 0 })
}

// TestServeUpstreamErrors: no head within --response-timeout → 504; every
// backend refusing connections → 502 after the retries; both with an
// OpenAI error body.
func TestServeUpstreamErrors(t *testing.T) {
	up := newCtlUpstream(t)
	sv := startServeWith(t, nil, func(c *serveConfig) { c.ResponseTimeout = duration(300 * time.Millisecond) }, up.srv.URL)
	a := post(t, sv.addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Slow."), "X-Test", "slowhead")
	if a.status != 504 || !strings.Contains(a.body, `"code":"gateway_timeout"`) {
		t.Fatalf("slow head: %d %s", a.status, a.body)
	}

	var dead []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, "http://"+ln.Addr().String())
		ln.Close()
	}
	sv2 := startServeWith(t, nil, nil, dead...)
	a = post(t, sv2.addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Anyone?"))
	if a.status != 502 || !strings.Contains(a.body, `"code":"bad_gateway"`) || !strings.Contains(a.body, "3 tried") {
		t.Fatalf("all refused: %d %s", a.status, a.body)
	}
}

// TestServeLimits: the limits as the real server applies them.
func TestServeLimits(t *testing.T) {
	up := newCtlUpstream(t)
	sv := startServeWith(t, nil, func(c *serveConfig) {
		c.MaxBody = 1 << 10
		c.MaxConns = 3
	}, up.srv.URL)
	raw := func(req string) (string, bool) {
		t.Helper()
		nc, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, req)
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(nc) // the server closes after each of these answers
		return string(b), true
	}
	big := strings.Repeat("x", 2<<10)
	if got, _ := raw(fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(big), big)); !strings.HasPrefix(got, "HTTP/1.1 413 ") || !strings.Contains(got, `"code":"request_too_large"`) {
		t.Fatalf("body over --max-body: %q", got)
	}
	if got, _ := raw("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("y", 70<<10) + "\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Fatalf("head over 64 KiB: %.200q", got)
	}
	if got, _ := raw("GET /v1/models HTTP/1.1\r\nthis is not a header\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "Connection: close") {
		t.Fatalf("malformed head: %q", got)
	}
	// --max-conns 3: a fourth connection gets 503 and is closed.
	var open []net.Conn
	for range 3 {
		nc, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, nc)
	}
	defer func() {
		for _, nc := range open {
			nc.Close()
		}
	}()
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasPrefix(last, "HTTP/1.1 503 ") || !strings.Contains(last, "too_many_connections") {
		if time.Now().After(deadline) {
			t.Fatalf("over --max-conns: %q", last)
		}
		last, _ = raw("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	}
}

// TestServeAdminAPI: the admin listener with a token, against the real
// serving path: backends added, drained and removed; explain forwards
// nothing; routes and metrics answer.
func TestServeAdminAPI(t *testing.T) {
	ups := []*ctlUpstream{newCtlUpstream(t), newCtlUpstream(t), newCtlUpstream(t)}
	sv := startServeWith(t, nil, func(c *serveConfig) { c.AdminToken = "s3cret" }, ups[0].srv.URL, ups[1].srv.URL)
	base := "http://" + sv.admin
	if code, _ := adminDo(t, "GET", base+"/health", "", ""); code != 200 {
		t.Fatalf("/health without token: %d", code)
	}
	if code, body := adminDo(t, "GET", base+"/admin/backends", "", ""); code != 401 || !strings.Contains(body, "unauthorized") {
		t.Fatalf("no token: %d %s", code, body)
	}
	if code, _ := adminDo(t, "GET", base+"/ready", "wrong", ""); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _ := adminDo(t, "GET", base+"/ready", "s3cret", ""); code != 200 {
		t.Fatalf("/ready: %d", code)
	}
	code, body := adminDo(t, "POST", base+"/admin/backends", "s3cret", fmt.Sprintf(`{"url":%q}`, ups[2].srv.URL))
	if code != 201 || !strings.Contains(body, `"id":2`) {
		t.Fatalf("add: %d %s", code, body)
	}

	// Explain: a decision, nothing forwarded.
	before := ups[0].calls.Load() + ups[1].calls.Load() + ups[2].calls.Load()
	code, body = adminDo(t, "POST", base+"/admin/explain", "s3cret", chatJSON(false, "system", sysA, "user", "Explain me."))
	var d struct {
		Backend    int    `json:"backend"`
		Reason     string `json:"reason"`
		Total      int    `json:"total_blocks"`
		Candidates []int  `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil || d.Reason != "hash" || d.Total == 0 || len(d.Candidates) != 3 {
		t.Fatalf("explain: %d %s (%v)", code, body, err)
	}
	if after := ups[0].calls.Load() + ups[1].calls.Load() + ups[2].calls.Load(); after != before {
		t.Fatalf("explain forwarded %d requests", after-before)
	}

	// Drain backend 0: no new requests reach it; remove backend 1: gone
	// from the list, and nothing reaches it either.
	if code, body := adminDo(t, "POST", base+"/admin/backends/0/drain", "s3cret", ""); code != 202 {
		t.Fatalf("drain: %d %s", code, body)
	}
	if code, body := adminDo(t, "DELETE", base+"/admin/backends/1", "s3cret", ""); code != 200 && code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	code, body = adminDo(t, "GET", base+"/admin/backends", "s3cret", "")
	if code != 200 || strings.Contains(body, ups[1].srv.URL) || !strings.Contains(body, `"draining":true`) {
		t.Fatalf("list after drain and delete: %d %s", code, body)
	}
	c0, c1 := ups[0].calls.Load(), ups[1].calls.Load()
	for i := range 8 {
		a := post(t, sv.addr, "/v1/chat/completions", chatJSON(false, "system", fmt.Sprintf("Family %d. %s", i, sysB), "user", "Hi."))
		if a.status != 200 || a.backend != ups[2].srv.URL {
			t.Fatalf("request %d after drain: %d from %q", i, a.status, a.backend)
		}
	}
	if ups[0].calls.Load() != c0 || ups[1].calls.Load() != c1 {
		t.Fatal("a drained or removed backend got new requests")
	}

	if code, body := adminDo(t, "GET", base+"/admin/routes", "s3cret", ""); code != 200 || !strings.HasPrefix(body, "{") {
		t.Fatalf("routes: %d %s", code, body)
	}
	code, body = adminDo(t, "GET", base+"/metrics", "s3cret", "")
	for _, m := range []string{"saltus_requests_total", "saltus_route_decisions_total", "saltus_backend_in_flight"} {
		if code != 200 || !strings.Contains(body, m) {
			t.Fatalf("/metrics lacks %s (%d)", m, code)
		}
	}
}

// TestServeBranchReusesSystemPrompt: a conversation that branches from an
// earlier turn goes to the backend holding the shared part, matched by
// the tree past the system prompt.
func TestServeBranchReusesSystemPrompt(t *testing.T) {
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "c"), newUpstream(t, "d")}
	addr := startServe(t, ups)
	reply := "Sure. " + strings.Repeat("Here is a long and careful answer about tides. ", 10)
	trunk := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Tides at Brest?", "assistant", reply, "user", "And at Dover?"))
	if trunk.status != 200 {
		t.Fatalf("trunk: %d %s", trunk.status, trunk.body)
	}
	branch := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Tides at Brest?", "assistant", reply, "user", "What about Calais instead?"))
	sys := post(t, addr, "/v1/chat/completions", chatJSON(false, "system", sysA, "user", "Something else entirely."))
	for _, a := range []answer{branch, sys} {
		var m, n int
		fmt.Sscanf(a.route, "%d/%d", &m, &n)
		if a.backend != trunk.backend || !strings.HasSuffix(a.route, " tree") || m == 0 {
			t.Fatalf("branch on %q route %q, want %q by tree", a.backend, a.route, trunk.backend)
		}
	}
	var mb, ms int
	fmt.Sscanf(branch.route, "%d/", &mb)
	fmt.Sscanf(sys.route, "%d/", &ms)
	if mb <= ms {
		t.Fatalf("the branch matched %d blocks, the new question %d: the branch shares more", mb, ms)
	}
}
