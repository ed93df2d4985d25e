package shard

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/openai/openaitest"
)

// TestOffloadedDecode: a body over OffloopBytes is decoded on a worker
// while its loop serves a small request; a full decode queue answers 503
// with Retry-After; an offloaded body's error is answered from the worker.
func TestOffloadedDecode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2, config: func(c *Config) {
		c.OffloopBytes, c.DecodeWorkers, c.DecodeQueue = 2048, 1, 1
		c.Body.MaxValues = 1000
	}})
	entered, release := make(chan *job, 8), make(chan struct{})
	h := func(j *job) {
		entered <- j
		<-release
	}
	e.r.decodeHook.Store(&h)
	big := func(tag string) *fakeExchange {
		return newExchange(0, "POST", "/v1/chat/completions", chatBody("system", strings.Repeat(tag+" ", 1000), "user", "hi"))
	}
	x1 := big("first")
	e.loops.run(t, 0, func() { e.r.serve(x1) })
	if j := <-entered; j.x != x1 {
		t.Fatal("another job on the worker")
	}
	// The worker holds x1: the loop answers a small request meanwhile.
	small := newExchange(0, "POST", "/v1/chat/completions", chatBody("user", "small"))
	if c := e.serve(t, small); c == nil || c.x != small {
		t.Fatalf("small request while a large one decodes: %+v status %d", c, small.status)
	}
	x2 := big("second") // queued (DecodeQueue 1)
	e.loops.run(t, 0, func() { e.r.serve(x2) })
	x3 := big("third") // over the queue
	if c := e.serve(t, x3); c != nil || x3.status != 503 || x3.header("Retry-After") != "1" {
		t.Fatalf("over the decode queue: %+v %d %q", c, x3.status, x3.header("Retry-After"))
	}
	openaitest.CheckErrorBody(t, x3.body, "server_error", "overloaded", "")
	close(release)
	got := map[any]bool{}
	for range 2 {
		select {
		case c := <-e.up.calls:
			got[c.x] = true
		case <-time.After(10 * time.Second):
			t.Fatal("offloaded requests not forwarded")
		}
	}
	if !got[x1] || !got[x2] {
		t.Fatalf("forwarded %v, want x1 and x2", got)
	}
	// Refused on the worker: too many values for Body.MaxValues.
	x4 := newExchange(0, "POST", "/v1/completions", `{"model":"m","prompt":[`+strings.Repeat("1,", 1500)+`1]}`)
	if c := e.serve(t, x4); c != nil || x4.status != 413 {
		t.Fatalf("too many values: %+v %d %s", c, x4.status, x4.body)
	}
	openaitest.CheckErrorBody(t, x4.body, "invalid_request_error", "too_many_json_values", "")
	if n, full, refused := e.r.m.offloop.Get(), e.r.m.decodeQueueFull.Get(), e.r.m.refused[openai.ScanTooMany].Get(); n != 3 || full != 1 || refused != 1 {
		t.Fatalf("offloop %d, queue full %d, refused %d; want 3, 1, 1", n, full, refused)
	}
	var out bytes.Buffer
	e.set.WritePrometheus(&out)
	for _, want := range []string{
		`saltus_request_body_refused_total{reason="too_many_values"} 1`,
		`saltus_request_body_refused_total{reason="invalid_json"} 0`,
		`saltus_shard_decode_offloop_total 3`,
		`saltus_shard_decode_queue_full_total 1`,
		`saltus_shard_decode_queue_depth 0`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestLoopDropsGrownScratch: a loop's decode Scratch and texts that served
// a body over openai.KeepDecodeBytes are dropped, not reused; a small
// body's are kept.
func TestLoopDropsGrownScratch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2, config: func(c *Config) { c.OffloopBytes = 1 << 20 }})
	// texts is the first element of the loop's texts (nil: none kept),
	// kept is whether its Scratch holds anything.
	state := func() (texts *string, kept bool) {
		e.loops.run(t, 0, func() {
			ds := &e.r.shards[0].dec
			if cap(ds.texts) > 0 {
				texts = &ds.texts[:1][0]
			}
			kept = !reflect.ValueOf(ds.sc).IsZero()
		})
		return texts, kept
	}
	small := chatBody("user", "small")
	if c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", small)); c == nil {
		t.Fatal("not forwarded")
	}
	t0, kept := state()
	if t0 == nil || !kept {
		t.Fatal("no scratch kept after a small body")
	}
	if c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", small)); c == nil {
		t.Fatal("not forwarded")
	}
	if t1, _ := state(); t1 != t0 {
		t.Fatal("a small body's texts were not reused")
	}
	large := `{"model":"m","junk":[` + strings.Repeat("1,", openai.KeepDecodeBytes/2) + `1],"messages":[{"role":"user","content":"x"}]}`
	if c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", large)); c == nil {
		t.Fatal("large body not forwarded")
	}
	if texts, kept := state(); texts != nil || kept {
		t.Fatalf("after a body over openai.KeepDecodeBytes: texts kept %v, scratch kept %v", texts != nil, kept)
	}
	if c := e.serve(t, newExchange(0, "POST", "/v1/chat/completions", small)); c == nil {
		t.Fatal("not forwarded")
	}
	if t2, kept := state(); t2 == nil || t2 == t0 || !kept {
		t.Fatal("after a large body, the next request does not start from fresh memory")
	}
}

