package admin

import (
	"bytes"
	"embed"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

// The dashboard (issue 14): GET /dashboard is one page, its script and
// its style sheet, embedded in the binary. They carry no data, so they
// are served without the token; the page reads the token from its URL
// fragment (#token=…, which a browser never sends) or asks for it, and
// polls GET /admin/dashboard.json with it. That endpoint is /metrics as
// JSON (the same Set, parsed here, so the page needs no Prometheus parser)
// plus the backends, the route table's statistics, the cluster and the
// model pools, in one request per poll.

//go:embed dashboard/index.html dashboard/app.js dashboard/style.css
var dashboardFS embed.FS

// dashboardCSP allows nothing but this listener's own script, style and
// JSON: no inline script or style, no framing (the page has buttons
// someday; clickjacking), no plugins, no form posts, no <base> rewrite.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboardAsset maps the part of a /dashboard path after "/dashboard" to
// its embedded file and content type; ok false for anything else.
func dashboardAsset(rest string) (file, ctype string, ok bool) {
	switch rest {
	case "":
		return "dashboard/index.html", "text/html; charset=utf-8", true
	case "/app.js":
		return "dashboard/app.js", "text/javascript; charset=utf-8", true
	case "/style.css":
		return "dashboard/style.css", "text/css; charset=utf-8", true
	}
	return "", "", false
}

// serveDashboard answers GET /dashboard, /dashboard/app.js and
// /dashboard/style.css (rest: what follows "/dashboard"), and redirects
// /dashboard/ to /dashboard (a browser keeps the #token fragment).
func serveDashboard(w http.ResponseWriter, rest string) {
	h := w.Header()
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if rest == "/" {
		h.Set("Location", "/dashboard")
		w.WriteHeader(http.StatusPermanentRedirect)
		return
	}
	file, ctype, ok := dashboardAsset(rest)
	if !ok {
		panic("BUG: admin: route gave the dashboard an unknown asset " + rest)
	}
	b, err := dashboardFS.ReadFile(file)
	if err != nil {
		panic("BUG: admin: dashboard asset not embedded: " + err.Error())
	}
	h.Set("Content-Type", ctype)
	// Revalidate each load: the binary's assets change with its version.
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // a write error means the browser left; nothing to do
}

// DashboardData is GET /admin/dashboard.json: what the page shows, read
// at one moment.
type DashboardData struct {
	TimeMS   int64         `json:"time_ms"` // Unix milliseconds when read
	Backends []BackendInfo `json:"backends"`
	Routes   any           `json:"routes"`  // Routes.RouteStats
	Cluster  any           `json:"cluster"` // as GET /admin/cluster
	// Pools is GET /admin/pools; absent when Backends does not
	// implement Pools.
	Pools *PoolsInfo `json:"pools,omitempty"`
	// Metrics: every counter, gauge and summary series of /metrics whose
	// family is saltus_* (and a few process ones: dashboardExtra), by
	// sample name. Non-finite values are left out (JSON has none).
	Metrics map[string][]Sample `json:"metrics"`
	// Histograms: the same for histograms, by family, one entry per label
	// set (le aside).
	Histograms map[string][]HistogramSeries `json:"histograms"`
}

// Sample is one series of a counter or gauge.
type Sample struct {
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
}

// HistogramSeries is one label set of a histogram: Counts[i] is the
// cumulative count of observations ≤ LE[i]; Counts has one more entry,
// the +Inf bucket (= Count).
type HistogramSeries struct {
	Labels map[string]string `json:"labels,omitempty"`
	LE     []float64         `json:"le"`
	Counts []float64         `json:"counts"`
	Sum    float64           `json:"sum"`
	Count  float64           `json:"count"`
}

// dashboardExtra are the non-saltus families the page shows.
var dashboardExtra = []string{"process_resident_memory_bytes", "process_cpu_seconds_total", "go_goroutines"}

func (s *Server) serveDashboardData(w http.ResponseWriter) {
	var buf bytes.Buffer
	if s.set != nil {
		s.set.WritePrometheus(&buf)
	}
	metrics.WriteProcessMetrics(&buf)
	d := DashboardData{TimeMS: time.Now().UnixMilli(), Backends: s.backends.List(), Routes: s.routes.RouteStats()}
	if d.Backends == nil {
		d.Backends = []BackendInfo{}
	}
	d.Cluster = s.clusterStatus()
	if p, ok := s.backends.(Pools); ok {
		d.Pools = new(p.Pools().nonNil())
	}
	d.Metrics, d.Histograms = parseExposition(buf.Bytes(), func(family string) bool {
		return strings.HasPrefix(family, "saltus_") || slices.Contains(dashboardExtra, family)
	})
	writeJSON(w, http.StatusOK, d)
}

// parseExposition reads Prometheus text (0.0.4) into the families keep
// accepts: histograms (by their # TYPE line) into hists, every other
// sample into samples by its name. Lines it cannot read are skipped: the
// text is this process's own /metrics, which the tests check strictly
// (promtext), so a bad line is a bug there, not a reason to show nothing.
func parseExposition(text []byte, keep func(family string) bool) (map[string][]Sample, map[string][]HistogramSeries) {
	samples := map[string][]Sample{}
	hists := map[string][]HistogramSeries{}
	histFamily := map[string]bool{}
	index := map[string]int{} // family + "\xff" + label set (le aside) → index in hists[family]
	for len(text) > 0 {
		var line []byte
		line, text, _ = bytes.Cut(text, []byte("\n"))
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
				if name, typ, ok := strings.Cut(string(rest), " "); ok && typ == "histogram" {
					histFamily[name] = true
				}
			}
			continue
		}
		name, labels, value, err := promtext.SplitSample(string(line))
		if err != nil {
			continue
		}
		family, part := name, ""
		for _, suf := range [...]string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok && histFamily[base] {
				family, part = base, suf
				break
			}
		}
		if !keep(family) {
			continue
		}
		if part == "" {
			if !isFinite(value) {
				continue
			}
			samples[name] = append(samples[name], Sample{Labels: labelMap(labels, ""), Value: value})
			continue
		}
		le := math.NaN()
		if part == "_bucket" {
			i := slices.IndexFunc(labels, func(l promtext.Label) bool { return l.Name == "le" })
			if i < 0 {
				continue
			}
			v, err := strconv.ParseFloat(labels[i].Value, 64)
			if err != nil {
				continue
			}
			le = v
		}
		key := family + "\xff" + labelKey(labels)
		i, ok := index[key]
		if !ok {
			i = len(hists[family])
			index[key] = i
			hists[family] = append(hists[family], HistogramSeries{Labels: labelMap(labels, "le"), LE: []float64{}, Counts: []float64{}})
		}
		h := &hists[family][i]
		switch {
		case part == "_sum":
			if isFinite(value) {
				h.Sum = value
			}
		case part == "_count":
			h.Count = value
		case math.IsInf(le, 1):
			h.Counts = append(h.Counts, value)
		case isFinite(le) && len(h.Counts) == len(h.LE):
			h.LE = append(h.LE, le)
			h.Counts = append(h.Counts, value)
		}
	}
	// A series without its +Inf bucket (not written by saltus) gets its
	// count there, so Counts always has len(LE)+1 entries.
	for _, series := range hists {
		for i := range series {
			if h := &series[i]; len(h.Counts) == len(h.LE) {
				h.Counts = append(h.Counts, h.Count)
			}
		}
	}
	return samples, hists
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// labelMap returns labels as a map, without the one named skip; nil when
// none is left.
func labelMap(labels []promtext.Label, skip string) map[string]string {
	var m map[string]string
	for _, l := range labels {
		if l.Name == skip {
			continue
		}
		if m == nil {
			m = make(map[string]string, len(labels))
		}
		m[l.Name] = l.Value
	}
	return m
}

// labelKey identifies a label set without le, whatever the labels' order.
func labelKey(labels []promtext.Label) string {
	var parts []string
	for _, l := range labels {
		if l.Name != "le" {
			parts = append(parts, l.Name+"\xfe"+l.Value)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\xff")
}
