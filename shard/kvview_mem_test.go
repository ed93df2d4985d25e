package shard

import (
	"runtime"
	"testing"

	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// TestViewMemoryPerBlock measures the view's bytes per mapped block (32-
// byte hashes, each with a parent), behind ViewConfig.MaxBlocks's comment.
func TestViewMemoryPerBlock(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ≈ 60 MiB")
	}
	const n = 1 << 18 // DefaultViewConfig().MaxBlocks
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := map[kvevents.Hash]viewBlock{}
	var prev kvevents.Hash
	for i := range n {
		var b [32]byte
		b[0], b[1], b[2], b[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
		h, _ := kvevents.BytesHash(b[:])
		m[h] = viewBlock{key: uint64(i), parent: prev, hasParent: i > 0}
		prev = h
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f heap bytes per mapped block (%d blocks)", per, len(m))
	if per > 300 {
		t.Errorf("%.0f bytes per block, want ≤ 300 (ViewConfig.MaxBlocks's comment)", per)
	}
	runtime.KeepAlive(m)
}
