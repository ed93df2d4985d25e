package backend

import (
	"crypto/tls"
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
	// FirstByteTimeout bounds the time from sending a request to its
	// response head, and on the loop path the silence between two reads
	// of the body; past it the client gets 504 (a timed-out request is
	// not retried: the engine may be working on it). For an LLM engine
	// the head comes after queueing plus prefill for a streamed answer,
	// but only after the whole generation for a non-streamed one (vLLM
	// sends a JSON answer's head with its body), so this bounds a
	// non-streamed generation: the default is long (issue 15).
	FirstByteTimeout time.Duration
	// RequestTimeout bounds a whole request, from ForwardOnLoop to the last
	// byte of the answer, retries included; 0 = no limit. Past it before
	// the head the client gets 504; after the head a streamed answer ends
	// with an SSE error event (or is cut, for other bodies).
	RequestTimeout time.Duration
	// StreamIdleTimeout ends a streamed answer (SSE or not) whose backend
	// sent nothing for this long after its head: the client gets an SSE
	// error event naming it (other bodies are cut), the upstream
	// connection is closed, and it is counted
	// (saltus_upstream_errors_total{kind="stream_idle"}). It is checked
	// to within an eighth of itself.
	StreamIdleTimeout time.Duration
	// MaxResponseBody bounds a non-streamed answer the loop path buffers
	// whole; a longer one is relayed as it comes instead (spilled,
	// spill.go: its hooks see no body), and counted
	// (saltus_upstream_body_spilled_total). It is also what a spilled
	// answer may leave owed to a client that does not read (at least
	// 4 MiB) before it is cut.
	MaxResponseBody int
	// IdleConnTimeout closes a pooled keep-alive connection idle this long.
	IdleConnTimeout time.Duration
	// MaxConnsPerBackend bounds the connections to one backend; a request
	// that finds them all busy waits up to ConnectTimeout for one, then
	// counts as a connect error.
	MaxConnsPerBackend int
	// MaxRetries is how many more candidates a request tries after a
	// connect error or a refusal before the first byte.
	MaxRetries int
	// EngineQueue bounds what each backend is given beyond its engine's
	// running slots once they are learned (Backend.Slots: vLLM's
	// --max-num-seqs as its /metrics show it): Slots + EngineQueue
	// requests at once, the rest waiting in the gateway queue of their
	// pool, where priority, fair share and prefix affinity order them
	// and the next one goes to the engine that frees a slot (late
	// binding). -1: no bound (engines queue what they are sent). At most
	// MaxEngineQueue. Reloadable.
	EngineQueue int
	// RetryServerErrors: an engine's 500, 502 or 504 head, before any
	// byte of the answer reached the client, sends the request to the
	// next candidate instead (within MaxRetries); the last candidate's
	// answer goes to the client as it is. What an OpenAI SDK would do
	// itself on such an answer, seconds later and maybe to the same
	// engine. Off (the default): every answer head is the client's.
	RetryServerErrors bool
	// HealthPath is the path the active probe GETs; a 2xx is a success.
	HealthPath string
	// HealthInterval is the time between two probes of a healthy
	// backend.
	HealthInterval time.Duration
	// HealthDownInterval is the time between two probes of a backend
	// that is down or whose breaker is open; a breaker trip probes at
	// once. Fixed, no backoff: a probe costs one small GET (a refused
	// connect when the engine is gone), and a backoff would delay
	// exactly the recovery that matters, every backend back after an
	// outage, when each second of 503s outlasts the OpenAI SDKs' default
	// retries (two, within ~1.3 s; issue 15). Each probe is bounded by
	// HealthInterval.
	HealthDownInterval time.Duration
	// HealthFailsDown consecutive failed probes mark a backend down.
	HealthFailsDown int
	// HealthOKUp consecutive successful probes mark it up again. The
	// hysteresis is deliberately lopsided: slow to mark down (a request
	// failing meanwhile is retried, and the breaker reacts to traffic
	// faster), fast to bring back; a passive success (a non-5xx answer)
	// also brings back a backend marked down.
	HealthOKUp int
	// BreakerFails consecutive passive failures (connect errors and
	// refusals before the head, 5xx answers; a timeout or all
	// connections busy counts neither way, any other answer resets the
	// count) trip a backend's breaker:
	// not healthy until a probe succeeds. 0 disables the breaker.
	BreakerFails int
	// MaxInFlight bounds the requests in flight of the whole Set; a
	// request over it is answered 503 at once.
	MaxInFlight int
	// BackendHeader is how a client sees the backend of an answer:
	// "url" (X-Saltus-Backend and saltus's error messages give its URL),
	// "name" (its name instead: a URL exposes the internal network), or
	// "none" (no X-Saltus-Backend; error messages give names).
	BackendHeader string
	// ScrapeInterval, when > 0, scrapes each backend's engine /metrics
	// this often (scrape.go: vLLM's waiting and running requests and KV
	// usage, for Backend.Engine; fresh for 3 intervals; each scrape
	// bounded by the interval and 4 MiB). 0 = off. 1 s is the
	// recommended value when enabled: vLLM refreshes its gauges about
	// once per engine step, and a scrape costs it ~1 ms.
	ScrapeInterval time.Duration
	// TLS is the client side for https:// backends: RootCAs (nil: the
	// system roots) and InsecureSkipVerify; each backend's clone gets the
	// URL's host as ServerName, TLS 1.2 at least and ALPN http/1.1. nil:
	// the system roots, verified. The requests' handshake runs on the
	// reactor's dial goroutine (reactor.Loop.DialUpstreamTLS), the
	// probes' in fasthttp.
	TLS *tls.Config
}

