package tree

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// check verifies every structural invariant of t and returns the first
// violation.
func (t *Tree) check() error {
	if !t.nodes[root].live {
		return fmt.Errorf("root not live")
	}
	reach, blocks, local, remote := 0, 0, 0, 0
	var walk func(id nodeID) error
	walk = func(id nodeID) error {
		prev := nodeID(0)
		for c := t.nodes[id].child; c != 0; c = t.nodes[c].next {
			n := &t.nodes[c]
			switch {
			case !n.live:
				return fmt.Errorf("node %d reachable but dead", c)
			case n.parent != id:
				return fmt.Errorf("node %d parent %d, want %d", c, n.parent, id)
			case n.prev != prev:
				return fmt.Errorf("node %d prev %d, want %d", c, n.prev, prev)
			case n.kn == 0:
				return fmt.Errorf("node %d has an empty edge", c)
			case t.index[n.edge()[0]] != c:
				return fmt.Errorf("node %d not indexed by its first key", c)
			case int(n.nHolders) > t.h:
				return fmt.Errorf("node %d has %d holders > %d", c, n.nHolders, t.h)
			}
			seen := map[uint16]bool{}
			for _, h := range t.holdersOf(c) {
				if seen[h.backend] {
					return fmt.Errorf("node %d holds backend %d twice", c, h.backend)
				}
				seen[h.backend] = true
				if h.origin() == Local {
					local++
				} else {
					remote++
					if h.confirmed() {
						return fmt.Errorf("node %d: backend %d remote and confirmed", c, h.backend)
					}
				}
			}
			reach++
			blocks += int(n.kn)
			prev = c
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return err
	}
	live := 0
	for i := 1; i < len(t.nodes); i++ {
		if t.nodes[i].live {
			live++
		}
	}
	for _, f := range t.free {
		if t.nodes[f].live {
			return fmt.Errorf("free slot %d is live", f)
		}
	}
	switch {
	case live != reach:
		return fmt.Errorf("%d live nodes, %d reachable", live, reach)
	case reach != t.stats.Nodes:
		return fmt.Errorf("stats.Nodes %d, reachable %d", t.stats.Nodes, reach)
	case len(t.index) != reach:
		return fmt.Errorf("index has %d entries, %d nodes", len(t.index), reach)
	case blocks != t.blocks:
		return fmt.Errorf("blocks %d, counted %d", t.blocks, blocks)
	case t.blocks > t.cfg.MaxBlocks:
		return fmt.Errorf("blocks %d over MaxBlocks %d", t.blocks, t.cfg.MaxBlocks)
	case local != t.stats.HoldersLocal || remote != t.stats.HoldersRemote:
		return fmt.Errorf("holders local/remote %d/%d, stats %d/%d", local, remote, t.stats.HoldersLocal, t.stats.HoldersRemote)
	}
	for _, c := range []uint8{listLocal, listRemote} {
		prev := nodeID(0)
		for id := t.lists[c].head; id != 0; id = t.nodes[id].lruNext {
			n := &t.nodes[id]
			if !n.live || n.list != c || n.lruPrev != prev {
				return fmt.Errorf("list %d broken at node %d", c, id)
			}
			prev = id
		}
		if t.lists[c].tail != prev {
			return fmt.Errorf("list %d tail %d, walked to %d", c, t.lists[c].tail, prev)
		}
	}
	return nil
}

// oracle is the naive model the tree must agree with when capacity never
// binds: a map from every inserted prefix to its holders, with the same
// holder-cap rule applied per prefix.
type oracle struct {
	h      int
	ttl    int64
	m      map[string][]oholder
	epochs map[uint16]uint16
}

func newOracle(h int, ttl int64) *oracle {
	return &oracle{h: h, ttl: ttl, m: map[string][]oholder{}, epochs: map[uint16]uint16{}}
}

func prefixKey(chain []uint64) string {
	b := make([]byte, 0, 8*len(chain))
	for _, k := range chain {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	return string(b)
}

// oholder is the oracle's plain holder.
type oholder struct {
	lastUsed int64
	backend  uint16
	epoch    uint16
	origin   Origin
	conf     bool // confirmed by the engine (inserted with origin Engine)
}

func (o *oracle) valid(h oholder, now int64) bool {
	return now-h.lastUsed < o.ttl && h.epoch == o.epochs[h.backend]
}

func (o *oracle) insert(chain []uint64, b uint16, org Origin, now int64) {
	for d := 1; d <= len(chain); d++ {
		k := prefixKey(chain[:d])
		hs := o.m[k]
		found := false
		for i := range hs {
			if hs[i].backend == b {
				valid := o.valid(hs[i], now)
				hs[i].conf = org == Engine || (valid && hs[i].conf)
				if !valid || org != Remote {
					hs[i].origin = org.kept()
				}
				hs[i].lastUsed, hs[i].epoch = now, o.epochs[b]
				found = true
			}
		}
		if !found {
			nh := oholder{lastUsed: now, backend: b, epoch: o.epochs[b], origin: org.kept(), conf: org == Engine}
			if len(hs) < o.h {
				hs = append(hs, nh)
			} else {
				best, bestRank := -1, 0
				for i, h := range hs {
					rank := 2
					if !o.valid(h, now) {
						rank = 0
					} else if h.origin == Remote {
						rank = 1
					} else if h.conf {
						rank = 3
					}
					if best < 0 || rank < bestRank || (rank == bestRank && h.lastUsed < hs[best].lastUsed) {
						best, bestRank = i, rank
					}
				}
				hs[best] = nh
			}
		}
		o.m[k] = hs
	}
}

func (o *oracle) match(chain []uint64, now int64) []Hit {
	var res []Hit
	for d := 1; d <= len(chain); d++ {
		hs, ok := o.m[prefixKey(chain[:d])]
		if !ok {
			break
		}
		for _, h := range hs {
			if o.valid(h, now) {
				var i int
				res, i = addHit(res, 0, int(h.backend), d, h.origin, h.lastUsed)
				if h.conf {
					res[i].Confirmed = d
				}
			}
		}
	}
	sortHits(res)
	return res
}

func sortHits(h []Hit) {
	slices.SortFunc(h, func(a, b Hit) int { return a.Backend - b.Backend })
}

// symChain turns small symbols into a chain with block size 1, so random
// symbol strings share prefixes often.
func symChain(syms []int32) []uint64 {
	return BlockKeys(nil, 7, syms, 1)
}

func mustNew(tb testing.TB, cfg Config) *Tree {
	tb.Helper()
	tr, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// op is one step of a property or fuzz run.
type op struct {
	kind    uint8 // 0 insert, 1 match, 2 remove backend, 3 maintain, 4 time jump, 5 demote
	syms    []int32
	bounds  []int
	backend uint16
	origin  Origin
	n       int
}

// decodeOps reads a byte string as a sequence of ops.
func decodeOps(data []byte, backends int) []op {
	var ops []op
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for len(data) > 0 {
		o := op{kind: next() % 6}
		switch o.kind {
		case 0, 1, 5:
			n := int(next() % 14)
			for i := 0; i < n; i++ {
				o.syms = append(o.syms, int32(next()%3))
			}
			for i := int(next() % 3); i > 0; i-- {
				o.bounds = append(o.bounds, int(next()%16)-1)
			}
			o.backend = uint16(int(next()) % backends)
			o.origin = [...]Origin{Local, Remote, Engine}[next()%3]
			if o.kind == 5 {
				o.n = int(next()%16) - 1 // keepBlocks
			}
		case 2:
			o.backend = uint16(int(next()) % backends)
		case 3:
			o.n = int(next()%8) + 1
		case 4:
			o.n = int(next()) * 4
		}
		ops = append(ops, o)
	}
	return ops
}

// runOracle applies ops to a tree and the oracle and fails on the first
// disagreement. Capacity is large enough never to bind.
func runOracle(t *testing.T, ops []op, holders int) {
	t.Helper()
	const ttl = 300
	cfg := DefaultConfig()
	cfg.MaxHolders, cfg.TTL, cfg.MaxBackends = holders, ttl, 8
	tr := mustNew(t, cfg)
	or := newOracle(holders, ttl)
	now := int64(1000)
	var got []Hit
	for i, o := range ops {
		now++
		chain := symChain(o.syms)
		switch o.kind {
		case 0:
			if err := tr.Insert(chain, o.bounds, int(o.backend), o.origin, now); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			or.insert(chain, o.backend, o.origin, now)
		case 1:
			var depth int
			got, depth = tr.Match(got[:0], chain, now)
			want := or.match(chain, now)
			sortHits(got)
			if !slices.Equal(got, want) {
				t.Fatalf("op %d: Match(%v) = %v, oracle %v", i, o.syms, got, want)
			}
			for _, h := range got {
				if h.Blocks > depth {
					t.Fatalf("op %d: hit %v deeper than depth %d", i, h, depth)
				}
			}
		case 2:
			if err := tr.RemoveBackend(int(o.backend)); err != nil {
				t.Fatal(err)
			}
			or.epochs[o.backend]++
		case 3:
			tr.Maintain(now, o.n)
		case 4:
			now += int64(o.n)
		case 5:
			paths, starts := tr.demoteTargets(chain, o.n)
			before := tr.Stats().HolderDrops[DropDemoted]
			removed := tr.Demote(chain, int(o.backend), o.n, now)
			visible := 0
			for k, p := range paths {
				visible += or.demote(p, starts[k], o.backend, now)
			}
			if removed != visible || tr.Stats().HolderDrops[DropDemoted]-before != uint64(removed) {
				t.Fatalf("op %d: Demote removed %d (stats +%d), oracle %d visible", i, removed, tr.Stats().HolderDrops[DropDemoted]-before, visible)
			}
		}
		if err := tr.check(); err != nil {
			t.Fatalf("op %d (%+v): %v", i, o, err)
		}
	}
}

// demoteTargets lists, for Demote(chain, _, keep), the nodes it must visit
// with their reach beyond keep, read from the tree's structure: each as its
// full key path from the root to the end of its edge and the depth its
// edge starts at. The oracle drops the holder from every prefix of such a
// path deeper than its start (a holder on a node claims the whole edge).
func (t *Tree) demoteTargets(chain []uint64, keep int) (paths [][]uint64, starts []int) {
	p, cur := 0, root
	for p < len(chain) {
		id, ok := t.index[chain[p]]
		if !ok || t.nodes[id].parent != cur {
			break
		}
		n := &t.nodes[id]
		k := commonPrefix(n.edge(), chain[p:])
		if p+k > keep {
			var path []uint64
			for a := id; a != root; a = t.nodes[a].parent {
				path = append(slices.Clone(t.nodes[a].edge()), path...)
			}
			paths, starts = append(paths, path), append(starts, p)
		}
		p += k
		cur = id
		if k < int(n.kn) {
			break
		}
	}
	return paths, starts
}

// demote drops backend b from every prefix of path deeper than start and
// returns how many of the removed entries were visible at now.
func (o *oracle) demote(path []uint64, start int, b uint16, now int64) int {
	visible := 0
	for d := start + 1; d <= len(path); d++ {
		k := prefixKey(path[:d])
		hs := o.m[k]
		for i := range hs {
			if hs[i].backend == b {
				if d == len(path) && o.valid(hs[i], now) {
					visible++ // one tree holder per node: count it once
				}
				hs = slices.Delete(hs, i, i+1)
				break
			}
		}
		if _, ok := o.m[k]; ok {
			o.m[k] = hs
		}
	}
	return visible
}
