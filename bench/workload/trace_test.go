package workload

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseTraceLine(t *testing.T) {
	t.Parallel()
	f := func(line string, want Request, wantT float64, wantHasT bool) {
		t.Helper()
		got, ts, hasT, err := parseTraceLine([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !reflect.DeepEqual(got, want) || ts != wantT || hasT != wantHasT {
			t.Fatalf("%s:\n got %+v t=%v (%v)\nwant %+v t=%v (%v)", line, got, ts, hasT, want, wantT, wantHasT)
		}
	}
	chat := func(ms ...Message) Request { return Request{Messages: ms, MaxTokens: -1, Tag: "trace"} }
	u := func(s string) Message { return Message{"user", s} }

	f(`{"messages":[{"role":"user","content":"hi"}]}`, chat(u("hi")), 0, false)
	r := chat(Message{"system", "be brief"}, u("hi"))
	r.Model, r.MaxTokens = "llama", 64
	f(`{"model":"llama","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":64,"stream":true,"temperature":0.7}`, r, 0, false)
	f(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, chat(u("a\nb")), 0, false)
	f(`{"messages":[{"role":"assistant","content":null},{"role":"user"}],"prompt":null}`, chat(Message{"assistant", ""}, u("")), 0, false)
	f(`{"messages":[{"role":"user","content":"\u00e9\ud83d\ude00"}]}`, chat(u("é😀")), 0, false)
	f(`{"prompt":"once","max_tokens":5,"max_completion_tokens":7}`, Request{Prompt: "once", MaxTokens: 7, Tag: "trace"}, 0, false)
	f(` {"prompt":["once"],"max_tokens":0} `, Request{Prompt: "once", MaxTokens: 0, Tag: "trace"}, 0, false)
	f(`{"prompt":"p","t":1.5,"tag":"batch"}`, Request{Prompt: "p", MaxTokens: -1, Tag: "batch"}, 1.5, true)
	f(`{"prompt":"p","timestamp":1700000000.25}`, Request{Prompt: "p", MaxTokens: -1, Tag: "trace"}, 1700000000.25, true)
	f(`{"prompt":"p","t":0}`, Request{Prompt: "p", MaxTokens: -1, Tag: "trace"}, 0, true)
	f(`{"prompt":"p","t":null}`, Request{Prompt: "p", MaxTokens: -1, Tag: "trace"}, 0, false)
}

func TestParseTraceLineErrors(t *testing.T) {
	t.Parallel()
	f := func(line, want string) {
		t.Helper()
		r, _, _, err := parseTraceLine([]byte(line))
		if err == nil {
			t.Fatalf("%s: parsed as %+v, want an error", line, r)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: error %q, want it to contain %q", line, err, want)
		}
	}
	for _, line := range []string{"", "   ", "null", "42", `"s"`, `[{"prompt":"p"}]`} {
		f(line, "not a JSON object")
	}
	f(`{`, "unexpected end of JSON input")
	f(`{"prompt":"p"} x`, "invalid character")
	f(`{}`, "neither messages (chat completions) nor prompt")
	f(`{"messages":[{"role":"user","content":"a"}],"prompt":"p"}`, "both messages and prompt")
	f(`{"messages":[]}`, "messages: empty")
	f(`{"messages":{"role":"user"}}`, "messages: json: cannot unmarshal object")
	f(`{"messages":[{"content":"a"}]}`, "messages[0]: no role")
	f(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":5}]}`, "messages[1].content: want a string, an array of text parts or null")
	f(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}}]}]}`, `messages[0].content: part 1 has type "image_url"`)
	f(`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "part 0: no text")
	f(`{"prompt":[1,2,3]}`, "token ids are not replayed")
	f(`{"prompt":["a","b"]}`, "an array of 2 prompts")
	f(`{"prompt":[]}`, "an array of 0 prompts")
	f(`{"prompt":""}`, "prompt: empty")
	f(`{"prompt":5}`, "prompt: want a string")
	f(`{"prompt":"p","max_tokens":-1}`, "max_tokens: must not be negative, got -1")
	f(`{"prompt":"p","max_completion_tokens":-3}`, "max_completion_tokens: must not be negative")
	f(`{"prompt":"p","max_tokens":1.5}`, "max_tokens")
	f(`{"prompt":"p","model":5}`, "model")
	f(`{"prompt":"p","t":-1}`, "timestamp: want seconds in [0, 8589934592], got -1")
	f(`{"prompt":"p","t":1e10}`, "timestamp: want seconds")
	f(`{"prompt":"p","t":"5"}`, "t")
	f(`{"prompt":"p","t":1,"timestamp":1}`, `both "timestamp" and "t"`)
}