// MaxEngineQueue bounds Config.EngineQueue.
const MaxEngineQueue = 1 << 16

// MaxRetries bounds Config.MaxRetries (--max-retries): a request tries
// at most 11 candidates, so a fleet refusing everything answers in a
// bounded number of attempts.
const MaxRetries = 10

// DefaultConfig returns the defaults, each commented.
func DefaultConfig() Config {
	return Config{
		ConnectTimeout:     2 * time.Second,  // a LAN connect takes < 1 ms; 2 s covers a busy accept queue
		FirstByteTimeout:   10 * time.Minute, // the OpenAI SDKs' own default timeout: a non-streamed head waits for the whole generation (issue 15; 60 s cut long answers)
		RequestTimeout:     0,                // no limit, as vLLM itself has none; the client's timeout decides
		StreamIdleTimeout:  2 * time.Minute,  // vLLM sends a stream's head at once and its first event after the queue and the prefill: minutes only when badly overloaded (nginx's proxy_read_timeout is 60 s)
		MaxResponseBody:    8 << 20,          // a non-streamed LLM answer is a few KiB to a few hundred KiB
		IdleConnTimeout:    4 * time.Second,  // below uvicorn's (vLLM's server) 5 s keep-alive, so we close first instead of meeting a closed connection
		MaxConnsPerBackend: 1024,             // one connection per in-flight request; vLLM batches up to 256 sequences by default
		MaxRetries:         2,                // issue 4
		EngineQueue:        -1,               // no hold: engines queue what they are sent (docs/BENCHMARKS.md finding 17)
		RetryServerErrors:  false,            // off, as nginx's and Envoy's retries of a POST: an engine's refusal sheds load at saturation (docs/BENCHMARKS.md finding 14)
		HealthPath:         "/health",        // vLLM, SGLang, TensorRT-LLM serve it
		HealthInterval:     5 * time.Second,
		HealthDownInterval: time.Second, // back within ~1 s of the engine's return: inside the SDKs' retry window
		HealthFailsDown:    3,
		HealthOKUp:         1, // issue 15: 2 probes 5 s apart meant 9.4 s of 503s after an outage
		BreakerFails:       5,
		MaxInFlight:        8192,  // requests; each holds its body, a parser and an upstream connection
		BackendHeader:      "url", // what saltus always did; "name" for untrusted clients
		ScrapeInterval:     0,     // off: routing uses saltus's own in-flight counts; 1 s when enabled
		TLS:                nil,   // https backends: the system roots, verified
	}
}

// Validate names the first field that is wrong.
func (c *Config) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("backend: %s must be positive, got %s", name, d))
		}
	}
	pos("ConnectTimeout", c.ConnectTimeout)
	pos("FirstByteTimeout", c.FirstByteTimeout)
	pos("IdleConnTimeout", c.IdleConnTimeout)
	pos("StreamIdleTimeout", c.StreamIdleTimeout)
	pos("HealthInterval", c.HealthInterval)
	pos("HealthDownInterval", c.HealthDownInterval)
	if c.ScrapeInterval < 0 {
		errs = append(errs, fmt.Errorf("backend: ScrapeInterval must not be negative (0 = off), got %s", c.ScrapeInterval))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("backend: RequestTimeout must not be negative (0 = no limit), got %s", c.RequestTimeout))
	}
	if c.MaxResponseBody < 1<<10 || c.MaxResponseBody > 1<<30 {
		errs = append(errs, fmt.Errorf("backend: MaxResponseBody must be in [1KiB, 1GiB], got %d", c.MaxResponseBody))
	}
	if c.MaxConnsPerBackend <= 0 {
		errs = append(errs, fmt.Errorf("backend: MaxConnsPerBackend must be > 0, got %d", c.MaxConnsPerBackend))
	}
	if c.EngineQueue < -1 || c.EngineQueue > MaxEngineQueue {
		errs = append(errs, fmt.Errorf("backend: EngineQueue must be between -1 (no bound) and %d, got %d", MaxEngineQueue, c.EngineQueue))
	}
	if c.MaxRetries < 0 || c.MaxRetries > MaxRetries {
		errs = append(errs, fmt.Errorf("backend: MaxRetries must be between 0 and %d, got %d", MaxRetries, c.MaxRetries))
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
	if c.BackendHeader != "url" && c.BackendHeader != "name" && c.BackendHeader != "none" {
		errs = append(errs, fmt.Errorf(`backend: BackendHeader must be "url", "name" or "none", got %q`, c.BackendHeader))
	}
	if c.MaxInFlight <= 0 {
		errs = append(errs, fmt.Errorf("backend: MaxInFlight must be > 0, got %d", c.MaxInFlight))
	}
	return errors.Join(errs...)
}
