package wire

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// FuzzDecode: Decode never panics, and what it accepts re-encodes to the
// same bytes (the encoding is canonical), which decode to an equal Message.
func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		f.Add(AppendMessage(nil, &m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if err := Decode(data, &m); err != nil {
			return
		}
		again := AppendMessage(nil, &m)
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, data)
		}
		var m2 Message
		if err := Decode(again, &m2); err != nil {
			t.Fatalf("re-encoded message: %v", err)
		}
		if d := diffMessage(&m2, &m); d != "" {
			t.Fatal(d)
		}
	})
}

// FuzzBatchReassemble: the input drives a Batcher's limit and the routes
// added to it (sizes from one key to over 16,000, bounds valid or not).
// Every message it emits is within the limit and decodes, and a
// Reassembler fed the decoded routes returns exactly the routes added, as
// the Batcher documents it repairs them, in order.
func FuzzBatchReassemble(f *testing.F) {
	f.Add([]byte{0, 0, 5, 2, 1, 80, 3, 2, 9, 0, 6, 4, 200, 7})
	f.Add([]byte{130, 1, 78, 9, 2, 3, 1, 4, 200, 40, 5, 1, 0, 0})
	f.Add([]byte{255, 5, 255, 255, 0, 1, 1, 2, 12, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 || len(data) > 600 {
			return
		}
		const node = "node-a"
		limit := 256 + len(node) + 8*int(data[0])
		data = data[1:]

		b := NewBatcher(node, limit)
		ra := NewReassembler(4, time.Minute)
		now := time.UnixMilli(1_000_000)
		var m Message
		var got []Route
		emit := func(msg []byte) {
			if len(msg) > limit {
				t.Fatalf("message of %d bytes, limit %d", len(msg), limit)
			}
			if err := Decode(msg, &m); err != nil {
				t.Fatalf("emitted message: %v", err)
			}
			if m.Kind != KindRoutes || m.Node != node || m.Sent != now.UnixMilli() || len(m.Routes) == 0 {
				t.Fatalf("header %+v with %d routes", m.Header, len(m.Routes))
			}
			for _, r := range m.Routes {
				if w, ok := ra.Add(node, r, now); ok {
					w.Keys, w.Bounds = slices.Clone(w.Keys), slices.Clone(w.Bounds)
					got = append(got, w)
				}
			}
		}

		var want []Route
		var split []bool // whether want[i] could not travel whole
		for i := 0; len(data) >= 3; i++ {
			ctl, size, nb := data[0], int(data[1]), int(data[2])
			data = data[3:]
			n := size
			if ctl&1 != 0 {
				n *= 64
			}
			r := Route{Op: OpInsert, Backend: uint64(ctl), Age: uint32(size) << 12, Keep: uint32(nb) * 5, Keys: chain(uint64(i), n)}
			if ctl&2 != 0 {
				r.Op = OpDemote
			}
			step := max(1, n/(nb+1))
			for j := range nb {
				x := uint32((j + 1) * step)
				if ctl&4 != 0 && j%3 == 1 {
					x = uint32(j*7) % uint32(n+3) // out of order, 0 or past the chain: skipped
				}
				r.Bounds = append(r.Bounds, x)
			}
			now = now.Add(time.Millisecond)
			b.Add(r, now, emit)
			if n == 0 {
				continue // no keys: nothing is sent
			}
			w := whole(r.Op, r.Backend, r.Age, r.Keys, nil)
			if r.Op == OpDemote {
				w.Keep = min(r.Keep, uint32(n))
			}
			prev := uint32(0)
			for _, x := range r.Bounds {
				if x > prev && x <= uint32(n) {
					w.Bounds = append(w.Bounds, x)
					prev = x
				}
			}
			want = append(want, w)
			split = append(split, headerLen(len(node))+1+routeSize(&w) > limit)
		}
		now = now.Add(time.Millisecond)
		b.Flush(now, emit)

		if len(got) != len(want) {
			t.Fatalf("%d routes came out, %d went in; stats %+v", len(got), len(want), ra.Stats())
		}
		for i := range got {
			g, w := got[i], want[i]
			if split[i] {
				// Part 0 carries the bounds that fit, the first ones: all of
				// them when they take less than 128 bytes (part 0 has room
				// for about 200 at the smallest limit).
				if len(g.Bounds) > len(w.Bounds) || !slices.Equal(g.Bounds, w.Bounds[:len(g.Bounds)]) {
					t.Fatalf("route %d: bounds %v, want a prefix of %v", i, g.Bounds, w.Bounds)
				}
				if boundsBytes(w.Bounds) >= 128 {
					w.Bounds = g.Bounds
				}
			}
			if d := diffRoute(&g, &w); d != "" {
				t.Fatalf("route %d of %d (split %v): %s", i, len(want), split[i], d)
			}
		}
		if s := ra.Stats(); s.Dropped != 0 || s.Evicted != 0 || s.Pending != 0 {
			t.Fatalf("reassembler stats %+v", s)
		}
	})
}

// boundsBytes is the encoded size of bounds with their count.
func boundsBytes(bounds []uint32) int {
	n := uvarintLen(uint64(len(bounds)))
	prev := uint32(0)
	for _, x := range bounds {
		n += uvarintLen(uint64(x - prev))
		prev = x
	}
	return n
}
