package promtext

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

func init() {
	Describe(map[string]string{
		"promtext_test_total":    `Things counted by the test, with a \ and a` + "\nnewline.",
		"promtext_test_seconds":  "Time the test took, in seconds.",
		"promtext_test_inflight": "Test things in flight.",
	})
}

func TestAnnotate(t *testing.T) {
	t.Parallel()
	f := func(in, want string) {
		t.Helper()
		if got := string(Annotate(nil, []byte(in))); got != want {
			t.Errorf("Annotate(%q)\n got %q\nwant %q", in, got, want)
		}
	}
	f("", "")
	f("# HELP promtext_test_seconds\n# TYPE promtext_test_seconds gauge\npromtext_test_seconds 1\n",
		"# HELP promtext_test_seconds Time the test took, in seconds.\n# TYPE promtext_test_seconds gauge\npromtext_test_seconds 1\n")
	f("# HELP promtext_test_total\n", "# HELP promtext_test_total Things counted by the test, with a \\\\ and a\\nnewline.\n")
	f("# HELP promtext_test_seconds already said\n", "# HELP promtext_test_seconds already said\n")
	f("# HELP unknown_family\nx 1", "# HELP unknown_family\nx 1")
	f("# HELP go_goroutines\n", "# HELP go_goroutines "+Help("go_goroutines")+"\n")
}

func TestDescribeTwice(t *testing.T) {
	t.Parallel()
	Describe(map[string]string{"promtext_test_inflight": "Test things in flight."}) // the same text: fine
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "described twice") {
			t.Errorf("recover() = %v, want a BUG panic", r)
		}
	}()
	Describe(map[string]string{"promtext_test_inflight": "another text"})
}

const good = `# HELP a_total A.
# TYPE a_total counter
a_total{x="1"} 3
a_total{x="2\"\\\n"} 4
# HELP h_seconds H.
# TYPE h_seconds histogram
h_seconds_bucket{b="u",le="0.1"} 1
h_seconds_bucket{b="u",le="1"} 2
h_seconds_bucket{b="u",le="+Inf"} 3
h_seconds_sum{b="u"} 4.5
h_seconds_count{b="u"} 3
# HELP s S.
# TYPE s summary
s{quantile="0.5"} 1
s_sum 2
s_count 3
# HELP g G.
# TYPE g gauge
# HELP saltus_x_total X.
# TYPE saltus_x_total counter
saltus_x_total 0
`

func TestParse(t *testing.T) {
	t.Parallel()
	fams, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.Name+":"+f.Type)
	}
	if got := strings.Join(names, " "); got != "a_total:counter h_seconds:histogram s:summary g:gauge saltus_x_total:counter" {
		t.Errorf("families %s", got)
	}
	if fams[1].Series != 5 || fams[1].Help != "H." {
		t.Errorf("h_seconds: %+v", fams[1])
	}
}

