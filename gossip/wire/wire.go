package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Version is the format version this package writes and reads.
const Version = 1

// magic is the first byte of every message: 'S' for saltus. It tells a
// saltus message from anything else that reaches memberlist's user-message
// handler before the version is looked at.
const magic = 'S'

// Kind says what a message's body holds.
type Kind uint8

const (
	// KindRoutes is a batch of route changes (broadcast).
	KindRoutes Kind = 1
	// KindLoad is a node's per-backend load (broadcast).
	KindLoad Kind = 2
	// KindState is a push-pull snapshot: routes and load (TCP, any size).
	KindState Kind = 3
)

// Op says what a route change teaches.
type Op uint8

const (
	// OpInsert: Backend holds the chain; insert it with origin REMOTE, last
	// used Age ago.
	OpInsert Op = 1
	// OpDemote: Backend holds no more than Keep leading blocks of the chain.
	OpDemote Op = 2
)

const (
	// MaxChain bounds the blocks of one chain (Route.Total).
	MaxChain = 1 << 20
	// MaxParts bounds the parts of one split route (Route.Parts).
	MaxParts = 4096
)

var (
	// ErrVersion is returned by Decode for a message of a version above
	// Version: a newer peer. The caller drops the message and counts it.
	ErrVersion = errors.New("wire: unknown version")
	// ErrMalformed is returned by Decode for anything else wrong with a
	// message, wrapped with the reason (errors.Is finds it).
	ErrMalformed = errors.New("wire: malformed message")
)

// Route is one route change. A chain too long for one message is split
// into parts (Parts > 1) that share Seq; part i carries Keys for blocks
// [Offset, Offset+len(Keys)) of a chain of Total blocks.
type Route struct {
	Op      Op
	Backend uint64   // the backend's stable identity hash, the same on every router
	Age     uint32   // OpInsert: milliseconds since the sender last used the route
	Keep    uint32   // OpDemote: blocks the backend keeps
	Keys    []uint64 // block keys (8 bytes each on the wire)
	Bounds  []uint32 // message ends in blocks (absolute, strictly ascending, each in (0, Total]); carried by part 0 only
	Seq     uint64   // sender-chosen id shared by the parts of one split route; 0 when Parts == 1
	Part    uint16   // index of this part, < Parts
	Parts   uint16   // 1 for a whole route; at most MaxParts
	Offset  uint32   // first block index of Keys in the whole chain (0 for part 0)
	Total   uint32   // blocks in the whole chain, at most MaxChain
}

// whole reports whether r is a whole route, not a part of a split one.
// AppendMessage and the Batcher read Parts 0 as 1.
func (r *Route) whole() bool { return r.Parts <= 1 }

// Load is a node's load on one backend.
type Load struct {
	Backend  uint64 // identity hash
	InFlight uint32 // requests this node has in flight to the backend
	Prefill  uint64 // prompt tokens this node sent that the backend has not started answering (pending prefill)
	// Footprint and Pinned: prompt tokens of the prefixes this node's
	// requests use on the backend, and of those its requests in flight
	// hold in the backend's KV cache (the prefix policy's eviction and
	// KV-room inputs).
	Footprint uint64
	Pinned    uint64
}

// Header is what every message starts with.
type Header struct {
	Kind Kind
	Node string // sender's node name, 1..255 bytes
	Sent int64  // sender's wall clock, Unix milliseconds, when the message was encoded
}

// Message is one decoded message, or one to encode. Routes is the body of
// KindRoutes, Loads the body of KindLoad, both that of KindState.
type Message struct {
	Header
	Routes []Route
	Loads  []Load

	// Decode's storage, reused by the next Decode: every route's Keys
	// and Bounds are carved from these (one array of each when capacity
	// allows), so they never alias the decoded bytes.
	keys   []uint64
	bounds []uint32
}

