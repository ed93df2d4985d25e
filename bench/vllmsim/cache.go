package vllmsim

// kvCache is the simulated KV cache: blocks keyed by chained hash, pinned
// while a running request uses them, kept on an LRU free list once free
// (still cached), evicted from the list's head when room is needed.
// Owned by the scheduler goroutine.
type kvCache struct {
	capacity int // blocks
	used     int // blocks held: keyed ones plus anonymous reservations
	blocks   map[uint64]*block
	// free list: keyed blocks with no user, computed; head = least recent.
	head, tail *block
	free       int
	evicted    uint64
	ev         *kvEvents // nil: no events published
}

type block struct {
	key        uint64
	refs       int
	ready      bool // computed: a later prompt may hit it
	prev, next *block
}

func newKVCache(capacity int) *kvCache {
	return &kvCache{capacity: capacity, blocks: make(map[uint64]*block)}
}

// prefix is how many leading keys are cached (present and computed).
func (c *kvCache) prefix(keys []uint64) int {
	for i, k := range keys {
		if b := c.blocks[k]; b == nil || !b.ready {
			return i
		}
	}
	return len(keys)
}

// reserve pins keys (adding the missing ones) and anon more blocks, evicting
// free blocks as needed; false, with nothing changed, if they cannot fit.
func (c *kvCache) reserve(keys []uint64, anon int) bool {
	need := anon
	for _, k := range keys {
		if c.blocks[k] == nil {
			need++
		}
	}
	// Free-list blocks this request pins itself are not evictable for it.
	mine := 0
	for _, k := range keys {
		if b := c.blocks[k]; b != nil && b.refs == 0 {
			mine++
		}
	}
	if c.capacity-c.used+c.free-mine < need {
		return false
	}
	for _, k := range keys { // pin first: eviction must not take them
		if b := c.blocks[k]; b != nil {
			if b.refs == 0 {
				c.unlink(b)
			}
			b.refs++
		}
	}
	for c.capacity-c.used < need {
		c.evictOne()
	}
	for _, k := range keys {
		if c.blocks[k] == nil {
			c.blocks[k] = &block{key: k, refs: 1}
			c.used++
		}
	}
	c.used += anon
	return true
}

// computed marks keys[from:to] of a prompt as computed: later prompts
// hit them. Each run of blocks that were not computed before is a
// BlockStored event (ids: the prompt's token ids; lora: its adapter;
// salt: its cache_salt).
func (c *kvCache) computed(keys []uint64, from, to int, ids []int32, lora, salt string) {
	run := -1 // start of the current run of newly computed blocks
	for i := from; i < to; i++ {
		b := c.blocks[keys[i]]
		if b != nil && !b.ready {
			b.ready = true
			if run < 0 {
				run = i
			}
			continue
		}
		if run >= 0 {
			c.ev.stored(keys, run, i, ids, lora, salt)
			run = -1
		}
	}
	if run >= 0 {
		c.ev.stored(keys, run, to, ids, lora, salt)
	}
}

// clear drops every block: POST /reset_prefix_cache. The caller checks
// that nothing runs (no block is pinned).
func (c *kvCache) clear() {
	c.blocks = make(map[uint64]*block)
	c.head, c.tail = nil, nil
	c.used, c.free = 0, 0
	c.ev.cleared()
}

// release unpins what reserve pinned: computed blocks nobody uses go to
// the free list's tail (most recent first in line to stay), others are
// dropped.
func (c *kvCache) release(keys []uint64, anon int) {
	c.used -= anon
	for i := len(keys) - 1; i >= 0; i-- { // the prefix's head ends most recent
		b := c.blocks[keys[i]]
		if b == nil || b.refs == 0 {
			continue // a key repeated in one prompt: released already
		}
		if b.refs--; b.refs > 0 {
			continue
		}
		if b.ready {
			c.pushTail(b)
		} else {
			delete(c.blocks, b.key)
			c.used--
		}
	}
}

// usage is the fraction of blocks in use (not free), like vLLM's.
func (c *kvCache) usage() float64 {
	return float64(c.used-c.free) / float64(c.capacity)
}

func (c *kvCache) evictOne() {
	b := c.head
	if b == nil {
		panic("BUG: vllmsim: eviction with an empty free list")
	}
	c.unlink(b)
	delete(c.blocks, b.key)
	c.used--
	c.evicted++
	c.ev.removed(b.key)
}

func (c *kvCache) pushTail(b *block) {
	b.prev, b.next = c.tail, nil
	if c.tail != nil {
		c.tail.next = b
	} else {
		c.head = b
	}
	c.tail = b
	c.free++
}

func (c *kvCache) unlink(b *block) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		c.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = nil, nil
	c.free--
}
