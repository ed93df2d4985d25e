package backend

import (
	"time"

	"github.com/saltus-lb/saltus/reactor"
)

// Loop is one event loop's part of a Set: its upstream connections and
// requests, reached through the loop's own handle (shard.Shard holds one
// per loop) rather than a loop number passed along. The state stays the
// Set's (its pools, its requests in flight, closed by Set.Close); the
// handle only names the loop. Loop only (the loop's), as ForwardOnLoop
// and Tick.
type Loop struct {
	s *Set
	i int
}

// Loop returns loop i's handle.
func (s *Set) Loop(i int) Loop { return Loop{s, i} }

// ForwardOnLoop is Set.ForwardOnLoop on this loop.
func (l Loop) ForwardOnLoop(req *reactor.Request, body []byte, candidates []*Backend, sink LoopSink, extraHdr []reactor.Header, h Hooks) bool {
	return l.s.ForwardOnLoop(l.i, req, body, candidates, sink, extraHdr, h)
}

// Tick is Set.Tick on this loop.
func (l Loop) Tick(now time.Time) { l.s.Tick(l.i, now) }
