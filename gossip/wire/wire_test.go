package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// chain returns n distinct keys identified by tag.
func chain(tag uint64, n int) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = tag<<32 | uint64(i) | 1<<63
	}
	return keys
}

// every returns the bounds step, 2·step, ... up to n.
func every(step, n int) []uint32 {
	var b []uint32
	for x := step; x <= n; x += step {
		b = append(b, uint32(x))
	}
	return b
}

// whole returns a whole route as Decode returns it.
func whole(op Op, backend uint64, arg uint32, keys []uint64, bounds []uint32) Route {
	r := Route{Op: op, Backend: backend, Keys: keys, Bounds: bounds, Parts: 1, Total: uint32(len(keys))}
	if op == OpInsert {
		r.Age = arg
	} else {
		r.Keep = arg
	}
	return r
}

// diffRoute describes how got differs from want, or returns "".
// Nil and empty slices are equal.
func diffRoute(got, want *Route) string {
	g, w := *got, *want
	switch {
	case !slices.Equal(g.Keys, w.Keys):
		return fmt.Sprintf("keys %d %v…, want %d %v…", len(g.Keys), head(g.Keys), len(w.Keys), head(w.Keys))
	case !slices.Equal(g.Bounds, w.Bounds):
		return fmt.Sprintf("bounds %v, want %v", g.Bounds, w.Bounds)
	}
	if scalars(&g) != scalars(&w) {
		return fmt.Sprintf("%+v, want %+v", scalars(&g), scalars(&w))
	}
	return ""
}

// routeScalars is a Route without its slices, comparable with ==.
type routeScalars struct {
	Op            Op
	Backend, Seq  uint64
	Age, Keep     uint32
	Part, Parts   uint16
	Offset, Total uint32
}

func scalars(r *Route) routeScalars {
	return routeScalars{r.Op, r.Backend, r.Seq, r.Age, r.Keep, r.Part, r.Parts, r.Offset, r.Total}
}

func head[T any](s []T) []T { return s[:min(len(s), 4)] }

// diffMessage describes how got differs from want, or returns "".
func diffMessage(got, want *Message) string {
	if got.Header != want.Header {
		return fmt.Sprintf("header %+v, want %+v", got.Header, want.Header)
	}
	if len(got.Routes) != len(want.Routes) {
		return fmt.Sprintf("%d routes, want %d", len(got.Routes), len(want.Routes))
	}
	for i := range got.Routes {
		if d := diffRoute(&got.Routes[i], &want.Routes[i]); d != "" {
			return fmt.Sprintf("route %d: %s", i, d)
		}
	}
	if !slices.Equal(got.Loads, want.Loads) {
		return fmt.Sprintf("loads %+v, want %+v", got.Loads, want.Loads)
	}
	return ""
}

// samples are valid messages of every kind, as Decode returns them.
func samples() []Message {
	node255 := strings.Repeat("n", 255)
	big := chain(7, 3000)
	return []Message{
		{Header: Header{Kind: KindRoutes, Node: "a", Sent: 0}},
		{Header: Header{Kind: KindLoad, Node: "a", Sent: -1}},
		{Header: Header{Kind: KindState, Node: "a", Sent: 1}},
		{Header: Header{Kind: KindRoutes, Node: "router-1", Sent: 1_700_000_000_000}, Routes: []Route{
			whole(OpInsert, 42, 1500, chain(1, 3), []uint32{1, 3}),
			whole(OpDemote, 43, 2, chain(2, 5), nil),
			whole(OpInsert, 44, 0, chain(3, 1), []uint32{1}),
		}},
		{Header: Header{Kind: KindRoutes, Node: node255, Sent: math.MaxInt64}, Routes: []Route{
			// Max values: a split route's first and last parts of a chain of
			// MaxChain blocks, cheap because a part carries few keys.
			{Op: OpInsert, Backend: math.MaxUint64, Age: math.MaxUint32, Keys: chain(4, 3),
				Bounds: []uint32{1, 2, 130, 20_000, MaxChain}, Seq: math.MaxUint64, Part: 0, Parts: MaxParts, Offset: 0, Total: MaxChain},
			{Op: OpDemote, Backend: 1, Keep: MaxChain, Keys: chain(4, 2),
				Seq: 1, Part: MaxParts - 1, Parts: MaxParts, Offset: MaxChain - 2, Total: MaxChain},
			{Op: OpDemote, Backend: 2, Keep: 0, Keys: chain(5, 1),
				Seq: 9, Part: 1, Parts: 2, Offset: 1, Total: 2},
		}},
		{Header: Header{Kind: KindRoutes, Node: "big", Sent: math.MinInt64}, Routes: []Route{
			whole(OpInsert, 5, 60_000, big, every(16, len(big))),
		}},
		{Header: Header{Kind: KindLoad, Node: "router-2", Sent: 12345}, Loads: []Load{
			{Backend: 1, InFlight: 0, Prefill: 0},
			{Backend: math.MaxUint64, InFlight: math.MaxUint32, Prefill: math.MaxUint64},
			{Backend: 3, InFlight: 17, Prefill: 40_000},
		}},
		{Header: Header{Kind: KindState, Node: "router-3", Sent: 99}, Routes: []Route{
			whole(OpInsert, 42, 1, chain(6, 40), every(8, 40)),
		}, Loads: []Load{{Backend: 42, InFlight: 3, Prefill: 9000}}},
		{Header: Header{Kind: KindState, Node: "router-4", Sent: 99}, Loads: []Load{{Backend: 1, InFlight: 1, Prefill: 1}}},
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	var reused Message // decoded into by every case, in turn
	for i, want := range samples() {
		t.Run(fmt.Sprintf("%d-kind%d-%droutes-%dloads", i, want.Kind, len(want.Routes), len(want.Loads)), func(t *testing.T) {
			data := AppendMessage(nil, &want)
			var got Message
			if err := Decode(data, &got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if d := diffMessage(&got, &want); d != "" {
				t.Fatal(d)
			}
			if again := AppendMessage(nil, &got); !bytes.Equal(again, data) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, data)
			}
			if err := Decode(data, &reused); err != nil {
				t.Fatalf("Decode into a reused Message: %v", err)
			}
			if d := diffMessage(&reused, &want); d != "" {
				t.Fatalf("into a reused Message: %s", d)
			}
			// AppendMessage appends.
			if pre := AppendMessage([]byte("xy"), &want); !bytes.Equal(pre[2:], data) || string(pre[:2]) != "xy" {
				t.Fatalf("AppendMessage did not append to dst")
			}
		})
	}
}

