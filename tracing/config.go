package tracing

import (
	"errors"
	"fmt"
	"net/url"
)

// Config is tracing's configuration. Tracing is off unless Endpoint or
// the environment's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT names a collector (New). Immutable once
// validated.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's URL (http or https); a URL
	// without a path gets /v1/traces. Default "": the environment's, as
	// the SDK reads it, else off. It wins over the environment's.
	Endpoint string
	// SampleRatio is the share of traces sampled among requests whose
	// client sent no traceparent (0 to 1); a client's traceparent
	// decides by its sampled flag (parent-based). Default -1: the
	// environment's OTEL_TRACES_SAMPLER and _ARG, as the SDK reads them,
	// else every request (parentbased_always_on).
	SampleRatio float64
	// QueueSize bounds the spans handed off the loops and not yet built
	// by the tracing goroutine; when it is full a span is dropped and
	// counted. Default 2048, the SDK's own processor queue's default: at
	// 1 % sampling a second of 200k requests per second.
	QueueSize int
}

// DefaultConfig returns tracing's defaults: off.
func DefaultConfig() Config {
	return Config{
		Endpoint:    "",   // off unless the environment names a collector
		SampleRatio: -1,   // the environment's sampler, else all
		QueueSize:   2048, // see the field
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil {
			return fmt.Errorf("tracing: Endpoint: %w", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("tracing: Endpoint: want http://host:port[/path] or https://..., got %q", c.Endpoint)
		}
	}
	if c.SampleRatio > 1 || (c.SampleRatio < 0 && c.SampleRatio != -1) {
		return fmt.Errorf("tracing: SampleRatio: want 0 to 1 (or -1: from OTEL_TRACES_SAMPLER), got %g", c.SampleRatio)
	}
	if c.QueueSize < 1 {
		return errors.New("tracing: QueueSize: must be at least 1")
	}
	return nil
}