// TestCheckRejects: each broken exposition names its problem.
func TestCheckRejects(t *testing.T) {
	t.Parallel()
	f := func(name, text, want string) {
		t.Helper()
		err := Check([]byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Check = %v, want an error containing %q", name, err, want)
		}
	}
	const meta = "# HELP c_total C.\n# TYPE c_total counter\n"
	f("no metadata", "c_total 1\n", "no HELP and TYPE")
	f("no help text", "# HELP c_total\n# TYPE c_total counter\nc_total 1\n", "has no text")
	f("no type", "# HELP c_total C.\nc_total 1\n", "before its HELP and TYPE")
	f("bad type", "# HELP c_total C.\n# TYPE c_total countr\nc_total 1\n", `TYPE "countr"`)
	f("saltus counter without _total", "# HELP saltus_c C.\n# TYPE saltus_c counter\nsaltus_c 1\n", "does not end in _total")
	f("other comment", meta+"# hello\nc_total 1\n", "neither HELP nor TYPE")
	f("blank line", meta+"\nc_total 1\n", "blank line")
	f("no final newline", meta+"c_total 1", "newline")
	f("timestamp", meta+"c_total 1 1700000000\n", "timestamp")
	f("bad value", meta+"c_total one\n", "bad value")
	f("bad label", meta+"c_total{x=1} 1\n", "bad label")
	f("label twice", meta+`c_total{x="1",x="2"} 1`+"\n", "label x twice")
	f("series twice", meta+"c_total 1\nc_total 2\n", "twice")
	f("not contiguous", meta+"c_total 1\n# HELP d D.\n# TYPE d gauge\nd 1\n# HELP c_total C.\n", "contiguous")
	f("metadata after samples", "# HELP c_total C.\nc_total 1\n# TYPE c_total counter\n", "after its samples")
	f("vmrange", "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"+`h_seconds_bucket{vmrange="1.0e0...1.2e0"} 1`+"\nh_seconds_sum 1\nh_seconds_count 1\n", "vmrange")
	const hmeta = "# HELP h H.\n# TYPE h histogram\n"
	f("no +Inf", hmeta+`h_bucket{le="1"} 1`+"\nh_sum 1\nh_count 1\n", "not +Inf")
	f("count differs", hmeta+`h_bucket{le="1"} 1`+"\n"+`h_bucket{le="+Inf"} 2`+"\nh_sum 1\nh_count 3\n", "differs")
	f("no sum", "# HELP saltus_h H.\n# TYPE saltus_h histogram\n"+`saltus_h_bucket{le="+Inf"} 2`+"\nsaltus_h_count 2\n", "no _sum")
	f("no count", "# HELP saltus_h H.\n# TYPE saltus_h histogram\n"+`saltus_h_bucket{le="+Inf"} 2`+"\nsaltus_h_sum 2\n", "no _count")
	f("decreasing", hmeta+`h_bucket{le="1"} 3`+"\n"+`h_bucket{le="+Inf"} 2`+"\nh_sum 1\nh_count 2\n", "not decrease")
	f("le order", hmeta+`h_bucket{le="2"} 1`+"\n"+`h_bucket{le="1"} 1`+"\n"+`h_bucket{le="+Inf"} 1`+"\nh_sum 1\nh_count 1\n", "le must increase")
	f("histogram sample", hmeta+"h 1\n", "no HELP and TYPE")
	f("le on a counter", meta+`c_total{le="1"} 1`+"\n", "le label on a counter")
}

// TestVictoriaMetricsSet: a Set's counters, gauges and Prometheus
// histograms, and the Go and process metrics, pass Check once annotated
// (and the Set's own metadata has no text, which is what Annotate is
// for).
func TestVictoriaMetricsSet(t *testing.T) {
	metrics.ExposeMetadata(true)
	set := metrics.NewSet()
	set.NewCounter(`promtext_test_total{k="v"}`).Inc()
	set.NewGauge("promtext_test_inflight", func() float64 { return 2 })
	h := set.NewPrometheusHistogramExt(`promtext_test_seconds{backend="http://x:1"}`, []float64{0.1, 1, 10})
	h.Update(0.5)
	h.Update(100)
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	metrics.WriteProcessMetrics(&buf)
	if err := Check(buf.Bytes()); err == nil || !strings.Contains(err.Error(), "has no text") {
		t.Errorf("Check of the raw Set = %v, want HELP lines without text", err)
	}
	out := Annotate(nil, buf.Bytes())
	if err := Check(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`promtext_test_seconds_bucket{backend="http://x:1",le="1"} 1`,
		`promtext_test_seconds_bucket{backend="http://x:1",le="+Inf"} 2`,
		`promtext_test_seconds_count{backend="http://x:1"} 2`,
		"# TYPE promtext_test_seconds histogram",
	} {
		if !bytes.Contains(out, []byte(want+"\n")) {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
}

func TestQuoteLabel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"org/alpha": `"org/alpha"`, `a"b\c`: `"a\"b\\c"`, "a\nb": `"a\nb"`, "a\x01b\x7f": `"a?b?"`, "é\xff": `"é?"`,
	} {
		got := QuoteLabel(in)
		if got != want {
			t.Errorf("QuoteLabel(%q) = %s, want %s", in, got, want)
		}
		if err := Check([]byte("# HELP x X.\n# TYPE x counter\nx{l=" + got + "} 1\n")); err != nil {
			t.Errorf("QuoteLabel(%q) = %s: not a valid sample: %v", in, got, err)
		}
	}
}
