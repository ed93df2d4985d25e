package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/internal/tlsconf/tlstest"
)

// TestTLSConfig: the TLS keys are validated together, each error naming
// its key.
func TestTLSConfig(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "config")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "localhost")
	other := ca.Issue(t, tlstest.ECDSA, time.Hour, "localhost")
	none := filepath.Join(t.TempDir(), "none.pem")
	for _, tc := range []struct {
		args []string
		want string // "" = valid
	}{
		{[]string{"--tls-cert-file", leaf.CertFile, "--tls-key-file", leaf.KeyFile}, ""},
		{[]string{"--tls-cert-file", leaf.CertFile}, "tls-key-file: needs to be set with tls-cert-file"},
		{[]string{"--tls-key-file", leaf.KeyFile}, "tls-cert-file: needs to be set with tls-key-file"},
		{[]string{"--tls-cert-file", none, "--tls-key-file", leaf.KeyFile}, "tls-cert-file: cannot load the TLS certificate " + none},
		{[]string{"--tls-cert-file", leaf.CertFile, "--tls-key-file", other.KeyFile}, "private key does not match public key"},
		{[]string{"--tls-handshake-timeout", "0s"}, "tls-handshake-timeout: must be positive"},
		{[]string{"--admin-tls-cert-file", leaf.CertFile, "--admin-tls-key-file", leaf.KeyFile, "--admin-tls-client-ca-file", ca.File}, ""},
		{[]string{"--admin-tls-client-ca-file", ca.File}, "admin-tls-client-ca-file: needs admin-tls-cert-file"},
		{[]string{"--admin-tls-cert-file", leaf.CertFile, "--admin-tls-key-file", leaf.KeyFile, "--admin-tls-client-ca-file", leaf.KeyFile}, "no PEM certificate found"},
	} {
		_, _, err := loadServeConfig(tc.args, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// tlsServe is `saltus serve` with TLS on its API, in front of n
// simulated engines, and the CA that signed its certificate.
type tlsServe struct {
	*sdkFleet
	ca   *tlstest.CA
	leaf *tlstest.Leaf
}

func startTLSServe(t *testing.T, mod func(*serveConfig)) *tlsServe {
	t.Helper()
	ca := tlstest.NewCA(t, "serve")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1", "localhost")
	f := startSDKFleetWith(t, 2, 100, func(c *serveConfig) {
		c.TLSCertFile, c.TLSKeyFile = leaf.CertFile, leaf.KeyFile
		if mod != nil {
			mod(c)
		}
	})
	return &tlsServe{sdkFleet: f, ca: ca, leaf: leaf}
}

// client is an HTTPS client trusting the test CA; no keep-alive unless
// keepAlive (then the test closes its idle connections).
func (s *tlsServe) client(keepAlive bool) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: s.ca.Pool()},
		DisableKeepAlives: !keepAlive,
		ForceAttemptHTTP2: true, // offered, and refused: saltus serves http/1.1
	}}
}

