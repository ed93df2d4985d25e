package tracing

import (
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
