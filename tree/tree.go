package tree

import (
	"fmt"
	"slices"
	"unsafe"
)

// Origin says how the tree learned a holder.
type Origin uint8

const (
	// Local holders were learned from this router's own traffic.
	Local Origin = 1
	// Remote holders were learned from a peer router. They are evicted
	// before local ones: a peer's guess is worth less than what we saw.
	Remote Origin = 2
	// Engine holders were reported by the backend's engine itself (its
	// KV-cache events: issue 31, the exact view). Only Insert takes it:
	// the holder is a Local one that is also confirmed, and every other
	// API (Hit.Origin, Recent, Stats, the LRU lists) reports it as Local,
	// so what is gossiped and persisted is unchanged and a restored or
	// received route is a guess again. Match reports the confirmed depth
	// apart (Hit.Confirmed). Routing's inserts (Local or Remote) on a
	// confirmed holder keep it confirmed and refresh its time; Demote,
	// RemoveBackend, expiry and a holder's replacement drop it.
	Engine Origin = 3
)

func (o Origin) String() string {
	switch o {
	case Local:
		return "local"
	case Remote:
		return "remote"
	case Engine:
		return "engine"
	}
	return fmt.Sprintf("origin(%d)", uint8(o))
}

// kept is the origin a holder inserted with o keeps: Engine holders are
// Local ones with the confirmed bit.
func (o Origin) kept() Origin {
	if o == Engine {
		return Local
	}
	return o
}

// Hit reports that a backend holds the first Blocks blocks of a matched
// chain. Origin is the origin of its deepest holder entry on the path
// (Local or Remote: an Engine holder reports Local).
type Hit struct {
	Backend int
	Blocks  int
	Origin  Origin
	// Used is when an insert last refreshed the holder at Blocks (the
	// tree's clock, as Match's now).
	Used int64
	// Confirmed is the deepest block count at which the backend's holder
	// is confirmed by its engine (inserted with origin Engine, or kept
	// confirmed since), 0 if none; at most Blocks.
	Confirmed int
}

// nodeID indexes Tree.nodes. 0 is the root, which is nobody's child,
// sibling or LRU entry, so 0 also means "none" in those links.
type nodeID uint32

const root nodeID = 0

// LRU list a node is on.
const (
	listNone uint8 = iota
	listLocal
	listRemote
)

// node is 40 bytes and holder 12: BenchmarkMemoryPerBlock/node-per-block
// (the worst shape, every node a single block) measured 188 bytes per block
// with a slice header for the edge and 16-byte holders, over the 160-byte
// budget; packing brought it under.
type node struct {
	// The edge, as a pointer and a length (a slice header costs 8 bytes
	// more); see edge. Its first key is this node's entry in Tree.index.
	kp *uint64
	kn uint32
	// Tree links: parent, first child, next and previous sibling.
	parent, child, next, prev nodeID
	// LRU links within lists[list]; toward head is more recent.
	lruPrev, lruNext nodeID
	nHolders         uint8
	list             uint8
	live             bool
}

// holder packs last-used time (caller's clock, nanoseconds, never negative),
// origin and the engine's confirmation into two 32-bit words, so that it
// takes 12 bytes. The time keeps 62 bits: 146 years of nanoseconds.
type holder struct {
	lo, hi  uint32 // hi's top bit: remote origin; the next: confirmed; the rest: last-used time
	backend uint16
	epoch   uint16 // Tree.epochs[backend] when learned; stale means removed
}

const (
	remoteBit    = 1 << 31
	confirmedBit = 1 << 30
	flagBits     = remoteBit | confirmedBit
	// maxTime is the latest time a holder can store.
	maxTime = 1<<62 - 1
)

func (h *holder) lastUsed() int64 {
	return int64(uint64(h.hi&^flagBits)<<32 | uint64(h.lo))
}

func (h *holder) origin() Origin {
	if h.hi&remoteBit != 0 {
		return Remote
	}
	return Local
}

// confirmed: the engine reported the blocks (origin Engine); always a
// Local holder.
func (h *holder) confirmed() bool { return h.hi&confirmedBit != 0 }

// set stores now and origin o (Local or Remote), confirmed by the engine
// when conf (Local only).
func (h *holder) set(now int64, o Origin, conf bool) {
	h.lo, h.hi = uint32(now), uint32(uint64(now)>>32)&^flagBits
	switch {
	case o == Remote:
		h.hi |= remoteBit
	case conf:
		h.hi |= confirmedBit
	}
}

