package memlimit

import (
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

func TestParseCgroupLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"max\n":                 0,
		"536870912\n":           536870912,
		"9223372036854771712\n": 0, // v1's unlimited
		"0":                     0,
		"-1":                    0,
		"garbage":               0,
		"":                      0,
	} {
		if got := parseCgroupLimit(in); got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{Limit: -1}, {Interval: -time.Second}, {Slack: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

// The governor gives back once the heap holds Slack more than after its
// last give-back and stopped growing (by Slack/4 or more a look), at most
// once per Interval.
func TestTickDecides(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	held := []uint64{100 * mib} // New's first read
	freed := 0
	g := &Governor{cfg: Config{Interval: time.Second, Slack: 64 * mib}}
	g.readOS = func() uint64 { h := held[0]; held = held[1:]; return h }
	g.freeOS = func() { freed++ }
	set := vm.NewSet()
	g.givenN, g.givenBytes = set.NewCounter("n"), set.NewCounter("b")
	g.floor = g.held()
	g.prev = g.floor
	t0 := time.Unix(1000, 0)
	steps := []struct {
		held  []uint64 // what Tick reads: the look, and after a give-back
		at    time.Duration
		gives bool
	}{
		{[]uint64{150 * mib}, 1 * time.Second, false},           // under floor + slack
		{[]uint64{300 * mib}, 2 * time.Second, false},           // growing: the burst runs
		{[]uint64{300 * mib, 110 * mib}, 3 * time.Second, true}, // stopped: give back
		{[]uint64{200 * mib}, 3500 * time.Millisecond, false},   // over slack, but growing
		{[]uint64{200 * mib}, 3900 * time.Millisecond, false},   // stopped, within an interval of the last
		{[]uint64{190 * mib, 120 * mib}, 4 * time.Second, true}, // an interval later
		{[]uint64{80 * mib}, 5 * time.Second, false},            // shrank: the floor follows
		{[]uint64{150 * mib}, 5500 * time.Millisecond, false},   // growing again
		{[]uint64{150 * mib, 90 * mib}, 6 * time.Second, true},  // 70 MiB over the new floor
		{[]uint64{140 * mib}, 7 * time.Second, false},           // 50 over: under slack
		{[]uint64{170 * mib}, 8 * time.Second, false},           // grew 30: more than slack/4
		{[]uint64{172 * mib, 95 * mib}, 9 * time.Second, true},  // grew 2: an idle router's garbage
	}
	for i, s := range steps {
		held = append(held[:0], s.held...)
		if got := g.Tick(t0.Add(s.at)); got != s.gives {
			t.Fatalf("step %d (held %d MiB): gave back %v, want %v", i, s.held[0]/mib, got, s.gives)
		}
	}
	if freed != 4 || g.givenN.Get() != 4 || g.givenBytes.Get() != (190+70+60+77)*mib {
		t.Fatalf("freed %d, counted %d, bytes %d MiB", freed, g.givenN.Get(), g.givenBytes.Get()/mib)
	}
}
