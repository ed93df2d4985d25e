// Package memlimit keeps saltus's memory near what it uses. It sets the Go
// runtime's soft memory limit (debug.SetMemoryLimit) from the container's
// memory limit, and its governor gives the heap's pages back to the
// operating system once a burst is over. `saltus serve` starts one for
// the process.
//
// Why a governor: the runtime returns free heap pages to the OS slowly
// (its background scavenger paces itself to about 1 % of a CPU) and only
// after a collection finds them free, and an idle router allocates too
// little to trigger one: after a burst of large request bodies the
// process kept its peak resident set for minutes (the collector's forced
// period is 2 minutes), which in a pod sized for the steady state is how
// a handful of requests takes it down. The governor looks at the heap
// every Config.Interval; when the heap holds Config.Slack more than
// after its last give-back and stopped growing (the burst is over: it
// grew less than a quarter of Slack since the last look), it
// collects and returns what is free (debug.FreeOSMemory), at most once
// per interval.
//
// # Concurrency
//
// A Governor's state is owned by the goroutine that runs it (Run) or calls
// Tick; its metrics are safe for concurrent use.
package memlimit

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

// Config is the process's memory settings.
type Config struct {
	// Limit is the soft memory limit in bytes (debug.SetMemoryLimit: the
	// collector runs harder as the process nears it; it is not a cap).
	// 0: automatic: GOMEMLIMIT when the environment sets it (the
	// runtime's own; GOMEMLIMIT=off for none), else LimitShare of the
	// cgroup's memory limit when the process has one, else none.
	Limit int64
	// Interval is how often the governor looks at the heap; 0: never
	// (no give-back). Default 5s: memory returns within a few intervals
	// of a burst's end.
	Interval time.Duration
	// Slack is how much more heap (held from the OS, not returned) than
	// after the last give-back makes the governor give back, once the
	// heap stopped growing (grew less than Slack/4 since its last look).
	// Default 8 MiB: one 2 MB body of a million JSON values leaves ~12
	// MiB of heap behind (garbage below the collector's goal, which
	// serve's 32 MiB --gc-heap-floor raises), kept for good without a
	// give-back (at 16 MiB it was: RSS stayed 60 % above its level
	// before). A give-back is a full collection (a few ms on this heap),
	// and under load the heap grows between collections, so it happens
	// when traffic pauses, at most once per Interval.
	Slack int64
}

// LimitShare is the share of the cgroup's memory limit the automatic soft
// limit takes: the rest is for what the Go runtime does not count
// (thread stacks outside the heap, the binary's pages, the kernel's
// socket buffers charged to the cgroup).
const LimitShare = 0.9

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Limit:    0,               // automatic
		Interval: 5 * time.Second, // give-back within ~10 s of a burst's end
		Slack:    8 << 20,         // 8 MiB
	}
}

// Validate names the invalid fields.
func (c Config) Validate() error {
	switch {
	case c.Limit < 0:
		return fmt.Errorf("memlimit: Limit must not be negative, got %d", c.Limit)
	case c.Interval < 0:
		return fmt.Errorf("memlimit: Interval must not be negative, got %v", c.Interval)
	case c.Slack < 0:
		return fmt.Errorf("memlimit: Slack must not be negative, got %d", c.Slack)
	}
	return nil
}

// Apply sets the runtime's soft memory limit as c says and returns it
// (math.MaxInt64: none), with where it came from: "config", "GOMEMLIMIT",
// "cgroup" or "none". cgroupMax is the cgroup's memory limit (0: none;
// CgroupLimit reads it).
func (c Config) Apply(cgroupMax int64) (int64, string) {
	switch {
	case c.Limit > 0:
		debug.SetMemoryLimit(c.Limit)
		return c.Limit, "config"
	case os.Getenv("GOMEMLIMIT") != "":
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT" // the runtime read it at start
	case cgroupMax > 0:
		l := int64(float64(cgroupMax) * LimitShare)
		debug.SetMemoryLimit(l)
		return l, "cgroup"
	}
	return debug.SetMemoryLimit(-1), "none"
}