// Retention ceilings: a Message that held more than this after one Decode
// (a large push-pull snapshot) lets the next Decode drop that storage
// instead of keeping it at its high-water mark. Each is far above what a
// broadcast of ~1,300 bytes needs (at most 162 keys, 59 routes, 108 loads).
const (
	retainRoutes = 1 << 12 // ~400 KiB of Route values
	retainLoads  = 1 << 14 // 384 KiB
	retainKeys   = 1 << 16 // 512 KiB
	retainBounds = 1 << 16 // 256 KiB
)

// Smallest encodings, which bound what a count may claim: a route record
// is at least op, backend, arg, parts, total, nkeys, one key and nbounds;
// a load record at least backend, in-flight and prefill.
const (
	minRouteBytes = 1 + 8 + 1 + 1 + 1 + 1 + 8 + 1
	minLoadBytes  = 8 + 1 + 1 + 1 + 1
)

// headerLen is the encoded size of a header with a node name of n bytes.
func headerLen(n int) int { return 4 + n + 8 }

// uvarintLen is the encoded size of x as a uvarint.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// AppendMessage appends the encoding of m to dst and returns the extended
// slice. It writes Routes for KindRoutes, Loads for KindLoad and both for
// KindState, with no size limit (the Batcher keeps broadcasts small).
//
// Field values are written as given; Decode refuses what is not valid.
// For a whole route (Parts 0 or 1) Seq, Part, Offset and Total are not
// written: Decode returns Parts 1 and Total len(Keys). Bounds are written
// for part 0 only; Age for OpInsert and Keep for OpDemote only.
//
// It panics ("BUG: ...") when the caller broke its contract: a Node of 0
// or more than 255 bytes, or a Kind that is none of the three.
func AppendMessage(dst []byte, m *Message) []byte {
	if len(m.Node) == 0 || len(m.Node) > 255 {
		panic(fmt.Sprintf("BUG: wire: node name of %d bytes, want 1..255", len(m.Node)))
	}
	if m.Kind < KindRoutes || m.Kind > KindState {
		panic(fmt.Sprintf("BUG: wire: unknown kind %d", m.Kind))
	}
	dst = appendHeader(dst, m.Kind, m.Node, m.Sent)
	if m.Kind != KindLoad {
		dst = binary.AppendUvarint(dst, uint64(len(m.Routes)))
		for i := range m.Routes {
			dst = appendRoute(dst, &m.Routes[i])
		}
	}
	if m.Kind != KindRoutes {
		dst = binary.AppendUvarint(dst, uint64(len(m.Loads)))
		for _, l := range m.Loads {
			dst = binary.LittleEndian.AppendUint64(dst, l.Backend)
			dst = binary.AppendUvarint(dst, uint64(l.InFlight))
			dst = binary.AppendUvarint(dst, l.Prefill)
			dst = binary.AppendUvarint(dst, l.Footprint)
			dst = binary.AppendUvarint(dst, l.Pinned)
		}
	}
	return dst
}

func appendHeader(dst []byte, k Kind, node string, sent int64) []byte {
	dst = append(dst, magic, Version, byte(k), byte(len(node)))
	dst = append(dst, node...)
	return binary.LittleEndian.AppendUint64(dst, uint64(sent))
}

// routeArg is the one of Age and Keep that r's Op puts on the wire.
func routeArg(r *Route) uint32 {
	if r.Op == OpDemote {
		return r.Keep
	}
	return r.Age
}

func appendRoute(dst []byte, r *Route) []byte {
	dst = append(dst, byte(r.Op))
	dst = binary.LittleEndian.AppendUint64(dst, r.Backend)
	dst = binary.AppendUvarint(dst, uint64(routeArg(r)))
	if r.whole() {
		dst = append(dst, 1)
		dst = binary.AppendUvarint(dst, uint64(len(r.Keys)))
	} else {
		dst = binary.AppendUvarint(dst, uint64(r.Parts))
		dst = binary.AppendUvarint(dst, r.Seq)
		dst = binary.AppendUvarint(dst, uint64(r.Part))
		dst = binary.AppendUvarint(dst, uint64(r.Offset))
		dst = binary.AppendUvarint(dst, uint64(r.Total))
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Keys)))
	for _, k := range r.Keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
	}
	if r.whole() || r.Part == 0 {
		dst = binary.AppendUvarint(dst, uint64(len(r.Bounds)))
		prev := uint32(0)
		for _, b := range r.Bounds {
			dst = binary.AppendUvarint(dst, uint64(b-prev))
			prev = b
		}
	}
	return dst
}

