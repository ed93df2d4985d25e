package main

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/internal/tlsconf/tlstest"
)

// scrapeServed serves the real path over two test engines, sends it the
// traffic that makes every lazily created series appear (chat on the loop
// path and streamed, completions, an unknown path, an admin request), and
// returns its /metrics parsed strictly (promtext.Parse: a family without
// HELP text or TYPE, a vmrange bucket or a broken histogram fails).
func scrapeServed(t *testing.T) (*served, []promtext.Family, string) {
	t.Helper()
	// A cluster of one, with a state dir, TLS on the API, and a Kubernetes
	// discovery whose API server refuses connections: their metrics are on
	// /metrics too.
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "metrics")
	leaf := ca.Issue(t, tlstest.ECDSA, time.Hour, "127.0.0.1")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("current-context: c\nclusters: [{name: k, cluster: {server: \""+deadPort(t)+"\"}}]\n"+
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ups := []*upstream{newUpstream(t, "a"), newUpstream(t, "b")}
	s := startServeWith(t, ups, func(c *serveConfig) {
		// The test engines list model-a and model-b; pinned to the
		// models the traffic below names, both serve both pools (and
		// the per-pool series appear).
		for _, u := range ups {
			c.BackendModels = append(c.BackendModels, u.srv.URL+"=llama3", u.srv.URL+"=m")
		}
		c.Cluster.Bind, c.State.Dir = "127.0.0.1:0", dir
		c.Discovery, c.K8s.Service, c.K8s.Kubeconfig = dataplane.DiscoveryK8s, "vllm", kubeconfig
		c.TLSCertFile, c.TLSKeyFile = leaf.CertFile, leaf.KeyFile
		c.KVEventsPort = kvDeadPort(t)                                            // a subscription per backend, retrying: its series exist
		c.KVEventsReplayPort = kvDeadPort(t)                                      // with a replay endpoint: its series too
		c.KVEventsListen = "tcp://127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t)) // the bound subscription's series too
		c.AccessLog.Path = filepath.Join(dir, "access.log")                       // the access log's series
	})
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	api := "https://" + s.addr
	for _, stream := range []bool{false, true} {
		if a := doWith(t, hc, "POST", api+"/v1/chat/completions", chatJSON(stream, "system", sysA, "user", "Port of Rotterdam?")); a.status != 200 {
			t.Fatalf("chat (stream %v): %d %s", stream, a.status, a.body)
		}
	}
	if a := doWith(t, hc, "POST", api+"/v1/completions", `{"model":"m","prompt":"hello"}`); a.status != 200 {
		t.Fatalf("completions: %d %s", a.status, a.body)
	}
	if a := doWith(t, hc, "POST", api+"/nowhere", `{}`); a.status != 404 {
		t.Fatalf("/nowhere: %d %s", a.status, a.body)
	}
	if a := s.adm(t, "GET", "/admin/backends", ""); a.status != 200 {
		t.Fatalf("/admin/backends: %d %s", a.status, a.body)
	}
	// The pools, as the fleet built them from the pins: both backends in
	// each, two requests admitted to llama3's, one to m's.
	p := s.pools(t)
	if len(p.Pools) != 2 || p.Pools[0].Model != "llama3" || p.Pools[1].Model != "m" || len(p.Unknown) != 0 || len(p.Backends) != 2 {
		t.Fatalf("/admin/pools: %+v", p)
	}
	for i, want := range []uint64{2, 1} {
		if pl := p.Pools[i]; len(pl.Backends) != 2 || pl.Routable != 2 || pl.Requests != want || pl.Parent != "" ||
			pl.Backends[0].URL != ups[0].srv.URL || pl.Backends[1].URL != ups[1].srv.URL {
			t.Errorf("/admin/pools: pool %s: %+v, want both backends routable and %d requests", pl.Model, pl, want)
		}
	}
	for _, b := range p.Backends {
		if b.State != "pinned" || !slices.Equal(b.Models, []string{"llama3", "m"}) {
			t.Errorf("/admin/pools: backend %d: %+v, want pinned to llama3 and m", b.ID, b)
		}
	}
	if a := s.adm(t, "GET", "/admin/cluster", ""); a.status != 200 || !strings.Contains(a.body, `"enabled":true`) || !strings.Contains(a.body, `"self":true`) {
		t.Fatalf("/admin/cluster: %d %s", a.status, a.body)
	}
	// The loop path hands a status code it has not counted before to a
	// flusher, which creates its counter: wait for it.
	waitFor(t, func() bool {
		return strings.Contains(s.adm(t, "GET", "/metrics", "").body, "saltus_backend_requests_total{")
	})
	a := s.adm(t, "GET", "/metrics", "")
	if a.status != 200 || a.header.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("/metrics: %d %q", a.status, a.header.Get("Content-Type"))
	}
	fams, err := promtext.Parse([]byte(a.body))
	if err != nil {
		t.Fatalf("/metrics is not strict Prometheus text:\n%v", err)
	}
	return s, fams, a.body
}

