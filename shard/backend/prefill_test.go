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
	if m.Samples != 200 {
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
