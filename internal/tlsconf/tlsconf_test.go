package tlsconf

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/tlsconf/tlstest"
	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func metricLine(set *metrics.Set, name string) string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			return v
		}
	}
	return "absent"
}

func TestReload(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "reload")
	first := ca.Issue(t, tlstest.ECDSA, time.Hour, "localhost")
	h, err := Load(first.CertFile, first.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	set := metrics.NewSet()
	h.Register(set, "data")
	got, _ := h.GetCertificate(nil)
	if !bytes.Equal(got.Certificate[0], first.Cert.Certificate[0]) {
		t.Fatal("GetCertificate is not the loaded certificate")
	}
	if v := metricLine(set, `saltus_tls_cert_expiry_seconds{listener="data"}`); v != formatUnix(first.NotAfter) {
		t.Fatalf("expiry gauge %s, want %s", v, formatUnix(first.NotAfter))
	}

	// A renewal: the new pair is served after Reload.
	second := ca.Issue(t, tlstest.RSA, 2*time.Hour, "localhost")
	second.WriteTo(t, first.CertFile, first.KeyFile)
	if err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	got, _ = h.GetCertificate(nil)
	if !bytes.Equal(got.Certificate[0], second.Cert.Certificate[0]) {
		t.Fatal("Reload did not swap the certificate")
	}
	if v := metricLine(set, `saltus_tls_cert_expiry_seconds{listener="data"}`); v != formatUnix(second.NotAfter) {
		t.Fatalf("expiry gauge %s, want %s", v, formatUnix(second.NotAfter))
	}

	// A broken key (a half-written renewal): the old pair stays, the error says so.
	if err := os.WriteFile(first.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = h.Reload()
	if err == nil || !strings.Contains(err.Error(), "cannot load the TLS certificate "+first.CertFile+" and key "+first.KeyFile) ||
		!strings.Contains(err.Error(), "still serving the certificate loaded at") {
		t.Fatalf("Reload of a broken key: %v", err)
	}
	got, _ = h.GetCertificate(nil)
	if !bytes.Equal(got.Certificate[0], second.Cert.Certificate[0]) {
		t.Fatal("a failed Reload changed the certificate")
	}
	// A key of another certificate.
	third := ca.Issue(t, tlstest.ECDSA, time.Hour, "localhost")
	if err := os.WriteFile(first.KeyFile, third.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Reload of a mismatched key: %v", err)
	}
	if ok, bad := metricLine(set, `saltus_tls_cert_reloads_total{listener="data",result="ok"}`), metricLine(set, `saltus_tls_cert_reloads_total{listener="data",result="error"}`); ok != "1" || bad != "2" {
		t.Fatalf("reloads ok=%s error=%s, want 1 and 2", ok, bad)
	}
}

func formatUnix(t time.Time) string {
	var b bytes.Buffer
	set := metrics.NewSet()
	set.NewGauge("x", func() float64 { return float64(t.Unix()) })
	set.WritePrometheus(&b)
	_, v, _ := strings.Cut(strings.TrimSpace(b.String()), " ")
	return v
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	if _, err := Load("", ""); err == nil {
		t.Fatal("Load without files: no error")
	}
	if err := Check("/nonexistent/cert.pem", "/nonexistent/key.pem"); err == nil || !strings.Contains(err.Error(), "/nonexistent/cert.pem") {
		t.Fatalf("Check of missing files: %v", err)
	}
	if _, err := LoadCAFile("/nonexistent/ca.pem", false); err == nil {
		t.Fatal("LoadCAFile of a missing file: no error")
	}
	ca := tlstest.NewCA(t, "pool")
	pool, err := LoadCAFile(ca.File, false)
	if err != nil || pool == nil {
		t.Fatalf("LoadCAFile: %v", err)
	}
}