// routeSize is len(appendRoute(nil, r)), without encoding it.
func routeSize(r *Route) int {
	n := 1 + 8 + uvarintLen(uint64(routeArg(r)))
	if r.whole() {
		n += 1 + uvarintLen(uint64(len(r.Keys)))
	} else {
		n += uvarintLen(uint64(r.Parts)) + uvarintLen(r.Seq) + uvarintLen(uint64(r.Part)) +
			uvarintLen(uint64(r.Offset)) + uvarintLen(uint64(r.Total))
	}
	n += uvarintLen(uint64(len(r.Keys))) + 8*len(r.Keys)
	if r.whole() || r.Part == 0 {
		n += uvarintLen(uint64(len(r.Bounds)))
		prev := uint32(0)
		for _, b := range r.Bounds {
			n += uvarintLen(uint64(b - prev))
			prev = b
		}
	}
	return n
}

// Decode decodes data into m, or reports why it cannot: ErrVersion for a
// newer peer's message, ErrMalformed (wrapped with the reason) for
// anything else wrong. It never panics.
//
// It reuses m's storage: m.Routes, m.Loads, and the arrays every route's
// Keys and Bounds are carved from, when their capacity allows; a Message
// reused for messages of about the same size stops allocating (only a
// Node that differs from the last one decoded into m costs a string).
// The decoded slices alias m's storage, never data: they stay valid until
// the next Decode into m, and data may be reused at once. A route's Keys
// and Bounds are capped at their length, so appending to one never writes
// over another. After an error m holds partial content: do not use it.
func Decode(data []byte, m *Message) error {
	m.reset()
	d := decoder{b: data, index: -1}
	if len(d.b) > 0 && d.b[0] != magic {
		return d.errorf("magic 0x%02x, want 0x%02x", d.b[0], magic)
	}
	if len(d.b) > 1 {
		switch v := d.b[1]; {
		case v > Version:
			return fmt.Errorf("%w %d (this node reads %d)", ErrVersion, v, Version)
		case v < 1:
			return d.errorf("version %d", v)
		}
	}
	if len(d.b) < 4 {
		return d.errorf("header truncated at %d bytes", len(d.b))
	}
	k := Kind(d.b[2])
	if k < KindRoutes || k > KindState {
		return d.errorf("kind %d unknown", k)
	}
	n := int(d.b[3])
	if n == 0 {
		return d.errorf("empty node name")
	}
	d.b = d.b[4:]
	if len(d.b) < n+8 {
		return d.errorf("header truncated: node name of %d bytes and the sent time need %d, have %d", n, n+8, len(d.b))
	}
	// The comparison converts without allocating: a Message that keeps
	// hearing from one peer keeps its Node string.
	if m.Node != string(d.b[:n]) {
		m.Node = string(d.b[:n])
	}
	m.Kind = k
	m.Sent = int64(binary.LittleEndian.Uint64(d.b[n:]))
	d.b = d.b[n+8:]

	if k != KindLoad {
		if err := d.routes(m); err != nil {
			return err
		}
	}
	if k != KindRoutes {
		if err := d.loads(m); err != nil {
			return err
		}
	}
	if len(d.b) != 0 {
		return d.errorf("%d trailing bytes", len(d.b))
	}
	return nil
}

// reset empties m for a Decode, dropping storage over its ceiling.
func (m *Message) reset() {
	if cap(m.Routes) > retainRoutes {
		m.Routes = nil
	}
	if cap(m.Loads) > retainLoads {
		m.Loads = nil
	}
	if cap(m.keys) > retainKeys {
		m.keys = nil
	}
	if cap(m.bounds) > retainBounds {
		m.bounds = nil
	}
	m.Routes = m.Routes[:0]
	m.Loads = m.Loads[:0]
	m.keys = m.keys[:0]
	m.bounds = m.bounds[:0]
}

