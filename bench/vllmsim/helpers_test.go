package vllmsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startSim starts a simulator on a loopback port (byte-block mode, the
// default profile, speedup 100 unless mutate says otherwise) and closes
// it when the test ends, failing the test if Close fails.
func startSim(t *testing.T, mutate func(*Config)) *Sim {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Speedup = 100
	cfg.Model = "m" // the model the tests' bodies name
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// client is a test's HTTP client: no keep-alive, so no connection (and
// no transport goroutine) outlives a request.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
}

// post sends body to the simulator's path with the given header pairs
// and returns the status and the body.
func post(t *testing.T, s *Sim, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	return resp.StatusCode, b
}

func get(t *testing.T, s *Sim, path string) (int, []byte) {
	t.Helper()
	resp, err := client().Get(s.URL() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// completion is the part of a non-streamed answer the tests read.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	Details          struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// complete posts a non-streamed request and decodes its 200 answer.
func complete(t *testing.T, s *Sim, path, body string) completion {
	t.Helper()
	code, b := post(t, s, path, body)
	if code != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", path, code, b)
	}
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("POST %s: %v in %s", path, err, b)
	}
	if c.Usage == nil {
		t.Fatalf("POST %s: no usage in %s", path, b)
	}
	return c
}

// prompt is a completions body for a text prompt.
func prompt(text string, maxTokens int) string {
	b, err := json.Marshal(map[string]any{"model": "m", "prompt": text, "max_tokens": maxTokens})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// text is n bytes of text unique to tag.
func text(tag string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d ", tag, i)
	}
	return b.String()[:n]
}

// streamed is what a test saw of an SSE answer.
type streamed struct {
	status  int
	header  http.Header
	events  []string      // each event's data
	ttft    time.Duration // to the first event with content
	done    bool          // data: [DONE] came
	readErr error         // how the body ended, if not cleanly
}

// stream posts body and reads the SSE answer to its end.
func stream(t *testing.T, s *Sim, path, body string, header ...string) streamed {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	start := time.Now()
	resp, err := client().Do(req)
	if err != nil {
		return streamed{readErr: err}
	}
	defer resp.Body.Close()
	out := streamed{status: resp.StatusCode, header: resp.Header}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
			if d == "[DONE]" {
				out.done = true
			} else {
				if out.ttft == 0 && (strings.Contains(d, `"content":"`) && !strings.Contains(d, `"content":""`) || strings.Contains(d, `"text":"`)) {
					out.ttft = time.Since(start)
				}
				out.events = append(out.events, d)
			}
		}
		if err != nil {
			if err != io.EOF {
				out.readErr = err
			}
			return out
		}
	}
}

// metric scrapes /metrics for the value of name{model_name="…"}.
func metric(t *testing.T, s *Sim, name string) float64 {
	t.Helper()
	_, b := get(t, s, "/metrics")
	prefix := []byte(name + `{model_name="` + s.cfg.Model + `"} `)
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not in /metrics:\n%s", name, b)
	return 0
}
