package promtext

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Family is one metric family of an exposition, as Parse read it.
type Family struct {
	Name, Type, Help string
	Series           int // sample lines
}

// maxProblems bounds the problems Parse reports; the rest are counted.
const maxProblems = 40

// Parse reads text as the Prometheus text exposition format (0.0.4), more
// strictly than Prometheus does, and returns its families in order with
// every problem found (nil: none):
//
//   - each line is `# HELP family text`, `# TYPE family type` or a sample
//     `name{label="value",...} value`: no timestamps, no other comments,
//     no blank lines;
//   - each family has one HELP with a text and one TYPE (counter, gauge,
//     histogram, summary, untyped), both before its first sample, and its
//     lines are contiguous;
//   - a sample's name fits its family's type: a histogram has only
//     family_bucket (with le), family_sum and family_count, a summary
//     family (with quantile), family_sum and family_count, the others
//     only family;
//   - no series twice, no label twice, no vmrange label (VictoriaMetrics
//     histograms, which histogram_quantile cannot read);
//   - a histogram's buckets, per label set, have increasing le ending in
//     "+Inf", non-decreasing counts, the +Inf count equal to _count; a
//     saltus_* histogram has _sum and _count (the Go runtime's, as
//     VictoriaMetrics writes them, have neither);
//   - a saltus_* counter's name ends in _total.
//
// A family with metadata and no sample yet (a writer's counters before
// their first event) is valid, as it is for Prometheus.
//
// The tests of /metrics use it (admin, cmd/saltus).
func Parse(text []byte) ([]Family, error) {
	p := parser{seen: map[string]bool{}, series: map[string]bool{}}
	if len(text) > 0 && text[len(text)-1] != '\n' {
		p.errorf(0, "the text does not end in a newline")
	}
	if len(text) > 0 {
		for n, line := range bytes.Split(bytes.TrimSuffix(text, []byte("\n")), []byte("\n")) {
			p.line(n+1, string(line))
		}
	}
	p.close()
	if p.dropped > 0 {
		p.errs = append(p.errs, fmt.Errorf("and %d more problems", p.dropped))
	}
	return p.fams, errors.Join(p.errs...)
}

// Check is Parse without the families.
func Check(text []byte) error {
	_, err := Parse(text)
	return err
}

type parser struct {
	fams    []Family
	cur     *Family // the family being read; nil before the first
	hasHelp bool    // cur has its HELP line
	hasType bool    // cur has its TYPE line
	sampled bool    // cur has a sample
	hist    map[string]*histSeries
	histOrd []string        // hist's keys in first-seen order
	seen    map[string]bool // families closed or open
	series  map[string]bool
	errs    []error
	dropped int
}

type histSeries struct {
	les, counts []float64
	sum, count  float64
	hasSum      bool
	hasCount    bool
	firstLine   int
}

func (p *parser) errorf(n int, format string, args ...any) {
	if len(p.errs) >= maxProblems {
		p.dropped++
		return
	}
	msg := fmt.Sprintf(format, args...)
	if n > 0 {
		msg = fmt.Sprintf("line %d: %s", n, msg)
	}
	p.errs = append(p.errs, errors.New(msg))
}

// family makes name the current family, starting it if it is new.
func (p *parser) family(n int, name string) {
	if p.cur != nil && p.cur.Name == name {
		return
	}
	p.close()
	if p.seen[name] {
		p.errorf(n, "family %s again after other families (its lines must be contiguous, its metadata once)", name)
	}
	p.seen[name] = true
	p.fams = append(p.fams, Family{Name: name})
	p.cur = &p.fams[len(p.fams)-1]
	p.hasHelp, p.hasType, p.sampled = false, false, false
	p.hist, p.histOrd = map[string]*histSeries{}, nil
}

