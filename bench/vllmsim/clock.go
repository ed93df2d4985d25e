package vllmsim

import "time"

// clock is the engine's simulated time: a duration since the engine
// started. The scheduler sleeps until a step's simulated end; handlers
// read it when a request arrives.
type clock interface {
	// now returns the simulated time. Any goroutine.
	now() time.Duration
	// sleepUntil returns when the simulated time reaches t (at once if it
	// has), true, or false if stop is closed first. Scheduler only.
	sleepUntil(t time.Duration, stop <-chan struct{}) bool
}

// realClock is simulated time = real time since start × speedup. Steps
// end at absolute deadlines (sleepUntil the step's end, not sleep its
// length), so timer lateness does not add up over a busy stretch; a
// scheduler that falls behind real time starts its next step at the
// current time, so simulated time never runs behind the clients' clock.
type realClock struct {
	start   time.Time
	speedup float64
}

func (c realClock) now() time.Duration {
	return time.Duration(float64(time.Since(c.start)) * c.speedup)
}

func (c realClock) sleepUntil(t time.Duration, stop <-chan struct{}) bool {
	d := time.Until(c.start.Add(time.Duration(float64(t) / c.speedup)))
	if d <= 0 {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-stop:
		return false
	}
}