// takeKeys returns n keys of m's key storage. rest is the number of bytes
// left in the message, at least 8n: a new array is sized for every key the
// rest could hold, so one message needs at most one new array and never
// more bytes than it has itself. Earlier routes keep the old array.
func (m *Message) takeKeys(n, rest int) []uint64 {
	if cap(m.keys)-len(m.keys) < n {
		m.keys = make([]uint64, 0, rest/8)
	}
	i := len(m.keys)
	m.keys = m.keys[:i+n]
	return m.keys[i : i+n : i+n]
}

// takeBounds returns n bounds of m's bound storage. rest (≥ n) is the
// number of bytes left in the message, each bound taking one at least:
// storage grows by doubling, never past what the rest could hold.
func (m *Message) takeBounds(n, rest int) []uint32 {
	if cap(m.bounds)-len(m.bounds) < n {
		m.bounds = make([]uint32, 0, min(max(n, 2*cap(m.bounds), 16), rest))
	}
	i := len(m.bounds)
	m.bounds = m.bounds[:i+n]
	return m.bounds[i : i+n : i+n]
}

// decoder reads a message front to back.
type decoder struct {
	b     []byte // not read yet
	what  string // "route" or "load" while a record is read, for errors
	index int    // that record's index
}

// errorf returns ErrMalformed wrapped with the reason and, inside a
// record, which one. It runs on failure only, so its boxing of args costs
// the success path nothing.
func (d *decoder) errorf(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if d.what != "" {
		return fmt.Errorf("%w: %s %d: %s", ErrMalformed, d.what, d.index, msg)
	}
	return fmt.Errorf("%w: %s", ErrMalformed, msg)
}

// uvarint reads a uvarint of at most limit, naming field if it cannot:
// truncated, over 64 bits, not in its shortest form, or over limit.
func (d *decoder) uvarint(field string, limit uint64) (uint64, error) {
	var x uint64
	for i := 0; i < len(d.b); i++ {
		c := d.b[i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			return 0, d.errorf("%s: uvarint overflows 64 bits", field)
		}
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, d.errorf("%s: uvarint not in its shortest form", field)
			}
			x |= uint64(c) << (7 * i)
			if x > limit {
				return 0, d.errorf("%s %d above %d", field, x, limit)
			}
			d.b = d.b[i+1:]
			return x, nil
		}
		x |= uint64(c&0x7f) << (7 * i)
	}
	return 0, d.errorf("%s truncated", field)
}

// count reads a count of records of at least size bytes each, refusing
// one that the bytes left after it could not hold.
func (d *decoder) count(field string, size int) (int, error) {
	n, err := d.uvarint(field, math.MaxUint64)
	if err != nil {
		return 0, err
	}
	if n > uint64(len(d.b)/size) {
		return 0, d.errorf("%s %d above %d, what %d bytes left can hold", field, n, len(d.b)/size, len(d.b))
	}
	return int(n), nil
}

// u64 reads 8 little-endian bytes.
func (d *decoder) u64(field string) (uint64, error) {
	if len(d.b) < 8 {
		return 0, d.errorf("%s truncated", field)
	}
	x := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return x, nil
}

func (d *decoder) routes(m *Message) error {
	n, err := d.count("route count", minRouteBytes)
	if err != nil {
		return err
	}
	if cap(m.Routes) < n {
		m.Routes = make([]Route, 0, n)
	}
	m.Routes = m.Routes[:n]
	d.what = "route"
	for i := range m.Routes {
		d.index = i
		if err := d.route(&m.Routes[i], m); err != nil {
			return err
		}
	}
	d.what = ""
	return nil
}