// A whole route is written without the fields of parts: Decode gives Parts
// 1 and Total len(Keys) whatever they were; each op writes its own arg.
func TestAppendMessageWholeRoute(t *testing.T) {
	t.Parallel()
	in := Message{Header: Header{Kind: KindRoutes, Node: "a"}, Routes: []Route{
		{Op: OpInsert, Backend: 1, Age: 5, Keep: 7, Keys: chain(1, 4), Bounds: []uint32{2}, Seq: 9, Part: 3, Parts: 0, Offset: 2, Total: 100},
		{Op: OpDemote, Backend: 2, Age: 5, Keep: 3, Keys: chain(2, 4), Parts: 1, Total: 0},
	}}
	want := Message{Header: in.Header, Routes: []Route{
		whole(OpInsert, 1, 5, chain(1, 4), []uint32{2}),
		whole(OpDemote, 2, 3, chain(2, 4), nil),
	}}
	var got Message
	if err := Decode(AppendMessage(nil, &in), &got); err != nil {
		t.Fatal(err)
	}
	if d := diffMessage(&got, &want); d != "" {
		t.Fatal(d)
	}
}

func TestAppendMessagePanics(t *testing.T) {
	t.Parallel()
	f := func(name string, m Message) {
		t.Helper()
		defer func() {
			if p, ok := recover().(string); !ok || !strings.HasPrefix(p, "BUG: ") {
				t.Errorf("%s: panic %v, want a BUG panic", name, p)
			}
		}()
		AppendMessage(nil, &m)
	}
	f("empty node", Message{Header: Header{Kind: KindRoutes}})
	f("long node", Message{Header: Header{Kind: KindRoutes, Node: strings.Repeat("x", 256)}})
	f("kind 0", Message{Header: Header{Node: "a"}})
	f("kind 4", Message{Header: Header{Kind: 4, Node: "a"}})
}

func TestDecodeTruncated(t *testing.T) {
	t.Parallel()
	for i, m := range samples() {
		data := AppendMessage(nil, &m)
		var got Message
		for n := range len(data) {
			if err := Decode(data[:n], &got); !errors.Is(err, ErrMalformed) {
				t.Fatalf("sample %d cut to %d of %d bytes: %v, want ErrMalformed", i, n, len(data), err)
			}
		}
	}
}

// Byte builders for hand-made messages.
func uv(x uint64) []byte  { return binary.AppendUvarint(nil, x) }
func u64(x uint64) []byte { return binary.LittleEndian.AppendUint64(nil, x) }
func cat(parts ...[]byte) []byte {
	return slices.Concat(parts...)
}

// hdr is a valid header of kind k from node "n".
func hdr(k Kind) []byte { return cat([]byte{'S', Version, byte(k), 1, 'n'}, u64(7)) }

// rec is a route record: op, backend 1, arg, parts, [seq part offset],
// total, nkeys keys, then tail (the bounds part, if any).
func rec(op Op, arg, parts uint64, split []uint64, total, nkeys uint64, tail ...[]byte) []byte {
	b := cat([]byte{byte(op)}, u64(1), uv(arg), uv(parts))
	for _, x := range split {
		b = append(b, uv(x)...)
	}
	b = cat(b, uv(total), uv(nkeys))
	for i := range nkeys {
		b = append(b, u64(i+1)...)
	}
	return cat(append([][]byte{b}, tail...)...)
}

// routes1 is a KindRoutes message of the one record r.
func routes1(r []byte) []byte { return cat(hdr(KindRoutes), uv(1), r) }