// CgroupLimit reads the process's cgroup memory limit: cgroup v2's
// memory.max, else v1's memory.limit_in_bytes; 0 when there is none (or
// "max", or a v1 value of 2^62 and more, its "unlimited").
func CgroupLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // not this cgroup version, or not in a container
		}
		return parseCgroupLimit(string(b))
	}
	return 0
}

// parseCgroupLimit is one cgroup file's limit, 0 for none.
func parseCgroupLimit(s string) int64 {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's page-rounded MaxInt64
		return 0
	}
	return n
}

// heapHeld are the runtime/metrics classes of heap memory held from the
// OS: the objects (live or garbage not yet swept), the free spans not yet
// returned, and what the spans in use do not fill. What FreeOSMemory
// returns comes out of them.
var heapHeld = [...]string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
}

// Governor gives the heap back after bursts (see the package comment).
type Governor struct {
	cfg     Config
	samples []metrics.Sample
	freeOS  func()        // debug.FreeOSMemory; a test's counter
	readOS  func() uint64 // heldNow; a test's sequence

	// Owned by the goroutine that calls Tick (Run's).
	floor, prev uint64    // held after the last give-back (or at start); at the last look
	last        time.Time // the last give-back
	givenN      *vm.Counter
	givenBytes  *vm.Counter
}

func init() {
	promtext.Describe(map[string]string{
		"saltus_memory_limit_bytes":            "The Go runtime's soft memory limit (--memory-limit, GOMEMLIMIT, or 90 % of the cgroup's memory limit), in bytes; 0: none.",
		"saltus_memory_given_back_total":       "Times the memory governor collected and returned the heap's free pages to the OS after a burst.",
		"saltus_memory_given_back_bytes_total": "Heap bytes the memory governor's give-backs returned to the OS, in bytes.",
	})
}

// New returns a governor of c's (validated) settings, its metrics in set
// (nil: not exported).
// limit is Apply's (math.MaxInt64: none, exported as 0).
func New(c Config, limit int64, set *vm.Set) *Governor {
	g := &Governor{cfg: c, freeOS: debug.FreeOSMemory}
	g.readOS = g.heldNow
	for _, name := range heapHeld {
		g.samples = append(g.samples, metrics.Sample{Name: name})
	}
	if set == nil {
		set = vm.NewSet() // not exported (a test's serving path)
	}
	if limit == math.MaxInt64 {
		limit = 0 // none
	}
	set.NewGauge("saltus_memory_limit_bytes", func() float64 { return float64(limit) })
	g.givenN = set.NewCounter("saltus_memory_given_back_total")
	g.givenBytes = set.NewCounter("saltus_memory_given_back_bytes_total")
	g.floor = g.held()
	g.prev = g.floor
	return g
}

// held is the heap memory held from the OS now.
func (g *Governor) held() uint64 { return g.readOS() }

// heldNow is held from the runtime's metrics.
func (g *Governor) heldNow() uint64 {
	metrics.Read(g.samples)
	var n uint64
	for _, s := range g.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	return n
}

// Tick looks at the heap once, at now, and gives it back when a burst is
// over (see the package comment); it reports whether it did. The caller
// owns g (Run's goroutine, or a test).
func (g *Governor) Tick(now time.Time) bool {
	h := g.held()
	prev := g.prev
	g.prev = h
	if h < g.floor {
		g.floor = h // the steady heap shrank: measure growth from there
		return false
	}
	growing := h > prev+uint64(g.cfg.Slack/4) // an idle router's probes and scrapes add a little garbage
	if h < g.floor+uint64(g.cfg.Slack) || growing || now.Sub(g.last) < g.cfg.Interval {
		return false
	}
	g.freeOS()
	after := g.held()
	if after < h {
		g.givenBytes.Add(int(h - after))
	}
	g.givenN.Inc()
	g.floor, g.prev, g.last = after, after, now
	return true
}

// Run calls Tick every Config.Interval until ctx is done; with an
// Interval of 0 it returns at once. Its caller's goroutine owns g (a
// rules.Group's, so that it is named and joined).
func (g *Governor) Run(ctx context.Context) {
	if g.cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.Tick(now)
		}
	}
}
