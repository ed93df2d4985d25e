package main

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// postWith posts body on a connection of its own (closed after), so that no
// connection's buffers outlive the request.
func postWith(t *testing.T, addr, path, body string) answer {
	t.Helper()
	a, err := postOnce(addr, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// postOnce is postWith for another goroutine than the test's.
func postOnce(addr, path, body string) (answer, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// bigAnswer is postOnce's result, from the goroutine that posts.
type bigAnswer struct {
	a   answer
	err error
}

func postAsync(addr, path, body string, done chan<- bigAnswer) {
	a, err := postOnce(addr, path, body)
	done <- bigAnswer{a, err}
}

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC() // twice: sync.Pool's victim cache goes on the second
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestServeTinyValuesBodiesPinNoMemory: ten 15 MB bodies of tiny JSON
// values (7.5 M values each, under the 16 MiB body limit) are refused by
// the structural cap with 413 naming it, and leave the heap where it was
// (before the cap, one took RSS from 382 MB to 3.4 GB and a loop's parser
// kept it). Not parallel: it measures the process's heap.
func TestServeTinyValuesBodiesPinNoMemory(t *testing.T) {
	ok := newUpstreamFunc(t, "ok", func(u *upstream, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	s := startServeWith(t, []*upstream{ok}, func(c *serveConfig) { c.Tokenizer = "" })
	const target = 15 << 20
	body := `{"model":"m","junk":[` + strings.Repeat("1,", (target-32)/2) + `1]}`
	if a := postWith(t, s.addr, "/v1/chat/completions", chatJSON(false, "user", "warm up")); a.status != 200 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	before := heapInuse()
	for i := range 10 {
		a := postWith(t, s.addr, "/v1/chat/completions", body)
		if a.status != 413 || !strings.Contains(a.body, `"code":"too_many_json_values"`) ||
			!strings.Contains(a.body, "more than 1100000 JSON values (max-body-values 1100000") {
			t.Fatalf("body %d: %d %.300s", i, a.status, a.body)
		}
	}
	after := heapInuse()
	grown := int64(after) - int64(before)
	t.Logf("heap in use: %d MiB before, %d MiB after ten 15 MB bodies (%+d KiB)", before>>20, after>>20, grown>>10)
	if grown > 64<<20 {
		t.Fatalf("heap in use grew by %d MiB, want under 64 MiB", grown>>20)
	}
	// A body of the same shape within the limit is decoded, once, and its
	// parser dropped too.
	small := `{"model":"m","junk":[` + strings.Repeat("1,", 500_000) + `1],"messages":[{"role":"user","content":"x"}]}`
	if a := postWith(t, s.addr, "/v1/chat/completions", small); a.status != 200 {
		t.Fatalf("500k values: %d %.300s", a.status, a.body)
	}
	if grown := int64(heapInuse()) - int64(before); grown > 64<<20 {
		t.Fatalf("heap in use grew by %d MiB after a 1 MB body, want under 64 MiB", grown>>20)
	}
	runtime.KeepAlive(body) // in both measurements
	// Syntax errors name the byte.
	if a := postWith(t, s.addr, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user",}]}`); a.status != 400 ||
		!strings.Contains(a.body, "invalid JSON at byte 40: unexpected '}', want an object key") {
		t.Fatalf("bad JSON: %d %s", a.status, a.body)
	}
}

// TestServeLargeBodyDoesNotStallItsLoop: while a 29 MB body of 1 M
// messages is decoded (held on its decode worker by a test hook), a small
// request on the same loop (one shard) is answered; released, the large
// one is answered too. It then measures, without the gate, the small
// request's latency while the large body decodes (logged: a wall-clock
// bound would flake).
func TestServeLargeBodyDoesNotStallItsLoop(t *testing.T) {
	t.Parallel()
	ok := newUpstreamFunc(t, "ok", func(u *upstream, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	s := startServeWith(t, []*upstream{ok}, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Reactor.Loops = 1
		c.Reactor.MaxBodyBytes = 32 << 20
		c.Router.Body.MaxValues = 4_000_000
	})
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := range 1_000_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":""}`)
	}
	b.WriteString(`]}`)
	big := b.String()
	small := chatJSON(false, "user", "a small request")

	entered, release := make(chan struct{}, 4), make(chan struct{})
	s.router.SetDecodeHook(func() {
		entered <- struct{}{}
		<-release
	})
	bigDone := make(chan bigAnswer, 1)
	wantBig := func() {
		t.Helper()
		if r := <-bigDone; r.err != nil || r.a.status != 200 {
			t.Fatalf("large body: %v %d %.300s", r.err, r.a.status, r.a.body)
		}
	}
	go postAsync(s.addr, "/v1/chat/completions", big, bigDone)
	select {
	case <-entered: // the large body is on the decode worker, held
	case r := <-bigDone:
		t.Fatalf("large body answered before its decode: %v %d %.300s", r.err, r.a.status, r.a.body)
	}
	start := time.Now()
	if a := postWith(t, s.addr, "/v1/chat/completions", small); a.status != 200 {
		t.Fatalf("small request: %d %s", a.status, a.body)
	}
	gated := time.Since(start)
	select {
	case r := <-bigDone:
		t.Fatalf("the large body was answered while held: %v %d %.200s", r.err, r.a.status, r.a.body)
	default:
	}
	close(release)
	wantBig()

	// Ungated: the worker decodes while the small request comes.
	decoding := make(chan struct{}, 1)
	s.router.SetDecodeHook(func() { decoding <- struct{}{} })
	bigStart := time.Now()
	go postAsync(s.addr, "/v1/chat/completions", big, bigDone)
	select {
	case <-decoding:
	case r := <-bigDone:
		t.Fatalf("large body answered before its decode: %v %d %.300s", r.err, r.a.status, r.a.body)
	}
	start = time.Now()
	if a := postWith(t, s.addr, "/v1/chat/completions", small); a.status != 200 {
		t.Fatalf("small request: %d %s", a.status, a.body)
	}
	during := time.Since(start)
	wantBig()
	t.Logf("small request on the large body's loop: %v with the decode held, %v during the decode; the large body took %v end to end",
		gated, during, time.Since(bigStart))
}