func (n *node) edge() []uint64 { return unsafe.Slice(n.kp, n.kn) }

func (n *node) setEdge(keys []uint64) {
	n.kp, n.kn = unsafe.SliceData(keys), uint32(len(keys))
}

type lruList struct{ head, tail nodeID }

// Tree is the route table of one shard. See the package doc; loop only.
type Tree struct {
	cfg Config
	ttl int64
	h   int // cfg.MaxHolders

	nodes   []node   // slab; nodes[0] is the root
	holders []holder // h per node: node i owns holders[i*h : i*h+h]
	free    []nodeID // dead slab slots, reused first
	index   map[uint64]nodeID
	lists   [3]lruList // indexed by listLocal, listRemote
	epochs  []uint16   // per backend; bumped by RemoveBackend
	blocks  int        // stored blocks, sum of len(keys)
	cursor  nodeID     // next slot Maintain looks at
	ends    []int      // Insert scratch

	// Recent's scratch (recent.go); dropped when a long chain grew it
	// past recentCeiling keys.
	recentPath   []nodeID
	recentKeys   []uint64
	recentBounds []int

	stats Stats
}

// New returns an empty tree, or an error naming the invalid config field.
func New(cfg Config) (*Tree, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tree{
		cfg:     cfg,
		ttl:     int64(cfg.TTL),
		h:       cfg.MaxHolders,
		nodes:   make([]node, 1, 1024),
		holders: make([]holder, cfg.MaxHolders, 1024*cfg.MaxHolders),
		index:   make(map[uint64]nodeID),
		epochs:  make([]uint16, cfg.MaxBackends),
	}
	t.nodes[root].live = true
	return t, nil
}

// Config returns the tree's configuration. Loop only.
func (t *Tree) Config() Config { return t.cfg }

func (t *Tree) holdersOf(id nodeID) []holder {
	i := int(id) * t.h
	return t.holders[i : i+int(t.nodes[id].nHolders) : i+t.h]
}

// valid reports whether a holder is visible: not expired, backend not removed.
func (t *Tree) valid(h *holder, now int64) bool {
	return now-h.lastUsed() < t.ttl && h.epoch == t.epochs[h.backend]
}

// Match walks chain from the root and appends to dst, for every backend
// holding at least one block of it, the deepest block count it holds. It
// returns the extended dst and the number of leading blocks of chain that
// the tree knows at all (with or without visible holders). Expired holders
// and holders of removed backends are invisible. The matched nodes become
// the most recently used.
//
// Match allocates nothing when dst has room for every backend it reports.
// Loop only.
func (t *Tree) Match(dst []Hit, chain []uint64, now int64) ([]Hit, int) {
	base := len(dst)
	p, cur := 0, root
	for p < len(chain) {
		id, ok := t.index[chain[p]]
		if !ok {
			break
		}
		n := &t.nodes[id]
		if n.parent != cur {
			// A 64-bit key collision between two prefixes: stop
			// rather than report another prefix's holders.
			t.stats.Collisions++
			break
		}
		k := commonPrefix(n.edge(), chain[p:])
		p += k
		hs := t.holdersOf(id)
		for i := range hs {
			h := &hs[i]
			if !t.valid(h, now) {
				continue
			}
			var j int
			dst, j = addHit(dst, base, int(h.backend), p, h.origin(), h.lastUsed())
			if h.confirmed() {
				dst[j].Confirmed = p // deeper than any earlier node's
			}
		}
		cur = id
		if k < int(n.kn) {
			break
		}
	}
	t.touchPath(cur)
	return dst, p
}

// addHit records backend's holder at depth blocks in dst[base:] and
// returns dst and the hit's index.
func addHit(dst []Hit, base, backend, blocks int, o Origin, used int64) ([]Hit, int) {
	for i := base; i < len(dst); i++ {
		if dst[i].Backend == backend {
			dst[i].Blocks, dst[i].Origin, dst[i].Used = blocks, o, used
			return dst, i
		}
	}
	return append(dst, Hit{Backend: backend, Blocks: blocks, Origin: o, Used: used}), len(dst)
}

