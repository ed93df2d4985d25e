package wire

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"
)

// A Batcher packs route changes into KindRoutes messages no larger than a
// byte limit (memberlist's room for one broadcast in a UDP packet).
//
// Routes go into the pending message in the order they are added. One
// that does not fit makes the pending message go out first; one that does
// not fit even an empty message is split into parts that share a Seq,
// each part alone in a message filled up to the limit. Every message
// decodes with Decode and is at most the limit.
//
// What is dropped, and why (each a caller's data that cannot travel):
//   - a route with no keys: there is nothing to share;
//   - blocks past MaxChain, and past what MaxParts parts carry at this
//     limit (at a limit of 1,300 bytes, about 630,000 blocks): the tail of
//     the chain; Keep is lowered to the blocks that remain;
//   - bounds that are not strictly ascending in (0, blocks]: skipped;
//   - bounds of a split route beyond what fits in part 0 with at least one
//     key: the last ones, so the first message ends are kept.
//
// # Concurrency
//
// A Batcher is owned by one goroutine; it has no locks.
type Batcher struct {
	node  string
	limit int
	head  int    // header bytes: headerLen(len(node))
	seq   uint64 // the last Seq given to a split route

	body []byte // the pending message's route records, at most limit bytes
	n    int    // routes in body

	scratch []uint32 // bounds kept of a route whose bounds are not all valid
}

// NewBatcher returns a Batcher of messages from node, each at most limit
// bytes. It panics ("BUG: ...") when node is empty or over 255 bytes, or
// when limit is below 256+len(node): the limit is a constant of the
// caller's (memberlist's packet size less its overhead), and under that
// floor a part could carry too few keys for a chain to travel at all.
func NewBatcher(node string, limit int) *Batcher {
	if len(node) == 0 || len(node) > 255 {
		panic(fmt.Sprintf("BUG: wire: NewBatcher: node name of %d bytes, want 1..255", len(node)))
	}
	if limit < 256+len(node) {
		panic(fmt.Sprintf("BUG: wire: NewBatcher: limit %d below 256 + len(node) = %d", limit, 256+len(node)))
	}
	return &Batcher{
		node:  node,
		limit: limit,
		head:  headerLen(len(node)),
		// A random start: a router that restarts under the same name does
		// not reuse the Seqs of its previous run, whose parts receivers
		// may still hold.
		seq: rand.Uint64(),
	}
}

// Len returns the number of routes in the pending message.
func (b *Batcher) Len() int { return b.n }

// Add adds the whole route r (Parts 0 or 1; Keys is the whole chain) to the
// pending message, calling emit with each message that is complete: the
// pending one when r does not fit beside it, and every part of r when r
// must be split. emit gets a freshly allocated slice it may keep; the
// header's Sent is now. Seq, Part, Offset and Total of r are ignored (the
// Batcher sets them), and Add keeps none of r's slices.
//
// It panics ("BUG: ...") when r is a part (Parts > 1) or its Op is
// neither OpInsert nor OpDemote.
func (b *Batcher) Add(r Route, now time.Time, emit func(msg []byte)) {
	if r.Parts > 1 {
		panic(fmt.Sprintf("BUG: wire: Batcher.Add takes whole routes, got part %d of %d", r.Part, r.Parts))
	}
	if r.Op != OpInsert && r.Op != OpDemote {
		panic(fmt.Sprintf("BUG: wire: Batcher.Add: op %d unknown", r.Op))
	}
	if len(r.Keys) == 0 {
		return // nothing to share: a route names at least one block
	}
	w := Route{Op: r.Op, Backend: r.Backend, Keys: r.Keys, Parts: 1}
	if len(w.Keys) > MaxChain {
		w.Keys = w.Keys[:MaxChain]
	}
	w.Total = uint32(len(w.Keys))
	if w.Op == OpInsert {
		w.Age = r.Age
	} else {
		w.Keep = min(r.Keep, w.Total)
	}
	w.Bounds = b.validBounds(r.Bounds, w.Total)

	size := routeSize(&w)
	if b.head+uvarintLen(uint64(b.n+1))+len(b.body)+size <= b.limit {
		b.append(&w)
		return
	}
	b.Flush(now, emit)
	if b.head+1+size <= b.limit {
		b.append(&w)
		return
	}
	b.split(&w, now, emit)
}

// Flush emits the pending message, if it holds a route, with Sent now.
func (b *Batcher) Flush(now time.Time, emit func(msg []byte)) {
	if b.n == 0 {
		return
	}
	msg := make([]byte, 0, b.head+uvarintLen(uint64(b.n))+len(b.body))
	msg = appendHeader(msg, KindRoutes, b.node, now.UnixMilli())
	msg = binary.AppendUvarint(msg, uint64(b.n))
	msg = append(msg, b.body...)
	b.body = b.body[:0]
	b.n = 0
	emit(msg)
}

func (b *Batcher) append(w *Route) {
	b.body = appendRoute(b.body, w)
	b.n++
}

// validBounds returns bounds if they are strictly ascending in (0, total],
// else those that are, in b's scratch (valid until the next Add).
func (b *Batcher) validBounds(bounds []uint32, total uint32) []uint32 {
	prev := uint32(0)
	for i, x := range bounds {
		if x <= prev || x > total {
			return b.keptBounds(bounds, i, total)
		}
		prev = x
	}
	return bounds
}

