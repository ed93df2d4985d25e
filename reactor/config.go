package reactor

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"
)

// Config configures a Server. It is immutable once NewServer has it.
type Config struct {
	Listen           string        // host:port to listen on; ":0" picks a free port (see Server.Addr)
	Loops            int           // event loops (= shards); 0 means GOMAXPROCS
	LockOSThread     bool          // lock each loop goroutine to its OS thread (gnet WithLockOSThread)
	MaxHeaderBytes   int           // request line + headers; larger → 431 and close
	MaxBodyBytes     int           // de-chunked body; larger → 413 and close
	HeaderTimeout    time.Duration // a request head not complete this long after its first byte → close
	IdleTimeout      time.Duration // keep-alive connection with nothing in flight, or an answer not drained, this long → close
	MaxConns         int           // open connections; one more → 503 and close
	MaxOutboundBytes int           // per connection: unsent answer bytes before the loop stops reading its requests
	MailboxSize      int           // per loop: Loop.Post functions queued and not yet run

	// TLS, when not nil, makes Listen speak TLS 1.2/1.3 (tls.go): a Go
	// acceptor does the handshakes on its own goroutines, then a loop
	// reads and writes each connection's records (tlswire.go). Its certificate comes from GetCertificate or
	// Certificates; NextProtos and MinVersion are overridden ("http/1.1"
	// only, TLS 1.2 at least). nil: plain HTTP.
	TLS                 *tls.Config
	TLSHandshakeTimeout time.Duration // a TLS handshake not done this long after accept → close, counted
	MaxTLSHandshakes    int           // TLS handshakes in progress at once; one more connection → closed, counted
}

// DefaultConfig returns the defaults, each commented.
func DefaultConfig() Config {
	return Config{
		Listen:           "127.0.0.1:8080",
		Loops:            0,        // GOMAXPROCS
		LockOSThread:     false,    // pinning is a bench decision (DESIGN.md § Shards)
		MaxHeaderBytes:   64 << 10, // 64 KiB, as the issue asks
		MaxBodyBytes:     16 << 20, // 16 MiB: long prompts with images as URLs fit
		HeaderTimeout:    10 * time.Second,
		IdleTimeout:      60 * time.Second,
		MaxConns:         10000,
		MaxOutboundBytes: 1 << 20, // 1 MiB per connection
		MailboxSize:      4096,

		TLS:                 nil, // plain HTTP
		TLSHandshakeTimeout: 10 * time.Second,
		// 256 handshakes at ~1 ms of CPU each (RSA-2048, see
		// tls_timing_test.go) is a quarter second of both cores' work
		// queued: more only waits longer.
		MaxTLSHandshakes: 256,
	}
}

// Validate reports the first invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("reactor: Listen is empty"))
	}
	if c.Loops < 0 || c.Loops > 1024 {
		errs = append(errs, fmt.Errorf("reactor: Loops must be between 0 (GOMAXPROCS) and 1024, got %d", c.Loops))
	}
	if c.MaxHeaderBytes < 256 {
		errs = append(errs, fmt.Errorf("reactor: MaxHeaderBytes = %d: want ≥ 256", c.MaxHeaderBytes))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("reactor: MaxBodyBytes = %d: want ≥ 0", c.MaxBodyBytes))
	}
	if c.HeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("reactor: HeaderTimeout must be positive, got %v", c.HeaderTimeout))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("reactor: IdleTimeout must be positive, got %v", c.IdleTimeout))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("reactor: MaxConns must be at least 1, got %d", c.MaxConns))
	}
	if c.MaxOutboundBytes < 1024 {
		errs = append(errs, fmt.Errorf("reactor: MaxOutboundBytes = %d: want ≥ 1024", c.MaxOutboundBytes))
	}
	if c.MailboxSize < 1 {
		errs = append(errs, fmt.Errorf("reactor: MailboxSize = %d: want ≥ 1", c.MailboxSize))
	}
	if c.TLS != nil {
		if c.TLS.GetCertificate == nil && len(c.TLS.Certificates) == 0 {
			errs = append(errs, errors.New("reactor: TLS has no certificate (GetCertificate or Certificates)"))
		}
		if c.TLSHandshakeTimeout <= 0 {
			errs = append(errs, fmt.Errorf("reactor: TLSHandshakeTimeout = %v: want > 0", c.TLSHandshakeTimeout))
		}
		if c.MaxTLSHandshakes < 1 {
			errs = append(errs, fmt.Errorf("reactor: MaxTLSHandshakes = %d: want ≥ 1", c.MaxTLSHandshakes))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// limits returns c's request and connection limits, the fields Retune
// may change while the server runs.
func (c Config) limits() limits {
	return limits{maxHead: c.MaxHeaderBytes, maxBody: c.MaxBodyBytes, maxConns: c.MaxConns,
		headerTimeout: c.HeaderTimeout, idleTimeout: c.IdleTimeout}
}
