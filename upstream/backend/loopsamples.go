package backend

// The loop path's metrics: a loop never takes the histograms' mutex or
// creates a counter (which takes the metrics.Set's lock); it batches
// samples, and one goroutine ("backend-loop-metrics") writes them.

import "context"

// sample is one request's histogram values (and its status code when
// that counter did not exist yet: creating it takes the metrics.Set's
// lock).
type sample struct {
	b           *Backend
	code        int
	ttfb, total float64 // ttfb < 0: no head arrived
}

// maxSamples bounds a loop's batch of samples between two sweeps.
const maxSamples = 4096

// countCodeLoop is countCode for a loop: a code seen before is an atomic
// add; a new one goes to the flusher, which creates its counter.
func (s *Set) countCodeLoop(ls *loopState, b *Backend, code int) {
	i := code
	if i < 100 || i > 599 {
		i = 0
	}
	if c := b.m.codes[i].Load(); c != nil {
		c.Inc()
		return
	}
	ls.addSample(sample{b: b, code: code, ttfb: -1, total: -1})
}

// addSample records s for the flusher; a full batch goes at once.
func (ls *loopState) addSample(sm sample) {
	ls.samples = append(ls.samples, sm)
	if len(ls.samples) >= maxSamples {
		ls.handOff()
	}
}

// handOff gives the batch to the flusher without waiting; a full queue
// drops it (counted).
func (ls *loopState) handOff() {
	if len(ls.samples) == 0 {
		return
	}
	select {
	case ls.s.samples <- ls.samples:
		ls.samples = make([]sample, 0, min(2*len(ls.samples), maxSamples))
	default:
		ls.s.samplesDropped.Add(len(ls.samples))
		ls.samples = ls.samples[:0]
	}
}

// flushSamples writes the loops' batches into the histograms and
// counters (off the loops: Histogram.Update takes a mutex).
func (s *Set) flushSamples(ctx context.Context) {
	for {
		select {
		case batch := <-s.samples:
			for _, sm := range batch {
				if sm.code != 0 {
					s.countCode(sm.b, sm.code)
				}
				if sm.ttfb >= 0 {
					sm.b.m.ttfb.Update(sm.ttfb)
				}
				if sm.total >= 0 {
					sm.b.m.total.Update(sm.total)
				}
			}
		case <-ctx.Done():
			return
		}
	}
}
