package backend

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestFailReason(t *testing.T) {
	t.Parallel()
	f := func(err error, want string) {
		t.Helper()
		if got := failReason(err); got != want {
			t.Errorf("failReason(%v) = %q, want %q", err, got, want)
		}
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	f(&dialError{err: refused}, "connection refused")
	f(fmt.Errorf("backend x: %w", &dialError{err: refused}), "connection refused")
	f(&dialError{err: &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}}, "connect timed out")
	f(&dialError{err: errClosedBeforeHead}, "connection closed while connecting")
	f(&dialError{err: errors.New("no route to host")}, "cannot connect")
	f(fasthttp.ErrNoFreeConns, "every connection to it busy")
	f(&dialError{err: errNoFreeConns}, "every connection to it busy")
	f(fasthttp.ErrTimeout, "timed out")
	f(errClosedBeforeHead, "connection closed before the response head")
	f(io.EOF, "connection closed before the response head")
	f(fasthttp.ErrConnectionClosed, "connection closed before the response head")
	f(syscall.ECONNRESET, "connection closed before the response head")
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	f := func(name, wantErr string) {
		t.Helper()
		err := CheckName(name)
		if (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("CheckName(%q) = %v, want %q", name, err, wantErr)
		}
	}
	f("gpu-a100.1_x", "")
	f("backend-", "")
	f("backend-x1", "")
	f("backend-12", "reserved")
	f("", "1 to 64")
	f(strings.Repeat("a", 65), "1 to 64")
	f("a b", "only letters")
	f("a=b", "only letters")
	f("10.0.0.1:8000", "only letters")
}

// TestAddNamed: names are unique in the Set, defaults are backend-<id>,
// and the label follows BackendHeader.
func TestAddNamed(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, func(c *Config) { c.BackendHeader = "name" })
	a, err := s.AddNamed("alpha", "http://127.0.0.1:9001")
	if err != nil {
		t.Fatal(err)
	}
	b := mustAdd(t, s, "http://127.0.0.1:9002")
	if a.Name != "alpha" || b.Name != "backend-1" || s.label(a) != "alpha" || s.label(b) != "backend-1" {
		t.Errorf("names %q %q, labels %q %q", a.Name, b.Name, s.label(a), s.label(b))
	}
	if _, err := s.AddNamed("alpha", "http://127.0.0.1:9003"); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate name: %v", err)
	}
	if _, err := s.AddNamed("backend-5", "http://127.0.0.1:9003"); err == nil {
		t.Error("reserved name accepted")
	}
	u, _ := testSet(t, nil)
	c := mustAdd(t, u, "http://127.0.0.1:9001")
	if u.label(c) != c.URL {
		t.Errorf("BackendHeader url: label %q", u.label(c))
	}
}