func (p *parser) line(n int, l string) {
	if l == "" {
		p.errorf(n, "blank line")
		return
	}
	if rest, ok := strings.CutPrefix(l, "# HELP "); ok {
		name, text, _ := strings.Cut(rest, " ")
		if !validName(name) {
			p.errorf(n, "bad metric name in %q", l)
			return
		}
		p.family(n, name)
		switch {
		case p.hasHelp:
			p.errorf(n, "second HELP for %s", name)
		case p.sampled:
			p.errorf(n, "HELP for %s after its samples", name)
		case strings.TrimSpace(text) == "":
			p.errorf(n, "HELP for %s has no text", name)
		}
		p.hasHelp = true
		p.cur.Help = text
		return
	}
	if rest, ok := strings.CutPrefix(l, "# TYPE "); ok {
		name, typ, _ := strings.Cut(rest, " ")
		if !validName(name) {
			p.errorf(n, "bad metric name in %q", l)
			return
		}
		p.family(n, name)
		switch {
		case p.hasType:
			p.errorf(n, "second TYPE for %s", name)
		case p.sampled:
			p.errorf(n, "TYPE for %s after its samples", name)
		}
		switch typ {
		case "counter", "gauge", "histogram", "summary", "untyped":
		default:
			p.errorf(n, "TYPE %q for %s", typ, name)
		}
		if typ == "counter" && strings.HasPrefix(name, "saltus_") && !strings.HasSuffix(name, "_total") {
			p.errorf(n, "counter %s does not end in _total", name)
		}
		p.hasType = true
		p.cur.Type = typ
		return
	}
	if l[0] == '#' {
		p.errorf(n, "a comment that is neither HELP nor TYPE: %q", l)
		return
	}
	p.sample(n, l)
}

func (p *parser) sample(n int, l string) {
	name, labels, value, err := splitSample(l)
	if err != nil {
		p.errorf(n, "%v: %q", err, l)
		return
	}
	slices.Sort(labels)
	key := name + "{" + strings.Join(labels, ",") + "}"
	if p.series[key] {
		p.errorf(n, "series %s twice", key)
	}
	p.series[key] = true
	var le string
	var rest []string // labels without le
	for _, lv := range labels {
		k, v, _ := strings.Cut(lv, "=")
		switch k {
		case "vmrange":
			p.errorf(n, "vmrange label (a VictoriaMetrics histogram; Prometheus wants le buckets): %q", l)
		case "le":
			le = v
			continue
		}
		rest = append(rest, lv)
	}
	if p.cur == nil || !p.belongs(name) {
		p.errorf(n, "sample %s has no HELP and TYPE of its own (or follows another family's)", name)
		return
	}
	p.sampled = true
	p.cur.Series++
	if !p.hasHelp || !p.hasType {
		p.errorf(n, "sample of %s before its HELP and TYPE", p.cur.Name)
	}
	if p.cur.Type != "histogram" {
		if le != "" {
			p.errorf(n, "le label on a %s", p.cur.Type)
		}
		return
	}
	hk := strings.Join(rest, ",")
	h := p.hist[hk]
	if h == nil {
		h = &histSeries{firstLine: n}
		p.hist[hk] = h
		p.histOrd = append(p.histOrd, hk)
	}
	switch strings.TrimPrefix(name, p.cur.Name) {
	case "_bucket":
		ub, err := strconv.ParseFloat(strings.Trim(le, `"`), 64)
		if le == "" || err != nil {
			p.errorf(n, "bucket without a numeric le: %q", l)
			return
		}
		if k := len(h.les); k > 0 && (ub <= h.les[k-1] || value < h.counts[k-1]) {
			p.errorf(n, "bucket le=%s after le=%g with count %g after %g: le must increase and counts not decrease", le, h.les[k-1], value, h.counts[k-1])
		}
		h.les, h.counts = append(h.les, ub), append(h.counts, value)
	case "_sum":
		h.sum, h.hasSum = value, true
	case "_count":
		h.count, h.hasCount = value, true
	}
}

// belongs reports whether a sample named name is of the current family.
func (p *parser) belongs(name string) bool {
	f := p.cur.Name
	switch p.cur.Type {
	case "histogram":
		return name == f+"_bucket" || name == f+"_sum" || name == f+"_count"
	case "summary":
		return name == f || name == f+"_sum" || name == f+"_count"
	}
	return name == f
}

