package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlots draws, per workload: the TTFT CDF per policy, the token hit
// ratio and P99 TTFT per policy, and the requests per backend per policy.
func (r *Report) writePlots(dir string) ([]string, error) {
	var paths []string
	for _, wl := range r.workloads() {
		var runs []int
		for i, s := range r.Runs {
			if s.Workload == wl {
				runs = append(runs, i)
			}
		}
		type fig struct {
			name string
			draw func() (*plot.Plot, error)
		}
		figs := []fig{
			{"ttft_cdf", func() (*plot.Plot, error) { return r.ttftCDF(wl, runs) }},
			{"hit_ratio", func() (*plot.Plot, error) {
				return r.bars(wl, runs, "token hit ratio", func(s Summary) float64 { return s.TokenHitRatio })
			}},
			{"ttft_p99", func() (*plot.Plot, error) {
				return r.bars(wl, runs, "TTFT p99 (ms)", func(s Summary) float64 { return s.TTFT.P99 })
			}},
			{"load", func() (*plot.Plot, error) { return r.load(wl, runs) }},
		}
		for _, f := range figs {
			p, err := f.draw()
			if err != nil {
				return paths, fmt.Errorf("%s %s: %w", wl, f.name, err)
			}
			if p == nil {
				continue
			}
			path := filepath.Join(dir, fmt.Sprintf("%s_%s.png", fileSafe(wl), f.name))
			if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
				return paths, err
			}
			paths = append(paths, path)
		}
	}
	return paths, nil
}

// ttftCDF: one line per policy, TTFT (ms, log scale) against the fraction
// of successful requests at or below it. Nil without samples.
func (r *Report) ttftCDF(wl string, runs []int) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = wl + ": TTFT CDF"
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	drawn := 0
	for k, i := range runs {
		if i >= len(r.Samples) {
			continue
		}
		var ts []float64
		for _, x := range r.Samples[i] {
			if x.Err == "" && x.TTFT > 0 {
				ts = append(ts, float64(x.TTFT)/float64(time.Millisecond))
			}
		}
		if len(ts) == 0 {
			continue
		}
		slices.Sort(ts)
		pts := make(plotter.XYs, len(ts))
		for j, t := range ts {
			pts[j] = plotter.XY{X: t, Y: float64(j+1) / float64(len(ts))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(k)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(k)
		p.Add(l)
		p.Legend.Add(r.Runs[i].Label(), l)
		drawn++
	}
	if drawn == 0 {
		return nil, nil
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// bars: one bar per policy of value(run).
func (r *Report) bars(wl string, runs []int, label string, value func(Summary) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = wl + ": " + label
	p.Y.Label.Text = label
	vals := make(plotter.Values, len(runs))
	names := make([]string, len(runs))
	for k, i := range runs {
		vals[k] = value(r.Runs[i])
		names[k] = r.Runs[i].Label()
	}
	b, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return nil, err
	}
	b.Color = plotutil.Color(0)
	b.LineStyle.Width = 0
	p.Add(b)
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}

// load: requests per backend, grouped by policy (one colour per backend).
func (r *Report) load(wl string, runs []int) (*plot.Plot, error) {
	backends := map[string]bool{}
	for _, i := range runs {
		for b := range r.Runs[i].PerBackend {
			backends[b] = true
		}
	}
	if len(backends) == 0 {
		return nil, nil
	}
	names := sortedKeys(backends)
	p := plot.New()
	p.Title.Text = wl + ": requests per backend"
	p.Y.Label.Text = "requests"
	w := vg.Points(max(4, 60/float64(len(names))))
	policies := make([]string, len(runs))
	for k, i := range runs {
		policies[k] = r.Runs[i].Label()
	}
	for j, be := range names {
		vals := make(plotter.Values, len(runs))
		for k, i := range runs {
			vals[k] = float64(r.Runs[i].PerBackend[be])
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(j)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(j)-float64(len(names)-1)/2)
		p.Add(b)
		if len(names) <= 12 {
			p.Legend.Add(shortBackend(be), b)
		}
	}
	p.Legend.Top = true
	p.NominalX(policies...)
	p.Y.Min = 0
	return p, nil
}

func shortBackend(u string) string {
	u = strings.TrimPrefix(u, "http://")
	return strings.TrimPrefix(u, "127.0.0.1")
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
