package tracing

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Sampler decides on the loop, as the SDK's samplers of the same name
// would (sdk/trace/sampling.go, v1.47.0), whether a request's span is
// sampled: the decision must be in the traceparent the engine gets, before
// the SDK sees the span. sampler_test.go checks it against the SDK's.
type Sampler struct {
	// parentBased: a client's traceparent decides by its sampled flag
	// (ParentBased); the root sampler decides the others.
	parentBased bool
	// bound: a trace is sampled when the last 8 bytes of its ID, big
	// endian, shifted right once, are below it (TraceIDRatioBased):
	// 1<<63 samples all, 0 none.
	bound uint64
	ratio float64 // bound's ratio, 0 to 1
	desc  string
}

const allBound = 1 << 63

// RatioSampler is ParentBased(TraceIDRatioBased(ratio)): a request whose
// client's span was sampled is sampled, one whose client's was not is
// not, and of the others a ratio (0 to 1) is.
func RatioSampler(ratio float64) Sampler {
	return newSampler(true, ratio, fmt.Sprintf("parentbased_traceidratio %g", ratio))
}

func newSampler(parentBased bool, ratio float64, desc string) Sampler {
	return Sampler{parentBased: parentBased, bound: ratioBound(ratio), ratio: min(max(ratio, 0), 1), desc: desc}
}

func ratioBound(ratio float64) uint64 {
	switch {
	case ratio >= 1:
		return allBound
	case ratio <= 0:
		return 0
	}
	return uint64(ratio * (1 << 63))
}

// Sample decides for a trace: hasParent says the client sent a valid
// traceparent, parentSampled its flag.
func (s Sampler) Sample(traceID [16]byte, hasParent, parentSampled bool) bool {
	if s.parentBased && hasParent {
		return parentSampled
	}
	return binary.BigEndian.Uint64(traceID[8:])>>1 < s.bound
}

// String names the sampler as OTEL_TRACES_SAMPLER would.
func (s Sampler) String() string { return s.desc }

// sdkSampler is the SDK's sampler of the same rules, for tests.
func (s Sampler) sdkSampler() sdktrace.Sampler {
	var root sdktrace.Sampler
	switch s.desc {
	case "always_on", "parentbased_always_on":
		root = sdktrace.AlwaysSample()
	case "always_off", "parentbased_always_off":
		root = sdktrace.NeverSample()
	default:
		root = sdktrace.TraceIDRatioBased(s.ratio)
	}
	if s.parentBased {
		return sdktrace.ParentBased(root)
	}
	return root
}

// SamplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// as the SDK does (sdk/trace/sampler_env.go, v1.47.0): unset,
// parentbased_always_on; a ratio's argument missing, 1; a bad argument,
// the ratio 1 and an error; an unknown sampler (jaeger_remote, xray:
// not in the SDK either), parentbased_always_on and an error. The error
// is for a warning: the sampler returned is usable.
func SamplerFromEnv(getenv func(string) string) (Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		switch {
		case err != nil:
			return 1, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: %w; sampling every trace", arg, err)
		case v < 0 || v > 1:
			return 1, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: not between 0 and 1; sampling every trace", arg)
		}
		return v, nil
	}
	s := newSampler(true, 1, "parentbased_always_on")
	var err error
	switch name {
	case "", "parentbased_always_on":
	case "always_on":
		s = newSampler(false, 1, name)
	case "always_off":
		s = newSampler(false, 0, name)
	case "parentbased_always_off":
		s = newSampler(true, 0, name)
	case "traceidratio", "parentbased_traceidratio":
		var r float64
		r, err = ratio()
		s = newSampler(name == "parentbased_traceidratio", r, fmt.Sprintf("%s %g", name, r))
	default:
		err = fmt.Errorf("OTEL_TRACES_SAMPLER %q is not supported (want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio); using parentbased_always_on", name)
	}
	return s, err
}
