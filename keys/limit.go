package keys

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Window is the period the limits are counted over: OpenAI's requests
// and tokens per minute.
const Window = int64(time.Minute)

// maxDebt bounds how far usage past a reservation may push a limiter
// ahead of now: two windows. A key that used far more than it reserved
// (a prompt estimate much too low) waits at most this long to be
// admitted again.
const maxDebt = 2 * Window

// Limiter is one limit's state: a generic cell rate algorithm. tat, the
// theoretical arrival time, is when the limiter would be back to its full
// allowance (a minute's worth of its limit); now + Window − tat is what a
// request may still take. Its methods take the clock (nanoseconds of the
// Ring's monotonic clock) and the limit (per Window, positive), so that a
// reload that changes a key's limit keeps its state. The zero value is a
// full allowance. Any goroutine: one atomic, updated by compare-and-swap.
type Limiter struct{ tat atomic.Int64 }

// span is the time n units take at limit per Window, n clamped to
// [0, 4 × limit] (beyond that the debt bound applies anyway): exact
// integer arithmetic, n × Window / limit.
func span(n, limit int64) int64 {
	if n <= 0 || limit <= 0 {
		return 0
	}
	n = min(n, 4*limit)
	hi, lo := bits.Mul64(uint64(n), uint64(Window))
	q, _ := bits.Div64(hi, lo, uint64(limit)) // q ≤ 4 Window: no overflow
	return int64(q)
}

// Take takes n units if they fit in what is left of the allowance now,
// and reports so; when they do not, nothing is taken and wait is how long
// until they would fit.
func (l *Limiter) Take(now, n, limit int64) (ok bool, wait time.Duration) {
	cost := span(n, limit)
	for {
		tat := l.tat.Load()
		next := max(tat, now) + cost
		if next-now > Window {
			return false, time.Duration(next - now - Window)
		}
		if l.tat.CompareAndSwap(tat, next) {
			return true, 0
		}
	}
}

// Adjust corrects what was taken by delta units: a refund (delta < 0, at
// most back to a full allowance) or a charge past the allowance (delta >
// 0, never refused: the usage happened; bounded by maxDebt).
func (l *Limiter) Adjust(now, delta, limit int64) {
	switch {
	case delta > 0:
		cost := span(delta, limit)
		for {
			tat := l.tat.Load()
			next := min(max(tat, now)+cost, now+maxDebt)
			if next <= tat || l.tat.CompareAndSwap(tat, next) {
				return
			}
		}
	case delta < 0:
		cost := span(-delta, limit)
		for {
			tat := l.tat.Load()
			if tat <= now {
				return // full already
			}
			if l.tat.CompareAndSwap(tat, max(tat-cost, now)) {
				return
			}
		}
	}
}

// State is the limiter now: the units left (0 to limit) and the time
// until the allowance is whole again (0 when it is).
func (l *Limiter) State(now, limit int64) (remaining int64, reset time.Duration) {
	ahead := l.tat.Load() - now
	if ahead <= 0 {
		return limit, 0
	}
	if ahead >= Window {
		return 0, time.Duration(ahead)
	}
	hi, lo := bits.Mul64(uint64(Window-ahead), uint64(limit))
	q, _ := bits.Div64(hi, lo, uint64(Window)) // < limit
	return int64(q), time.Duration(ahead)
}
