package promtext

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestSplitSample(t *testing.T) {
	t.Parallel()
	f := func(line string, ok bool, name string, labels []Label, value float64) {
		t.Helper()
		n, l, v, err := SplitSample(line)
		if (err == nil) != ok || n != name || !reflect.DeepEqual(l, labels) || v != value {
			t.Errorf("SplitSample(%q) = %q %v %v %v, want %q %v %v ok=%v", line, n, l, v, err, name, labels, value, ok)
		}
	}
	f(`a 1`, true, "a", []Label{}, 1)
	f(`a{b="c"} -2`, true, "a", []Label{{"b", "c"}}, -2)
	f(`a{d="e", b="c"} 3`, true, "a", []Label{{"d", "e"}, {"b", "c"}}, 3)
	f(`a{b="\\n\"\n"} 3`, true, "a", []Label{{"b", "\\n\"\n"}}, 3)
	f(`a:b_c9 1e3`, true, "a:b_c9", []Label{}, 1000)
	for _, bad := range []string{``, `a`, `a `, `a x`, `9a 1`, `a{b="c" 1`, `a{b="c"`, `a{b=c} 1`, `a{b="c\x"} 1`, `a{b:x="c"} 1`,
		`a{b="c",b="d"} 1`, `a{b="c"}1`, `a{="c"} 1`, `a{b="c"}} 1`, `a{b="\`, `a 1 123`} {
		f(bad, false, "", nil, 0)
	}
}

// FuzzSplitSample: never panics; what it accepts, written back in the
// format, reads the same.
func FuzzSplitSample(f *testing.F) {
	for _, s := range []string{`a 1`, `a{b="c",d="e\"\\\n"} 2`, `a{b="c", d=""} NaN`, `x{le="+Inf"} 4`} {
		f.Add(s)
	}
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	f.Fuzz(func(t *testing.T, line string) {
		name, labels, value, err := SplitSample(line)
		if err != nil {
			return
		}
		var b strings.Builder
		b.WriteString(name)
		if len(labels) > 0 {
			b.WriteByte('{')
			for i, l := range labels {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(l.Name + `="` + esc.Replace(l.Value) + `"`)
			}
			b.WriteByte('}')
		}
		b.WriteString(" " + strconv.FormatFloat(value, 'g', -1, 64))
		n2, l2, v2, err := SplitSample(b.String())
		if err != nil || n2 != name || !reflect.DeepEqual(l2, labels) || !(v2 == value || math.IsNaN(v2) && math.IsNaN(value)) {
			t.Errorf("%q → %q → %q %v %v %v", line, b.String(), n2, l2, v2, err)
		}
	})
}
