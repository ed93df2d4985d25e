package backend

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/internal/tlsconf/tlstest"
)

// TestHTTPSControl: an https backend's control client (probes, the engine
// scrape) verifies the certificate against Config.TLS's roots and the
// URL's host.
func TestHTTPSControl(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "backend")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\n") // the test's engine
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.Cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted client's handshakes fail on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "https://") {
		t.Fatal(srv.URL)
	}

	trusted, _ := testSet(t, func(c *Config) { c.TLS = &tls.Config{RootCAs: ca.Pool()} })
	b := mustAdd(t, trusted, srv.URL)
	if b.URL != srv.URL {
		t.Errorf("URL %s, want %s", b.URL, srv.URL)
	}
	if !trusted.probe(b, 5*time.Second) {
		t.Errorf("probe of a trusted https backend failed: %v", b.probeErr)
	}
	if body, err := trusted.scrape(b, 5*time.Second); err != nil || !strings.Contains(string(body), "vllm:num_requests_running 2") {
		t.Errorf("scrape of a trusted https backend: %q, %v", body, err)
	}

	untrusted, _ := testSet(t, nil) // the system roots do not hold the test CA
	b2 := mustAdd(t, untrusted, srv.URL)
	if untrusted.probe(b2, 5*time.Second) || b2.probeErr == nil || !strings.Contains(b2.probeErr.Error(), "certificate signed by unknown authority") {
		t.Errorf("probe of an untrusted https backend: %v", b2.probeErr)
	}
}
