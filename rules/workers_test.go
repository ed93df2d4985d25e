package rules

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestWorkersReuse: sequential tasks run on one reused goroutine; tasks
// submitted while all workers are busy start new ones; idle workers
// return after the idle timeout; Stop ends the rest.
func TestWorkersReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(context.Background())
		w := NewWorkers(g, "proxy", time.Second)
		done := make(chan int, 16)
		for i := range 5 {
			w.Go(func(context.Context) { done <- i })
			if got := <-done; got != i {
				t.Fatalf("task %d ran as %d", i, got)
			}
			synctest.Wait() // the worker is idle again, receiving
		}
		if got := g.Running(); !slices.Equal(got, []string{"proxy"}) {
			t.Fatalf("Running after 5 sequential tasks = %v, want one worker", got)
		}
		// Three tasks that block at once need three workers.
		release := make(chan struct{})
		for range 3 {
			w.Go(func(context.Context) { <-release })
		}
		synctest.Wait()
		if got := g.Running(); len(got) != 3 {
			t.Fatalf("Running with 3 blocked tasks = %v, want 3 workers", got)
		}
		close(release)
		synctest.Wait()
		time.Sleep(2 * time.Second) // past the idle timeout (fake clock)
		synctest.Wait()
		if got := g.Running(); len(got) != 0 {
			t.Fatalf("Running after the idle timeout = %v, want none", got)
		}
		// A task after the idle workers left starts a fresh one; Stop
		// ends it while it waits for work.
		w.Go(func(context.Context) { done <- 9 })
		<-done
		g.Stop()
		if err := g.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWorkersContextCancelled: a task gets the group's context, which
// Stop cancels.
func TestWorkersContextCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(context.Background())
		w := NewWorkers(g, "watch", time.Minute)
		got := make(chan error, 1)
		w.Go(func(ctx context.Context) { <-ctx.Done(); got <- ctx.Err() })
		g.Stop()
		if err := <-got; err != context.Canceled {
			t.Fatalf("task ctx err = %v, want Canceled", err)
		}
		if err := g.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
