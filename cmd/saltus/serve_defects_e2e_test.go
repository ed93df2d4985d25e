package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// End-to-end tests of the transport defects issue 16 lists, each
// reproduced black-box first (see serve_e2e_test.go for the harness).

// TestServeDropsUpstreamSaltusHeaders: an upstream's own X-Saltus-*
// headers (a lying backend, or another saltus) never reach the client
// beside saltus's, streamed or not, on either upstream path.
func TestServeDropsUpstreamSaltusHeaders(t *testing.T) {
	t.Parallel()
	liar := func(u *upstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Saltus-Route", "99/99 evil")
		w.Header().Set("X-Saltus-Backend", "evil")
		w.Header().Set("X-Saltus-Anything", "evil")
		u.chat(w, r)
	}
	for _, mode := range upstreamModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			up := newUpstreamFunc(t, "a", liar)
			s := startServeWith(t, []*upstream{up}, func(c *serveConfig) { c.Tokenizer, c.UpstreamIO = "", mode })
			for _, stream := range []bool{false, true} {
				a := s.chat(t, chatJSON(stream, "system", sysA, "user", "Hi."))
				if a.status != 200 {
					t.Fatalf("stream %v: %d %s", stream, a.status, a.body)
				}
				for name, vals := range a.header {
					if strings.HasPrefix(strings.ToLower(name), "x-saltus-") && (len(vals) != 1 || vals[0] == "evil" || strings.Contains(vals[0], "evil")) {
						t.Errorf("stream %v: %s: %q reached the client", stream, name, vals)
					}
				}
				if _, ok := a.header["X-Saltus-Anything"]; ok {
					t.Errorf("stream %v: the upstream's X-Saltus-Anything reached the client", stream)
				}
				if a.backend != up.srv.URL || strings.HasPrefix(a.route, "99/99") || a.route == "" {
					t.Errorf("stream %v: X-Saltus-Backend %q, X-Saltus-Route %q; want saltus's own", stream, a.backend, a.route)
				}
			}
		})
	}
}

// TestServeResetSendsAtMostRetries: backends that reset every connection
// as the request arrives get, together, at most 1 + --max-retries sends
// of a POST, streamed or not: each send is a whole generation on an
// engine (the stream path sent 6 for --max-retries 2, fasthttp's
// stale-connection retry firing on fresh connections).
func TestServeResetSendsAtMostRetries(t *testing.T) {
	t.Parallel()
	for _, mode := range upstreamModes {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", mode, stream), func(t *testing.T) {
				t.Parallel()
				ups := []*upstream{newUpstreamFunc(t, "r1", resetter), newUpstreamFunc(t, "r2", resetter), newUpstreamFunc(t, "r3", resetter)}
				s := startServeWith(t, ups, func(c *serveConfig) {
					c.Tokenizer, c.UpstreamIO = "", mode
					c.Backend.MaxRetries = 2
				})
				a := s.chat(t, chatJSON(stream, "system", sysA, "user", "Anyone?"))
				if a.status != 502 {
					t.Fatalf("%d %s, want 502", a.status, a.body)
				}
				var sends int64
				for _, u := range ups {
					sends += u.calls.Load()
				}
				if sends != 3 {
					t.Errorf("%d sends of one POST, want 3 (1 + --max-retries 2)", sends)
				}
			})
		}
	}
}

// TestServeStreamIdleTimeout: a backend that sends a stream's head and
// one event, then goes silent, does not hold the client forever: after
// --stream-idle-timeout without a byte the client gets an SSE error
// event naming it, the stream ends, and the timeout is counted.
func TestServeStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	silent := func(u *upstream, w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"tok\":0}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-u.done:
		}
	}
	for _, mode := range upstreamModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			up := newUpstreamFunc(t, "a", silent)
			s := startServeWith(t, []*upstream{up}, func(c *serveConfig) {
				c.Tokenizer, c.UpstreamIO = "", mode
				c.Backend.StreamIdleTimeout = idle
			})
			start := time.Now()
			a := s.chat(t, chatJSON(true, "system", sysA, "user", "Then nothing."))
			if el := time.Since(start); el < idle {
				t.Errorf("ended after %v, before the idle timeout %v", el, idle)
			}
			if a.status != 200 || !strings.HasPrefix(a.body, "data: {\"tok\":0}\n\nevent: error\ndata: ") ||
				!strings.Contains(a.body, "no data from the backend for 300ms (the stream idle timeout)") || strings.Contains(a.body, "[DONE]") {
				t.Errorf("%d %q, want the first event, then an SSE error event naming the stream idle timeout", a.status, a.body)
			}
			series := `saltus_upstream_errors_total{backend="` + up.srv.URL + `",kind="stream_idle"}`
			waitFor(t, func() bool { return s.metric(t, series) == 1 })
		})
	}
}