// TestServeTLSSDK: the OpenAI Go SDK over HTTPS, whole and streamed.
func TestServeTLSSDK(t *testing.T) {
	t.Parallel()
	s := startTLSServe(t, nil)
	client := openai.NewClient(
		option.WithBaseURL("https://"+s.s.addr+"/v1/"),
		option.WithAPIKey("test"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(s.client(false)),
	)
	ctx := t.Context()
	var resp *http.Response
	p := chatParams("Which berth is free at dawn?", 6)
	c, err := client.Chat.Completions.New(ctx, p, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || len(strings.Fields(c.Choices[0].Message.Content)) != 6 || c.Object != "chat.completion" {
		t.Fatalf("answer: %+v", c)
	}
	if resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" || resp.ProtoMajor != 1 {
		t.Fatalf("TLS state %+v, HTTP/%d", resp.TLS, resp.ProtoMajor)
	}
	s.simOf(t, resp) // routed to one of the engines
	st := client.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for st.Next() {
		acc.AddChunk(st.Current())
		chunks++
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	_ = st.Close() // read to its end
	if chunks != 1+6 || acc.Choices[0].Message.Content != c.Choices[0].Message.Content {
		t.Errorf("stream: %d chunks, %q; whole %q", chunks, acc.Choices[0].Message.Content, c.Choices[0].Message.Content)
	}
	if v := metricValue(t, s.s, `saltus_tls_handshakes_total{result="ok"}`); v != "2" {
		t.Errorf("handshakes ok %s, want 2", v)
	}
}

// metricValue is a series' value in serve's metrics set.
func metricValue(t *testing.T, s *served, name string) string {
	t.Helper()
	var b bytes.Buffer
	s.set.WritePrometheus(&b)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == name {
			return v
		}
	}
	return "absent"
}

// TestServeTLSCurl: curl --cacert, a chat completion whole and streamed.
func TestServeTLSCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	s := startTLSServe(t, nil)
	run := func(stream bool) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), curl, "-sS", "--fail-with-body", "--max-time", "30", "-N",
			"--cacert", s.ca.File, "-H", "Content-Type: application/json",
			"-d", `{"model":"llama3","max_tokens":4,"stream":`+map[bool]string{true: "true", false: "false"}[stream]+`,"messages":[{"role":"user","content":"Which berth is free at dawn?"}]}`,
			"https://localhost:"+s.s.addr[strings.LastIndexByte(s.s.addr, ':')+1:]+"/v1/chat/completions")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl (stream %v): %v\n%s", stream, err, out)
		}
		return string(out)
	}
	if whole := run(false); !strings.Contains(whole, `"object":"chat.completion"`) || !strings.Contains(whole, `"completion_tokens":4`) {
		t.Errorf("curl whole: %s", whole)
	}
	streamed := run(true)
	if n := strings.Count(streamed, "data: {"); n != 1+4 || !strings.HasSuffix(strings.TrimSpace(streamed), "data: [DONE]") {
		t.Errorf("curl streamed: %d events\n%s", n, streamed)
	}
}