func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	valid := routes1(rec(OpInsert, 5, 1, nil, 2, 2, uv(1), uv(2)))
	var m Message
	if err := Decode(valid, &m); err != nil {
		t.Fatalf("the valid base message: %v", err)
	}
	f := func(name string, data []byte, want error, field string) {
		t.Helper()
		err := Decode(data, &m)
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
			return
		}
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %q does not name %q", name, err, field)
		}
	}
	f("empty", nil, ErrMalformed, "truncated")
	f("magic", cat([]byte{'X'}, valid[1:]), ErrMalformed, "magic 0x58")
	f("version 2", cat([]byte{'S', 2}, valid[2:]), ErrVersion, "version 2")
	f("version 2, short", []byte{'S', 2}, ErrVersion, "version 2")
	f("version 0", cat([]byte{'S', 0}, valid[2:]), ErrMalformed, "version 0")
	f("kind 0", cat([]byte{'S', 1, 0}, valid[3:]), ErrMalformed, "kind 0")
	f("kind 9", cat([]byte{'S', 1, 9}, valid[3:]), ErrMalformed, "kind 9")
	f("empty node", cat([]byte{'S', 1, 1, 0}, u64(7), uv(0)), ErrMalformed, "node")
	f("node longer than the message", []byte{'S', 1, 1, 200, 'n'}, ErrMalformed, "node")
	f("trailing byte", cat(valid, []byte{0}), ErrMalformed, "1 trailing bytes")
	f("trailing byte after loads", cat(hdr(KindLoad), uv(0), []byte{0}), ErrMalformed, "trailing")

	// Counts that lie.
	f("huge route count", cat(hdr(KindRoutes), uv(1<<40)), ErrMalformed, "route count")
	f("route count over the bytes", cat(hdr(KindRoutes), uv(2), make([]byte, 40)), ErrMalformed, "route count 2 above 1")
	f("huge load count", cat(hdr(KindLoad), uv(math.MaxUint64), make([]byte, 30)), ErrMalformed, "load count")
	f("load count over the bytes", cat(hdr(KindLoad), uv(4), make([]byte, 36)), ErrMalformed, "load count 4 above 3")
	f("state load count", cat(hdr(KindState), uv(0), uv(2), make([]byte, 10)), ErrMalformed, "load count")
	f("nkeys over the bytes", routes1(cat([]byte{byte(OpInsert)}, u64(1), uv(0), uv(1), uv(9), uv(9), make([]byte, 14))), ErrMalformed, "nkeys 9 above 1")
	f("nbounds over total", routes1(rec(OpInsert, 0, 1, nil, 2, 2, uv(3), uv(1), uv(1), uv(1))), ErrMalformed, "nbounds 3 above 2")
	f("nbounds over the bytes", routes1(rec(OpInsert, 0, 1, nil, 4, 4, uv(3), uv(1))), ErrMalformed, "nbounds 3 above 1")

	// Route fields.
	f("op 0", routes1(rec(0, 0, 1, nil, 1, 1, uv(0))), ErrMalformed, "route 0: op 0")
	f("op 3", routes1(rec(3, 0, 1, nil, 1, 1, uv(0))), ErrMalformed, "op 3")
	f("parts 0", routes1(rec(OpInsert, 0, 0, nil, 1, 1, uv(0))), ErrMalformed, "parts 0")
	f("parts over MaxParts", routes1(rec(OpInsert, 0, MaxParts+1, []uint64{1, 0, 0}, 1, 1, uv(0))), ErrMalformed, "parts 4097 above 4096")
	f("part = parts", routes1(rec(OpInsert, 0, 3, []uint64{1, 3, 0}, 4, 1)), ErrMalformed, "part 3 above 2")
	f("part > parts", routes1(rec(OpInsert, 0, 3, []uint64{1, 7, 0}, 4, 1)), ErrMalformed, "part 7")
	f("seq 0", routes1(rec(OpInsert, 0, 2, []uint64{0, 1, 1}, 2, 1)), ErrMalformed, "seq 0")
	f("part 0 off offset 0", routes1(rec(OpInsert, 0, 2, []uint64{1, 0, 1}, 2, 1, uv(0))), ErrMalformed, "part 0 at offset 1")
	f("total over MaxChain", routes1(rec(OpInsert, 0, 2, []uint64{1, 1, 0}, MaxChain+1, 1)), ErrMalformed, "total 1048577 above")
	f("offset over MaxChain", routes1(rec(OpInsert, 0, 2, []uint64{1, 1, MaxChain + 1}, 4, 1)), ErrMalformed, "offset")
	f("offset+nkeys over total", routes1(rec(OpInsert, 0, 2, []uint64{1, 1, 3}, 4, 2)), ErrMalformed, "offset 3 + nkeys 2 above total 4")
	f("no keys", routes1(rec(OpInsert, 0, 2, []uint64{1, 1, 0}, 4, 0, make([]byte, 8))), ErrMalformed, "no keys")
	f("whole route short of total", routes1(rec(OpInsert, 0, 1, nil, 3, 2, uv(0))), ErrMalformed, "whole route of 2 keys, total 3")
	f("keep over total", routes1(rec(OpDemote, 3, 1, nil, 2, 2, uv(0))), ErrMalformed, "keep 3 above total 2")
	f("age over 32 bits", routes1(rec(OpInsert, 1<<32, 1, nil, 1, 1, uv(0))), ErrMalformed, "arg 4294967296 above")
	f("bounds not ascending", routes1(rec(OpInsert, 0, 1, nil, 4, 4, uv(2), uv(2), uv(0))), ErrMalformed, "bound 1 (2) not above")
	f("first bound 0", routes1(rec(OpInsert, 0, 1, nil, 4, 4, uv(1), uv(0))), ErrMalformed, "bound 0 (0)")
	f("bound over total", routes1(rec(OpInsert, 0, 1, nil, 4, 4, uv(2), uv(3), uv(2))), ErrMalformed, "bound 5 above total 4")
	f("bound truncated", routes1(rec(OpInsert, 0, 1, nil, 4, 4, uv(2), uv(3), []byte{0x80})), ErrMalformed, "bound truncated")

	// Load fields.
	f("in-flight over 32 bits", cat(hdr(KindLoad), uv(1), u64(1), uv(1<<32), uv(0), uv(0), uv(0)), ErrMalformed, "load 0: in-flight 4294967296 above")
	f("prefill truncated", cat(hdr(KindLoad), uv(1), u64(1), uv(1), []byte{0x80, 0x80, 0x80}), ErrMalformed, "load 0: prefill truncated")
	f("pinned truncated", cat(hdr(KindLoad), uv(1), u64(1), uv(1), uv(1), uv(1), []byte{0x80}), ErrMalformed, "load 0: pinned truncated")

	// Varints.
	overflow11 := bytes.Repeat([]byte{0xff}, 11)
	f("uvarint of 11 bytes", cat(hdr(KindRoutes), overflow11), ErrMalformed, "route count: uvarint overflows 64 bits")
	f("uvarint over 64 bits", cat(hdr(KindLoad), uv(1), u64(1), uv(1), bytes.Repeat([]byte{0xff}, 9), []byte{0x02}, uv(0), uv(0)), ErrMalformed, "prefill: uvarint overflows")
	f("uvarint not shortest", cat(hdr(KindRoutes), []byte{0x80, 0x00}), ErrMalformed, "not in its shortest form")
	f("prefill of 64 bits is fine but trailing", cat(hdr(KindLoad), uv(1), u64(1), uv(1), uv(math.MaxUint64), uv(0), uv(0), []byte{1}), ErrMalformed, "1 trailing")
}

