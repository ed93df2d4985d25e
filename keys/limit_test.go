package keys

import (
	"sync"
	"testing"
	"time"
)

const sec = int64(time.Second)

func TestLimiterRequests(t *testing.T) {
	t.Parallel()
	var l Limiter
	now := int64(1000 * sec)
	// 3 per minute: a whole minute's allowance at first.
	for i := range 3 {
		if ok, _ := l.Take(now, 1, 3); !ok {
			t.Fatalf("request %d refused", i)
		}
	}
	if rem, reset := l.State(now, 3); rem != 0 || reset != time.Minute {
		t.Fatalf("State after 3 of 3 = %d, %v; want 0, 1m", rem, reset)
	}
	ok, wait := l.Take(now, 1, 3)
	if ok || wait != 20*time.Second {
		t.Fatalf("4th request: ok %v, wait %v; want refused, 20s (one request is earned back every 20 s)", ok, wait)
	}
	// A refusal takes nothing.
	if rem, _ := l.State(now, 3); rem != 0 {
		t.Fatalf("refused request took something: remaining %d", rem)
	}
	now += 20 * sec
	if rem, reset := l.State(now, 3); rem != 1 || reset != 40*time.Second {
		t.Fatalf("20 s later: State = %d, %v; want 1, 40s", rem, reset)
	}
	if ok, _ := l.Take(now, 1, 3); !ok {
		t.Fatal("request refused after 20 s")
	}
	now += 10 * time.Minute.Nanoseconds()
	if rem, reset := l.State(now, 3); rem != 3 || reset != 0 {
		t.Fatalf("idle: State = %d, %v; want 3, 0", rem, reset)
	}
}

func TestLimiterTokensAdjust(t *testing.T) {
	t.Parallel()
	var l Limiter
	now := int64(5 * sec)
	if ok, _ := l.Take(now, 600, 1000); !ok {
		t.Fatal("600 of 1000 refused")
	}
	if ok, wait := l.Take(now, 600, 1000); ok || wait != 12*time.Second {
		t.Fatalf("600 more: ok %v, wait %v; want refused, 12s", ok, wait)
	}
	// The usage said 100 were used, not 600: 500 back.
	l.Adjust(now, -500, 1000)
	if rem, _ := l.State(now, 1000); rem != 900 {
		t.Fatalf("after the refund: remaining %d, want 900", rem)
	}
	// A refund never goes past a full allowance.
	l.Adjust(now, -5000, 1000)
	if rem, reset := l.State(now, 1000); rem != 1000 || reset != 0 {
		t.Fatalf("after a large refund: %d, %v; want 1000, 0", rem, reset)
	}
	// A charge past the limit is a debt, bounded by maxDebt.
	l.Adjust(now, 1500, 1000)
	if rem, reset := l.State(now, 1000); rem != 0 || reset != 90*time.Second {
		t.Fatalf("after 1500 of 1000: %d, %v; want 0, 1m30s", rem, reset)
	}
	if ok, wait := l.Take(now, 1, 1000); ok || wait != 30*time.Second+60*time.Millisecond {
		t.Fatalf("in debt: ok %v, wait %v", ok, wait)
	}
	l.Adjust(now, 1_000_000, 1000)
	if _, reset := l.State(now, 1000); reset != time.Duration(maxDebt) {
		t.Fatalf("debt %v, want bounded to %v", reset, time.Duration(maxDebt))
	}
}

func TestLimiterLargeLimits(t *testing.T) {
	t.Parallel()
	var l Limiter
	now := int64(sec)
	if ok, _ := l.Take(now, MaxTPM, MaxTPM); !ok {
		t.Fatal("the whole of MaxTPM refused")
	}
	if rem, reset := l.State(now, MaxTPM); rem != 0 || reset != time.Minute {
		t.Fatalf("State = %d, %v", rem, reset)
	}
	if got := span(1, 1); got != Window {
		t.Fatalf("span(1, 1) = %d", got)
	}
	if got := span(1<<62, 1); got != 4*Window {
		t.Fatalf("span clamps: %d", got)
	}
}

// TestLimiterConcurrent: loops racing on one limiter take exactly its
// limit, never more.
func TestLimiterConcurrent(t *testing.T) {
	t.Parallel()
	var l Limiter
	const limit = 1000
	now := int64(sec)
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range 500 {
				if ok, _ := l.Take(now, 1, limit); ok {
					n++
				}
			}
			mu.Lock()
			taken += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if taken != limit {
		t.Fatalf("took %d, want exactly %d", taken, limit)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", -time.Second: "0s", time.Microsecond: "1ms", 20 * time.Millisecond: "20ms",
		time.Second: "1s", 6 * time.Minute: "6m0s", 1500 * time.Millisecond: "1.5s", 17280*time.Millisecond + 400*time.Microsecond: "17.28s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestMask(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"sk-abcdefghijyz":    "sk-ab********yz",
		"short":              "***",
		"sk-abc\x01defghijk": "***",
		"sk-" + string(make([]byte, 0)) + "0123456789012345678901234567890123456789yz": "sk-01" + "********************************" + "yz",
	} {
		if got := Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}
