package shard

import (
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/upstream/backend"
)

// TestDecodeTracked: a streamed request is tracked among its backend's
// decoding requests from its first event to its end, expected to end
// after its max_tokens (ignore_eos) at the backend's learned time per
// token; its answer teaches that time. A request that got no 2xx, or
// whose backend has learned no decode speed, is not tracked.
func TestDecodeTracked(t *testing.T) {
	t.Parallel()
	e := newHoldEnv(t, 2, 2)
	body := chatBody("system", systemA, "user", "How long is the answer?")
	body = strings.Replace(body, "{", `{"max_tokens":300,"ignore_eos":true,`, 1)
	untaught := e.send(t, 0, body)
	b := untaught.cands[0]
	headCame(untaught.h, b, 200)
	dataCame(untaught.h)
	if n := b.Decoding(); n != 0 {
		t.Fatalf("no decode speed learned: %d tracked", n)
	}
	// The answer: 301 tokens in 3 s after the first, 10 ms per token.
	endCame(untaught.h, backend.Outcome{Backend: b, Status: 200, TTFB: time.Millisecond, FirstData: 100 * time.Millisecond,
		Total: 3100 * time.Millisecond, Usage: []byte(`{"prompt_tokens":40,"completion_tokens":301}`)})
	if got := b.TokenTime(); got != 10*time.Millisecond {
		t.Fatalf("token time %v, want 10ms", got)
	}

	c := e.send(t, 0, body)
	b = c.cands[0]
	b.ObserveDecode(301, 3*time.Second) // whichever backend it went to
	headCame(c.h, b, 200)
	dataCame(c.h)
	if n := b.Decoding(); n != 1 {
		t.Fatalf("after the first event: %d tracked, want 1", n)
	}
	rem := b.Remaining(e.r.now(), nil)
	if len(rem) != 1 || rem[0] > 3 || rem[0] < 2 {
		t.Fatalf("remaining %v s, want about 300 × 10 ms", rem)
	}
	endCame(c.h, backend.Outcome{Backend: b, Status: 200, TTFB: time.Millisecond, FirstData: 50 * time.Millisecond,
		Total: 3050 * time.Millisecond, Usage: []byte(`{"prompt_tokens":40,"completion_tokens":301}`)})
	if n := b.Decoding(); n != 0 {
		t.Fatalf("after its end: %d tracked", n)
	}

	// A refusal's head: nothing tracked, nothing learned.
	f := e.send(t, 1, body)
	fb := f.cands[0]
	before := fb.TokenTime()
	headCame(f.h, fb, 503)
	endCame(f.h, backend.Outcome{Backend: fb, Status: 503, TTFB: time.Millisecond, Total: time.Millisecond})
	if fb.Decoding() != 0 || fb.TokenTime() != before {
		t.Fatalf("a 503: %d tracked, token time %v (was %v)", fb.Decoding(), fb.TokenTime(), before)
	}
}
