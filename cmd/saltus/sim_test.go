package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// lockedBuffer is a bytes.Buffer written by simWith's goroutine and read
// by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestSimFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--help"}, 0, "h100-8b   step 8ms + 40µs per prefill token"},
		{[]string{"--profile", "tpu"}, 2, `profile: unknown "tpu", want one of a100-13b, h100-8b`},
		{[]string{"--speedup", "0", "--kv-tokens", "8"}, 2, "saltus sim: vllmsim: kv-tokens: must be between one block (16)"},
		{[]string{"--speedup", "0.5"}, 2, "saltus sim: vllmsim: speedup: must be at least 1"},
		{[]string{"--block-size", "32"}, 2, "block-size: must be 16 without a tokenizer"},
		{[]string{"--max-body", "12XB"}, 2, "unknown size unit"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--listen", "127.0.0.1:-5"}, 1, "cannot listen on 127.0.0.1:-5"},
	} {
		var out, errb bytes.Buffer
		if code := simWith(tc.args, &out, &errb, nil); code != tc.code || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("saltus sim %q: code %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.err)
		}
	}
}

// TestApplySimProfile: the profile's values, then the flags given.
func TestApplySimProfile(t *testing.T) {
	t.Parallel()
	cfg := vllmsim.DefaultConfig()
	sf := simFlags{profile: "h100-8b", kvTokens: 8192, stepBase: time.Millisecond, maxBody: 1 << 20}
	if err := applySimProfile(&cfg, &sf); err != nil {
		t.Fatal(err)
	}
	h := vllmsim.Profiles["h100-8b"]
	if cfg.KVTokens != 8192 || cfg.StepBase != time.Millisecond || cfg.PrefillPerToken != h.PrefillPerToken ||
		cfg.MaxNumSeqs != h.MaxNumSeqs || cfg.MaxBody != 1<<20 || cfg.Name != "h100-8b" {
		t.Errorf("config %+v", cfg)
	}
}

// TestSimServes: saltus sim answers until a signal, then stops cleanly.
func TestSimServes(t *testing.T) {
	t.Parallel()
	var out, errb lockedBuffer
	signals := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() { // the command under test
		done <- simWith([]string{"--listen", "127.0.0.1:0", "--speedup", "100", "--model", "tiny", "--profile", "h100-8b", "--max-tokens", "3"}, &out, &errb, signals)
	}()
	var url string
	deadline := time.Now().Add(10 * time.Second)
	for url == "" {
		if _, u, ok := strings.Cut(out.String(), " on "); ok && strings.HasSuffix(u, "\n") {
			url = strings.TrimSpace(u)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed; stdout %q, stderr %q", out.String(), errb.String())
		}
		time.Sleep(time.Millisecond)
	}
	if !strings.HasPrefix(out.String(), "simulated engine tiny (h100-8b, speedup 100) on http://127.0.0.1:") {
		t.Errorf("stdout %q", out.String())
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"completion_tokens":3`) || !strings.Contains(string(b), `"model":"tiny"`) {
		t.Errorf("completion: %d %s", resp.StatusCode, b)
	}
	signals <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Errorf("exit code %d; stderr %q", code, errb.String())
	}
	if !strings.Contains(errb.String(), "stopping") || !strings.Contains(errb.String(), "component=vllmsim") {
		t.Errorf("stderr %q", errb.String())
	}
}
