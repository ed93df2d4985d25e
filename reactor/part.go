package reactor

import (
	"fmt"
	"sync/atomic"
)

// Parts: how the packages above the reactor keep their per-loop state in
// the loop's one value, by type rather than in tables indexed by a loop
// number. A package declares its part once, at package level:
//
//	var shardPart = reactor.NewPart[*Shard]()
//
// sets it on each Loop while wiring (before Server.Start), and reads it
// in the callbacks the loop runs: part.Get(x.Loop()). A part is a slot in
// the Loop's fixed array: Get is an index and a type assertion, with no
// allocation or lock. Each part has one owner package; T is normally a
// pointer to that package's per-loop struct, whose fields say who owns
// them (usually the loop).

// maxParts bounds the parts of a Loop: one per package that keeps
// per-loop state (today backend and shard), with room to spare.
const maxParts = 8

// nparts counts the parts NewPart handed out.
var nparts atomic.Int32

// Part is one package's slot in every Loop, holding a T. Its zero value
// is not a part: make one with NewPart.
type Part[T any] struct {
	i int32 // the slot, 1-based: 0 marks a Part that NewPart did not make
}

// NewPart returns a new slot in every Loop. Call it from a package-level
// var (once per part, during init); it panics past maxParts. Any
// goroutine.
func NewPart[T any]() Part[T] {
	i := nparts.Add(1)
	if i > maxParts {
		panic(fmt.Sprintf("BUG: reactor.NewPart: more than %d parts", maxParts))
	}
	return Part[T]{i: i}
}

// Set stores v as l's part. Before Server.Start (the wiring: Start
// publishes it to the loops) or on l's loop.
func (p Part[T]) Set(l *Loop, v T) {
	l.parts[p.slot()] = v
}

// Get returns l's part, the zero T if none was set. On l's loop, or any
// goroutine for a part set before Start and not changed since.
func (p Part[T]) Get(l *Loop) T {
	v, _ := l.parts[p.slot()].(T) // absent: the zero T
	return v
}

func (p Part[T]) slot() int {
	if p.i == 0 {
		panic("BUG: reactor.Part not made by NewPart")
	}
	return int(p.i - 1)
}
