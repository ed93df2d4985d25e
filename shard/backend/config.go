package backend

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is the upstream side's configuration: immutable after NewSet.
type Config struct {
	// ConnectTimeout bounds one TCP connect to a backend; a connect that
	// takes longer is a connect error (retried on the next candidate).
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the time from sending a request to
	// its response head (the first byte, for an LLM engine: queueing plus
	// prefill, or the whole generation of a non-streamed answer); past
	// it the client gets 504.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes a pooled keep-alive connection idle this long.
	IdleConnTimeout time.Duration
	// MaxConnsPerBackend bounds the connections to one backend; a request
	// that finds them all busy waits up to ConnectTimeout for one, then
	// counts as a connect error.
	MaxConnsPerBackend int
	// MaxRetries is how many more candidates a request tries after a
	// connect error or a refusal before the first byte.
	MaxRetries int
	// HealthPath is the path the active probe GETs; a 2xx is a success.
	HealthPath string
	// HealthInterval is the time between two probes of one backend.
	HealthInterval time.Duration
	// HealthFailsDown consecutive failed probes mark a backend down.
	HealthFailsDown int
	// HealthOKUp consecutive successful probes mark it up again.
	HealthOKUp int
	// BreakerFails consecutive passive failures (connect errors and
	// refusals before the head, 5xx answers; a timeout or all
	// connections busy counts neither way, any other answer resets the
	// count) trip a backend's breaker:
	// not healthy until a probe succeeds. 0 disables the breaker.
	BreakerFails int
	// MaxInFlight bounds the requests in flight of the whole Set (proxy
	// goroutines and loop-path requests together); a Forward over it is
	// answered 503 at once.
	MaxInFlight int
	// LoopIO sends routed non-streamed requests through ForwardOnLoop
	// (once UseLoops attached the reactor): the upstream I/O on the
	// client connection's event loop, no goroutine in the request path
	// (loop.go). Streamed ones, and everything else, go through Forward.
	LoopIO bool
}

// DefaultConfig returns the defaults, each commented.
func DefaultConfig() Config {
	return Config{
		ConnectTimeout:        2 * time.Second,  // a LAN connect takes < 1 ms; 2 s covers a busy accept queue
		ResponseHeaderTimeout: 60 * time.Second, // issue 4: time to first byte, 60 s → 504
		IdleConnTimeout:       4 * time.Second,  // below uvicorn's (vLLM's server) 5 s keep-alive, so we close first instead of meeting a closed connection
		MaxConnsPerBackend:    1024,             // one connection per in-flight request; vLLM batches up to 256 sequences by default
		MaxRetries:            2,                // issue 4
		HealthPath:            "/health",        // vLLM, SGLang, TensorRT-LLM serve it
		HealthInterval:        5 * time.Second,
		HealthFailsDown:       3,
		HealthOKUp:            2,
		BreakerFails:          5,
		MaxInFlight:           8192, // proxy goroutines; ~8 KiB of stack and buffers each when idle-waiting
		LoopIO:                true, // 1.2–1.4× the goroutine path's req/s, a third less CPU per request (loop.go)
	}
}

// Validate names the first field that is wrong.
func (c *Config) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("backend: %s must be > 0, got %s", name, d))
		}
	}
	pos("ConnectTimeout", c.ConnectTimeout)
	pos("ResponseHeaderTimeout", c.ResponseHeaderTimeout)
	pos("IdleConnTimeout", c.IdleConnTimeout)
	pos("HealthInterval", c.HealthInterval)
	if c.MaxConnsPerBackend <= 0 {
		errs = append(errs, fmt.Errorf("backend: MaxConnsPerBackend must be > 0, got %d", c.MaxConnsPerBackend))
	}
	if c.MaxRetries < 0 || c.MaxRetries > 16 {
		errs = append(errs, fmt.Errorf("backend: MaxRetries must be in [0, 16], got %d", c.MaxRetries))
	}
	if !strings.HasPrefix(c.HealthPath, "/") {
		errs = append(errs, fmt.Errorf("backend: HealthPath must start with '/', got %q", c.HealthPath))
	}
	if c.HealthFailsDown <= 0 {
		errs = append(errs, fmt.Errorf("backend: HealthFailsDown must be > 0, got %d", c.HealthFailsDown))
	}
	if c.HealthOKUp <= 0 {
		errs = append(errs, fmt.Errorf("backend: HealthOKUp must be > 0, got %d", c.HealthOKUp))
	}
	if c.BreakerFails < 0 {
		errs = append(errs, fmt.Errorf("backend: BreakerFails must be >= 0, got %d", c.BreakerFails))
	}
	if c.MaxInFlight <= 0 {
		errs = append(errs, fmt.Errorf("backend: MaxInFlight must be > 0, got %d", c.MaxInFlight))
	}
	return errors.Join(errs...)
}
