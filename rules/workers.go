package rules

import (
	"context"
	"time"
)

// Workers runs short tasks on reusable goroutines of a Group: a task goes
// to an idle worker if one is waiting, else a new worker starts; a worker
// idle for the idle timeout returns. Reuse matters on a hot path: a fresh
// goroutine per proxied request spent ~12 % of the router's CPU growing its
// stack (runtime.morestack in perf, 2-core machine, 4 KB requests to an
// instant backend), plus the Group's bookkeeping and pprof labels.
//
// Workers does not bound how many run: the caller bounds the tasks it
// submits (the backend set counts requests in flight). Every worker is a
// goroutine of the Group, so the Group's Stop and Wait cover them.
type Workers struct {
	g    *Group
	name string
	idle time.Duration
	// tasks is unbuffered: a send succeeds only when a worker is idle and
	// receiving, so a task never waits behind another.
	tasks chan func(context.Context)
}

// NewWorkers returns workers started in g under name (their pprof label),
// each returning after idle without a task.
func NewWorkers(g *Group, name string, idle time.Duration) *Workers {
	if idle <= 0 {
		panic("BUG: rules.NewWorkers: idle must be positive")
	}
	return &Workers{g: g, name: name, idle: idle, tasks: make(chan func(context.Context))}
}

// Go runs fn(ctx) on an idle worker or a new one, where ctx is the group's
// context. Like Group.Go, it panics after the group's Stop when it must
// start a worker: callers that may race Stop guard it. Any goroutine; it
// never blocks.
func (w *Workers) Go(fn func(ctx context.Context)) {
	select {
	case w.tasks <- fn:
		return
	default:
	}
	w.g.Go(w.name, func(ctx context.Context) { w.work(ctx, fn) })
}

// work runs fn, then the tasks handed to it, until it has been idle too
// long or the group stops.
func (w *Workers) work(ctx context.Context, fn func(context.Context)) {
	timer := time.NewTimer(w.idle)
	defer timer.Stop()
	for {
		fn(ctx)
		fn = nil // not kept alive while idle
		if ctx.Err() != nil {
			return
		}
		timer.Reset(w.idle)
		select {
		case fn = <-w.tasks:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
