package reactor

import (
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/internal/httplex"
)

func TestHeadRequestID(t *testing.T) {
	t.Parallel()
	f := func(head, want string) {
		t.Helper()
		if got := headRequestID([]byte(head)); got != want {
			t.Errorf("headRequestID(%q) = %q, want %q", head, got, want)
		}
	}
	f("GET / HTTP/1.1\r\nHost: x\r\nX-Request-ID: abc\r\n\r\n", "abc")
	f("\r\nGET / HTTP/1.1\nx-request-id:\t a b \n\n", "a b")
	f("GET / HTTP/1.1\r\nX-Request-ID: first\r\nX-Request-ID: second\r\n\r\n", "first")
	f("GET / HTTP/1.1\r\nX-Request-ID: cut", "")                              // not a whole line
	f("GET / HTTP/1.1\r\n\r\nX-Request-ID: body\r\n", "")                     // after the head
	f("X-Request-ID: line\r\nHost: x\r\n\r\n", "")                            // the request line
	f("GET / HTTP/1.1\r\nX-Request-ID: \x01\r\n\r\n", "")                     // control character
	f("GET / HTTP/1.1\r\nX-Request-ID: "+strings.Repeat("a", 257)+"\r\n", "") // too long
	f("GET / HTTP/1.1\r\nX-Request-ID:\r\n\r\n", "")
	f("", "")
}

func TestNewRequestID(t *testing.T) {
	t.Parallel()
	a, b := NewRequestID(), NewRequestID()
	if a == b || !strings.HasPrefix(a, idPrefix) || len(a) < 18 {
		t.Fatalf("NewRequestID: %q then %q", a, b)
	}
	r := &Request{Header: []Header{{"x-request-id", "mine"}}}
	if got := r.RequestID(); got != "mine" {
		t.Fatalf("RequestID() = %q, want the client's", got)
	}
	if got := (&Request{}).RequestID(); !strings.HasPrefix(got, idPrefix) {
		t.Fatalf("RequestID() without one = %q, want a generated one", got)
	}
}

func FuzzHeadRequestID(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nX-Request-ID: abc\r\n\r\n"))
	f.Add([]byte("\n\nGET\nx-request-id:\n"))
	f.Fuzz(func(t *testing.T, head []byte) {
		id := headRequestID(head)
		if len(id) > maxEchoedID || !httplex.ValidValue(id) || id != httplex.TrimOWS(id) {
			t.Fatalf("headRequestID(%q) = %q", head, id)
		}
	})
}