// close checks the current family's histograms and ends it.
func (p *parser) close() {
	if p.cur == nil {
		return
	}
	for _, hk := range p.histOrd {
		h := p.hist[hk]
		where := fmt.Sprintf("histogram %s{%s} (line %d)", p.cur.Name, hk, h.firstLine)
		switch {
		case len(h.les) == 0:
			p.errorf(0, "%s has no buckets", where)
		case !math.IsInf(h.les[len(h.les)-1], 1):
			p.errorf(0, "%s: the last bucket is le=%g, not +Inf", where, h.les[len(h.les)-1])
		case h.hasCount && h.counts[len(h.counts)-1] != h.count:
			p.errorf(0, "%s: _count %g differs from the +Inf bucket %g", where, h.count, h.counts[len(h.counts)-1])
		}
		// VictoriaMetrics exports the Go runtime's histograms without
		// _sum and _count (the runtime has no exact sum); Prometheus
		// accepts that. Ours have both.
		if own := strings.HasPrefix(p.cur.Name, "saltus_"); own && !h.hasSum {
			p.errorf(0, "%s has no _sum", where)
		} else if own && !h.hasCount {
			p.errorf(0, "%s has no _count", where)
		}
	}
	p.cur = nil
}

// Label is one label of a sample, its value unescaped.
type Label struct{ Name, Value string }

// SplitSample splits one sample line, `name{k="v",...} value` (no
// timestamp), as Parse reads it: its labels in the order written, their
// values unescaped (\\, \", \n). The error says what is wrong. The
// dashboard (admin) reads this process's own /metrics with it.
func SplitSample(l string) (name string, labels []Label, value float64, err error) {
	name, raw, value, err := splitSample(l)
	if err != nil {
		return "", nil, 0, err
	}
	labels = make([]Label, 0, len(raw))
	for _, lv := range raw {
		k, v, _ := strings.Cut(lv, "=")
		labels = append(labels, Label{k, unescape(v[1 : len(v)-1])})
	}
	return name, labels, value, nil
}

// unescape undoes a label value's escapes (splitSample allowed only \\,
// \" and \n).
func unescape(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' && i+1 < len(v) {
			i++
			if c = v[i]; c == 'n' {
				c = '\n'
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// splitSample splits `name{k="v",...} value` into its parts; labels as
// written (k="v", value still escaped), in their order.
func splitSample(l string) (name string, labels []string, value float64, err error) {
	i := 0
	for i < len(l) && l[i] != '{' && l[i] != ' ' {
		i++
	}
	name = l[:i]
	if !validName(name) {
		return "", nil, 0, errors.New("bad metric name")
	}
	if i < len(l) && l[i] == '{' {
		i++
		for {
			j := i
			for j < len(l) && l[j] != '=' {
				j++
			}
			k := l[i:j]
			if !validLabel(k) || j+1 >= len(l) || l[j+1] != '"' {
				return "", nil, 0, errors.New("bad label")
			}
			e := j + 2
			for e < len(l) && l[e] != '"' {
				if l[e] == '\\' {
					if e+1 >= len(l) || !strings.ContainsRune(`\"n`, rune(l[e+1])) {
						return "", nil, 0, errors.New("bad escape in a label value")
					}
					e++
				}
				e++
			}
			if e >= len(l) {
				return "", nil, 0, errors.New("unterminated label value")
			}
			lv := l[i : e+1]
			for _, o := range labels {
				if strings.HasPrefix(o, k+"=") {
					return "", nil, 0, fmt.Errorf("label %s twice", k)
				}
			}
			labels = append(labels, lv)
			i = e + 1
			if i < len(l) && l[i] == ',' {
				i++
				for i < len(l) && l[i] == ' ' { // the format allows blanks here (go_info_ext has them)
					i++
				}
				continue
			}
			if i < len(l) && l[i] == '}' {
				i++
				break
			}
			return "", nil, 0, errors.New("bad label list")
		}
	}
	if i >= len(l) || l[i] != ' ' {
		return "", nil, 0, errors.New("no value")
	}
	v := l[i+1:]
	if strings.ContainsRune(v, ' ') {
		return "", nil, 0, errors.New("a timestamp or trailing text after the value")
	}
	value, err = strconv.ParseFloat(v, 64)
	if err != nil {
		return "", nil, 0, errors.New("bad value")
	}
	return name, labels, value, nil
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

func validLabel(s string) bool {
	return validName(s) && !strings.ContainsRune(s, ':')
}