// Decode copies: the decoded slices never alias the input, and a route's
// slices are capped so appending to one cannot write over another.
func TestDecodeOwnsItsSlices(t *testing.T) {
	t.Parallel()
	want := Message{Header: Header{Kind: KindRoutes, Node: "a"}, Routes: []Route{
		whole(OpInsert, 1, 1, chain(1, 3), []uint32{1, 3}),
		whole(OpInsert, 2, 1, chain(2, 3), []uint32{2}),
	}}
	data := AppendMessage(nil, &want)
	var m Message
	if err := Decode(data, &m); err != nil {
		t.Fatal(err)
	}
	clear(data)
	m.Routes[0].Keys = append(m.Routes[0].Keys, 99)
	m.Routes[0].Bounds = append(m.Routes[0].Bounds, 4)
	m.Routes[0].Keys, m.Routes[0].Bounds = m.Routes[0].Keys[:3], m.Routes[0].Bounds[:2]
	if d := diffMessage(&m, &want); d != "" {
		t.Fatal(d)
	}
}

// A Message that decoded a large snapshot does not keep its storage.
func TestDecodeDropsLargeStorage(t *testing.T) {
	t.Parallel()
	big := Message{Header: Header{Kind: KindState, Node: "a"}}
	for i := range 40 {
		big.Routes = append(big.Routes, whole(OpInsert, uint64(i), 1, chain(uint64(i), 4000), every(1, 4000)))
	}
	for i := range retainLoads + 1 {
		big.Loads = append(big.Loads, Load{Backend: uint64(i)})
	}
	small := Message{Header: Header{Kind: KindState, Node: "a"},
		Routes: []Route{whole(OpInsert, 1, 1, chain(1, 3), []uint32{3})}, Loads: []Load{{Backend: 1}}}
	var m Message
	if err := Decode(AppendMessage(nil, &big), &m); err != nil {
		t.Fatal(err)
	}
	if cap(m.keys) <= retainKeys || cap(m.bounds) <= retainBounds || cap(m.Loads) <= retainLoads {
		t.Fatalf("the snapshot fit under the ceilings (%d keys, %d bounds, %d loads): make it larger",
			cap(m.keys), cap(m.bounds), cap(m.Loads))
	}
	if err := Decode(AppendMessage(nil, &small), &m); err != nil {
		t.Fatal(err)
	}
	if d := diffMessage(&m, &small); d != "" {
		t.Fatal(d)
	}
	if cap(m.keys) > 1024 || cap(m.bounds) > 1024 || cap(m.Loads) > 1024 {
		t.Fatalf("storage kept after a large Decode: %d keys, %d bounds, %d loads", cap(m.keys), cap(m.bounds), cap(m.Loads))
	}
}

