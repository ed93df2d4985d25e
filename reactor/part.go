package reactor

// Parts: how the packages above the reactor keep their per-loop state in
// the loop's one value, by type rather than in tables indexed by a loop
// number. A package declares its part once, at package level:
//
//	var shardPart = reactor.NewPart[*Shard]()
//
// sets it on each Loop while wiring (before Server.Start), and reads it
// in the callbacks the loop runs: shardPart.Get(x.Loop()). A Loop keeps
// its parts in a short list (one entry per package that has a part: two
// today), so Get is a scan of a few pointers and a type assertion, with
// no allocation, no lock and no package-level registry (rule R12). Each
// part has one owner package; T is normally a pointer to that package's
// per-loop struct, whose fields say who owns them (usually the loop).

// Part is one package's slot in every Loop, holding a T. Its zero value
// is not a part: make one with NewPart.
type Part[T any] struct {
	key *byte // the part's identity: a distinct allocation per NewPart
}

// partEntry is one part set on a Loop.
type partEntry struct {
	key *byte
	v   any
}

// NewPart returns a new slot in every Loop. Call it once per part, from
// a package-level var. Any goroutine.
func NewPart[T any]() Part[T] {
	return Part[T]{key: new(byte)}
}

// Set stores v as l's part, replacing what was set. Before Server.Start
// (the wiring: Start publishes it to the loops) or on l's loop.
func (p Part[T]) Set(l *Loop, v T) {
	p.check()
	for i := range l.parts {
		if l.parts[i].key == p.key {
			l.parts[i].v = v
			return
		}
	}
	l.parts = append(l.parts, partEntry{p.key, v})
}

// Get returns l's part, the zero T if none was set. On l's loop, or any
// goroutine for a part set before Start and not changed since.
func (p Part[T]) Get(l *Loop) T {
	p.check()
	for i := range l.parts {
		if l.parts[i].key == p.key {
			v, _ := l.parts[i].v.(T) // set by Set: always a T
			return v
		}
	}
	var zero T
	return zero
}

func (p Part[T]) check() {
	if p.key == nil {
		panic("BUG: reactor.Part not made by NewPart")
	}
}
