package main

import (
	"math"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestOpenShots(t *testing.T) {
	t.Parallel()
	for _, spacing := range []string{"poisson", "fixed"} {
		o := &options{arrival: "open", rate: 40, duration: 30 * time.Second, spacing: spacing}
		if err := o.validate(); err != nil {
			t.Fatal(err)
		}
		shots := openShots(o, 48, "priority")
		if len(shots) != 1200 {
			t.Fatalf("%s: %d shots, want rate × duration = 1200", spacing, len(shots))
		}
		perClient := map[int]int{}
		for k, s := range shots {
			if s.client != k%48 || s.n != perClient[s.client] {
				t.Fatalf("%s: shot %d is client %d's request %d, want client %d's %d", spacing, k, s.client, s.n, k%48, perClient[k%48])
			}
			perClient[s.client]++
			if k > 0 && s.at < shots[k-1].at {
				t.Fatalf("%s: shot %d at %v before shot %d at %v", spacing, k, s.at, k-1, shots[k-1].at)
			}
		}
		last := shots[len(shots)-1].at
		want := 29975 * time.Millisecond // 1199 gaps of 25 ms
		switch spacing {
		case "fixed":
			if d := last - want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("fixed: last shot at %v, want %v", last, want)
			}
		case "poisson":
			// 1199 exponential gaps: relative deviation 1/sqrt(1199), 2.9 %.
			if math.Abs(float64(last-want)) > 0.12*float64(want) {
				t.Fatalf("poisson: last shot at %v, want about %v", last, want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := options{arrival: "open", rate: 12, duration: 30 * time.Second, spacing: "poisson"}
	for _, bad := range []options{
		{arrival: "sometimes"},
		{arrival: "open", rate: 12, duration: 30 * time.Second, spacing: "random"},
		{arrival: "open", rate: 0, duration: 30 * time.Second, spacing: "fixed"},
		{arrival: "open", rate: math.NaN(), duration: 30 * time.Second, spacing: "fixed"},
		{arrival: "open", rate: 1000, duration: time.Hour, spacing: "fixed"}, // 3.6 million requests
		{arrival: "open", rate: 1, duration: 100 * time.Millisecond, spacing: "fixed"},
	} {
		if err := bad.validate(); err == nil {
			t.Errorf("validate(%+v) = nil, want an error", bad)
		}
	}
	for _, good := range []options{ok, {arrival: "closed"}, {arrival: "burst"}} {
		if err := good.validate(); err != nil {
			t.Errorf("validate(%+v) = %v", good, err)
		}
	}
}
