package tree

// Recent walks the routes the tree knows, most recently used first, for a
// snapshot a joining peer router receives (stage 10's push-pull): for each
// visible holder, the chain from the root to the deepest node where that
// backend holds it, with the node ends along the way as boundaries. It
// calls fn once per (chain, backend) and stops after limit calls, after
// visiting maxVisit nodes (children inspected count as visits), or when fn
// returns false. It returns how many routes it reported.
//
// Nodes with a local holder come first (this router's own traffic), then
// remote-only ones, each list from its most recent end; parents are more
// recent than their children (Match and Insert touch the whole path), so a
// backend's prefix is reported before the deeper routes that extend it
// would make it redundant: a holder is reported only on a node where no
// child carries the same backend, because inserting the deeper chain
// teaches the prefix too.
//
// A receiver should insert the routes in reverse order, oldest first: a
// node holds at most MaxHolders, and an insert into a full node replaces
// the least recently used holder with the new one, however old.
//
// keys and bounds are the tree's scratch, valid only during the call; fn
// must copy what it keeps and must not call the tree. Recent does not
// change recency or any holder. Loop only.
func (t *Tree) Recent(now int64, limit, maxVisit int, fn func(keys []uint64, bounds []int, backend int, o Origin, used int64) bool) int {
	defer t.trimRecent()
	reported, visits := 0, 0
	for _, c := range [...]uint8{listLocal, listRemote} {
		for id := t.lists[c].head; id != 0; id = t.nodes[id].lruNext {
			if reported >= limit || visits >= maxVisit {
				return reported
			}
			visits++
			var path bool // t.recentKeys holds id's chain
			for _, h := range t.holdersOf(id) {
				if !t.valid(&h, now) {
					continue
				}
				deeper, seen := t.childHolds(id, h.backend, now)
				visits += seen
				if deeper {
					continue
				}
				if !path {
					t.pathOf(id)
					path = true
				}
				reported++
				if !fn(t.recentKeys, t.recentBounds, int(h.backend), h.origin(), h.lastUsed()) || reported >= limit {
					return reported
				}
			}
		}
	}
	return reported
}

// childHolds reports whether a child of id has a visible holder for b, and
// how many children it looked at.
func (t *Tree) childHolds(id nodeID, b uint16, now int64) (bool, int) {
	seen := 0
	for c := t.nodes[id].child; c != 0; c = t.nodes[c].next {
		seen++
		for _, h := range t.holdersOf(c) {
			if h.backend == b && t.valid(&h, now) {
				return true, seen
			}
		}
	}
	return false, seen
}

// pathOf fills t.recentKeys with the chain from the root to the end of
// id's edge and t.recentBounds with the ends of the nodes above id.
func (t *Tree) pathOf(id nodeID) {
	stack := t.recentPath[:0]
	for n := id; n != root; n = t.nodes[n].parent {
		stack = append(stack, n)
	}
	keys, bounds := t.recentKeys[:0], t.recentBounds[:0]
	for i := len(stack) - 1; i >= 0; i-- {
		keys = append(keys, t.nodes[stack[i]].edge()...)
		if i > 0 {
			bounds = append(bounds, len(keys))
		}
	}
	t.recentPath, t.recentKeys, t.recentBounds = stack, keys, bounds
}

// recentCeiling bounds the chain scratch Recent keeps between calls: 64K
// keys (512 KiB), a 1M-token prompt at block size 16.
const recentCeiling = 1 << 16

func (t *Tree) trimRecent() {
	if cap(t.recentKeys) > recentCeiling {
		t.recentPath, t.recentKeys, t.recentBounds = nil, nil, nil
	}
}
