package backend

import (
	"time"

	"github.com/saltus-lb/saltus/reactor"
)

// Loop is one event loop's part of a Set as a handle: the Set and the
// reactor.Loop, whose loopPart holds the loop's upstream connections and
// requests (closed by Set.Close). shard.Shard holds one per loop. Loop
// only (the loop's), as ForwardOnLoop and Tick.
type Loop struct {
	s *Set
	l *reactor.Loop
}

// Loop returns l's handle. Any goroutine.
func (s *Set) Loop(l *reactor.Loop) Loop { return Loop{s, l} }

// ForwardOnLoop is Set.ForwardOnLoop on this loop.
func (l Loop) ForwardOnLoop(req *reactor.Request, body []byte, candidates []*Backend, sink LoopSink, extraHdr []reactor.Header, h Hooks) bool {
	return l.s.ForwardOnLoop(l.l, req, body, candidates, sink, extraHdr, h)
}

// Tick is Set.Tick on this loop.
func (l Loop) Tick(now time.Time) { l.s.Tick(l.l, now) }