// batch adds routes to a Batcher and returns the emitted messages, the
// now of the call that emitted each one, and checks each is within limit.
func batch(tb testing.TB, b *Batcher, limit int, routes []Route) (msgs [][]byte, sent []int64) {
	tb.Helper()
	now := time.UnixMilli(1_700_000_000_000)
	emit := func(msg []byte) {
		if len(msg) > limit {
			tb.Fatalf("message of %d bytes, limit %d", len(msg), limit)
		}
		msgs = append(msgs, msg)
		sent = append(sent, now.UnixMilli())
	}
	for _, r := range routes {
		now = now.Add(time.Millisecond)
		b.Add(r, now, emit)
	}
	now = now.Add(time.Millisecond)
	b.Flush(now, emit)
	if b.Len() != 0 {
		tb.Fatalf("Len after Flush = %d", b.Len())
	}
	return msgs, sent
}

// decodeAll decodes messages and returns copies of their routes.
func decodeAll(tb testing.TB, node string, msgs [][]byte, sent []int64) []Route {
	tb.Helper()
	var m Message
	var routes []Route
	for i, msg := range msgs {
		if err := Decode(msg, &m); err != nil {
			tb.Fatalf("message %d: %v", i, err)
		}
		if m.Kind != KindRoutes || m.Node != node {
			tb.Fatalf("message %d: header %+v, want routes from %q", i, m.Header, node)
		}
		if sent != nil && m.Sent != sent[i] {
			tb.Fatalf("message %d: sent %d, want %d (the now of the call that emitted it)", i, m.Sent, sent[i])
		}
		for _, r := range m.Routes {
			r.Keys, r.Bounds = slices.Clone(r.Keys), slices.Clone(r.Bounds)
			routes = append(routes, r)
		}
	}
	return routes
}

func TestBatcherSmallRoutes(t *testing.T) {
	t.Parallel()
	const limit = 1300
	rng := rand.New(rand.NewPCG(1, 2))
	var in, want []Route
	for i := range 500 {
		n := 1 + rng.IntN(20)
		op, arg := OpInsert, uint32(rng.IntN(100_000))
		if i%7 == 0 {
			op, arg = OpDemote, uint32(rng.IntN(n+1))
		}
		bounds := every(1+rng.IntN(n), n)
		w := whole(op, rng.Uint64(), arg, chain(uint64(i), n), bounds)
		in = append(in, Route{Op: op, Backend: w.Backend, Age: w.Age, Keep: w.Keep, Keys: w.Keys, Bounds: w.Bounds})
		want = append(want, w)
	}
	b := NewBatcher("router-1", limit)
	msgs, sent := batch(t, b, limit, in)
	if len(msgs) < 10 {
		t.Fatalf("%d messages for 500 routes, want them spread over many", len(msgs))
	}
	for i, msg := range msgs[:len(msgs)-1] {
		if len(msg) < limit-(1+8+3+1+1+1+20*8+1+20) {
			t.Errorf("message %d of %d bytes: room for another route was left", i, len(msg))
		}
	}
	got := decodeAll(t, "router-1", msgs, sent)
	sameRoutes(t, got, want)
}

// A route too long for one message travels in parts that a Reassembler
// joins, in any order and with duplicates.
func TestBatcherSplitReassemble(t *testing.T) {
	t.Parallel()
	const limit = 1300
	keys := chain(9, 5000)
	bounds := every(100, 5000)
	b := NewBatcher("router-1", limit)
	// A small route before it is emitted first, on its own.
	msgs, sent := batch(t, b, limit, []Route{
		{Op: OpInsert, Backend: 1, Keys: chain(1, 2)},
		{Op: OpInsert, Backend: 7, Age: 1234, Keys: keys, Bounds: bounds},
	})
	parts := decodeAll(t, "router-1", msgs, sent)
	if len(parts) != len(msgs) {
		t.Fatalf("%d routes in %d messages, want one each", len(parts), len(msgs))
	}
	if d := diffRoute(&parts[0], &Route{Op: OpInsert, Backend: 1, Keys: chain(1, 2), Parts: 1, Total: 2}); d != "" {
		t.Fatalf("first message: %s", d)
	}
	parts = parts[1:]
	if least := 5000*8/limit + 1; len(parts) < least || len(parts) > least+3 {
		t.Fatalf("%d parts, want %d to %d", len(parts), least, least+3)
	}
	for i, p := range parts {
		if p.Seq == 0 || p.Seq != parts[0].Seq || int(p.Part) != i || int(p.Parts) != len(parts) || p.Total != 5000 {
			t.Fatalf("part %d: seq %d part %d/%d total %d", i, p.Seq, p.Part, p.Parts, p.Total)
		}
		if i < len(parts)-1 && len(msgs[1+i]) < limit-12 {
			t.Errorf("part %d: %d bytes, want it filled to about %d", i, len(msgs[1+i]), limit)
		}
	}
	want := whole(OpInsert, 7, 1234, keys, bounds)

	rng := rand.New(rand.NewPCG(3, 4))
	for _, order := range []string{"in order", "shuffled", "shuffled with duplicates"} {
		feed := slices.Clone(parts)
		if order != "in order" {
			rng.Shuffle(len(feed), func(i, j int) { feed[i], feed[j] = feed[j], feed[i] })
		}
		if order == "shuffled with duplicates" {
			// Half of them twice, and two more after the route joined.
			feed = slices.Concat(feed[:len(feed)/2], feed, parts[:1], parts[len(parts)-1:])
		}
		ra := NewReassembler(8, time.Minute)
		now := time.Now()
		var done []Route
		for _, p := range feed {
			if w, ok := ra.Add("router-1", p, now); ok {
				done = append(done, w)
			}
		}
		if len(done) < 1 {
			t.Fatalf("%s: never completed; stats %+v", order, ra.Stats())
		}
		if d := diffRoute(&done[0], &want); d != "" {
			t.Fatalf("%s: %s", order, d)
		}
		s := ra.Stats()
		if s.Completed != 1 || s.Dropped != 0 || s.Evicted != 0 {
			t.Fatalf("%s: stats %+v, want 1 completed, none dropped", order, s)
		}
	}
}

