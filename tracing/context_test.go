package tracing

import (
	"strings"
	"testing"
)

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	f := func(in string, ok bool, flags byte) {
		t.Helper()
		gotT, gotS, gotF, gotOK := ParseTraceparent(in)
		if gotOK != ok {
			t.Fatalf("ParseTraceparent(%q) ok = %v, want %v", in, gotOK, ok)
		}
		if !ok {
			return
		}
		c := Context{TraceID: gotT, SpanID: gotS, Sampled: gotF&1 == 1}
		if out := string(c.AppendTraceparent(nil)); out[:52] != "00-"+tid+"-"+sid || gotF != flags {
			t.Fatalf("ParseTraceparent(%q) = %s flags %x, want %s-%s flags %x", in, out, gotF, tid, sid, flags)
		}
	}
	f("00-"+tid+"-"+sid+"-01", true, 1)
	f("00-"+tid+"-"+sid+"-00", true, 0)
	f("00-"+tid+"-"+sid+"-03", true, 3)
	f("01-"+tid+"-"+sid+"-01-what-follows", true, 1) // a later version: the first four fields
	f("01-"+tid+"-"+sid+"-01", true, 1)
	f("00-"+tid+"-"+sid+"-01-x", false, 0) // version 00 ends at the flags
	f("01-"+tid+"-"+sid+"-01x", false, 0)
	f("ff-"+tid+"-"+sid+"-01", false, 0)
	f("00-"+strings.ToUpper(tid)+"-"+sid+"-01", false, 0)
	f("00-"+strings.Repeat("0", 32)+"-"+sid+"-01", false, 0)
	f("00-"+tid+"-"+strings.Repeat("0", 16)+"-01", false, 0)
	f("00-"+tid+"-"+sid+"-0g", false, 0)
	f("00-"+tid+"-"+sid+"_01", false, 0)
	f("00-"+tid[:31]+"-"+sid+"-01", false, 0)
	f("", false, 0)
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		tid, sid, flags, ok := ParseTraceparent(s)
		if !ok {
			return
		}
		if tid == [16]byte{} || sid == [8]byte{} {
			t.Fatalf("%q: a zero ID accepted", s)
		}
		// What it read is what the value says, in canonical form.
		c := Context{TraceID: tid, SpanID: sid, Sampled: flags&1 == 1}
		out := string(c.AppendTraceparent(nil))
		if out[2:53] != s[2:53] || (out[54] == '1') != (flags&1 == 1) {
			t.Fatalf("%q read as %q", s, out)
		}
	})
}

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

func TestBeginAllocs(t *testing.T) {
	l := Loop{rng: newPCG(), sampler: RatioSampler(0.01)}
	if n := testing.AllocsPerRun(100, func() {
		var c Context
		l.Begin(&c, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	}); n != 0 {
		t.Fatalf("Begin allocates %v times", n)
	}
}
