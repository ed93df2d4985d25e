package tracing

import (
	"fmt"
	"strings"
	"testing"
)

func TestLoopBegin(t *testing.T) {
	t.Parallel()
	l := Loop{rng: newPCG(), sampler: RatioSampler(0)}
	var c Context
	l.Begin(&c, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
	tp := string(c.AppendTraceparent(nil))
	if !c.Began() || !c.HasParent() || !c.Sampled || c.State != "k=v" ||
		!strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(tp, "00f067aa0ba902b7") || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("a sampled client parent: %+v %s", c, tp)
	}
	first := c.SpanID
	l.Begin(&c, "", "") // once only
	if c.SpanID != first || !c.HasParent() {
		t.Fatalf("Begin again changed the context: %+v", c)
	}
	var root Context
	l.Begin(&root, "garbage", "k=v")
	if root.HasParent() || root.Sampled || root.State != "" || root.TraceID == [16]byte{} || root.SpanID == [8]byte{} {
		t.Fatalf("no valid parent, ratio 0: %+v", root)
	}
	if tp := string(root.AppendTraceparent(nil)); !strings.HasSuffix(tp, "-00") || len(tp) != traceparentLen {
		t.Fatalf("a not-sampled traceparent %q", tp)
	}
	var off Loop
	var none Context
	off.Begin(&none, "", "")
	if none.Began() {
		t.Fatal("the zero Loop began a context")
	}
}

func TestLimitState(t *testing.T) {
	t.Parallel()
	member := func(i int) string { return fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 40)) } // 44 bytes
	var ms []string
	for i := range 20 {
		ms = append(ms, member(i))
	}
	long := strings.Join(ms, ",") // 899 bytes
	f := func(in, want string) {
		t.Helper()
		if got := LimitState(in); got != want {
			t.Fatalf("LimitState(%d bytes) = %q, want %q", len(in), got, want)
		}
	}
	f("", "")
	f("a=1,b=2", "a=1,b=2")
	f(long, strings.Join(ms[:11], ",")) // 11 × 45 - 1 = 494 bytes
	f(strings.Join(ms[:11], ",")+" ,"+strings.Repeat("y", 600), strings.Join(ms[:11], ","))
	f(strings.Repeat("z", 513), "")
	f(strings.Repeat("z", 512), strings.Repeat("z", 512))
}

func FuzzLimitState(f *testing.F) {
	f.Add("a=1,b=2")
	f.Add(strings.Repeat("k=v,", 200))
	f.Add(strings.Repeat("z", 600))
	f.Fuzz(func(t *testing.T, s string) {
		got := LimitState(s)
		if len(got) > maxState || !strings.HasPrefix(s, got) {
			t.Fatalf("LimitState(%q) = %q", s, got)
		}
		if len(s) <= maxState && got != s {
			t.Fatalf("LimitState(%q) changed a short value to %q", s, got)
		}
		if got != "" && len(got) < len(s) && s[len(got)] != ',' && strings.TrimLeft(s[len(got):], " \t")[0] != ',' {
			t.Fatalf("LimitState(%q) = %q: not cut at a member's end", s, got)
		}
	})
}