// TestMetricsExposition: /metrics of a running saltus is Prometheus text
// that Prometheus and Grafana read as it is: every family has a HELP text
// and a TYPE, every histogram le buckets up to +Inf with _sum and _count.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	s, fams, body := scrapeServed(t)
	types := map[string]string{}
	for _, f := range fams {
		types[f.Name] = f.Type
		if strings.HasPrefix(f.Name, "saltus_") && (len(f.Help) < 10 || !strings.HasSuffix(f.Help, ".")) {
			t.Errorf("%s: HELP %q is not a sentence saying what it counts", f.Name, f.Help)
		}
	}
	for name, typ := range map[string]string{
		"saltus_backend_ttfb_seconds":             "histogram",
		"saltus_backend_request_duration_seconds": "histogram",
		"saltus_tokenizer_latency_seconds":        "histogram",
		"saltus_router_prefix_match_ratio":        "histogram",
		"saltus_requests_total":                   "counter",
		"saltus_reactor_connections_open":         "gauge",
		"saltus_admin_requests_total":             "counter",
		"go_goroutines":                           "gauge",
	} {
		if types[name] != typ {
			t.Errorf("%s: TYPE %q, want %s", name, types[name], typ)
		}
	}
	// The LLM buckets, from 1 ms to 10 min, on each backend's histograms.
	for _, want := range []string{`le="0.001"}`, `le="0.25"}`, `le="600"}`, `le="+Inf"}`} {
		if !strings.Contains(body, "saltus_backend_ttfb_seconds_bucket{backend=") || !regexp.MustCompile(`saltus_backend_request_duration_seconds_bucket\{backend="[^"]+",`+regexp.QuoteMeta(want)).MatchString(body) {
			t.Errorf("no saltus_backend_request_duration_seconds bucket %s", want)
		}
	}
	// Three answers (two chats, a completion): the loop path hands its
	// samples to a flusher, so wait for them to be counted.
	waitFor(t, func() bool { return ttfbAnswers(s.adm(t, "GET", "/metrics", "").body) == 3 })
}

// ttfbAnswers sums the +Inf buckets of saltus_backend_ttfb_seconds over
// the backends in a /metrics body.
func ttfbAnswers(body string) (n int) {
	re := regexp.MustCompile(`(?m)^saltus_backend_ttfb_seconds_bucket\{backend="[^"]+",le="\+Inf"\} (\d+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.Atoi(m[1]) // \d+
		n += v
	}
	return n
}

// TestREADMEMetricTable: the README's metric table names every saltus_*
// family /metrics has, and nothing else. Metrics are added on several
// branches at once: the failure lists every name to add or remove.
func TestREADMEMetricTable(t *testing.T) {
	t.Parallel()
	_, fams, _ := scrapeServed(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	table, bad := readmeMetricNames(string(readme))
	if len(table) == 0 {
		t.Fatal("README.md: no metric table (a `| area | metrics |` table under \"Metrics (`/metrics`\")")
	}
	for _, b := range bad {
		t.Errorf("README.md metric table: %q is not a full metric name (write saltus_… names whole, so they can be grepped)", b)
	}
	exposed := map[string]bool{}
	var missing []string
	for _, f := range fams {
		if strings.HasPrefix(f.Name, "saltus_") {
			exposed[f.Name] = true
			if !table[f.Name] {
				missing = append(missing, f.Name)
			}
		}
	}
	var stale []string
	for name := range table {
		if !exposed[name] {
			stale = append(stale, name)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	if len(missing) > 0 {
		t.Errorf("README.md's metric table lacks %d metrics that /metrics has; add them:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	if len(stale) > 0 {
		t.Errorf("README.md's metric table names %d metrics that /metrics does not have; remove or rename them:\n  %s", len(stale), strings.Join(stale, "\n  "))
	}
}

// readmeMetricNames returns the saltus_* names in the README's metric
// table (labels dropped), and the backquoted words of the table that
// start with "_" (an abbreviated name, which the table must not have).
func readmeMetricNames(readme string) (names map[string]bool, bad []string) {
	_, rest, ok := strings.Cut(readme, "\n| area | metrics |\n")
	if !ok {
		return nil, nil
	}
	names = map[string]bool{}
	code := regexp.MustCompile("`([^`]+)`")
	for line := range strings.SplitSeq(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		for _, m := range code.FindAllStringSubmatch(line, -1) {
			w, _, _ := strings.Cut(m[1], "{")
			switch {
			case strings.HasPrefix(w, "saltus_"):
				names[w] = true
			case strings.HasPrefix(w, "_"):
				bad = append(bad, w)
			}
		}
	}
	return names, bad
}