func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Insert records that backend now holds chain (the request's whole block
// chain) with the given origin, refreshing last-used times of holders
// already known. Origin Engine inserts confirmed Local holders (see
// Engine); Local and Remote keep a visible holder's confirmation. boundaries are message ends in blocks (token boundary
// divided by block size, rounded down), in any order; values outside
// (0, len(chain)] are ignored and duplicates collapse. The tree keeps a node
// end at every boundary so that eviction trims a conversation back to its
// earlier turns and its system prompt instead of dropping it whole.
//
// Remote-only nodes are evicted before nodes with a local holder, so a remote
// insert into a tree full of local routes evicts its own leaves first: a
// peer's routes never displace what this router saw itself.
//
// Insert is idempotent. A chain longer than MaxBlocks is truncated to it. It
// copies chain and boundaries; the caller keeps ownership. It returns an
// error only for a backend index outside [0, MaxBackends), an invalid
// origin or a now outside [0, 2^62) (a holder keeps 62 bits of time: 146
// years of nanoseconds). Loop only.
func (t *Tree) Insert(chain []uint64, boundaries []int, backend int, o Origin, now int64) error {
	if backend < 0 || backend >= len(t.epochs) {
		return fmt.Errorf("tree: backend index %d outside [0, %d)", backend, len(t.epochs))
	}
	if o != Local && o != Remote && o != Engine {
		return fmt.Errorf("tree: invalid origin %d", o)
	}
	if now < 0 || now > maxTime {
		return fmt.Errorf("tree: time %d outside [0, 2^62)", now)
	}
	if len(chain) > t.cfg.MaxBlocks {
		chain = chain[:t.cfg.MaxBlocks]
	}
	if len(chain) == 0 {
		return nil
	}
	ends := t.ends[:0]
	for _, b := range boundaries {
		if b > 0 && b < len(chain) {
			ends = append(ends, b)
		}
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	ends = append(ends, len(chain))
	t.ends = ends

	b := uint16(backend)
	p, cur, ei := 0, root, 0
	for p < len(chain) {
		for ends[ei] <= p {
			ei++
		}
		id, ok := t.index[chain[p]]
		if !ok {
			// The rest of the chain is new: one allocation for its
			// keys, one node per boundary segment.
			rest := slices.Clone(chain[p:])
			for p < len(chain) {
				e := ends[ei]
				id = t.newNode(cur, rest[:e-p:e-p])
				rest = rest[e-p:]
				t.addHolder(id, b, o, now)
				p, cur = e, id
				ei++
			}
			break
		}
		if t.nodes[id].parent != cur {
			t.stats.Collisions++ // see Match
			break
		}
		cut := min(commonPrefix(t.nodes[id].edge(), chain[p:]), ends[ei]-p)
		if cut < int(t.nodes[id].kn) {
			id = t.split(id, cut)
		}
		t.addHolder(id, b, o, now)
		p, cur = p+cut, id
	}
	t.touchPath(cur)
	t.enforceCapacity()
	return nil
}

// newNode links a new leaf with the given edge under parent. keys must not
// alias caller memory.
func (t *Tree) newNode(parent nodeID, keys []uint64) nodeID {
	var id nodeID
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		id = nodeID(len(t.nodes))
		t.nodes = append(t.nodes, node{})
		t.holders = append(t.holders, make([]holder, t.h)...)
	}
	t.nodes[id] = node{live: true}
	t.nodes[id].setEdge(keys)
	t.linkChild(parent, id)
	t.index[keys[0]] = id
	t.blocks += len(keys)
	t.stats.Nodes++
	return id
}

func (t *Tree) linkChild(parent, id nodeID) {
	n := &t.nodes[id]
	n.parent, n.prev = parent, 0
	n.next = t.nodes[parent].child
	if n.next != 0 {
		t.nodes[n.next].prev = id
	}
	t.nodes[parent].child = id
}

func (t *Tree) unlinkChild(id nodeID) {
	n := &t.nodes[id]
	if n.prev != 0 {
		t.nodes[n.prev].next = n.next
	} else {
		t.nodes[n.parent].child = n.next
	}
	if n.next != 0 {
		t.nodes[n.next].prev = n.prev
	}
	n.prev, n.next = 0, 0
}

// split cuts node id's edge after k keys (0 < k < len): a new node takes
// the first k keys and id's place in the tree, id keeps the rest as its
// only child. The new node inherits id's holders (they hold id's whole
// edge, so they hold its first part). It returns the new upper node.
func (t *Tree) split(id nodeID, k int) nodeID {
	keys := t.nodes[id].edge()
	parent := t.nodes[id].parent
	t.unlinkChild(id)
	up := t.newNode(parent, keys[:k:k])
	t.blocks -= k // newNode counted the upper keys; they were already stored
	t.nodes[id].setEdge(keys[k:])
	t.index[keys[k]] = id
	t.linkChild(up, id)
	nh := t.nodes[id].nHolders
	copy(t.holders[int(up)*t.h:], t.holdersOf(id))
	t.nodes[up].nHolders = nh
	for _, h := range t.holdersOf(up) {
		t.countHolder(h.origin(), +1)
	}
	t.relist(up, true)
	return up
}

func (t *Tree) countHolder(o Origin, d int) {
	if o == Local {
		t.stats.HoldersLocal += d
	} else {
		t.stats.HoldersRemote += d
	}
}

// addHolder adds or refreshes backend b on node id with origin o (Local,
// Remote or Engine).
func (t *Tree) addHolder(id nodeID, b uint16, o Origin, now int64) {
	hs := t.holdersOf(id)
	epoch := t.epochs[b]
	conf := o == Engine
	o = o.kept()
	for i := range hs {
		h := &hs[i]
		if h.backend != b {
			continue
		}
		valid := t.valid(h, now)
		// A visible holder stays confirmed: routing's sighting of what
		// the engine reported only refreshes it.
		conf = conf || (valid && h.confirmed())
		if !valid || o == Local {
			// A stale entry is relearned as new; a local sighting
			// upgrades a remote one, a remote one never downgrades.
			t.countHolder(h.origin(), -1)
			t.countHolder(o, +1)
		} else {
			o = h.origin() // a remote sighting never downgrades
		}
		h.set(now, o, conf)
		h.epoch = epoch
		t.relist(id, false)
		return
	}
	nh := holder{backend: b, epoch: epoch}
	nh.set(now, o, conf)
	if len(hs) < t.h {
		t.holders[int(id)*t.h+len(hs)] = nh
		t.nodes[id].nHolders++
		t.countHolder(o, +1)
		t.relist(id, false)
		return
	}
	v := t.victim(hs, now)
	if t.valid(&hs[v], now) {
		t.stats.HolderDrops[DropCap]++
	} else {
		t.stats.HolderDrops[t.invalidReason(&hs[v])]++
	}
	t.countHolder(hs[v].origin(), -1)
	hs[v] = nh
	t.countHolder(o, +1)
	t.relist(id, false)
}

func (t *Tree) invalidReason(h *holder) DropReason {
	if h.epoch != t.epochs[h.backend] {
		return DropBackendRemoved
	}
	return DropExpired
}

// victim picks the holder a new one replaces: an invisible one first, else
// the least recently used remote one, else the least recently used local
// one the engine did not confirm, else the least recently used confirmed
// one (a guess goes before the engine's word). Ties go to the lowest slot.
func (t *Tree) victim(hs []holder, now int64) int {
	best, bestRank, bestTime := -1, 0, int64(0)
	for i := range hs {
		rank := 2 // local
		switch {
		case !t.valid(&hs[i], now):
			rank = 0
		case hs[i].origin() == Remote:
			rank = 1
		case hs[i].confirmed():
			rank = 3
		}
		if best < 0 || rank < bestRank || (rank == bestRank && hs[i].lastUsed() < bestTime) {
			best, bestRank, bestTime = i, rank, hs[i].lastUsed()
		}
	}
	return best
}

// class is the LRU list a node belongs on: local if any holder is local.
func (t *Tree) class(id nodeID) uint8 {
	for _, h := range t.holdersOf(id) {
		if h.origin() == Local {
			return listLocal
		}
	}
	return listRemote
}

// relist moves a node to the list of its class if its class changed, at the
// front of that list or at its back. A node whose class did not change stays
// where it is: recency is touchPath's business.
func (t *Tree) relist(id nodeID, front bool) {
	c := t.class(id)
	n := &t.nodes[id]
	if n.list == c {
		return
	}
	if n.list != listNone {
		t.unlist(id)
	}
	if front {
		t.pushFront(c, id)
	} else {
		t.pushBack(c, id)
	}
}

func (t *Tree) unlist(id nodeID) {
	n := &t.nodes[id]
	l := &t.lists[n.list]
	if n.lruPrev != 0 {
		t.nodes[n.lruPrev].lruNext = n.lruNext
	} else {
		l.head = n.lruNext
	}
	if n.lruNext != 0 {
		t.nodes[n.lruNext].lruPrev = n.lruPrev
	} else {
		l.tail = n.lruPrev
	}
	n.lruPrev, n.lruNext, n.list = 0, 0, listNone
}

func (t *Tree) pushFront(c uint8, id nodeID) {
	l := &t.lists[c]
	n := &t.nodes[id]
	n.list, n.lruPrev, n.lruNext = c, 0, l.head
	if l.head != 0 {
		t.nodes[l.head].lruPrev = id
	} else {
		l.tail = id
	}
	l.head = id
}

func (t *Tree) pushBack(c uint8, id nodeID) {
	l := &t.lists[c]
	n := &t.nodes[id]
	n.list, n.lruNext, n.lruPrev = c, 0, l.tail
	if l.tail != 0 {
		t.nodes[l.tail].lruNext = id
	} else {
		l.head = id
	}
	l.tail = id
}

// touchPath makes id and its ancestors the most recently used, deepest
// first, so that every parent is more recent than its children and the
// tail of a list is almost always a leaf.
func (t *Tree) touchPath(id nodeID) {
	for ; id != root; id = t.nodes[id].parent {
		n := &t.nodes[id]
		c := t.class(id)
		if n.list == c && t.lists[c].head == id {
			continue
		}
		if n.list != listNone {
			t.unlist(id)
		}
		t.pushFront(c, id)
	}
}

// enforceCapacity evicts least recently used leaves, remote-only ones
// first, until the stored blocks fit MaxBlocks. A node found at a list's
// tail with children (possible after holder eviction or expiry changed its
// class) is taken off the list; it returns to a list when it is touched or
// loses its last child. Each such step is paid for by an earlier touch, so
// the work is amortized O(1) per inserted node.
func (t *Tree) enforceCapacity() {
	for t.blocks > t.cfg.MaxBlocks {
		c := listRemote
		if t.lists[c].tail == 0 {
			c = listLocal
		}
		id := t.lists[c].tail
		if id == 0 {
			panic("BUG: tree over capacity with empty LRU lists")
		}
		if t.nodes[id].child != 0 {
			t.unlist(id)
			continue
		}
		reason := EvictCapacityLocal
		if c == listRemote {
			reason = EvictCapacityRemote
		}
		t.removeLeaf(id, reason)
	}
}

// removeLeaf deletes a childless node and its holders.
func (t *Tree) removeLeaf(id nodeID, reason EvictReason) {
	n := &t.nodes[id]
	if n.child != 0 || id == root {
		panic("BUG: tree.removeLeaf on an interior node")
	}
	for _, h := range t.holdersOf(id) {
		t.countHolder(h.origin(), -1)
	}
	parent := n.parent
	t.unlinkChild(id)
	if n.list != listNone {
		t.unlist(id)
	}
	delete(t.index, *n.kp)
	t.blocks -= int(n.kn)
	t.stats.NodeEvictions[reason]++
	t.stats.BlockEvictions[reason] += uint64(n.kn)
	t.stats.Nodes--
	*n = node{}
	t.free = append(t.free, id)
	// A parent that lost its last child while off the lists (see
	// enforceCapacity) is old: it goes back at the tail.
	if p := &t.nodes[parent]; parent != root && p.child == 0 && p.list == listNone {
		t.pushBack(t.class(parent), parent)
	}
}

// RemoveBackend forgets everything backend holds, as when it is removed or
// its cache is flushed. Its holders become invisible at once (O(1)); the
// memory is reclaimed by [Tree.Maintain] in bounded steps. Inserts for the
// same index after this call are new holders. Loop only.
//
// The per-backend epoch is 16 bits: a holder could reappear only if the same
// index were removed 65,536 times before Maintain completed one pass.
func (t *Tree) RemoveBackend(backend int) error {
	if backend < 0 || backend >= len(t.epochs) {
		return fmt.Errorf("tree: backend index %d outside [0, %d)", backend, len(t.epochs))
	}
	t.epochs[backend]++
	return nil
}

// Demote drops backend's holder from the nodes of chain that reach beyond
// keepBlocks blocks, as when the engine reported that it holds only the
// first keepBlocks blocks of chain (or a pending route failed). It returns
// how many holders it removed, counted in Stats.HolderDrops[DropDemoted]
// (an already invisible holder it removes is counted under its own
// reason, expired or backend_removed, and not returned).
//
// A node whose edge straddles keepBlocks (it starts before it and ends
// after it) loses the holder too: a holder on a node claims the whole
// edge, so keeping it would keep claiming blocks the engine denied. This
// is conservative: the backend keeps credit only up to the start of that
// node. The same holds for the last node a chain reaches that diverges
// from the chain inside its edge (the holder is dropped from the whole
// edge, the part shared with other chains included). Nodes of chain that
// end at or before keepBlocks, nodes below the chain's end and other
// backends' holders are not touched: the walk is one map probe per node
// on chain's path, O(len(chain)), bounded by MaxBlocks, and it allocates
// nothing. Nodes left without holders are removed by [Tree.Maintain].
//
// keepBlocks ≤ 0 drops the holder from the whole path; keepBlocks ≥
// len(chain) drops nothing. A backend index outside [0, MaxBackends)
// removes nothing. Demote does not change recency. Loop only.
func (t *Tree) Demote(chain []uint64, backend, keepBlocks int, now int64) (removed int) {
	if backend < 0 || backend >= len(t.epochs) || keepBlocks >= len(chain) {
		return 0
	}
	if len(chain) > t.cfg.MaxBlocks {
		chain = chain[:t.cfg.MaxBlocks]
	}
	b := uint16(backend)
	p, cur := 0, root
	for p < len(chain) {
		id, ok := t.index[chain[p]]
		if !ok {
			break
		}
		n := &t.nodes[id]
		if n.parent != cur {
			t.stats.Collisions++ // see Match
			break
		}
		k := commonPrefix(n.edge(), chain[p:])
		p += k
		if p > keepBlocks {
			removed += t.dropHolder(id, b, now)
		}
		cur = id
		if k < int(n.kn) {
			break
		}
	}
	return removed
}

// dropHolder removes backend b's holder from node id, if it has one, and
// returns 1 if that holder was visible.
func (t *Tree) dropHolder(id nodeID, b uint16, now int64) int {
	hs := t.holdersOf(id)
	for i := range hs {
		if hs[i].backend != b {
			continue
		}
		visible := 0
		if t.valid(&hs[i], now) {
			t.stats.HolderDrops[DropDemoted]++
			visible = 1
		} else {
			t.stats.HolderDrops[t.invalidReason(&hs[i])]++
		}
		t.countHolder(hs[i].origin(), -1)
		last := len(hs) - 1
		hs[i] = hs[last]
		t.nodes[id].nHolders = uint8(last)
		if last > 0 && t.nodes[id].list != listNone {
			t.relist(id, false)
		}
		return visible
	}
	return 0
}

// Maintain does at most budget units of cleanup work and returns how many
// it did: it visits budget slab slots, round robin, drops expired holders
// and holders of removed backends, and deletes nodes left without holders
// and children (and such ancestors above them, each counted against the
// budget). It never does more than budget units. Call it periodically from
// the owner loop; a full pass over N nodes takes about N/budget calls.
// Loop only.
func (t *Tree) Maintain(now int64, budget int) int {
	work := 0
	for work < budget && len(t.nodes) > 1 {
		if int(t.cursor) >= len(t.nodes) || t.cursor == root {
			t.cursor = 1
		}
		id := t.cursor
		t.cursor++
		work++
		if !t.nodes[id].live {
			continue
		}
		t.dropInvalid(id, now)
		// Cascade up through ancestors left empty, within the budget;
		// whatever remains is found on a later pass.
		for t.nodes[id].nHolders == 0 && t.nodes[id].child == 0 {
			parent := t.nodes[id].parent
			t.removeLeaf(id, EvictEmpty)
			if parent == root || work >= budget {
				break
			}
			id = parent
			work++
			t.dropInvalid(id, now)
		}
	}
	return work
}

func (t *Tree) dropInvalid(id nodeID, now int64) {
	hs := t.holdersOf(id)
	n := len(hs)
	for i := 0; i < n; {
		if t.valid(&hs[i], now) {
			i++
			continue
		}
		t.stats.HolderDrops[t.invalidReason(&hs[i])]++
		t.countHolder(hs[i].origin(), -1)
		n--
		hs[i] = hs[n]
	}
	if n == len(hs) {
		return
	}
	t.nodes[id].nHolders = uint8(n)
	if n > 0 && t.nodes[id].list != listNone {
		t.relist(id, false)
	}
}
