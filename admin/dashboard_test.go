package admin

import (
	"encoding/json"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// TestDashboardPage: the page and its two assets are served without the
// token, embedded, with the security headers; anything else under
// /dashboard/ is an unknown path (401 without the token, 404 with it).
func TestDashboardPage(t *testing.T) {
	t.Parallel()
	const token = "dash-Token_9"
	s, _, _, _ := newTest(t, func(c *Config) { c.BearerToken = token })
	for _, tc := range []struct {
		path, ctype, file string
	}{
		{"/dashboard", "text/html; charset=utf-8", "dashboard/index.html"},
		{"/dashboard/app.js", "text/javascript; charset=utf-8", "dashboard/app.js"},
		{"/dashboard/style.css", "text/css; charset=utf-8", "dashboard/style.css"},
	} {
		want, err := dashboardFS.ReadFile(tc.file)
		if err != nil || len(want) < 500 {
			t.Fatalf("%s not embedded (%d bytes): %v", tc.file, len(want), err)
		}
		for _, method := range []string{"GET", "HEAD"} {
			a := do(s, method, tc.path, "") // no token
			if a.code != 200 || a.hdr.Get("Content-Type") != tc.ctype || a.body != string(want) {
				t.Errorf("%s %s: %d %q, %d bytes; want 200 %q, the embedded %d bytes", method, tc.path, a.code, a.hdr.Get("Content-Type"), len(a.body), tc.ctype, len(want))
			}
			for h, v := range map[string]string{
				"Content-Security-Policy": dashboardCSP,
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
				"Referrer-Policy":         "no-referrer",
				"Cache-Control":           "no-cache",
				"Content-Length":          strconv.Itoa(len(want)),
			} {
				if got := a.hdr.Get(h); got != v {
					t.Errorf("%s %s: %s %q, want %q", method, tc.path, h, got, v)
				}
			}
		}
	}
	for _, part := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(dashboardCSP, part) {
			t.Errorf("CSP %q lacks %q", dashboardCSP, part)
		}
	}

	// The page has no inline script or style (the CSP would block them)
	// and loads nothing from elsewhere.
	page := do(s, "GET", "/dashboard", "").body
	if n, m := strings.Count(page, "<script"), strings.Count(page, `<script src="/dashboard/app.js" defer></script>`); n != 1 || m != 1 {
		t.Errorf("page has %d <script> elements, %d of them the app's; want just the app's", n, m)
	}
	if strings.Contains(page, "<style") || strings.Contains(page, " style=") || regexp.MustCompile(`\son[a-z]+=`).MatchString(page) {
		t.Error("page has an inline style or event handler")
	}
	for _, asset := range []string{"index.html", "app.js", "style.css"} {
		b, _ := dashboardFS.ReadFile("dashboard/" + asset) // read above
		if regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(`).Match(b) {
			t.Errorf("%s refers to something outside the page", asset)
		}
	}
	// Every id the browser test and the page's script read is there.
	for _, id := range []string{"kpi-req-total", "kpi-backends", "kpi-backends-healthy", "kpi-routes", "kpi-hit", "kpi-ttft-p50", "kpi-ttfb-p99", "kpi-tok-hit", "kpi-members", "backends-body", "cluster-body", "chart-req", "chart-hit", "chart-lat", "chart-inflight", "token-form", "auth"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("page has no element %s", id)
		}
	}

	for _, tc := range []struct {
		method, path, auth string
		code               int
		location           string
	}{
		{"GET", "/dashboard/", "", 308, "/dashboard"},
		{"GET", "/dashboard/xyz", "", 401, ""},
		{"GET", "/dashboard/xyz", "Bearer " + token, 404, ""},
		{"GET", "/dashboard/app.js/", "Bearer " + token, 404, ""},
		{"GET", "/dashboardx", "Bearer " + token, 404, ""},
		{"GET", "/dashboard/index.html", "Bearer " + token, 404, ""},
		{"POST", "/dashboard", "", 405, ""},
		{"GET", "/admin/dashboard.json", "", 401, ""},
		{"GET", "/admin/dashboard.json", "Bearer nope", 401, ""},
		{"GET", "/metrics", "", 401, ""},
		{"GET", "/admin/backends", "", 401, ""},
		{"GET", "/admin/cluster", "", 401, ""},
		{"GET", "/admin/dashboard.json", "Bearer " + token, 200, ""},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		a := do(s, tc.method, tc.path, "", hdr...)
		if a.code != tc.code || a.hdr.Get("Location") != tc.location {
			t.Errorf("%s %s (Authorization %q): %d, Location %q; want %d %q", tc.method, tc.path, tc.auth, a.code, a.hdr.Get("Location"), tc.code, tc.location)
		}
	}
}

// TestDashboardData: /admin/dashboard.json carries the backends, the
// route statistics, the cluster and the metrics Set's values, parsed.
func TestDashboardData(t *testing.T) {
	t.Parallel()
	s, b, _, set := newTest(t, nil)
	b.list[1].Engine = &EngineInfo{Waiting: 2, Running: 5, KVUsage: 0.25, KVTokens: 16384, AgeMS: 300}
	set.NewCounter(`saltus_requests_total{route="chat",code="200"}`).Add(7)
	set.NewCounter(`saltus_requests_total{route="chat",code="503"}`).Add(2)
	set.NewGauge(`saltus_tree_nodes`, func() float64 { return 12 })
	set.NewGauge(`saltus_nan`, func() float64 { return math.NaN() })
	set.NewCounter(`other_total`).Inc()
	set.RegisterMetricsWriter(func(w io.Writer) {
		metrics.WriteMetadataIfNeeded(w, "saltus_backend_ttfb_seconds", "histogram")
		io.WriteString(w, `saltus_backend_ttfb_seconds_bucket{backend="http://a:1",le="0.1"} 1
saltus_backend_ttfb_seconds_bucket{backend="http://a:1",le="1"} 3
saltus_backend_ttfb_seconds_bucket{backend="http://a:1",le="+Inf"} 4
saltus_backend_ttfb_seconds_sum{backend="http://a:1"} 7.5
saltus_backend_ttfb_seconds_count{backend="http://a:1"} 4
`)
	})
	a := do(s, "GET", "/admin/dashboard.json", "")
	if a.code != 200 || a.hdr.Get("Content-Type") != "application/json" || a.hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("dashboard.json: %d %q %q: %s", a.code, a.hdr.Get("Content-Type"), a.hdr.Get("Cache-Control"), a.body)
	}
	var d DashboardData
	if err := json.Unmarshal([]byte(a.body), &d); err != nil {
		t.Fatal(err)
	}
	if d.TimeMS <= 0 || len(d.Backends) != 2 || d.Backends[0].InFlight != 3 || d.Backends[1].Engine == nil || d.Backends[1].Engine.KVTokens != 16384 {
		t.Errorf("time %d, backends %+v", d.TimeMS, d.Backends)
	}
	if !strings.Contains(a.body, `"routes":{"blocks":42,"shards":[40,2]}`) || !strings.Contains(a.body, `"cluster":{"enabled":false}`) {
		t.Errorf("routes or cluster missing: %s", a.body)
	}
	want := map[string][]Sample{
		"saltus_requests_total": {
			{Labels: map[string]string{"route": "chat", "code": "200"}, Value: 7},
			{Labels: map[string]string{"route": "chat", "code": "503"}, Value: 2},
		},
		"saltus_tree_nodes": {{Value: 12}},
	}
	for name, w := range want {
		if got := d.Metrics[name]; !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %+v, want %+v", name, got, w)
		}
	}
	if _, ok := d.Metrics["saltus_nan"]; ok {
		t.Error("a NaN gauge is in the JSON")
	}
	if _, ok := d.Metrics["other_total"]; ok {
		t.Error("a family that is not saltus_* is in the JSON")
	}
	if len(d.Metrics["go_goroutines"]) != 1 || d.Metrics["go_goroutines"][0].Value < 1 {
		t.Errorf("go_goroutines: %+v", d.Metrics["go_goroutines"])
	}
	wantH := []HistogramSeries{{Labels: map[string]string{"backend": "http://a:1"}, LE: []float64{0.1, 1}, Counts: []float64{1, 3, 4}, Sum: 7.5, Count: 4}}
	if got := d.Histograms["saltus_backend_ttfb_seconds"]; !reflect.DeepEqual(got, wantH) {
		t.Errorf("ttfb histogram: %+v, want %+v", got, wantH)
	}
}

func TestParseExposition(t *testing.T) {
	t.Parallel()
	text := `# HELP h A histogram.
# TYPE h histogram
h_bucket{le="1",x="a"} 1
h_bucket{x="a",le="+Inf"} 2
h_sum{x="a"} 3
h_count{x="a"} 2
h_bucket{x="b",le="1"} 5
h_count{x="b"} 6
# TYPE c counter
c_count 9
c{a="q\"\\\n",b=""} 4
bad line
c{a="x} 1
g NaN
g2 +Inf
`
	samples, hists := parseExposition([]byte(text), func(string) bool { return true })
	wantS := map[string][]Sample{
		"c_count": {{Value: 9}},
		"c":       {{Labels: map[string]string{"a": "q\"\\\n", "b": ""}, Value: 4}},
	}
	if !reflect.DeepEqual(samples, wantS) {
		t.Errorf("samples %+v, want %+v", samples, wantS)
	}
	wantH := map[string][]HistogramSeries{"h": {
		{Labels: map[string]string{"x": "a"}, LE: []float64{1}, Counts: []float64{1, 2}, Sum: 3, Count: 2},
		{Labels: map[string]string{"x": "b"}, LE: []float64{1}, Counts: []float64{5, 6}, Count: 6}, // +Inf from _count
	}}
	if !reflect.DeepEqual(hists, wantH) {
		t.Errorf("histograms %+v, want %+v", hists, wantH)
	}
}
