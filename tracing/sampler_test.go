package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestSamplerMatchesSDK: the loop's decision is the SDK sampler's, for
// every OTEL_TRACES_SAMPLER the SDK reads, with and without a parent.
func TestSamplerMatchesSDK(t *testing.T) {
	t.Parallel()
	envs := []struct{ name, arg string }{
		{"", ""}, {"always_on", ""}, {"always_off", ""}, {"traceidratio", "0.25"}, {"traceidratio", ""},
		{"parentbased_always_on", ""}, {"parentbased_always_off", ""}, {"parentbased_traceidratio", "0.5"},
		{"parentbased_traceidratio", "0"}, {"PARENTBASED_TRACEIDRATIO", " 0.001 "}, {"traceidratio", "1.5"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, e := range envs {
		s, err := SamplerFromEnv(func(k string) string {
			switch k {
			case "OTEL_TRACES_SAMPLER":
				return e.name
			case "OTEL_TRACES_SAMPLER_ARG":
				return e.arg
			}
			return ""
		})
		if (err != nil) != (e.arg == "1.5") {
			t.Fatalf("%s %s: err %v", e.name, e.arg, err)
		}
		checkAgainstSDK(t, s, rng)
	}
	checkAgainstSDK(t, RatioSampler(0.01), rng)
	checkAgainstSDK(t, RatioSampler(1), rng)
}

func checkAgainstSDK(t *testing.T, s Sampler, rng *rand.Rand) {
	t.Helper()
	sdk := s.sdkSampler()
	sampled := 0
	for i := range 4000 {
		var tid [16]byte
		binary.BigEndian.PutUint64(tid[:8], rng.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rng.Uint64())
		hasParent, parentSampled := i%3 != 0, i%3 == 1
		ctx := context.Background()
		if hasParent {
			flags := trace.TraceFlags(0)
			if parentSampled {
				flags = trace.FlagsSampled
			}
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: flags, Remote: true}))
		}
		want := sdk.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid}).Decision == sdktrace.RecordAndSample
		if got := s.Sample(tid, hasParent, parentSampled); got != want {
			t.Fatalf("%s (%s): trace %x parent %v sampled %v: loop %v, SDK %v", s, sdk.Description(), tid, hasParent, parentSampled, got, want)
		}
		if want {
			sampled++
		}
	}
	t.Logf("%s: %d of 4000 sampled", s, sampled)
}
