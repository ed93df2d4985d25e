package backend

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPrefillDefaults(t *testing.T) {
	t.Parallel()
	var b Backend
	m := b.Prefill()
	if m.Base != DefaultPrefillBase || m.TokensPerSec != DefaultPrefillTokensPerSec || m.Samples != 0 {
		t.Fatalf("defaults: %+v", m)
	}
	for range prefillMinSamples - 1 {
		b.ObserveTTFT(1000, time.Second)
	}
	if m := b.Prefill(); m.Samples != 0 {
		t.Fatalf("fitted before %d samples: %+v", prefillMinSamples, m)
	}
	b.ObserveTTFT(-1, time.Second) // ignored
	b.ObserveTTFT(10, 0)           // ignored
	if b.prefill.seen != prefillMinSamples-1 {
		t.Fatalf("seen %d", b.prefill.seen)
	}
}

// A synthetic engine: TTFT = 30 ms + tokens / 5000, ±2 % noise, and one
// sample in eight an outlier (stuck 2 s behind another prefill).
func TestPrefillFitOutliers(t *testing.T) {
	t.Parallel()
	var b Backend
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		tok := r.IntN(8000)
		secs := (0.030 + float64(tok)/5000) * (0.98 + 0.04*r.Float64())
		if i%8 == 3 {
			secs += 2
		}
		b.ObserveTTFT(tok, time.Duration(secs*float64(time.Second)))
	}
	m := b.Prefill()
	if m.Samples < 192 || m.Samples > 200 { // a full window refits at least every 64 samples
		t.Fatalf("samples %d", m.Samples)
	}
	if math.Abs(m.TokensPerSec-5000)/5000 > 0.1 {
		t.Fatalf("rate %.0f, want ~5000", m.TokensPerSec)
	}
	if d := m.Base - 30*time.Millisecond; d < -15*time.Millisecond || d > 15*time.Millisecond {
		t.Fatalf("base %v, want ~30ms", m.Base)
	}
}

// Samples that do not spread in tokens fit the base only, at the last
// known rate (the default first).
func TestPrefillFitNoSpread(t *testing.T) {
	t.Parallel()
	var b Backend
	for range 32 {
		b.ObserveTTFT(800, 150*time.Millisecond) // 800/8000 = 100 ms + 50 ms
	}
	m := b.Prefill()
	if m.TokensPerSec != DefaultPrefillTokensPerSec {
		t.Fatalf("rate %v", m.TokensPerSec)
	}
	if d := m.Base - 50*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("base %v, want 50ms", m.Base)
	}
}

// Clamps: a slope that says the engine is infinitely fast, or TTFTs
// below the line, stay within bounds.
func TestPrefillFitClamps(t *testing.T) {
	t.Parallel()
	var b Backend
	for i := range 64 {
		b.ObserveTTFT(i*100, time.Nanosecond*time.Duration(1+i%2))
	}
	m := b.Prefill()
	if m.TokensPerSec < prefillMinRate || m.TokensPerSec > prefillMaxRate || m.Base < 0 || m.Base > prefillMaxBase {
		t.Fatalf("out of bounds: %+v", m)
	}
}

func TestPendingPrefill(t *testing.T) {
	t.Parallel()
	var b Backend
	b.AddPendingPrefill(300)
	b.AddPendingPrefill(200)
	b.AddPendingPrefill(-300)
	if got := b.PendingPrefill(); got != 200 {
		t.Fatalf("pending %d", got)
	}
}

func BenchmarkObserveTTFT(b *testing.B) {
	var be Backend
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		be.ObserveTTFT(i%4096, time.Duration(i%4096)*time.Microsecond*100)
	}
}