func (d *decoder) route(r *Route, m *Message) error {
	if len(d.b) == 0 {
		return d.errorf("op truncated")
	}
	op := Op(d.b[0])
	d.b = d.b[1:]
	if op != OpInsert && op != OpDemote {
		return d.errorf("op %d unknown", op)
	}
	backend, err := d.u64("backend")
	if err != nil {
		return err
	}
	arg, err := d.uvarint("arg", math.MaxUint32)
	if err != nil {
		return err
	}
	parts, err := d.uvarint("parts", MaxParts)
	if err != nil {
		return err
	}
	if parts == 0 {
		return d.errorf("parts 0")
	}
	var seq, part, offset uint64
	if parts > 1 {
		if seq, err = d.uvarint("seq", math.MaxUint64); err != nil {
			return err
		}
		if seq == 0 {
			return d.errorf("seq 0 in a route of %d parts", parts)
		}
		if part, err = d.uvarint("part", parts-1); err != nil {
			return err
		}
		if offset, err = d.uvarint("offset", MaxChain); err != nil {
			return err
		}
		if part == 0 && offset != 0 {
			return d.errorf("part 0 at offset %d", offset)
		}
	}
	total, err := d.uvarint("total", MaxChain)
	if err != nil {
		return err
	}
	nk, err := d.count("nkeys", 8)
	if err != nil {
		return err
	}
	nkeys := uint64(nk)
	switch {
	case nkeys == 0:
		return d.errorf("no keys")
	case offset+nkeys > total:
		return d.errorf("offset %d + nkeys %d above total %d", offset, nkeys, total)
	case parts == 1 && nkeys != total:
		return d.errorf("whole route of %d keys, total %d", nkeys, total)
	case op == OpDemote && uint64(arg) > total:
		return d.errorf("keep %d above total %d", arg, total)
	}
	keys := m.takeKeys(int(nkeys), len(d.b))
	for i := range keys {
		keys[i] = binary.LittleEndian.Uint64(d.b[8*i:])
	}
	d.b = d.b[8*nkeys:]

	var bounds []uint32
	if part == 0 {
		nb, err := d.uvarint("nbounds", total) // strictly ascending in (0, total]
		if err != nil {
			return err
		}
		if nb > uint64(len(d.b)) {
			return d.errorf("nbounds %d above %d, what the bytes left can hold", nb, len(d.b))
		}
		if nb > 0 {
			bounds = m.takeBounds(int(nb), len(d.b))
			prev := uint64(0)
			for i := range bounds {
				delta, err := d.uvarint("bound", total)
				if err != nil {
					return err
				}
				if delta == 0 {
					return d.errorf("bound %d (%d) not above the one before", i, prev)
				}
				prev += delta
				if prev > total {
					return d.errorf("bound %d above total %d", prev, total)
				}
				bounds[i] = uint32(prev)
			}
		}
	}
	*r = Route{
		Op:      op,
		Backend: backend,
		Keys:    keys,
		Bounds:  bounds,
		Seq:     seq,
		Part:    uint16(part),
		Parts:   uint16(parts),
		Offset:  uint32(offset),
		Total:   uint32(total),
	}
	if op == OpInsert {
		r.Age = uint32(arg)
	} else {
		r.Keep = uint32(arg)
	}
	return nil
}

func (d *decoder) loads(m *Message) error {
	n, err := d.count("load count", minLoadBytes)
	if err != nil {
		return err
	}
	if cap(m.Loads) < n {
		m.Loads = make([]Load, 0, n)
	}
	m.Loads = m.Loads[:n]
	d.what = "load"
	for i := range m.Loads {
		d.index = i
		l := &m.Loads[i]
		if l.Backend, err = d.u64("backend"); err != nil {
			return err
		}
		inFlight, err := d.uvarint("in-flight", math.MaxUint32)
		if err != nil {
			return err
		}
		l.InFlight = uint32(inFlight)
		if l.Prefill, err = d.uvarint("prefill", math.MaxUint64); err != nil {
			return err
		}
		if l.Footprint, err = d.uvarint("footprint", math.MaxUint64); err != nil {
			return err
		}
		if l.Pinned, err = d.uvarint("pinned", math.MaxUint64); err != nil {
			return err
		}
	}
	d.what = ""
	return nil
}
