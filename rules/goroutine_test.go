package rules

import (
	"context"
	"errors"
	"runtime/pprof"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGroupStopJoins(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	started := make(chan struct{})
	var exited [3]bool
	for i := range exited {
		g.Go("worker", func(ctx context.Context) {
			started <- struct{}{}
			<-ctx.Done()
			exited[i] = true
		})
	}
	for range exited {
		<-started
	}
	if got := g.Running(); !slices.Equal(got, []string{"worker", "worker", "worker"}) {
		t.Fatalf("Running = %v, want three workers", got)
	}
	g.Stop()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if exited != [3]bool{true, true, true} { // Wait is a happens-before edge
		t.Fatalf("exited = %v after Wait", exited)
	}
	if got := g.Running(); len(got) != 0 {
		t.Fatalf("Running = %v after Wait, want none", got)
	}
	g.Stop() // idempotent
}

func TestGroupLabelsGoroutine(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	got := make(chan string, 1)
	g.Go("tokenpool.worker/3", func(ctx context.Context) {
		v, _ := pprof.Label(ctx, "goroutine")
		got <- v
	})
	if v := <-got; v != "tokenpool.worker/3" {
		t.Fatalf("pprof label goroutine = %q", v)
	}
	g.Stop()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGroupParentCancel(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithCancel(context.Background())
	g := NewGroup(parent)
	g.Go("a", func(ctx context.Context) { <-ctx.Done() })
	cancel()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

// TestGroupWaitTimeout: a goroutine that ignores its context is reported by
// name, and a later Wait joins it.
func TestGroupWaitTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(context.Background())
		release := make(chan struct{})
		g.Go("stuck", func(context.Context) { <-release })
		g.Go("polite", func(ctx context.Context) { <-ctx.Done() })
		g.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = %v, want deadline exceeded", err)
		}
		if got := g.Running(); !slices.Equal(got, []string{"stuck"}) {
			t.Fatalf("Running = %v, want [stuck]", got)
		}
		close(release)
		if err := g.Wait(context.Background()); err != nil {
			t.Fatalf("second Wait = %v", err)
		}
	})
}

func TestGroupGoAfterStopPanics(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	g.Stop()
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Go after Stop did not panic")
		}
	}()
	g.Go("late", func(context.Context) {})
}
