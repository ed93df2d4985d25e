//go:build !race

package memlimit

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// Not under the race detector: its shadow memory grows with the heap and
// is not given back with it.

// A burst of garbage is given back to the OS: the resident set returns
// within 10 % (and 16 MiB of the runtime's own) of its level before.
func TestGiveBackReturnsRSS(t *testing.T) {
	rss := func() int64 {
		b, err := os.ReadFile("/proc/self/statm")
		if err != nil {
			t.Skip("no /proc/self/statm:", err)
		}
		f := strings.Fields(string(b))
		n, _ := strconv.ParseInt(f[1], 10, 64) // the kernel's own format
		return n * int64(os.Getpagesize())
	}
	debug.FreeOSMemory()
	before := rss()
	g := New(Config{Interval: time.Nanosecond, Slack: 64 << 20}, math.MaxInt64, vm.NewSet())
	burst := make([][]byte, 0, 256<<10)
	for range 256 << 10 { // 256 MiB in 1 KiB objects, as a decode's values are small
		b := make([]byte, 1024)
		b[0] = 1 // touched: fresh pages are not resident until written
		burst = append(burst, b)
	}
	peak := rss()
	runtime.KeepAlive(burst)
	burst = nil
	now := time.Now()
	gave := false
	for i := 0; i < 3 && !gave; i++ { // the first look may still see it grow
		now = now.Add(time.Second)
		gave = g.Tick(now)
	}
	if !gave {
		t.Fatalf("no give-back after a 256 MiB burst (held %d MiB, floor %d MiB)", g.prev>>20, g.floor>>20)
	}
	after := rss()
	t.Logf("RSS before %d MiB, peak %d MiB, after give-back %d MiB", before>>20, peak>>20, after>>20)
	if peak < before+200<<20 {
		t.Fatalf("the burst did not show in RSS: before %d MiB, peak %d MiB", before>>20, peak>>20)
	}
	if after > before+before/10+16<<20 {
		t.Fatalf("RSS after the give-back %d MiB, before %d MiB", after>>20, before>>20)
	}
}