// keptBounds copies the valid bounds, bounds[:ok] being valid already.
func (b *Batcher) keptBounds(bounds []uint32, ok int, total uint32) []uint32 {
	const retain = 1 << 12 // drop a scratch grown by a huge route
	if cap(b.scratch) > retain {
		b.scratch = nil
	}
	kept := append(b.scratch[:0], bounds[:ok]...)
	prev := uint32(0)
	if ok > 0 {
		prev = bounds[ok-1]
	}
	for _, x := range bounds[ok:] {
		if x > prev && x <= total {
			kept = append(kept, x)
			prev = x
		}
	}
	b.scratch = kept
	return kept
}

// keysFit returns the most keys whose nkeys uvarint and bytes fit in avail.
func keysFit(avail int) int {
	for l := 1; l <= binary.MaxVarintLen64; l++ {
		if avail < l {
			return 0
		}
		if k := (avail - l) / 8; uvarintLen(uint64(k)) <= l {
			return k
		}
	}
	return 0
}

// boundsFit returns how many leading bounds fit, with their count, in
// avail bytes, and their encoded size without the count.
func boundsFit(bounds []uint32, avail int) (n, size int) {
	prev := uint32(0)
	for i, x := range bounds {
		s := uvarintLen(uint64(x - prev))
		if uvarintLen(uint64(i+1))+size+s > avail {
			return i, size
		}
		size += s
		prev = x
	}
	return len(bounds), size
}

// split emits w, which does not fit an empty message, as parts, each in a
// message of its own. Part sizes are planned with upper bounds on the
// fields whose values truncation may still lower (parts, total, Keep), so
// the plan holds for the route as it is finally sent.
func (b *Batcher) split(w *Route, now time.Time, emit func(msg []byte)) {
	room := b.limit - b.head - 1 // one record per message: its count is 1 byte
	seq := b.seq + 1
	if seq == 0 {
		seq = 1 // 0 means a whole route
	}
	// op, backend, arg, parts, seq and total: the same in every part.
	fixed := 1 + 8 + uvarintLen(uint64(routeArg(w))) + uvarintLen(MaxParts) + uvarintLen(seq) + uvarintLen(uint64(w.Total))
	// Part 0 (index and offset 0, one byte each) carries the bounds, as
	// many as leave room for its nkeys and one key.
	avail0 := room - fixed - 2
	nb, bsize := boundsFit(w.Bounds, avail0-uvarintLen(MaxChain)-8)
	avail0 -= uvarintLen(uint64(nb)) + bsize
	k0 := min(keysFit(avail0), len(w.Keys))
	partKeys := func(part, offset int) int {
		return keysFit(room - fixed - uvarintLen(uint64(part)) - uvarintLen(uint64(offset)))
	}

	parts, covered := 1, k0
	for covered < len(w.Keys) && parts < MaxParts {
		covered += min(partKeys(parts, covered), len(w.Keys)-covered)
		parts++
	}
	bounds := w.Bounds[:nb]
	if covered < len(w.Keys) { // MaxParts parts cannot carry it all: drop the tail
		w.Keys = w.Keys[:covered]
		w.Total = uint32(covered)
		w.Keep = min(w.Keep, w.Total)
		for len(bounds) > 0 && bounds[len(bounds)-1] > w.Total {
			bounds = bounds[:len(bounds)-1]
		}
	}
	if parts == 1 {
		// The whole chain fits part 0 once bounds are dropped. Not reached
		// at the limits NewBatcher accepts (a route's bounds take fewer
		// bytes than its keys), but a plan of one part must still yield a
		// valid message: a whole route, smaller than that part.
		w.Bounds = bounds
		b.append(w)
		return
	}
	b.seq = seq

	p := Route{
		Op: w.Op, Backend: w.Backend, Age: w.Age, Keep: w.Keep,
		Seq: seq, Parts: uint16(parts), Total: w.Total, Bounds: bounds,
	}
	offset := 0
	for i := range parts {
		k := k0
		if i > 0 {
			k = min(partKeys(i, offset), len(w.Keys)-offset)
		}
		p.Part, p.Offset, p.Keys = uint16(i), uint32(offset), w.Keys[offset:offset+k]
		msg := make([]byte, 0, b.head+1+routeSize(&p))
		msg = appendHeader(msg, KindRoutes, b.node, now.UnixMilli())
		msg = append(msg, 1)
		msg = appendRoute(msg, &p)
		if len(msg) > b.limit {
			panic(fmt.Sprintf("BUG: wire: part %d of %d is %d bytes, limit %d", i, parts, len(msg), b.limit))
		}
		emit(msg)
		offset += k
		p.Bounds = nil
	}
}

// WholeRoutes prepares routes for a KindState message of at most about
// maxBytes of route records: each made a whole route (Parts 1, Total its
// keys, chains cut at MaxChain), kept in order until the next would not
// fit (a record's size is bounded from above). It returns a new slice;
// the routes' keys and bounds are shared.
func WholeRoutes(routes []Route, maxBytes int) []Route {
	kept := make([]Route, 0, len(routes))
	for _, r := range routes {
		if len(r.Keys) > MaxChain {
			r.Keys = r.Keys[:MaxChain]
		}
		r.Parts, r.Part, r.Seq, r.Offset, r.Total = 1, 0, 0, 0, uint32(len(r.Keys))
		if maxBytes -= 40 + 8*len(r.Keys) + 5*len(r.Bounds); maxBytes < 0 {
			break
		}
		kept = append(kept, r)
	}
	return kept
}