// TestServeTLSReload: SIGHUP reads the certificate files again: a
// keep-alive connection made before stays open and keeps its
// certificate, a new connection gets the new one; a broken pair leaves
// the new one in use, and POST /admin/reload says why.
func TestServeTLSReload(t *testing.T) {
	t.Parallel()
	a := newUpstream(t, "a")
	ca := tlstest.NewCA(t, "reload")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1")
	args := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--shards", "2", "--drain-timeout", "5s",
		"--health-interval", "1h", "--backend", a.srv.URL, "--tls-cert-file", leaf.CertFile, "--tls-key-file", leaf.KeyFile}
	cfg, _, err := loadServeConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := startServeCfg(t, cfg, args)
	client := func(keepAlive bool) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, DisableKeepAlives: !keepAlive}}
	}
	hc := client(true)
	defer hc.CloseIdleConnections()
	url := "https://" + s.addr + "/v1/chat/completions"
	// get posts a chat completion and reports the server certificate's
	// expiry and whether the connection was reused.
	get := func(c *http.Client) (time.Time, bool) {
		t.Helper()
		var reused bool
		req := mustReq(t, url, chatJSON(false, "user", "Which berth is free at dawn?"))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck // read below
		if _, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return resp.TLS.PeerCertificates[0].NotAfter, reused
	}
	if exp, _ := get(hc); !exp.Equal(leaf.NotAfter) {
		t.Fatalf("certificate expiring %v, want %v", exp, leaf.NotAfter)
	}
	renewed := ca.Issue(t, tlstest.RSA, 48*time.Hour, "127.0.0.1")
	renewed.WriteTo(t, leaf.CertFile, leaf.KeyFile)
	s.signals <- syscall.SIGHUP
	waitFor(t, func() bool {
		return metricValue(t, s, `saltus_tls_cert_reloads_total{listener="data",result="ok"}`) == "1"
	})
	if exp, reused := get(hc); !reused || !exp.Equal(leaf.NotAfter) {
		t.Errorf("after the reload, the open connection: reused %v, certificate expiring %v (want the old %v)", reused, exp, leaf.NotAfter)
	}
	if exp, reused := get(client(false)); reused || !exp.Equal(renewed.NotAfter) {
		t.Errorf("after the reload, a new connection: reused %v, certificate expiring %v (want the renewed %v)", reused, exp, renewed.NotAfter)
	}
	v := metricValue(t, s, `saltus_tls_cert_expiry_seconds{listener="data"}`)
	if f, err := strconv.ParseFloat(v, 64); err != nil || int64(f) != renewed.NotAfter.Unix() {
		t.Errorf("expiry gauge %s, want %d", v, renewed.NotAfter.Unix())
	}
	// A half-written renewal: the renewed pair stays; the reload says why.
	if err := os.WriteFile(leaf.KeyFile, []byte("-----BEGIN"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := do(t, "POST", "http://"+s.admin+"/admin/reload", ""); got.status == 200 || !strings.Contains(got.body, "cannot load the TLS certificate") {
		t.Errorf("POST /admin/reload with a broken key: %d %s", got.status, got.body)
	}
	if v := metricValue(t, s, `saltus_tls_cert_reloads_total{listener="data",result="error"}`); v != "1" {
		t.Errorf("reload errors %s, want 1", v)
	}
	if !strings.Contains(s.logs(), "still serving the certificate loaded at") {
		t.Errorf("the log does not say which certificate stays:\n%s", s.logs())
	}
	if exp, _ := get(client(false)); !exp.Equal(renewed.NotAfter) {
		t.Errorf("after a failed reload: certificate expiring %v, want %v", exp, renewed.NotAfter)
	}
	// The returned reload report names the listeners reloaded.
	renewed.WriteTo(t, leaf.CertFile, leaf.KeyFile)
	if got := do(t, "POST", "http://"+s.admin+"/admin/reload", ""); got.status != 200 || !strings.Contains(got.body, `"tls_reloaded":["data"]`) {
		t.Errorf("POST /admin/reload: %d %s", got.status, got.body)
	}
}

// TestServeAdminTLS: the admin listener over HTTPS with client
// certificates required: refused without one, served with one.
func TestServeAdminTLS(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "admin")
	srv := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1")
	clientCA := tlstest.NewCA(t, "admin-clients")
	cl := clientCA.Issue(t, tlstest.ECDSA, time.Hour, "operator")
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, func(c *serveConfig) {
		c.AdminTLSCertFile, c.AdminTLSKeyFile, c.AdminTLSClientCAFile = srv.CertFile, srv.KeyFile, clientCA.File
	})
	get := func(certs []tls.Certificate) (int, error) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
		resp, err := hc.Get("https://" + s.admin + "/health")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close() //nolint:errcheck // status only
		return resp.StatusCode, nil
	}
	if code, err := get(nil); err == nil {
		t.Errorf("without a client certificate: %d, want a refused handshake", code)
	} else if !strings.Contains(err.Error(), "certificate required") && !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("without a client certificate: %v", err)
	}
	wrong := ca.Issue(t, tlstest.ECDSA, time.Hour, "intruder") // signed by the server's CA, not the clients'
	if code, err := get([]tls.Certificate{wrong.Cert}); err == nil {
		t.Errorf("with a client certificate of another CA: %d, want a refused handshake", code)
	}
	if code, err := get([]tls.Certificate{cl.Cert}); err != nil || code != 200 {
		t.Errorf("with a client certificate: %d, %v", code, err)
	}
	// Plain HTTP to the admin port is refused (net/http answers 400).
	if resp, err := http.Get("http://" + s.admin + "/health"); err == nil {
		_ = resp.Body.Close() // status only
		if resp.StatusCode != 400 {
			t.Errorf("plain HTTP to the admin's TLS port: %d", resp.StatusCode)
		}
	}
	// The data plane stays plain HTTP: the admin's pair is not reused.
	if a := post(t, s.addr, "/v1/chat/completions", chatJSON(false, "user", "hi")); a.status != 200 {
		t.Errorf("plain data plane: %d %s", a.status, a.body)
	}
}

