package accesslog

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func record(status int) *reqlog.Record {
	start := time.Date(2026, 12, 6, 22, 40, 0, 123456000, time.UTC)
	tr, _ := reqlog.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	return &reqlog.Record{Start: start, End: start.Add(12345 * time.Microsecond), Duration: 12345 * time.Microsecond,
		RequestID: "req-1", Trace: tr, Client: "127.0.0.1:5555", Key: "team-a", Model: "llama",
		Method: "POST", Path: "/v1/chat/completions", Status: status, Backend: "vllm-0", RouteReason: "tree",
		CachedPredicted: 64, HasPrediction: true, Cached: 48, HasCached: true, PromptTokens: 100, CompletionTokens: 7, HasUsage: true,
		TTFT: 3 * time.Millisecond, BytesIn: 420, BytesOut: 1337}
}

func TestLineJSON(t *testing.T) {
	t.Parallel()
	line := appendLine(nil, record(200), FormatJSON)
	want := `{"time":"2026-12-06T22:40:00.123456Z","request_id":"req-1","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736",` +
		`"parent_span_id":"00f067aa0ba902b7","client":"127.0.0.1:5555","key":"team-a","model":"llama","method":"POST",` +
		`"path":"/v1/chat/completions","status":200,"backend":"vllm-0","route_reason":"tree","cached_tokens_predicted":64,` +
		`"cached_tokens":48,"prompt_tokens":100,"completion_tokens":7,"ttft_ms":3,"duration_ms":12.345,"bytes_in":420,"bytes_out":1337}` + "\n"
	if string(line) != want {
		t.Fatalf("line\n%s\nwant\n%s", line, want)
	}
	line = appendLine(nil, record(200), FormatLogfmt)
	wantL := `time=2026-12-06T22:40:00.123456Z request_id=req-1 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 ` +
		`parent_span_id=00f067aa0ba902b7 client=127.0.0.1:5555 key=team-a model=llama method=POST ` +
		`path=/v1/chat/completions status=200 backend=vllm-0 route_reason=tree cached_tokens_predicted=64 ` +
		`cached_tokens=48 prompt_tokens=100 completion_tokens=7 ttft_ms=3 duration_ms=12.345 bytes_in=420 bytes_out=1337` + "\n"
	if string(line) != wantL {
		t.Fatalf("line\n%s\nwant\n%s", line, wantL)
	}
	// The reactor's own answer: what is known only.
	end := time.Date(2026, 12, 6, 22, 40, 0, 0, time.UTC)
	line = appendLine(nil, &reqlog.Record{End: end, Status: 431, Own: true}, FormatJSON)
	if want := `{"time":"2026-12-06T22:40:00Z","status":431,"duration_ms":0,"bytes_in":0,"bytes_out":0,"own":true}` + "\n"; string(line) != want {
		t.Fatalf("line %s", line)
	}
}

// hostile are strings a client controls (path, model, key name as
// configured, request id) at their worst.
var hostile = []string{
	`a"b`, "line\nbreak", "cr\rlf", `back\slash`, "tab\there", "nul\x00", "del\x7f", "bad\xff\xfeutf8",
	"\xc3", "sep\u2028\u2029", "émoji 🚀", "k=v x=y", `"quoted"`, "", " ", "=",
}

func TestLineHostileJSON(t *testing.T) {
	t.Parallel()
	for _, s := range hostile {
		r := record(404)
		r.Path, r.Model, r.Key, r.RequestID, r.Client = s, s+"m", "k"+s, s, s
		line := appendLine(nil, r, FormatJSON)
		if bytes.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("%q: not one line: %q", s, line)
		}
		var got map[string]any
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%q: invalid JSON %q: %v", s, line, err)
		}
		if !json.Valid(line) {
			t.Fatalf("%q: invalid JSON", s)
		}
		want := func(v string) any {
			if v == "" {
				return nil
			}
			b, _ := json.Marshal(v) // encoding/json's treatment of invalid UTF-8: one U+FFFD per byte
			var w string
			_ = json.Unmarshal(b, &w)
			return w
		}
		for k, v := range map[string]string{"path": s, "model": s + "m", "key": "k" + s, "request_id": s, "client": s} {
			if g := got[k]; g != want(v) {
				t.Fatalf("%q: %s = %q, want %q", s, k, g, want(v))
			}
		}
	}
}

// parseLogfmt reads a line appendLogfmtValue wrote: bare values, or Go
// quoted ones.
func parseLogfmt(t *testing.T, line string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for line != "" {
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			t.Fatalf("no key in %q", line)
		}
		k := line[:eq]
		line = line[eq+1:]
		var v string
		if strings.HasPrefix(line, `"`) {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				t.Fatalf("bad quoted value in %q: %v", line, err)
			}
			if v, err = strconv.Unquote(q); err != nil {
				t.Fatal(err)
			}
			line = line[len(q):]
		} else {
			end := strings.IndexByte(line, ' ')
			if end < 0 {
				end = len(line)
			}
			v, line = line[:end], line[end:]
		}
		out[k] = v
		line = strings.TrimPrefix(line, " ")
	}
	return out
}

func TestLineHostileLogfmt(t *testing.T) {
	t.Parallel()
	for _, s := range hostile {
		r := record(404)
		r.Path, r.Model, r.Key, r.RequestID = s, s+"m", "k"+s, s
		line := appendLine(nil, r, FormatLogfmt)
		if bytes.IndexByte(line, '\n') != len(line)-1 || bytes.IndexByte(line, '\r') >= 0 {
			t.Fatalf("%q: not one line: %q", s, line)
		}
		got := parseLogfmt(t, string(line[:len(line)-1]))
		for k, v := range map[string]string{"path": s, "model": s + "m", "key": "k" + s, "request_id": s} {
			if v == "" {
				if _, ok := got[k]; ok {
					t.Fatalf("%q: empty %s written", s, k)
				}
				continue
			}
			if got[k] != v { // logfmt keeps the bytes (\x escapes)
				t.Fatalf("%q: %s = %q, want %q (line %q)", s, k, got[k], v, line)
			}
		}
		if got["status"] != "404" {
			t.Fatalf("status %q", got["status"])
		}
	}
}

