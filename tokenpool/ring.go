package tokenpool

import "sync/atomic"

// ring is a bounded single-producer single-consumer queue of jobs. Its one
// producer is a shard's event loop (Shard.Tokenize), its one consumer a
// worker; a worker owns one ring per producer shard, so no ring ever has two
// writers and neither side ever waits: push fails when the ring is full, pop
// when it is empty.
//
// Synchronization: the producer writes a slot, then publishes it by storing
// tail; the consumer loads tail, reads the slot, clears it (so a popped job
// is not pinned), then frees it by storing head. Go's atomics are
// sequentially consistent, which orders the plain slot accesses.
type ring struct {
	head  atomic.Uint64 // next slot to pop; written by the consumer only
	_     [56]byte      // head and tail on separate cache lines
	tail  atomic.Uint64 // next slot to fill; written by the producer only
	_     [56]byte
	mask  uint64
	slots []*job
}

func newRing(size int) *ring {
	if size <= 0 || size&(size-1) != 0 {
		panic("BUG: ring size is not a power of two")
	}
	return &ring{mask: uint64(size - 1), slots: make([]*job, size)}
}

// push appends j, or reports false if the ring is full. Producer only.
func (r *ring) push(j *job) bool {
	t := r.tail.Load()
	if t-r.head.Load() > r.mask {
		return false
	}
	r.slots[t&r.mask] = j
	r.tail.Store(t + 1)
	return true
}

// pop removes the oldest job, or returns nil if the ring is empty.
// Consumer only.
func (r *ring) pop() *job {
	h := r.head.Load()
	if h == r.tail.Load() {
		return nil
	}
	j := r.slots[h&r.mask]
	r.slots[h&r.mask] = nil
	r.head.Store(h + 1)
	return j
}
