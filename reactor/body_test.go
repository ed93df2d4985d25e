package reactor

import (
	"bytes"
	"testing"
)

func TestBodyClass(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, class int }{
		{1, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {4096, 2}, {4097, 3}, {65536, 6}, {65537, -1}, {16 << 20, -1},
	} {
		if got := bodyClass(tc.n); got != tc.class {
			t.Errorf("bodyClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
		if tc.class >= 0 && 1<<(minPooledShift+tc.class) < tc.n {
			t.Errorf("class %d too small for %d", tc.class, tc.n)
		}
	}
}

// A released body's buffer serves a later request; the released Request
// no longer shows it; unpooled sizes and double releases are harmless.
func TestBodyPool(t *testing.T) {
	body := bytes.Repeat([]byte("a"), 3000)
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n" + string(body)
	var p progress
	r, _, err := parse([]byte(req), testLimits, &p)
	if err != nil || !bytes.Equal(r.Body, body) || r.pooled == nil || cap(*r.pooled) != 4096 {
		t.Fatalf("parse: %v, body %d bytes, pooled %v", err, len(r.Body), r.pooled != nil)
	}
	r.ReleaseBody()
	r.ReleaseBody()
	if r.Body != nil || r.pooled != nil {
		t.Fatalf("after ReleaseBody: body %d bytes, pooled %v", len(r.Body), r.pooled != nil)
	}
	big := &Request{}
	b := big.newBody(maxPooledBody + 1)
	if len(b) != maxPooledBody+1 || big.pooled != nil {
		t.Fatalf("a body over the pooled size: len %d pooled %v", len(b), big.pooled != nil)
	}
	big.Body = b
	big.ReleaseBody()
	if big.Body != nil {
		t.Fatal("ReleaseBody kept an unpooled body")
	}
}