// At the smallest limit a chain longer than MaxParts parts carry loses its
// tail; the bounds and Keep follow the shorter chain.
func TestBatcherMaxParts(t *testing.T) {
	t.Parallel()
	const limit = 257
	keys := chain(3, 120_000)
	bounds := []uint32{10, 50_000, 110_000, 119_000}
	b := NewBatcher("n", limit)
	msgs, sent := batch(t, b, limit, []Route{{Op: OpDemote, Backend: 3, Keep: 110_000, Keys: keys, Bounds: bounds}})
	parts := decodeAll(t, "n", msgs, sent)
	if len(parts) != MaxParts {
		t.Fatalf("%d parts, want MaxParts", len(parts))
	}
	total := int(parts[0].Total)
	if total >= len(keys) || total < 90_000 {
		t.Fatalf("total %d, want the chain cut below %d, at most MaxParts full parts", total, len(keys))
	}
	got := joinParts(t, parts)
	if d := diffRoute(&got, &Route{Op: OpDemote, Backend: 3, Keep: uint32(total), Keys: keys[:total],
		Bounds: []uint32{10, 50_000}, Parts: 1, Total: uint32(total)}); d != "" {
		t.Fatal(d)
	}
}

// Part 0 carries the bounds that fit beside one key, the first ones.
func TestBatcherBoundsOverflow(t *testing.T) {
	t.Parallel()
	const limit = 300
	keys := chain(4, 2000)
	bounds := every(1, 2000)
	b := NewBatcher("n", limit)
	msgs, sent := batch(t, b, limit, []Route{{Op: OpInsert, Backend: 3, Keys: keys, Bounds: bounds}})
	parts := decodeAll(t, "n", msgs, sent)
	if n := len(parts[0].Bounds); n < 200 || n > 280 || len(parts[0].Keys) < 1 {
		t.Fatalf("part 0: %d bounds and %d keys, want about 250 bounds and a key", n, len(parts[0].Keys))
	}
	got := joinParts(t, parts)
	if d := diffRoute(&got, &Route{Op: OpInsert, Backend: 3, Keys: keys,
		Bounds: bounds[:len(parts[0].Bounds)], Parts: 1, Total: 2000}); d != "" {
		t.Fatal(d)
	}
}

// What a Batcher cannot send as given it repairs or skips.
func TestBatcherSanitizes(t *testing.T) {
	t.Parallel()
	b := NewBatcher("n", 1300)
	msgs, _ := batch(t, b, 1300, []Route{
		{Op: OpInsert, Backend: 1}, // no keys: skipped
		{Op: OpInsert, Backend: 2, Keys: chain(1, 4), Bounds: []uint32{0, 2, 2, 1, 9, 4}}, // bad bounds skipped
		{Op: OpDemote, Backend: 3, Keep: 100, Keys: chain(2, 4)},                          // Keep lowered to the chain
		{Op: OpInsert, Backend: 4, Keys: chain(3, 4), Seq: 5, Offset: 2, Total: 99, Part: 0, Parts: 1},
	})
	got := decodeAll(t, "n", msgs, nil)
	want := []Route{
		whole(OpInsert, 2, 0, chain(1, 4), []uint32{2, 4}),
		whole(OpDemote, 3, 4, chain(2, 4), nil),
		whole(OpInsert, 4, 0, chain(3, 4), nil),
	}
	sameRoutes(t, got, want)
}

func TestBatcherPanics(t *testing.T) {
	t.Parallel()
	f := func(name string, fn func()) { t.Helper(); wantBug(t, name, fn) }
	emit := func([]byte) {}
	f("empty node", func() { NewBatcher("", 1300) })
	f("long node", func() { NewBatcher(strings.Repeat("x", 256), 1300) })
	f("limit below the floor", func() { NewBatcher("node-1", 261) })
	f("a part", func() { NewBatcher("n", 1300).Add(Route{Op: OpInsert, Keys: chain(1, 1), Parts: 2}, time.Now(), emit) })
	f("op 0", func() { NewBatcher("n", 1300).Add(Route{Keys: chain(1, 1)}, time.Now(), emit) })
	NewBatcher("node-1", 262) // the floor itself is fine
}