func TestReadTrace(t *testing.T) {
	t.Parallel()
	in := "{\"prompt\":\"a\"}\r\n\n  \n" +
		`{"messages":[{"role":"user","content":"b"}],"max_tokens":3}` + "\n" +
		`{"prompt":"c","tag":"x"}` // no final newline
	reqs, timed, err := readTrace(strings.NewReader(in), traceLimits{maxTraceLine, maxTraceBytes})
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Prompt: "a", MaxTokens: -1, Tag: "trace"},
		{Messages: []Message{{"user", "b"}}, MaxTokens: 3, Tag: "trace"},
		{Prompt: "c", MaxTokens: -1, Tag: "x"},
	}
	if timed || !reflect.DeepEqual(reqs, want) {
		t.Fatalf("got %+v (timed %v), want %+v", reqs, timed, want)
	}

	// Timed: sorted by time (stable), At from the earliest.
	in = `{"prompt":"a","t":105}
{"prompt":"b","timestamp":103}
{"prompt":"c","t":103.5}
{"prompt":"d","t":103}`
	reqs, timed, err = readTrace(strings.NewReader(in), traceLimits{maxTraceLine, maxTraceBytes})
	if err != nil || !timed {
		t.Fatalf("timed %v, error %v", timed, err)
	}
	var order []string
	var at []time.Duration
	for _, r := range reqs {
		order, at = append(order, r.Prompt), append(at, r.At)
	}
	if want := []string{"b", "d", "c", "a"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %q, want %q", order, want)
	}
	if want := []time.Duration{0, 0, 500 * time.Millisecond, 2 * time.Second}; !reflect.DeepEqual(at, want) {
		t.Errorf("At %v, want %v", at, want)
	}
}

func TestReadTraceErrors(t *testing.T) {
	t.Parallel()
	// Small limits stand for the real ones (16 MiB lines, 1 GiB files),
	// which take seconds to exercise under -race.
	lim := traceLimits{line: 1000, bytes: 1 << 20}
	f := func(in string, lim traceLimits, want string) {
		t.Helper()
		_, _, err := readTrace(strings.NewReader(in), lim)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to contain %q", err, want)
		}
	}
	good := `{"prompt":"p"}` + "\n"
	f(good+"\n"+`{"prompt":"p","max_tokens":-2}`+"\n"+good, lim, "line 3: max_tokens: must not be negative")
	f(good+"{oops\n", lim, "line 2: invalid character 'o'")
	f(`{"prompt":"p","t":1}`+"\n"+good, lim, "line 2: no timestamp, but earlier lines have one (all lines or none)")
	f(good+"\n"+`{"prompt":"p","t":1}`, lim, "line 3: a timestamp, but earlier lines have none")
	f("", lim, "no requests")
	f("\n \n", lim, "no requests")
	small := traceLimits{line: 1000, bytes: int64(len(good)*10 - 1)}
	f(strings.Repeat(good, 10), small, "larger than 149 bytes")
	small.bytes++
	if _, _, err := readTrace(strings.NewReader(strings.Repeat(good, 10)), small); err != nil {
		t.Fatalf("a trace of exactly the bound: %v", err)
	}

	// Line bounds: a longest line parses (with \r\n too); one byte more
	// is an error naming the line, however much longer.
	pad := func(n int) string { // a valid line of n bytes
		return `{"prompt":"` + strings.Repeat("x", n-len(`{"prompt":""}`)) + `"}`
	}
	if reqs, _, err := readTrace(strings.NewReader(good+pad(lim.line)+"\r\n"+good), lim); err != nil || len(reqs) != 3 {
		t.Fatalf("a line of %d bytes: %d requests, error %v", lim.line, len(reqs), err)
	}
	f(good+pad(lim.line+1)+"\n"+good, lim, "line 2: longer than 1000 bytes")
	f(good+good+pad(lim.line+100), lim, "line 3: longer than 1000 bytes")
	f(good+good+good+pad(100*lim.line)+"\n", lim, "line 4: longer than 1000 bytes")
	if maxTraceLine != 16<<20 || maxTraceBytes != 1<<30 {
		t.Errorf("limits %d and %d, documented as 16 MiB and 1 GiB", maxTraceLine, maxTraceBytes)
	}
}

