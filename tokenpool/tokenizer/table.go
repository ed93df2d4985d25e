package tokenizer

import "math/bits"

// table is an open-addressing hash table from uint64 keys to two int32s,
// with linear probing at most half full. It replaces Go maps for the two
// lookups that dominate Encode (short tokens and merge pairs): one slot is
// 16 bytes and a hit usually costs a single cache line, where the swiss
// map's group probing showed as the top entry in pprof. Immutable after
// building; safe for concurrent reads.
type table struct {
	slots []slot
	shift uint
}

type slot struct {
	key  uint64 // stored key + 1; 0 marks an empty slot
	a, b int32
}

func newTable(n int) table {
	size := 1 << bits.Len(uint(2*n+1))
	return table{slots: make([]slot, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
}

func (t *table) index(key uint64) uint64 { return (key * 0x9e3779b97f4a7c15) >> t.shift }

// put stores key (below 2^64-1) unless it is present; it reports whether it
// stored.
func (t *table) put(key uint64, a, b int32) bool {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == 0 {
			*s = slot{key: key + 1, a: a, b: b}
			return true
		}
		if s.key == key+1 {
			return false
		}
	}
}

func (t *table) get(key uint64) (int32, int32, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key+1 {
			return s.a, s.b, true
		}
		if s.key == 0 {
			return 0, 0, false
		}
	}
}