// TestExplainBodyLimits: /admin/explain decodes with the same caps.
func TestExplainBodyLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2})
	_, err := e.r.Explain([]byte(`{"model":"m","messages":[`+strings.Repeat("[", 100)+`]}`), "/v1/chat/completions")
	if ae, ok := err.(*openai.Error); !ok || ae.Status != 413 || ae.Code != "json_too_deep" {
		t.Fatalf("too deep: %v", err)
	}
	_, err = e.r.Explain([]byte(`{"model":"m","messages":[}`), "/v1/chat/completions")
	if err == nil || err.Error() != "invalid JSON at byte 25: unexpected '}', want a value" {
		t.Fatalf("bad JSON: %v", err)
	}
}

// TestValueBudget: parses that together exceed the budget wait for each
// other; ones that fit go at once.
func TestValueBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var b valueBudget
		b.init(10)
		b.acquire(6)
		got := make(chan int, 2)
		go func() { b.acquire(6); got <- 6 }()
		go func() { b.acquire(4); got <- 4 }()
		synctest.Wait()
		if n := len(got); n != 1 || <-got != 4 {
			t.Fatalf("%d acquired; want only the 4 that fits", n)
		}
		b.release(4) // free 4: the waiting 6 still does not fit
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("6 acquired with 4 free")
		default:
		}
		b.release(6)
		synctest.Wait()
		if len(got) != 1 || <-got != 6 {
			t.Fatal("6 not acquired once the budget was free")
		}
		b.release(6)
		if b.free != 10 {
			t.Fatalf("free %d after all releases, want 10", b.free)
		}
	})
}

// TestLoopBodyLimits: a small body, decoded on the loop before it is
// scanned, gets the same refusals as a large one: over the depth, and
// what the scan's grammar refuses, even in a member the decoder skips
// (fastjson let `01` and `\x` pass there) or after a member it refuses.
func TestLoopBodyLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 1, backends: 2})
	f := func(body string, status int, code, msg string) {
		t.Helper()
		x := newExchange(0, "POST", "/v1/chat/completions", body)
		if c := e.serve(t, x); c != nil || x.status != status {
			t.Fatalf("%s: %+v %d %s", body, c, x.status, x.body)
		}
		if eb := openaitest.CheckErrorBody(t, x.body, "invalid_request_error", code, ""); !strings.Contains(eb.Message, msg) {
			t.Fatalf("%s: message %q, want %q", body, eb.Message, msg)
		}
	}
	f(`{"model":"m","messages":`+strings.Repeat("[", 65)+strings.Repeat("]", 65)+`}`, 413, "json_too_deep",
		"request body nests JSON deeper than 64 levels (max-body-depth 64; at byte 87)")
	f(`{"model":"m","messages":[{"role":"user","content":"x"}],}`, 400, "", "invalid JSON at byte 56: unexpected '}', want an object key")
	f(`{"model":"m","n":01,"messages":[{"role":"user","content":"x"}]}`, 400, "", `invalid JSON at byte 18: invalid number "01"`)
	f(`{"model":"m","s":"\x","messages":[{"role":"user","content":"x"}]}`, 400, "", `invalid JSON at byte 18: invalid escape \x in a string`)
	f(`{"model":5,"messages":[{"role":"user","content":"x"}],"n":nan}`, 400, "", `invalid JSON at byte 58: unexpected 'n', want a value (null?)`)
	if got := e.r.m.refused[openai.ScanTooDeep].Get() + e.r.m.refused[openai.ScanSyntax].Get(); got != 5 {
		t.Fatalf("refusals counted: %d, want 5", got)
	}
}

// TestJinjaOffloop: with a Jinja chat template every chat is rendered by
// a decode worker, off its loop, and keyed as the built-in rendering of
// the same template keys it; the queue holds a burst.
func TestJinjaOffloop(t *testing.T) {
	t.Parallel()
	body := chatBody("system", "You are a lighthouse keeper.", "user", "How often is the lens cleaned?")
	route := func(jinja bool) (string, *env) {
		e := newEnv(t, envOpts{loops: 1, backends: 2, tokenizer: true, jinja: jinja})
		x := newExchange(0, "POST", "/v1/chat/completions", body)
		c := e.serve(t, x)
		if c == nil {
			t.Fatalf("jinja %v: not forwarded: %d %s", jinja, x.status, x.body)
		}
		return strings.Fields(c.header(HeaderRoute))[0], e
	}
	builtin, eb := route(false)
	viaJinja, ej := route(true)
	if builtin != viaJinja {
		t.Fatalf("blocks %s through Jinja, %s through the built-in", viaJinja, builtin)
	}
	if n := eb.r.m.offloop.Get(); n != 0 {
		t.Errorf("built-in: %d offloaded, want 0", n)
	}
	if n := ej.r.m.offloop.Get(); n != 1 {
		t.Errorf("Jinja: %d offloaded, want 1", n)
	}
	if q := cap(ej.r.decodes); q < interpretedQueue {
		t.Errorf("decode queue %d with a Jinja template, want at least %d", q, interpretedQueue)
	}
}
