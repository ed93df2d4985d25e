package backend

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// testSet returns a Set with short timeouts, closed at the end of the test.
func testSet(t testing.TB, edit func(*Config)) (*Set, *metrics.Set) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ConnectTimeout = time.Second
	cfg.FirstByteTimeout = 5 * time.Second
	cfg.IdleConnTimeout = 200 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	ms := metrics.NewSet()
	s, err := NewSet(cfg, nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, ms
}

func upstream(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func mustAdd(t *testing.T, s *Set, url string) *Backend {
	t.Helper()
	b, err := s.Add(url)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// closedPort returns the URL of a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func counter(ms *metrics.Set, name string) uint64 {
	return ms.GetOrCreateCounter(name).Get()
}
