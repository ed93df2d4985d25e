package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// usageUpstream answers chat requests with a usage object whose
// cached_tokens is the request's X-Cached header (prompt_tokens 2000):
// JSON, or SSE with a final usage chunk when streamed.
func usageUpstream(t *testing.T, name string) *upstream {
	return newUpstreamFunc(t, name, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		cached, _ := strconv.Atoi(r.Header.Get("X-Cached"))
		usage := fmt.Sprintf(`{"prompt_tokens":2000,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}`, cached)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":%s}`, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
		io.WriteString(w, "data: [DONE]\n\n")
	})
}

// TestServeEngineFeedback: through the real serving path, the engines'
// usage (a whole JSON answer, a stream's usage chunk) is compared with the
// route table's prediction, and a contradicted holder is demoted; on
// both upstream paths of non-streamed answers.
func TestServeEngineFeedback(t *testing.T) {
	t.Parallel()
	for _, io := range []string{"loop"} {
		t.Run(io, func(t *testing.T) {
			t.Parallel()
			testEngineFeedback(t, io)
		})
	}
}

func testEngineFeedback(t *testing.T, upstreamIO string) {
	s := startServeWith(t, []*upstream{usageUpstream(t, "a"), usageUpstream(t, "b")}, func(c *serveConfig) { c.UpstreamIO = upstreamIO })
	metric := func(name string) int {
		t.Helper()
		a := s.adm(t, "GET", "/metrics", "")
		for line := range strings.Lines(a.body) {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
		return -1
	}
	body := func(stream bool) string { return chatJSON(stream, "system", sysA, "user", "Port of Rotterdam?") }
	// Cold: predicted miss, the engine agrees.
	a := s.chat(t, body(false), "X-Cached", "0")
	if a.status != 200 || !strings.HasPrefix(a.route, "0/") {
		t.Fatalf("first: %d %q %s", a.status, a.route, a.body)
	}
	waitFor(t, func() bool {
		return metric(`saltus_route_cache_predictions_total{predicted="miss",actual="miss"}`) == 1
	})
	// Warm, non-streamed: predicted hit, the engine agrees.
	a = s.chat(t, body(false), "X-Cached", "1984")
	matched, _, _ := strings.Cut(a.route, "/")
	m, _ := strconv.Atoi(matched)
	if a.status != 200 || m < 4 {
		t.Fatalf("second: %d %q", a.status, a.route)
	}
	waitFor(t, func() bool { return metric(`saltus_route_cache_predictions_total{predicted="hit",actual="hit"}`) == 1 })
	if got := metric("saltus_route_predicted_cached_tokens_total"); got != m*16 {
		t.Errorf("predicted cached tokens %d, want %d", got, m*16)
	}
	// Warm, streamed: the usage chunk says nothing is cached: demoted.
	// The client did not ask for usage, so --learn-from-usage (default on)
	// removed the chunk before the client saw it; the router read it.
	a = s.chat(t, body(true), "X-Cached", "0")
	if a.status != 200 || strings.Contains(a.body, `"usage"`) || !strings.Contains(a.body, `"content":"ok"`) ||
		!strings.HasSuffix(a.body, "data: [DONE]\n\n") {
		t.Fatalf("stream: %d %q", a.status, a.body)
	}
	waitFor(t, func() bool { return metric("saltus_route_demoted_total") > 0 })
	if got := metric(`saltus_route_cache_predictions_total{predicted="hit",actual="miss"}`); got != 1 {
		t.Errorf("hit/miss predictions %d, want 1", got)
	}
	if got := metric("saltus_route_contradicted_total"); got != 1 {
		t.Errorf("contradicted %d, want 1", got)
	}
	if a = s.chat(t, body(false), "X-Cached", "0"); !strings.HasPrefix(a.route, "0/") {
		t.Errorf("after the demotion: route %q, want no blocks held", a.route)
	}
}
