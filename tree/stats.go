package tree

import "unsafe"

// EvictReason says why a node left the tree.
type EvictReason uint8

const (
	// EvictCapacityRemote: over MaxBlocks, a remote-only leaf went first.
	EvictCapacityRemote EvictReason = iota
	// EvictCapacityLocal: over MaxBlocks with no remote-only leaf left.
	EvictCapacityLocal
	// EvictEmpty: Maintain removed a leaf whose holders all expired or
	// belonged to removed backends.
	EvictEmpty
	numEvictReasons
)

func (r EvictReason) String() string {
	return [...]string{"capacity_remote", "capacity_local", "empty"}[r]
}

// DropReason says why a holder left a node.
type DropReason uint8

const (
	// DropCap: the node had MaxHolders visible holders and a new one came.
	DropCap DropReason = iota
	// DropExpired: not refreshed within the TTL.
	DropExpired
	// DropBackendRemoved: its backend was removed (RemoveBackend).
	DropBackendRemoved
	// DropDemoted: Demote removed it (the engine reported holding less,
	// or a pending route's attempt failed).
	DropDemoted
	numDropReasons
)

func (r DropReason) String() string {
	return [...]string{"cap", "expired", "backend_removed", "demoted"}[r]
}

// Stats is a snapshot of the tree's size and counters.
type Stats struct {
	Nodes  int // stored nodes, root excluded
	Blocks int // stored blocks (sum of edge lengths)
	// Holder entries by origin, including invisible ones (expired, removed
	// backend) that Maintain has not reached yet.
	HoldersLocal, HoldersRemote int
	// NodeEvictions and BlockEvictions count removed nodes and their blocks.
	NodeEvictions  [numEvictReasons]uint64
	BlockEvictions [numEvictReasons]uint64
	// HolderDrops counts holders removed from nodes that stayed.
	HolderDrops [numDropReasons]uint64
	// Collisions counts walks stopped by a 64-bit key collision.
	Collisions uint64
	// BytesInUse estimates the tree's heap: slabs at capacity, edge keys and
	// about 24 bytes per index entry (Go's swiss map at 7/8 load). The
	// benchmark BenchmarkMemoryPerBlock measures the real figure.
	BytesInUse int
}

// Stats returns a snapshot. Loop only.
func (t *Tree) Stats() Stats {
	s := t.stats
	s.Blocks = t.blocks
	s.BytesInUse = cap(t.nodes)*int(unsafe.Sizeof(node{})) +
		cap(t.holders)*int(unsafe.Sizeof(holder{})) +
		cap(t.free)*4 + t.blocks*8 + len(t.index)*24
	return s
}