// part returns part i of a split route with the given offsets (ends[i] is
// where part i stops), keys from chain(tag, total).
func part(seq uint64, i int, ends []int, tag uint64) Route {
	total := ends[len(ends)-1]
	keys := chain(tag, total)
	start := 0
	if i > 0 {
		start = ends[i-1]
	}
	p := Route{Op: OpInsert, Backend: 1, Age: 10, Keys: keys[start:ends[i]], Seq: seq,
		Part: uint16(i), Parts: uint16(len(ends)), Offset: uint32(start), Total: uint32(total)}
	if i == 0 {
		p.Bounds = []uint32{2, uint32(total)}
	}
	return p
}

func TestReassemblerWholePassesThrough(t *testing.T) {
	t.Parallel()
	ra := NewReassembler(1, time.Second)
	in := whole(OpInsert, 1, 2, chain(1, 3), nil)
	got, ok := ra.Add("a", in, time.Now())
	if !ok || diffRoute(&got, &in) != "" || &got.Keys[0] != &in.Keys[0] {
		t.Fatalf("Add(whole) = %+v, %v; want the route itself", got, ok)
	}
	if s := ra.Stats(); s != (ReassemblyStats{}) {
		t.Fatalf("stats %+v after a whole route", s)
	}
}

// Parts are told apart by node and Seq.
func TestReassemblerKeys(t *testing.T) {
	t.Parallel()
	ra := NewReassembler(4, time.Minute)
	now := time.Now()
	ends := []int{3, 6}
	for _, node := range []string{"a", "b"} {
		if _, ok := ra.Add(node, part(1, 0, ends, 1), now); ok {
			t.Fatal("joined after one part")
		}
	}
	if _, ok := ra.Add("a", part(2, 1, ends, 1), now); ok {
		t.Fatal("joined parts of different seqs")
	}
	for _, node := range []string{"a", "b"} {
		got, ok := ra.Add(node, part(1, 1, ends, 1), now)
		if !ok {
			t.Fatalf("%s: not joined", node)
		}
		want := Route{Op: OpInsert, Backend: 1, Age: 10, Keys: chain(1, 6), Bounds: []uint32{2, 6}, Parts: 1, Total: 6}
		if d := diffRoute(&got, &want); d != "" {
			t.Fatalf("%s: %s", node, d)
		}
	}
	if s := ra.Stats(); s.Completed != 2 || s.Pending != 1 || s.Buffered != 3+partUnits {
		t.Fatalf("stats %+v, want 2 completed, 1 pending of 3 keys", s)
	}
}

func TestReassemblerInconsistent(t *testing.T) {
	t.Parallel()
	ends := []int{3, 6, 9}
	f := func(name string, second Route) {
		t.Helper()
		ra := NewReassembler(4, time.Minute)
		now := time.Now()
		ra.Add("a", part(1, 1, ends, 1), now)
		if _, ok := ra.Add("a", second, now); ok {
			t.Errorf("%s: joined", name)
		}
		if s := ra.Stats(); s.Dropped != 1 || s.Pending != 0 || s.Buffered != 0 {
			t.Errorf("%s: stats %+v, want the entry dropped", name, s)
		}
		// The rest of the route no longer joins: its entry is gone.
		ra.Add("a", part(1, 0, ends, 1), now)
		if _, ok := ra.Add("a", part(1, 2, ends, 1), now); ok {
			t.Errorf("%s: joined without part 1", name)
		}
	}
	with := func(r Route, fn func(*Route)) Route { fn(&r); return r }
	p0, p2 := part(1, 0, ends, 1), part(1, 2, ends, 1)
	f("total", with(p0, func(r *Route) { r.Total = 10 }))
	f("parts", with(p0, func(r *Route) { r.Parts = 4 }))
	f("op", with(p0, func(r *Route) { r.Op = OpDemote; r.Age = 0; r.Keep = 5 }))
	f("backend", with(p0, func(r *Route) { r.Backend = 2 }))
	f("age", with(p0, func(r *Route) { r.Age = 11 }))
	f("overlap", with(p0, func(r *Route) { r.Keys = chain(1, 4) }))
	f("gap before an adjacent part", with(p0, func(r *Route) { r.Keys = chain(1, 2) }))
	f("gap after an adjacent part", with(p2, func(r *Route) { r.Offset = 7; r.Keys = r.Keys[1:] }))
	f("last part short of total", with(p2, func(r *Route) { r.Keys = r.Keys[:2] }))
	f("duplicate index, other blocks", with(part(1, 1, ends, 1), func(r *Route) { r.Keys = r.Keys[:2] }))
	f("invalid: part ≥ parts", with(p0, func(r *Route) { r.Part = 3 }))
	f("invalid: no keys", with(p2, func(r *Route) { r.Keys = nil }))
	f("invalid: bounds over total", with(p0, func(r *Route) { r.Bounds = []uint32{10} }))
	f("invalid: part 0 off offset 0", with(p0, func(r *Route) { r.Offset = 1 }))
}

