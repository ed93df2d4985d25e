package tokenpool

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestSegmentCacheLRU(t *testing.T) {
	t.Parallel()
	// Room for exactly three entries of 1 byte and 1 id.
	c := NewSegmentCache(3*cost("a", []int32{1}), 100)
	c.Put("a", []int32{1})
	c.Put("b", []int32{2})
	c.Put("c", []int32{3})
	if ids, ok := c.Get("a"); !ok || !slices.Equal(ids, []int32{1}) {
		t.Fatalf("Get(a) = %v, %v", ids, ok)
	}
	c.Put("d", []int32{4}) // b is the least recently used
	if _, ok := c.Get("b"); ok {
		t.Fatal("b survived eviction")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.Get(k); !ok {
			t.Fatalf("%s evicted, want b evicted", k)
		}
	}
	s := c.Stats()
	if s.Hits != 4 || s.Misses != 1 || s.Evictions != 1 || s.Entries != 3 || s.Bytes != 3*cost("a", []int32{1}) {
		t.Fatalf("Stats = %+v", s)
	}
}

func TestSegmentCacheBounds(t *testing.T) {
	t.Parallel()
	c := NewSegmentCache(1000, 10)
	c.Put(strings.Repeat("x", 11), []int32{1})
	c.Put("short", make([]int32, 300)) // entry alone over 1000 bytes
	if s := c.Stats(); s.TooLarge != 2 || s.Entries != 0 {
		t.Fatalf("Stats = %+v, want two refusals and no entries", s)
	}
	// The cache copies what it keeps.
	buf := []byte("hello")
	ids := []int32{1, 2}
	c.Put(string(buf[:]), ids)
	buf[0], ids[0] = 'j', 9
	if got, ok := c.Get("hello"); !ok || !slices.Equal(got, []int32{1, 2}) {
		t.Fatalf("Get(hello) = %v, %v: the cache aliases its inputs", got, ok)
	}
}

// TestSegmentCacheModel compares random operations with a naive LRU model
// and checks the byte bound after every step.
func TestSegmentCacheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	const limit = 2000
	c := NewSegmentCache(limit, 64)
	var order []string // model: least recently used first
	model := map[string][]int32{}
	size := func() (n int) {
		for k, v := range model {
			n += cost(k, v)
		}
		return n
	}
	touch := func(k string) {
		order = slices.DeleteFunc(order, func(s string) bool { return s == k })
		order = append(order, k)
	}
	for i := 0; i < 20000; i++ {
		k := strconv.Itoa(r.IntN(60))
		if r.IntN(2) == 0 {
			got, ok := c.Get(k)
			want, wok := model[k]
			if ok != wok || !slices.Equal(got, want) {
				t.Fatalf("op %d: Get(%s) = %v, %v; model %v, %v", i, k, got, ok, want, wok)
			}
			if ok {
				touch(k)
			}
			continue
		}
		ids := make([]int32, r.IntN(20))
		for j := range ids {
			ids[j] = int32(len(k) + j)
		}
		if _, ok := model[k]; ok {
			ids = model[k] // same text, same ids
		} else {
			model[k] = ids
			for size() > limit {
				delete(model, order[0])
				order = order[1:]
			}
		}
		c.Put(k, ids)
		touch(k)
		if s := c.Stats(); s.Bytes > limit || s.Bytes != size() || s.Entries != len(model) {
			t.Fatalf("op %d: Stats %+v, model %d entries, %d bytes", i, s, len(model), size())
		}
	}
}

func BenchmarkSegmentCacheHit4K(b *testing.B) {
	c := NewSegmentCache(DefaultCacheBytes, DefaultMaxSegmentBytes)
	seg := strings.Repeat("You are a helpful assistant. ", 142)[:4096]
	c.Put(seg, make([]int32, 900))
	b.SetBytes(int64(len(seg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Get(seg); !ok {
			b.Fatal("miss")
		}
	}
}