// TestServeClientNeverReads: a client that never reads its answer
// cannot make saltus buffer without bound. A stream ends once 4 MiB are
// owed to the client; a whole answer over --max-response-body, relayed
// as it comes (spilled), once --max-response-body (at least 4 MiB) is.
// Both are counted (saltus_stream_overflow_total) and close the upstream
// connection, which stops the engine.
func TestServeClientNeverReads(t *testing.T) {
	t.Parallel()
	const total = 256 << 20 // what the upstream sends if nothing stops it
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			ended := make(chan error, 1)
			flood := func(u *upstream, w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				piece := []byte("data: " + strings.Repeat("x", 1000) + "\n\n")
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					piece = bytes.Repeat([]byte("x"), 64<<10)
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Content-Length", strconv.Itoa(total-total%len(piece)))
				}
				for sent := 0; sent+len(piece) <= total; sent += len(piece) {
					if _, err := w.Write(piece); err != nil {
						ended <- err
						return
					}
				}
				ended <- nil
			}
			up := newUpstreamFunc(t, "a", flood)
			s := startServeWith(t, []*upstream{up}, func(c *serveConfig) { c.Tokenizer, c.Backend.MaxResponseBody = "", 1<<20 })
			c := dialRaw(t, s.addr)
			_ = c.Conn.(*net.TCPConn).SetReadBuffer(16 << 10)
			body := chatJSON(stream, "system", sysA, "user", "Flood me.")
			c.send(t, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			select {
			case err := <-ended:
				if err == nil {
					t.Fatal("the upstream sent 256 MiB to a client that reads nothing")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the upstream was not stopped")
			}
			waitFor(t, func() bool { return s.metric(t, "saltus_stream_overflow_total") == 1 })
			if n, want := s.metric(t, "saltus_upstream_body_spilled_total"), map[bool]float64{true: 0, false: 1}[stream]; n != want {
				t.Errorf("spilled %v, want %v", n, want)
			}
		})
	}
}

// TestServeTwoHopsPerRequest: a conversation that grows each turn,
// served from both loops' connections, makes at most two cross-loop
// messages per request (to the owner loop: lookup and decision; back to
// the connection's loop: forward), none when the connection's loop owns
// the prompt: the 2xx confirms the route the decision recorded, with no
// third message to the owner. Byte-block mode: no tokenizer completions
// share the count.
func TestServeTwoHopsPerRequest(t *testing.T) {
	t.Parallel()
	s := startServeWith(t, []*upstream{newUpstream(t, "a"), newUpstream(t, "b")}, func(c *serveConfig) {
		c.Tokenizer, c.Reactor.Loops = "", 2
	})
	// Two keep-alive connections: the reactor spreads them over its two
	// loops, so one of them is not the owner's.
	clients := []*http.Client{
		{Transport: &http.Transport{MaxConnsPerHost: 1}},
		{Transport: &http.Transport{MaxConnsPerHost: 1}},
	}
	for _, c := range clients {
		defer c.CloseIdleConnections()
	}
	posts := func() float64 { return s.metrics(t)["saltus_reactor_mailbox_posts_total"] }
	served := func() float64 { return s.metrics(t)[`saltus_requests_total{route="chat",code="200"}`] }
	msgs := `{"role":"system","content":"` + strings.Repeat("You are a careful assistant for lighthouse keepers. ", 8) + `"}`
	remote := 0
	for turn := range 8 {
		msgs += fmt.Sprintf(`,{"role":"user","content":"turn %d: %s"},{"role":"assistant","content":"answer %d"}`, turn, strings.Repeat("more words ", 10), turn)
		before := posts()
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[%s,{"role":"user","content":"next?"}]}`, turn%2 == 0, msgs)
		resp, err := clients[turn%2].Post("http://"+s.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: %d", turn, resp.StatusCode)
		}
		// The request is counted when it ends, after its hooks ran.
		deadline := time.Now().Add(10 * time.Second)
		for served() < float64(turn+1) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		switch d := posts() - before; d {
		case 0:
		case 2:
			remote++
		default:
			t.Fatalf("turn %d: %v cross-loop messages, want 0 (the owner's connection) or 2", turn, d)
		}
	}
	if remote == 0 {
		t.Fatal("no request came from the other loop's connection: the test did not cover a remote owner")
	}
}