func TestReassemblerMaxPending(t *testing.T) {
	t.Parallel()
	ra := NewReassembler(2, time.Minute)
	now := time.Now()
	ends := []int{3, 6}
	for seq := uint64(1); seq <= 3; seq++ {
		ra.Add("a", part(seq, 0, ends, seq), now)
	}
	if s := ra.Stats(); s.Evicted != 1 || s.Pending != 2 || s.Buffered != 2*(3+2+partUnits) {
		t.Fatalf("stats %+v, want 1 evicted, 2 pending", s)
	}
	// The oldest (seq 1) went: its last part starts a new entry, which
	// evicts seq 2; seq 3 still joins.
	if _, ok := ra.Add("a", part(1, 1, ends, 1), now); ok {
		t.Fatal("seq 1 joined after its eviction")
	}
	if _, ok := ra.Add("a", part(3, 1, ends, 3), now); !ok {
		t.Fatal("seq 3 did not join")
	}
	if s := ra.Stats(); s.Evicted != 2 || s.Completed != 1 || s.Pending != 1 {
		t.Fatalf("stats %+v, want 2 evicted, 1 completed, 1 pending", s)
	}
}

func TestReassemblerMaxUnits(t *testing.T) {
	t.Parallel()
	ra := NewReassembler(100, time.Minute)
	ra.maxUnits = 100
	now := time.Now()
	ends := []int{30, 60}
	for seq := uint64(1); seq <= 3; seq++ {
		ra.Add("a", part(seq, 1, ends, seq), now) // 30 keys + partUnits each
	}
	if s := ra.Stats(); s.Evicted != 1 || s.Pending != 2 || s.Buffered != 2*(30+partUnits) {
		t.Fatalf("stats %+v, want the oldest evicted", s)
	}
	// A part larger than the whole budget evicts everything, itself last.
	ra.Add("a", part(9, 1, []int{1, 200}, 9), now)
	if s := ra.Stats(); s.Evicted != 4 || s.Pending != 0 || s.Buffered != 0 {
		t.Fatalf("stats %+v, want all 4 evicted", s)
	}
}

func TestReassemblerExpiry(t *testing.T) {
	t.Parallel()
	ra := NewReassembler(10, time.Second)
	t0 := time.Now()
	ends := []int{3, 6, 9}
	ra.Add("a", part(1, 0, ends, 1), t0)
	ra.Add("a", part(2, 0, ends, 2), t0.Add(500*time.Millisecond))
	ra.Add("a", part(1, 1, ends, 1), t0.Add(time.Second)) // not yet expired: 1 s is not over 1 s
	if s := ra.Stats(); s.Expired != 0 || s.Pending != 2 {
		t.Fatalf("stats %+v, want nothing expired yet", s)
	}
	// Any Add expires: here a whole route from another node.
	ra.Add("b", whole(OpInsert, 1, 1, chain(1, 1), nil), t0.Add(1400*time.Millisecond))
	if s := ra.Stats(); s.Expired != 1 || s.Pending != 1 || s.Buffered != 3+2+partUnits {
		t.Fatalf("stats %+v, want seq 1 expired", s)
	}
	if _, ok := ra.Add("a", part(1, 2, ends, 1), t0.Add(1400*time.Millisecond)); ok {
		t.Fatal("seq 1 joined after it expired")
	}
	ra.Add("a", part(3, 0, ends, 3), t0.Add(10*time.Second))
	if s := ra.Stats(); s.Expired != 3 || s.Pending != 1 {
		t.Fatalf("stats %+v, want 3 expired", s)
	}
}

func TestReassemblerPanics(t *testing.T) {
	t.Parallel()
	f := func(name string, fn func()) { t.Helper(); wantBug(t, name, fn) }
	f("maxPending 0", func() { NewReassembler(0, time.Second) })
	f("timeout 0", func() { NewReassembler(1, 0) })
}

// sameRoutes fails t unless got and want hold the same routes in order.
func sameRoutes(t *testing.T, got, want []Route) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d routes, want %d", len(got), len(want))
	}
	for i := range got {
		if d := diffRoute(&got[i], &want[i]); d != "" {
			t.Errorf("route %d: %s", i, d)
		}
	}
}

// wantBug fails t unless fn panics with a "BUG: " message.
func wantBug(t *testing.T, name string, fn func()) {
	t.Helper()
	defer func() {
		if p, ok := recover().(string); !ok || !strings.HasPrefix(p, "BUG: ") {
			t.Errorf("%s: panic %v, want a BUG panic", name, p)
		}
	}()
	fn()
}

// joinParts joins the parts of one split route, in order, and fails t
// unless the last one completes it.
func joinParts(t *testing.T, parts []Route) Route {
	t.Helper()
	ra := NewReassembler(1, time.Minute)
	var got Route
	var ok bool
	for _, p := range parts {
		got, ok = ra.Add("n", p, time.Now())
	}
	if !ok {
		t.Fatalf("not joined: %+v", ra.Stats())
	}
	return got
}