// startTLSSim starts a simulated vLLM engine serving HTTPS with a
// certificate for 127.0.0.1 signed by ca.
func startTLSSim(t *testing.T, ca *tlstest.CA) *vllmsim.Sim {
	t.Helper()
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1")
	return startSim(t, func(c *vllmsim.Config) {
		c.Speedup = 100
		c.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.Cert}}
	})
}

// TestServeHTTPSBackend: an https:// backend is verified against the
// system roots by default (a private CA fails: counted, logged, 502),
// works with --backend-tls-ca-file, whole and streamed, and its health
// probes speak TLS too.
func TestServeHTTPSBackend(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "engines")
	sim := startTLSSim(t, ca)
	if !strings.HasPrefix(sim.URL(), "https://") {
		t.Fatalf("sim URL %s", sim.URL())
	}
	chat := func(s *served, stream bool) answer {
		t.Helper()
		return post(t, s.addr, "/v1/chat/completions", `{"model":"llama3","max_tokens":4,"stream":`+strconv.FormatBool(stream)+`,"messages":[{"role":"user","content":"Which berth is free at dawn?"}]}`)
	}

	t.Run("unverified", func(t *testing.T) {
		t.Parallel()
		s := startServeWith(t, nil, func(c *serveConfig) { c.Backend.MaxRetries = 0 }, sim.URL())
		if a := chat(s, false); a.status != 502 {
			t.Errorf("an engine whose certificate does not verify: %d %s, want 502", a.status, a.body)
		}
		if v := metricValue(t, s, `saltus_upstream_tls_handshakes_total{result="error"}`); v == "0" || v == "absent" {
			t.Errorf("upstream TLS errors %s, want counted", v)
		}
		if logs := s.logs(); !strings.Contains(logs, "certificate signed by unknown authority") || !strings.Contains(logs, "TLS handshake with "+sim.Addr()) {
			t.Errorf("the logs do not say why:\n%s", logs)
		}
	})
	t.Run("with the CA", func(t *testing.T) {
		t.Parallel()
		s := startServeWith(t, nil, func(c *serveConfig) {
			c.BackendTLSCAFile = ca.File
			// Each scrape is bounded by the interval, handshake included:
			// 20 ms is too short under -race on a loaded machine.
			c.Backend.ScrapeInterval = 500 * time.Millisecond
		}, sim.URL())
		whole := chat(s, false)
		if whole.status != 200 || !strings.Contains(whole.body, `"completion_tokens":4`) || whole.backend != sim.URL() {
			t.Fatalf("whole: %d %s (backend %s)", whole.status, whole.body, whole.backend)
		}
		streamed := chat(s, true)
		if streamed.status != 200 || strings.Count(streamed.body, "data: {") != 1+4 || !strings.Contains(streamed.body, "data: [DONE]") {
			t.Fatalf("streamed: %d %s", streamed.status, streamed.body)
		}
		if v := metricValue(t, s, `saltus_upstream_tls_handshakes_total{result="ok"}`); v == "0" || v == "absent" {
			t.Errorf("upstream TLS handshakes ok %s", v)
		}
		// The control client (probes, /v1/models, the engine scrape)
		// speaks TLS too: a scrape of the engine's /metrics succeeds.
		waitFor(t, func() bool {
			var b bytes.Buffer
			s.set.WritePrometheus(&b)
			for line := range strings.SplitSeq(b.String(), "\n") {
				if strings.HasPrefix(line, "saltus_engine_scrapes_total{") && strings.Contains(line, `result="ok"`) && !strings.HasSuffix(line, " 0") {
					return true
				}
			}
			return false
		})
	})
}