// writeTrace writes a trace file and returns its path.
func writeTrace(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTraceWorkload(t *testing.T) {
	t.Parallel()
	path := writeTrace(t,
		`{"model":"a","prompt":"one"}`,
		`{"prompt":"two","max_tokens":9}`,
		`{"messages":[{"role":"user","content":"three"}]}`)
	opts := DefaultOptions()
	opts.TraceFile = path
	w := mustNew(t, "trace", opts)
	if w.Name() != "trace" {
		t.Fatalf("name %q", w.Name())
	}
	// Users share one cursor: the trace is sent once, in order.
	u0, u1 := w.NewUser(0), w.NewUser(1)
	r1, ok1 := u0.Next()
	r2, ok2 := u1.Next()
	r3, ok3 := u0.Next()
	if !ok1 || !ok2 || !ok3 || r1.Prompt != "one" || r2.Prompt != "two" || r3.Messages[0].Content != "three" {
		t.Fatalf("got %+v %+v %+v", r1, r2, r3)
	}
	if r1.Model != "a" || r2.Model != "" || r1.MaxTokens != 100 || r2.MaxTokens != 9 {
		t.Fatalf("model and max_tokens: %+v %+v", r1, r2)
	}
	for _, r := range []Request{r1, r2, r3} {
		if r.At != 0 || r.Think < opts.ThinkMin || r.Think > opts.ThinkMax {
			t.Fatalf("closed loop: At %v, think %v", r.At, r.Think)
		}
	}
	for range 3 {
		if r, ok := u1.Next(); ok {
			t.Fatalf("a used-up trace gave %+v", r)
		}
	}
	u0.Reply("ignored")

	// Options.Model replaces the lines' model; timed traces do not think.
	opts.Model = "b"
	w = mustNew(t, "trace:"+writeTrace(t, `{"model":"a","prompt":"x","t":10}`, `{"prompt":"y","t":12.25}`), opts)
	r, _ := w.NewUser(0).Next()
	r2, _ = w.NewUser(1).Next()
	if r.Model != "b" || r.Think != 0 || r.At != 0 || r2.At != 2250*time.Millisecond || r2.Think != 0 {
		t.Fatalf("timed: %+v %+v", r, r2)
	}

	_, err := New("trace:"+writeTrace(t, `{"prompt":"x"}`, `{"prompt":[1]}`), DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "trace.jsonl: line 2: prompt:") {
		t.Fatalf("error %v, want the file and line named", err)
	}
}

// TestTraceConcurrentUsers drains a trace with users on several
// goroutines: every line is sent exactly once (run with -race).
func TestTraceConcurrentUsers(t *testing.T) {
	t.Parallel()
	lines := make([]string, 1000)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"prompt":"p%d"}`, i)
	}
	w := mustNew(t, "trace:"+writeTrace(t, lines...), DefaultOptions())
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for id := range 8 {
		wg.Go(func() {
			u := w.NewUser(id)
			for {
				r, ok := u.Next()
				if !ok {
					return
				}
				mu.Lock()
				seen[r.Prompt]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != len(lines) {
		t.Fatalf("%d distinct requests sent, want %d", len(seen), len(lines))
	}
	for p, n := range seen {
		if n != 1 {
			t.Fatalf("%s sent %d times", p, n)
		}
	}
}

// FuzzParseTraceLine: any line gives a request or an error, never a
// panic; a request is well-formed and survives a round trip through the
// format.
func FuzzParseTraceLine(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":64,"t":1.5}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
		`{"prompt":["once"],"timestamp":3,"tag":"x","model":"m"}`,
		`{"prompt":[1,2]}`, `{}`, `null`, `{"messages":[{"role":"user","content":null}],"prompt":null}`,
		`{"prompt":"p","max_completion_tokens":-3}`, "{\"prompt\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, ts, hasT, err := parseTraceLine(line)
		if err != nil {
			return
		}
		if (len(req.Messages) == 0) == (req.Prompt == "") || req.MaxTokens < -1 || ts < 0 || ts > maxTimestamp || (!hasT && ts != 0) {
			t.Fatalf("ill-formed: %+v t=%v (%v)", req, ts, hasT)
		}
		// Re-encode in the trace format and parse again.
		type out struct {
			Model     string    `json:"model"`
			Messages  []Message `json:"messages,omitempty"`
			Prompt    string    `json:"prompt,omitempty"`
			MaxTokens *int      `json:"max_tokens,omitempty"`
			T         *float64  `json:"t,omitempty"`
			Tag       string    `json:"tag"`
		}
		o := out{Model: req.Model, Messages: req.Messages, Prompt: req.Prompt, Tag: req.Tag}
		if req.MaxTokens >= 0 {
			o.MaxTokens = &req.MaxTokens
		}
		if hasT {
			o.T = &ts
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		req2, ts2, hasT2, err := parseTraceLine(b)
		if err != nil {
			t.Fatalf("re-encoded %s: %v", b, err)
		}
		if !reflect.DeepEqual(req, req2) || ts != ts2 || hasT != hasT2 {
			t.Fatalf("round trip through %s:\n%+v t=%v\n%+v t=%v", b, req, ts, req2, ts2)
		}
	})
}
