package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
)

// TestAccessLogSDK: with --access-log, every request of an SDK battery
// (chat and completions, whole and streamed, responses, the model list and
// one model, a refusal) has exactly one line, its fields filled as each
// kind of answer knows them, and so do saltus's own 404, 400 and 401 and
// the reactor's answer to a request it cannot frame.
func TestAccessLogSDK(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "access.log")
	keys := keyFile(t, "", keyEntry("e2e", "test", "")) // the SDK fleet's client key
	f := startSDKFleetWith(t, 2, 100, func(c *serveConfig) {
		c.AccessLog.Path = path
		c.Keys.File = keys
	})
	ctx := t.Context()
	id := func(name string) option.RequestOption { return option.WithHeader("X-Request-ID", "alog-"+name) }
	tp := option.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")

	if _, err := f.client.Chat.Completions.New(ctx, chatParams("Which berth is free at dawn?", 4), id("chat"), tp); err != nil {
		t.Fatal(err)
	}
	st := f.client.Chat.Completions.NewStreaming(ctx, chatParams("Which berth is free at dusk?", 4), id("chat-stream"))
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	_ = st.Close() // read to its end
	cp := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel("llama3"),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: param.NewOpt(sysA + " And the tide?")}, MaxTokens: openai.Int(3)}
	if _, err := f.client.Completions.New(ctx, cp, id("completion")); err != nil {
		t.Fatal(err)
	}
	cs := f.client.Completions.NewStreaming(ctx, cp, id("completion-stream"))
	for cs.Next() {
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	_ = cs.Close() // read to its end
	if _, err := f.client.Responses.New(ctx, responses.ResponseNewParams{Model: "llama3",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}, id("responses")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Models.List(ctx, id("models")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Models.Get(ctx, "llama3", id("model")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Chat.Completions.New(ctx, chatParams("hi", 2), option.WithJSONSet("stream_options", 5), id("refused")); err == nil {
		t.Fatal("stream_options 5 accepted")
	}

	// Outside the SDK: saltus's 404 and 401, and the reactor's own 501.
	do := func(method, p, key, name string, want int) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+f.s.addr+p, strings.NewReader(`{}`))
		req.Header.Set("X-Request-ID", "alog-"+name)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close() // status only
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d", method, p, resp.StatusCode, want)
		}
	}
	do("GET", "/nope", "test", "404", 404)
	do("POST", "/v1/chat/completions", "wrong", "401", 401)
	c, err := net.Dial("tcp", f.s.addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-ID: alog-framing\r\nTransfer-Encoding: gzip\r\n\r\n")) // the answer tells
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if resp.StatusCode != 501 {
		t.Fatalf("framing error: %d", resp.StatusCode)
	}

	// A reload reopens the file logrotate moved: the next line goes to
	// the new one.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if a := f.s.adm(t, "POST", "/admin/reload", ""); a.status != 200 {
		t.Fatalf("reload: %d %s", a.status, a.body)
	}
	do("GET", "/after-reload", "test", "after-reload", 404)

	// The drain closes the log after the last request: every line is out.
	f.s.term()
	if code := f.s.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exit code %d", code)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(after, []byte(`"request_id":"alog-after-reload"`)) || bytes.Count(after, []byte("\n")) != 1 {
		t.Errorf("after the reload:\n%s", after)
	}
	raw, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]map[string]any{}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	for _, ln := range lines {
		var m map[string]any
		if err := json.Unmarshal(ln, &m); err != nil {
			t.Fatalf("line %q: %v", ln, err)
		}
		rid, _ := m["request_id"].(string)
		if byID[rid] != nil {
			t.Errorf("two lines for %s:\n%v\n%v", rid, byID[rid], m)
		}
		byID[rid] = m
	}
	if len(byID) != 11 || len(lines) != 11 {
		t.Fatalf("%d lines, %d request ids, want 11:\n%s", len(lines), len(byID), raw)
	}
	num := func(m map[string]any, k string) float64 {
		v, _ := m[k].(float64)
		return v
	}
	for name, want := range map[string]struct {
		status       float64
		routed, toks bool // a backend and route reason; token counts
		stream       bool // ttft_ms
		path         string
	}{
		"chat":              {200, true, true, false, "/v1/chat/completions"},
		"chat-stream":       {200, true, true, true, "/v1/chat/completions"},
		"completion":        {200, true, true, false, "/v1/completions"},
		"completion-stream": {200, true, true, true, "/v1/completions"},
		"responses":         {200, true, true, false, "/v1/responses"},
		"models":            {200, false, false, false, "/v1/models"},
		"model":             {200, false, false, false, "/v1/models/llama3"},
		"refused":           {400, false, false, false, "/v1/chat/completions"},
		"404":               {404, false, false, false, "/nope"},
		"401":               {401, false, false, false, "/v1/chat/completions"},
	} {
		m := byID["alog-"+name]
		if m == nil {
			t.Errorf("%s: no line", name)
			continue
		}
		if num(m, "status") != want.status || m["path"] != want.path || m["time"] == nil || m["client"] == nil ||
			!strings.HasPrefix(m["client"].(string), "127.0.0.1:") || m["duration_ms"] == nil {
			t.Errorf("%s: %v", name, m)
		}
		if name != "401" && name != "404" && m["key"] != "e2e" {
			t.Errorf("%s: key %v, want e2e", name, m["key"])
		}
		if want.routed != (m["backend"] != nil && m["route_reason"] != nil) || want.routed == (m["own"] == true) {
			t.Errorf("%s: routed %v: %v", name, want.routed, m)
		}
		if want.routed && m["model"] != "llama3" {
			t.Errorf("%s: model %v", name, m["model"])
		}
		if want.toks && (num(m, "prompt_tokens") < 5 || num(m, "completion_tokens") < 1 || m["cached_tokens"] == nil) {
			t.Errorf("%s: tokens %v", name, m)
		}
		if want.toks && name != "responses" && m["cached_tokens_predicted"] == nil {
			t.Errorf("%s: no prediction %v", name, m)
		}
		if want.stream != (num(m, "ttft_ms") > 0) {
			t.Errorf("%s: ttft_ms %v", name, m["ttft_ms"])
		}
		if want.status == 200 && (num(m, "bytes_out") <= 0 || (want.routed && num(m, "bytes_in") <= 0)) {
			t.Errorf("%s: bytes %v", name, m)
		}
	}
	if m := byID["alog-chat"]; m["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || m["parent_span_id"] != "00f067aa0ba902b7" {
		t.Errorf("trace: %v", m)
	}
	if m := byID["alog-refused"]; m["model"] != "llama3" {
		t.Errorf("refused: model %v", m["model"])
	}
	if m := byID["alog-framing"]; num(m, "status") != 501 || m["own"] != true || m["path"] != nil || !strings.HasPrefix(m["client"].(string), "127.0.0.1:") {
		t.Errorf("framing error line: %v", m)
	}
	var prom bytes.Buffer
	f.s.set.WritePrometheus(&prom)
	if s := prom.String(); !strings.Contains(s, "saltus_access_log_lines_total 12\n") || !strings.Contains(s, "saltus_access_log_dropped_total 0\n") {
		t.Errorf("metrics:\n%s", grepLines(s, "saltus_access_log"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
