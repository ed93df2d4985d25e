// Package rules is about the numbered concurrency rules of saltus
// (RULES.md): this package holds the helpers those rules mandate, and
// rules/vet the analyzers that check them (cmd/saltusvet, `make rules`).
//
// Rule R1 (RULES.md; CONVENTIONS.md § Concurrency):
// every goroutine starts through [Group.Go], which names it, ties it to the
// group's context and joins it on shutdown. A bare `go` statement outside
// this package and tests is a finding of the gostmt analyzer unless an
// exception (//saltus:allow R1 <reason>) says why.
//
// # Concurrency
//
// A Group is safe for concurrent use: any goroutine may call Go, Stop, Wait
// and Running.
package rules

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
)

// Group starts named goroutines under one context and joins them. The zero
// value is not usable; call [NewGroup].
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	running map[string]int
	stopped bool
}

// NewGroup returns a group whose goroutines get a context derived from
// parent: it is cancelled by Stop or when parent is.
func NewGroup(parent context.Context) *Group {
	ctx, cancel := context.WithCancel(parent)
	return &Group{ctx: ctx, cancel: cancel, running: make(map[string]int)}
}

// Go runs fn(ctx) in a new goroutine named name, where ctx is the group's
// context. The name is also the goroutine's pprof label "goroutine", so it
// shows in CPU profiles and in goroutine dumps (debug=1). fn must return
// soon after ctx is done. Go after Stop panics: a goroutine started then
// would never be told to stop. Any goroutine.
func (g *Group) Go(name string, fn func(ctx context.Context)) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		panic(fmt.Sprintf("BUG: rules.Group.Go(%q) after Stop", name))
	}
	g.running[name]++
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.done(name)
		pprof.Do(g.ctx, pprof.Labels("goroutine", name), fn)
	}()
}

func (g *Group) done(name string) {
	g.mu.Lock()
	if g.running[name]--; g.running[name] == 0 {
		delete(g.running, name)
	}
	g.mu.Unlock()
	g.wg.Done()
}

// Stop cancels the group's context; it does not wait. Calling it again
// does nothing. Any goroutine.
func (g *Group) Stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.cancel()
}

// Wait blocks until every goroutine of the group has returned, or ctx is
// done; then it returns ctx.Err() and the goroutines go on (a later Wait
// joins them). It does not stop them: call Stop first. Any goroutine, never
// an event loop.
func (g *Group) Wait(ctx context.Context) error {
	done := make(chan struct{})
	// The one goroutine not started through Go: it only waits on g.wg,
	// and it ends when the group's goroutines do.
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Running returns the names of the goroutines still running, sorted, one
// entry per goroutine: what a shutdown that timed out reports. Any
// goroutine.
func (g *Group) Running() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var names []string
	for name, n := range g.running {
		for range n {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