// The queue factor: 1 until learned; an engine whose first tokens wait
// for the prefill pending ahead (vLLM) stays near 1, one that prefills
// side by side goes to 0, and one that waits for half of it to ½.
func TestQueueFactor(t *testing.T) {
	t.Parallel()
	for _, want := range []float64{1, 0, 0.5} {
		var b Backend
		if f := b.QueueFactor(); f != 1 {
			t.Fatalf("unlearned: %v", f)
		}
		b.ObserveQueued(1000, 4000, time.Second) // no prefill model yet: ignored
		for i := range 4 * prefillMinSamples {   // TTFT = 20 ms + tokens / 10,000
			tok := 500 + 100*(i%32)
			b.ObserveTTFT(tok, 20*time.Millisecond+time.Duration(tok)*100*time.Microsecond)
		}
		if m := b.Prefill(); m.Samples == 0 {
			t.Fatalf("no fit: %+v", m)
		}
		for i := range queueMinSamples - 1 {
			ahead := int64(1000 + 500*(i%8))
			b.ObserveQueued(800, ahead, 20*time.Millisecond+80*time.Millisecond+time.Duration(want*float64(ahead))*100*time.Microsecond)
			if f := b.QueueFactor(); f != 1 {
				t.Fatalf("factor %v after %d samples, before %d", f, i+1, queueMinSamples)
			}
		}
		for i := range 64 {
			ahead := int64(1000 + 500*(i%8))
			b.ObserveQueued(800, ahead, 20*time.Millisecond+80*time.Millisecond+time.Duration(want*float64(ahead))*100*time.Microsecond)
		}
		if f := b.QueueFactor(); math.Abs(f-want) > 0.05 {
			t.Fatalf("factor %v, want %v", f, want)
		}
	}
}

// The fleet's pooled fit is the prior of a backend that has not learned
// its own: another backend's samples teach it the prefill model, the
// queue factor and the slot limit; its own samples then take over; an
// engine seen running more than the fleet's limit clears that limit.
func TestFleetPriors(t *testing.T) {
	t.Parallel()
	s, _ := testSet(t, nil)
	a, b := mustAdd(t, s, "http://127.0.0.1:1"), mustAdd(t, s, "http://127.0.0.1:2")
	if m := b.Prefill(); m.Samples != 0 || b.QueueFactor() != 1 || b.Slots() != 0 {
		t.Fatalf("nothing learned: %+v, factor %v, slots %d", m, b.QueueFactor(), b.Slots())
	}
	for i := range 4 * prefillMinSamples { // a: TTFT = 20 ms + tokens / 10,000
		tok := 500 + 100*(i%32)
		a.ObserveTTFT(tok, 20*time.Millisecond+time.Duration(tok)*100*time.Microsecond)
	}
	if m := b.Prefill(); m.Samples == 0 || math.Abs(m.TokensPerSec-10000) > 500 {
		t.Fatalf("b's prior after a's samples: %+v, want a's fit (10,000 tokens/s)", m)
	}
	for i := range 4 * queueMinSamples { // a prefills side by side: factor 0
		a.ObserveQueued(800, int64(1000+500*(i%8)), 100*time.Millisecond)
	}
	if f := b.QueueFactor(); f > 0.05 {
		t.Fatalf("b's queue factor after a's samples: %v, want a's (0)", f)
	}
	for i := range 4 * prefillMinSamples { // b's own: 5,000 tokens/s
		tok := 500 + 100*(i%32)
		b.ObserveTTFT(tok, 20*time.Millisecond+time.Duration(tok)*200*time.Microsecond)
	}
	if m := b.Prefill(); math.Abs(m.TokensPerSec-5000) > 250 {
		t.Fatalf("b's own fit: %+v, want 5,000 tokens/s", m)
	}
	for range slotsSeen {
		a.SetEngine(EngineLoad{Running: 5, Waiting: 2, KVUsage: 0.2, Until: time.Now().Add(time.Hour)})
	}
	if got := b.Slots(); got != 5 {
		t.Fatalf("b's slots after a's scrapes at 5: %d, want the fleet's 5", got)
	}
	b.SetEngine(EngineLoad{Running: 8, KVUsage: 0.2, Until: time.Now().Add(time.Hour)})
	if got := b.Slots(); got != 0 {
		t.Fatalf("b runs 8: slots %d, want the fleet's 5 cleared", got)
	}
	if got := a.Slots(); got != 5 {
		t.Fatalf("a's own limit: %d, want 5", got)
	}
}
