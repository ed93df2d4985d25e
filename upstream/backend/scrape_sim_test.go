package backend_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// TestParseEngineMetricsSim: what `saltus sim` serves on /metrics (vLLM's
// names) parses, idle and with a request running.
func TestParseEngineMetricsSim(t *testing.T) {
	t.Parallel()
	cfg := vllmsim.DefaultConfig()
	cfg.Speedup = 1 // a 4,096-token answer takes long enough to be seen running
	cfg.Model = "m" // the name the requests below send
	s, err := vllmsim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := s.Close(cctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	scrape := func() backend.EngineLoad {
		t.Helper()
		resp, err := hc.Get(s.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read whole
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
		}
		l, ok := backend.ParseEngineMetrics(body)
		if !ok {
			t.Fatalf("the simulator's /metrics does not parse:\n%s", body)
		}
		return l
	}
	if l := scrape(); l.Waiting != 0 || l.Running != 0 || l.KVUsage != 0 || l.KVTokens != int64(s.Config().KVTokens) {
		t.Fatalf("idle: %+v, want KVTokens %d", l, s.Config().KVTokens)
	}
	// A streamed request that generates for a long while: running 1.
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/completions",
			strings.NewReader(`{"model":"m","prompt":"`+strings.Repeat("word ", 2000)+`","max_tokens":4096,"stream":true}`))
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body) // until the test cancels it
			_ = resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(20 * time.Second) // a bound for an event that never comes, not a wait
	for {
		l := scrape()
		if l.Running == 1 && l.KVUsage > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running request never showed: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}
