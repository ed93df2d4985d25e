package wire

import (
	"testing"
	"time"
)

// routesBatch returns a KindRoutes message of about 1,300 bytes, as the
// Batcher packs one: routes of 12 blocks (a short conversation at block
// size 16) with two message ends each.
func routesBatch(tb testing.TB) []byte {
	tb.Helper()
	b := NewBatcher("router-1", 1300)
	var msg []byte
	for i := 0; msg == nil; i++ {
		b.Add(Route{Op: OpInsert, Backend: uint64(i % 8), Age: 1500, Keys: chain(uint64(i), 12), Bounds: []uint32{4, 12}},
			time.UnixMilli(1), func(m []byte) { msg = m })
	}
	return msg
}

func BenchmarkDecodeRoutes(b *testing.B) {
	data := routesBatch(b)
	var m Message
	if err := Decode(data, &m); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(data, &m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(m.Routes)), "routes/msg")
}

func BenchmarkBatcherAdd(b *testing.B) {
	for _, tc := range []struct {
		name string
		keys int
	}{
		{"12keys", 12},     // many routes per message
		{"5000keys", 5000}, // split into about 32 parts
	} {
		b.Run(tc.name, func(b *testing.B) {
			bt := NewBatcher("router-1", 1300)
			r := Route{Op: OpInsert, Backend: 3, Age: 1500, Keys: chain(1, tc.keys), Bounds: []uint32{4, uint32(tc.keys)}}
			now := time.UnixMilli(1)
			msgs := 0
			emit := func([]byte) { msgs++ }
			b.SetBytes(int64(8 * tc.keys))
			b.ReportAllocs()
			for b.Loop() {
				bt.Add(r, now, emit)
			}
			b.ReportMetric(float64(msgs)/float64(b.N), "msgs/op")
		})
	}
}
