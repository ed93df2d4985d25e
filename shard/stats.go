package shard

// RouteStats is what GET /admin/routes shows: the trees' gauges summed
// and per shard, and the Router's counters.
type RouteStats struct {
	Nodes     int64            `json:"nodes"`
	Blocks    int64            `json:"blocks"`
	Evictions int64            `json:"evictions"`
	Shards    []ShardStats     `json:"shards"`
	Decisions map[string]int64 `json:"decisions"`
	Diverted  uint64           `json:"diverted"`
	Learned   uint64           `json:"learned"`
	// LearnSkipped counts 2xx answers not learned because the tree
	// already held the whole prefix for that backend, freshly refreshed,
	// or the decision had recorded it (a pending route, now confirmed).
	LearnSkipped uint64 `json:"learn_skipped"`
	// MailboxOverflow counts lookups routed without the tree and learns
	// dropped because an owner loop's mailbox was full.
	MailboxOverflow uint64 `json:"mailbox_overflow"`
	LearnDropped    uint64 `json:"learn_dropped"`
}

// ShardStats is one shard's part of RouteStats. The tree gauges are as of
// the shard's last maintenance step or insert.
type ShardStats struct {
	Shard     int   `json:"shard"`
	Nodes     int64 `json:"nodes"`
	Blocks    int64 `json:"blocks"`
	Evictions int64 `json:"evictions"`
}

// RouteStats returns a RouteStats (typed any, as admin's Routes
// interface wants). Any goroutine.
func (r *Router) RouteStats() any { return r.routeStats() }

func (r *Router) routeStats() RouteStats {
	s := RouteStats{Decisions: map[string]int64{}}
	for _, sh := range r.shards {
		ss := ShardStats{Shard: sh.id, Nodes: sh.nodes.Load(), Blocks: sh.blocks.Load(),
			Evictions: sh.evictions.Load()}
		s.Nodes += ss.Nodes
		s.Blocks += ss.Blocks
		s.Evictions += ss.Evictions
		s.Shards = append(s.Shards, ss)
	}
	for i, name := range reasonNames {
		s.Decisions[name] = int64(r.m.decisions[i].Get())
	}
	s.Diverted, s.Learned, s.LearnSkipped = r.m.diverted.Get(), r.m.learned.Get(), r.m.learnSkipped.Get()
	s.MailboxOverflow, s.LearnDropped = r.m.overflow.Get(), r.m.learnDropped.Get()
	return s
}