func FuzzLine(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := record(200)
		r.Path, r.Model = s, s
		line := appendLine(nil, r, FormatJSON)
		if bytes.IndexByte(line, '\n') != len(line)-1 || !json.Valid(line) {
			t.Fatalf("%q: %q", s, line)
		}
		line = appendLine(nil, r, FormatLogfmt)
		if bytes.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("%q: %q", s, line)
		}
		got := parseLogfmt(t, string(line[:len(line)-1]))
		if w := s[:min(len(s), maxField)]; w != "" && got["path"] != w {
			t.Fatalf("%q: path %q", s, got["path"])
		}
	})
}

func testConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.Path = filepath.Join(t.TempDir(), "access.log")
	return c
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestOpenLogClose(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	set := metrics.NewSet()
	l, err := Open(c, nil, set)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		r := record(200)
		r.RequestID = strconv.Itoa(i)
		l.Log(r)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Log(record(200)) // after Close: dropped, counted
	lines := readLines(t, c.Path)
	written, dropped := l.written.Get(), l.dropped.Get()
	if uint64(len(lines)) != written || written+dropped != n+1 || dropped < 1 {
		t.Fatalf("%d lines, %d written, %d dropped", len(lines), written, dropped)
	}
	for _, ln := range lines {
		if !json.Valid([]byte(ln)) {
			t.Fatalf("invalid line %q", ln)
		}
	}
}

// TestDropsWhenFull: the writer is not running, so the queue fills.
func TestDropsWhenFull(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.Buffer = 3
	l, err := newLog(c, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		l.Log(record(200))
	}
	if got := l.dropped.Get(); got != 7 {
		t.Fatalf("%d dropped, want 7", got)
	}
	l.start()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(readLines(t, c.Path)); got != 3 {
		t.Fatalf("%d lines written, want the 3 queued", got)
	}
}

func TestSample(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.Sample, c.Buffer = 0.5, 4096
	l, err := newLog(c, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		l.Log(record(200))
	}
	if n := len(l.lines); n < 350 || n > 650 {
		t.Fatalf("%d of 1000 2xx logged at 0.5", n)
	}
	before := len(l.lines)
	for range 100 {
		l.Log(record(500))
		gone := record(200)
		gone.ClientGone = true
		l.Log(gone)
	}
	if n := len(l.lines) - before; n != 200 {
		t.Fatalf("%d of 200 errors and gone clients logged", n)
	}
	if l.sampledOut.Get()+uint64(before) != 1000 {
		t.Fatalf("sampled out %d", l.sampledOut.Get())
	}
	l.start()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRotate writes through the writer's own steps (no goroutine): each
// file stays under MaxSize, MaxFiles are kept, the newest lines in path.
func TestRotate(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	c.MaxSize, c.MaxFiles = 1000, 2
	l, err := newLog(c, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		r := record(200)
		r.RequestID = strconv.Itoa(i)
		bp := new([]byte)
		*bp = appendLine(nil, r, c.Format)
		l.write(bp)
	}
	l.flush()
	l.closeFile()
	var seen []string
	for _, p := range []string{c.Path + ".2", c.Path + ".1", c.Path} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > c.MaxSize {
			t.Fatalf("%s: %d bytes, over %d", p, st.Size(), c.MaxSize)
		}
		seen = append(seen, readLines(t, p)...)
	}
	if _, err := os.Stat(c.Path + ".3"); !os.IsNotExist(err) {
		t.Fatalf("a third old file: %v", err)
	}
	// The newest lines, in order, ending with the last.
	for i, ln := range seen {
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(n - len(seen) + i); m["request_id"] != want {
			t.Fatalf("line %d: request_id %v, want %s", i, m["request_id"], want)
		}
	}
	if l.rotations.Get() < 3 || len(seen) >= n {
		t.Fatalf("%d rotations, %d lines kept", l.rotations.Get(), len(seen))
	}
}

// TestReopen: logrotate renames the file, a reload reopens the path.
func TestReopen(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	l, err := newLog(c, nil, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	one := func(id string) {
		r := record(200)
		r.RequestID = id
		bp := new([]byte)
		*bp = appendLine(nil, r, c.Format)
		l.write(bp)
		l.flush()
	}
	one("before")
	if err := os.Rename(c.Path, c.Path+".old"); err != nil {
		t.Fatal(err)
	}
	one("between") // still the moved file's
	l.reopenFile()
	one("after")
	l.closeFile()
	old, cur := readLines(t, c.Path+".old"), readLines(t, c.Path)
	if len(old) != 2 || len(cur) != 1 || !strings.Contains(cur[0], `"request_id":"after"`) {
		t.Fatalf("old %q, new %q", old, cur)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, f := range []func(*Config){
		func(c *Config) { c.Format = "xml" },
		func(c *Config) { c.Sample = 0 },
		func(c *Config) { c.Sample = 1.5 },
		func(c *Config) { c.Buffer = 0 },
		func(c *Config) { c.MaxSize = -1 },
		func(c *Config) { c.MaxFiles = -1 },
		func(c *Config) { c.Path, c.MaxSize = "-", 10 },
	} {
		c := DefaultConfig()
		f(&c)
		if c.Validate() == nil {
			t.Fatalf("%+v validated", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
