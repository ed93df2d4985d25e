//go:build !race

package wire

import (
	"runtime"
	"testing"
	"time"
)

// The race detector allocates on its own; these run without it. None is
// parallel: testing.AllocsPerRun refuses to run in a parallel test, and
// the allocation totals are the whole process's.

// Decode into a Message that decoded a message as large allocates nothing.
func TestDecodeZeroAllocs(t *testing.T) {
	msgs := [][]byte{routesBatch(t)}
	for _, m := range samples() {
		msgs = append(msgs, AppendMessage(nil, &m))
	}
	for i, data := range msgs {
		var m Message
		if err := Decode(data, &m); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = Decode(data, &m) }); n != 0 {
			t.Errorf("message %d: %v allocs/op, want 0", i, n)
		}
	}
}

// Add allocates only the messages it emits.
func TestBatcherAddZeroAllocs(t *testing.T) {
	b := NewBatcher("n", 1<<20)
	r := Route{Op: OpInsert, Backend: 1, Keys: chain(1, 12), Bounds: []uint32{4, 12}}
	now := time.UnixMilli(1)
	emit := func([]byte) { t.Fatal("emitted before Flush") }
	for range 200 {
		b.Add(r, now, emit)
	}
	b.Flush(now, func([]byte) {})
	if n := testing.AllocsPerRun(100, func() { b.Add(r, now, emit) }); n != 0 {
		t.Errorf("%v allocs/op, want 0", n)
	}
}

// A short message that lies about its counts makes Decode allocate no
// more than a few times its own size. Parallel tests wait until the
// sequential ones are done, so none adds to the total it reads.
func TestDecodeAllocBound(t *testing.T) {
	lie := func(k Kind, body ...[]byte) []byte { return cat(append([][]byte{hdr(k)}, body...)...) }
	f := func(name string, data []byte) {
		t.Helper()
		var before, after runtime.MemStats
		const runs = 50
		runtime.ReadMemStats(&before)
		for range runs {
			var m Message
			if err := Decode(data, &m); err == nil {
				t.Fatalf("%s: decoded", name)
			}
		}
		runtime.ReadMemStats(&after)
		per := int(after.TotalAlloc-before.TotalAlloc) / runs
		// The error message costs a few hundred bytes whatever the size.
		t.Logf("%s: %d bytes per Decode of %d bytes", name, per, len(data))
		if limit := 8*len(data) + 1024; per > limit {
			t.Errorf("%s: %d bytes allocated per Decode of %d bytes, want at most %d", name, per, len(data), limit)
		}
	}
	f("huge route count", lie(KindRoutes, uv(1<<40), make([]byte, 10)))
	f("huge load count", lie(KindLoad, uv(1<<40), make([]byte, 10)))
	f("huge nkeys", routes1(cat([]byte{byte(OpInsert)}, u64(1), uv(0), uv(1), uv(MaxChain), uv(MaxChain), make([]byte, 16))))
	f("huge nbounds", routes1(rec(OpInsert, 0, 2, []uint64{1, 0, 0}, MaxChain, 1, uv(MaxChain), make([]byte, 8))))
	// As many routes as the bytes allow, then garbage: the routes are
	// allocated, about 4.4 times the message.
	f("most routes", lie(KindRoutes, uv(1000/minRouteBytes), make([]byte, 1000)))
	f("most loads", lie(KindLoad, uv(1000/minLoadBytes), make([]byte, 999), []byte{0x80}))
	// Bounds claiming every byte left, then garbage: 4 bytes per byte.
	f("most bounds", routes1(rec(OpInsert, 0, 2, []uint64{1, 0, 0}, 4000, 1, uv(2000), make([]byte, 2000))))
}
