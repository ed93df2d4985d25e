package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// genCert makes a self-signed certificate (a CA or a client's) and its
// key, PEM-encoded.
func genCert(t testing.TB, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestInCluster(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	env := func(host, port string) func(string) string {
		return func(k string) string {
			return map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}[k]
		}
	}

	dir := inClusterDir(t, f, "tok1", "team-a")
	a, err := inCluster(dir, env("fd00::1", "443"))
	if err != nil {
		t.Fatal(err)
	}
	if a.url.String() != "https://[fd00::1]:443" || a.namespace != "team-a" || a.tls == nil || a.tls.RootCAs == nil || a.tls.InsecureSkipVerify {
		t.Errorf("in-cluster: url %s namespace %q tls %+v", a.url, a.namespace, a.tls)
	}
	if tok, err := a.bearer(); tok != "tok1" || err != nil {
		t.Errorf("bearer %q, %v", tok, err)
	}

	for _, tc := range []struct {
		name, host, port string
		mutate           func(dir string)
		want             string
	}{
		{"no host", "", "443", nil, "KUBERNETES_SERVICE_HOST not set"},
		{"no env", "", "", nil, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set"},
		{"no token", "10.0.0.1", "443", func(d string) { os.Remove(filepath.Join(d, "token")) }, "cannot read the API token"},
		{"empty token", "10.0.0.1", "443", func(d string) { writeFile(t, filepath.Join(d, "token"), "\n") }, "is empty"},
		{"no CA", "10.0.0.1", "443", func(d string) { os.Remove(filepath.Join(d, "ca.crt")) }, "cannot read the cluster CA"},
		{"bad CA", "10.0.0.1", "443", func(d string) { writeFile(t, filepath.Join(d, "ca.crt"), "not a cert") }, "holds no PEM certificate"},
	} {
		dir := inClusterDir(t, f, "tok1", "team-a")
		if tc.mutate != nil {
			tc.mutate(dir)
		}
		_, err := inCluster(dir, env(tc.host, tc.port))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}

	// No namespace file: New falls back to "default".
	cfg := DefaultConfig()
	cfg.Service = "vllm"
	cfg.inClusterDir = inClusterDir(t, f, "tok1", "")
	cfg.getenv = env("10.0.0.1", "443")
	ws, err := New(cfg, slog.New(slog.DiscardHandler), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	if w := ws[0]; len(ws) != 1 || w.namespace != "default" || !strings.Contains(w.base, "/namespaces/default/endpointslices") {
		t.Errorf("%d watchers, namespace %q, base %s", len(ws), w.namespace, w.base)
	}
	cfg.Namespace = "explicit"
	if ws, err = New(cfg, slog.New(slog.DiscardHandler), metrics.NewSet()); err != nil || ws[0].namespace != "explicit" {
		t.Errorf("Config.Namespace not used: %v %v", ws, err)
	}
}

// kubeconfigYAML builds a kubeconfig with one cluster, context and user.
func kubeconfigYAML(cluster, user, ctxExtra string) string {
	return `apiVersion: v1
kind: Config
preferences: {}
current-context: dev
clusters:
- name: other
  cluster:
    server: https://wrong.example:6443
- name: c1
  cluster:
` + indent(cluster, 4) + `
contexts:
- name: dev
  context:
    cluster: c1
    user: u1
` + indent(ctxExtra, 4) + `
users:
- name: u1
  user:
` + indent(user, 4) + "\n"
}

func indent(s string, n int) string {
	if s == "" {
		return ""
	}
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n"+pad)
}

func TestParseKubeconfig(t *testing.T) {
	t.Parallel()
	caPEM, _ := genCert(t, "test-ca")
	certPEM, keyPEM := genCert(t, "saltus-test")
	files := map[string][]byte{
		"/etc/kube/ca.pem":     caPEM,
		"/etc/kube/cert.pem":   certPEM,
		"/etc/kube/key.pem":    keyPEM,
		"/etc/kube/token.txt":  []byte("tok-file\n"),
		"/abs/elsewhere/ca.pm": caPEM,
	}
	read := func(p string) ([]byte, error) {
		if b, ok := files[p]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	}
	parse := func(y string) (*apiServer, error) { return parseKubeconfig([]byte(y), "/etc/kube/config", read) }

	t.Run("token and CA data", func(t *testing.T) {
		a, err := parse(kubeconfigYAML("server: https://k8s.example:6443/\ncertificate-authority-data: "+b64(caPEM)+"\ntls-server-name: api.internal",
			"token: tok-static", "namespace: team-a"))
		if err != nil {
			t.Fatal(err)
		}
		if a.url.String() != "https://k8s.example:6443" || a.token != "tok-static" || a.tokenFile != "" || a.namespace != "team-a" ||
			a.tls == nil || a.tls.RootCAs == nil || a.tls.ServerName != "api.internal" || a.tls.InsecureSkipVerify || len(a.tls.Certificates) != 0 {
			t.Errorf("got %+v tls %+v", a, a.tls)
		}
		if !strings.Contains(a.source, "/etc/kube/config") || !strings.Contains(a.source, "dev") {
			t.Errorf("source %q", a.source)
		}
	})
	t.Run("files relative to the kubeconfig", func(t *testing.T) {
		a, err := parse(kubeconfigYAML("server: https://k8s.example/prefix/path\ncertificate-authority: ca.pem",
			"tokenFile: token.txt\nclient-certificate: cert.pem\nclient-key: /etc/kube/key.pem", ""))
		if err != nil {
			t.Fatal(err)
		}
		if a.url.Path != "/prefix/path" || a.tokenFile != "/etc/kube/token.txt" || len(a.tls.Certificates) != 1 || a.tls.RootCAs == nil {
			t.Errorf("got %+v tls %+v", a, a.tls)
		}
		if tok, err := a.bearer(); err == nil || tok != "" {
			// bearer reads the real file system: /etc/kube/token.txt is not there.
			t.Errorf("bearer %q, %v: want an error", tok, err)
		}
	})
	t.Run("client certificate data, insecure", func(t *testing.T) {
		a, err := parse(kubeconfigYAML("server: https://10.0.0.1:6443\ninsecure-skip-tls-verify: true",
			"client-certificate-data: "+b64(certPEM)+"\nclient-key-data: "+b64(keyPEM), ""))
		if err != nil {
			t.Fatal(err)
		}
		if !a.insecure || !a.tls.InsecureSkipVerify || len(a.tls.Certificates) != 1 || a.tls.RootCAs != nil {
			t.Errorf("got %+v tls %+v", a, a.tls)
		}
	})
	t.Run("kubectl proxy", func(t *testing.T) {
		a, err := parse(kubeconfigYAML("server: http://127.0.0.1:8001\nproxy-url: socks5://127.0.0.1:1080", "", ""))
		if err != nil {
			t.Fatal(err)
		}
		if a.tls != nil || a.url.Scheme != "http" || a.proxy == nil || a.proxy.Host != "127.0.0.1:1080" {
			t.Errorf("got %+v", a)
		}
	})
	t.Run("no user", func(t *testing.T) {
		y := strings.Replace(kubeconfigYAML("server: https://k", "token: x", ""), "    user: u1\n", "", 1)
		a, err := parse(y)
		if err != nil || a.token != "" {
			t.Errorf("got %+v, %v", a, err)
		}
	})

	for _, tc := range []struct{ name, yaml, want string }{
		{"exec", kubeconfigYAML("server: https://k", "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: aws-iam-authenticator\n  args: [token]", ""), "exec credential plugins (exec: aws-iam-authenticator) are not supported"},
		{"auth-provider", kubeconfigYAML("server: https://k", "auth-provider:\n  name: gcp", ""), "auth-provider plugins are not supported"},
		{"basic auth", kubeconfigYAML("server: https://k", "username: admin\npassword: secret", ""), "basic auth"},
		{"no current-context", "apiVersion: v1\nkind: Config\nclusters: []\n", "no current-context"},
		{"unknown context", "current-context: nope\ncontexts: []\n", `current-context "nope" is not among its contexts`},
		{"unknown cluster", strings.Replace(kubeconfigYAML("server: https://k", "", ""), "cluster: c1", "cluster: c9", 1), `cluster "c9" is not among the clusters`},
		{"unknown user", strings.Replace(kubeconfigYAML("server: https://k", "", ""), "user: u1", "user: u9", 1), `user "u9" is not among the users`},
		{"no server", kubeconfigYAML("certificate-authority-data: "+b64(caPEM), "", ""), "has no server"},
		{"ftp server", kubeconfigYAML("server: ftp://k", "", ""), "want an https://"},
		{"server with query", kubeconfigYAML("server: https://k/?a=b", "", ""), "without user, query or fragment"},
		{"CA and insecure", kubeconfigYAML("server: https://k\ninsecure-skip-tls-verify: true\ncertificate-authority-data: "+b64(caPEM), "", ""), "insecure-skip-tls-verify together"},
		{"CA data not base64", kubeconfigYAML("server: https://k\ncertificate-authority-data: '%%%'", "", ""), "certificate-authority-data: not base64"},
		{"CA data not PEM", kubeconfigYAML("server: https://k\ncertificate-authority-data: "+b64([]byte("hello")), "", ""), "not PEM"},
		{"CA file missing", kubeconfigYAML("server: https://k\ncertificate-authority: missing.pem", "", ""), "certificate-authority: file does not exist"},
		{"cert without key", kubeconfigYAML("server: https://k", "client-certificate-data: "+b64(certPEM), ""), "a client-certificate without a client-key"},
		{"key without cert", kubeconfigYAML("server: https://k", "client-key: key.pem", ""), "a client-key without a client-certificate"},
		{"mismatched pair", kubeconfigYAML("server: https://k", "client-certificate-data: "+b64(certPEM)+"\nclient-key-data: "+b64(func() []byte { _, k := genCert(t, "x"); return k }()), ""), "client certificate and key"},
		{"http with a CA", kubeconfigYAML("server: http://k\ncertificate-authority-data: "+b64(caPEM), "", ""), "is http://, but a certificate is configured"},
		{"bad proxy", kubeconfigYAML("server: https://k\nproxy-url: ftp://p", "", ""), "proxy-url"},
		{"not YAML", "current-context: [", "not a kubeconfig"},
	} {
		_, err := parse(tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// TestKubeconfigEndToEnd: a kubeconfig's CA data, client certificate and
// token, and its context's namespace, against a TLS server that requires
// a client certificate.
func TestKubeconfigEndToEnd(t *testing.T) {
	t.Parallel()
	certPEM, keyPEM := genCert(t, "saltus-test")
	f := newFakeAPIWith(t, true, func(c *tls.Config) { c.ClientAuth = tls.RequireAnyClientCert })
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, path, kubeconfigYAML("server: "+f.srv.URL+"\ncertificate-authority-data: "+b64(caPEM),
		"token: tok-kc\nclient-certificate-data: "+b64(certPEM)+"\nclient-key-data: "+b64(keyPEM), "namespace: ns1"))
	cfg := DefaultConfig()
	cfg.Service = testService
	cfg.Kubeconfig = path
	cfg.BackoffMin, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	r := start(t, cfg)
	l := f.nextList(t)
	if got := l.r.Header.Get("Authorization"); got != "Bearer tok-kc" {
		t.Errorf("Authorization %q", got)
	}
	if l.r.TLS == nil || len(l.r.TLS.PeerCertificates) == 0 || l.r.TLS.PeerCertificates[0].Subject.CommonName != "saltus-test" {
		t.Errorf("the client certificate did not reach the server: %+v", l.r.TLS)
	}
	if !strings.Contains(l.r.URL.Path, "/namespaces/ns1/") {
		t.Errorf("path %s: want the context's namespace", l.r.URL.Path)
	}
	l.list("1", slice("vllm-a", "1", "IPv4", httpPort, ep("10.0.0.1", "pod-a", "ready")))
	if got := targets(r.update(t)); got != "pod-a=http://10.0.0.1:8000" {
		t.Fatalf("got %s", got)
	}
	if st := r.status(); !strings.HasPrefix(st.Source, "kubeconfig "+path) || st.Server != f.srv.URL {
		t.Errorf("status %+v", st)
	}
	f.nextWatch(t, "1").json(http.StatusUnauthorized, `{"kind":"Status","message":"Unauthorized","code":401}`)
	f.nextWatch(t, "1")
	if st := r.status(); !strings.Contains(st.LastError, "refused the credentials") {
		t.Errorf("last error %q", st.LastError)
	}
}

// TestNewErrors: New names what is wrong before it runs anything.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Service = "vllm"
	cfg.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := New(cfg, slog.New(slog.DiscardHandler), metrics.NewSet()); err == nil || !strings.Contains(err.Error(), "cannot read the kubeconfig") {
		t.Errorf("missing kubeconfig: %v", err)
	}
	cfg.Kubeconfig = ""
	cfg.getenv = func(string) string { return "" }
	if _, err := New(cfg, slog.New(slog.DiscardHandler), metrics.NewSet()); err == nil || !strings.Contains(err.Error(), "--k8s-kubeconfig") {
		t.Errorf("outside a pod: %v", err)
	}
	cfg.Service = ""
	if _, err := New(cfg, slog.New(slog.DiscardHandler), metrics.NewSet()); err == nil || !strings.Contains(err.Error(), "--k8s-service") {
		t.Errorf("no service: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Service = "vllm"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := Config{Service: "9vllm", Namespace: "Team_A", PortName: "-http", BackoffMin: time.Second, BackoffMax: time.Millisecond,
		WatchTimeout: 1500 * time.Millisecond, WatchIdleMargin: -1, MaxResponseBytes: 10, MaxSlices: 0}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, field := range []string{"Service (--k8s-service) \"9vllm\": must start with a letter", "Namespace (--k8s-namespace)", "PortName (--k8s-port-name)",
		"BackoffMax", "ConnectTimeout", "HeaderTimeout", "ListTimeout", "WatchTimeout", "WatchIdleMargin", "MaxResponseBytes", "MaxSlices"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("the error does not name %s:\n%v", field, err)
		}
	}
	long := DefaultConfig()
	long.Service = strings.Repeat("a", 64)
	if err := long.Validate(); err == nil || !strings.Contains(err.Error(), "at most 63") {
		t.Errorf("a 64-character service: %v", err)
	}
}

func FuzzParseKubeconfig(f *testing.F) {
	caPEM, _ := genCert(f, "test-ca")
	certPEM, keyPEM := genCert(f, "saltus-test")
	f.Add([]byte(kubeconfigYAML("server: https://k8s.example:6443\ncertificate-authority-data: "+b64(caPEM), "token: t", "namespace: a")))
	f.Add([]byte(kubeconfigYAML("server: https://k8s.example\ninsecure-skip-tls-verify: true", "client-certificate-data: "+b64(certPEM)+"\nclient-key-data: "+b64(keyPEM), "")))
	f.Add([]byte(kubeconfigYAML("server: http://127.0.0.1:8001", "exec:\n  command: x", "")))
	f.Add([]byte("current-context: a\ncontexts: [{name: a, context: {cluster: b}}]\nclusters: [{name: b, cluster: {server: 'https://[::1]:1'}}]\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	read := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := parseKubeconfig(data, "/k/config", read)
		if err != nil {
			return
		}
		if a.url == nil || a.url.Host == "" || (a.url.Scheme != "https" && a.url.Scheme != "http") {
			t.Fatalf("accepted server %v", a.url)
		}
		if (a.url.Scheme == "https") != (a.tls != nil) {
			t.Fatalf("scheme %s with tls %v", a.url.Scheme, a.tls)
		}
		if a.tls != nil && a.tls.MinVersion < tls.VersionTLS12 {
			t.Fatalf("TLS below 1.2")
		}
	})
}
