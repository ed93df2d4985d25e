package tokenpool

import "strings"

// Segment cache defaults (the tokenizer-pool issue).
const (
	// DefaultCacheBytes bounds one shard's segment cache.
	DefaultCacheBytes = 64 << 20
	// DefaultMaxSegmentBytes: longer segments are not cached; a 256 KiB
	// segment is rare (a pasted document) and would evict many system
	// prompts for one hit.
	DefaultMaxSegmentBytes = 256 << 10
)

// entryOverhead approximates the bytes an entry costs beyond its text and
// ids: the entry struct (key and ids headers, links) and its map slot.
const entryOverhead = 96

// SegmentCache maps segment text to its token ids, bounded in bytes
// (text + 4 bytes per id + entryOverhead per entry), least recently used
// first out. Loop only.
type SegmentCache struct {
	maxBytes, maxSegment int
	bytes                int
	m                    map[string]*entry
	head, tail           *entry // head is the most recently used
	stats                CacheStats
}

type entry struct {
	key string
	ids []int32
	// work is 1 + the text's cost under the token budget (budget.go),
	// or 0 before a request over TokenBudget/32 bytes has counted it.
	work       int
	prev, next *entry
}

// CacheStats counts what a SegmentCache did.
type CacheStats struct {
	Hits, Misses uint64
	// Evictions counts entries dropped to stay within the byte bound.
	Evictions uint64
	// TooLarge counts Put calls refused for a segment over the size limit.
	TooLarge uint64
	Entries  int
	Bytes    int
}

// NewSegmentCache returns a cache of at most maxBytes that refuses segments
// longer than maxSegment bytes. It panics on a non-positive bound: configs
// are validated before this point.
func NewSegmentCache(maxBytes, maxSegment int) *SegmentCache {
	if maxBytes <= 0 || maxSegment <= 0 {
		panic("BUG: tokenpool.NewSegmentCache with a non-positive bound")
	}
	return &SegmentCache{maxBytes: maxBytes, maxSegment: maxSegment, m: make(map[string]*entry)}
}

// Get returns the ids of text and makes it the most recently used. The
// slice belongs to the cache: append it to your own buffer, never modify
// it. Loop only.
func (c *SegmentCache) Get(text string) ([]int32, bool) {
	e, ok := c.m[text]
	if !ok {
		c.stats.Misses++
		return nil, false
	}
	c.stats.Hits++
	c.moveToFront(e)
	return e.ids, true
}

// peek returns text's entry, or nil, without counting or reordering (the
// token budget's pre-pass; the lookup that follows counts). Loop only.
func (c *SegmentCache) peek(text string) *entry { return c.m[text] }

// Put stores copies of text and ids, evicting least recently used entries
// to make room. A segment over the size limit, or one whose entry alone
// exceeds the byte bound, is not stored (counted as TooLarge). Loop only.
func (c *SegmentCache) Put(text string, ids []int32) { c.put(text, ids, true) }

// put is Put; clone false: text is the cache's to keep as is (one the pool
// cloned before sending it to a worker). Loop only.
func (c *SegmentCache) put(text string, ids []int32, clone bool) {
	size := cost(text, ids)
	if len(text) > c.maxSegment || size > c.maxBytes {
		c.stats.TooLarge++
		return
	}
	if e, ok := c.m[text]; ok {
		// Same text, same tokenizer: the ids cannot differ. Refresh.
		c.moveToFront(e)
		return
	}
	for c.bytes+size > c.maxBytes {
		c.evict()
	}
	// strings.Clone: text may point into a request buffer that the loop
	// reuses; the cache must not pin or alias it.
	if clone {
		text = strings.Clone(text)
	}
	e := &entry{key: text, ids: append([]int32(nil), ids...)}
	c.m[e.key] = e
	c.bytes += size
	c.pushFront(e)
}

func cost(text string, ids []int32) int { return len(text) + 4*len(ids) + entryOverhead }

// Stats returns a snapshot of the counters. Loop only.
func (c *SegmentCache) Stats() CacheStats {
	s := c.stats
	s.Entries, s.Bytes = len(c.m), c.bytes
	return s
}

func (c *SegmentCache) evict() {
	e := c.tail
	if e == nil {
		panic("BUG: segment cache over its bound with no entries")
	}
	c.unlink(e)
	delete(c.m, e.key)
	c.bytes -= cost(e.key, e.ids)
	c.stats.Evictions++
}

func (c *SegmentCache) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *SegmentCache) pushFront(e *entry) {
	e.next = c.head
	if c.head != nil {
		c.head.prev = e
	} else {
		c.tail = e
	}
	c.head = e
}

func (c *SegmentCache) moveToFront(e *entry) {
	if c.head == e {
		return
	}
	c.unlink(e)
	c.pushFront(e)
}
