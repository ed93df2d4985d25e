package admin

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Config configures the admin listener. It is immutable once passed to
// [New].
type Config struct {
	// Listen is the TCP address to serve on, host:port. Default
	// "127.0.0.1:9180": loopback only, since the API can add and remove
	// backends. ":0" picks a free port (tests; see [Server.Addr]).
	Listen string
	// BearerToken, when not empty, is required as "Authorization: Bearer
	// <token>" on every endpoint but /health. Default "" (no auth). It must
	// be printable ASCII without spaces, as a header value needs.
	BearerToken string
	// Ready, when not nil, says whether the data plane can serve: nil, or
	// why not; /ready answers 503 with the error's text while it returns
	// one. Nil Ready: ready while Backends.List has a healthy backend that
	// is not draining, else 503 "no routable backend" (see [Routable]).
	// Called on the request's goroutine, so it must be safe for concurrent
	// use and not block.
	Ready func() error
	// Reload, when not nil, serves POST /admin/reload: it re-reads the
	// configuration and applies it, returning what changed (a JSON
	// value) or why nothing was (400 with the error's text: the running
	// configuration stays). Nil: no such endpoint (404). Called on the
	// request's goroutine; it may take a while (it reads files).
	Reload func() (any, error)
	// MaxBodyBytes bounds a request body (POST /admin/explain carries an
	// OpenAI request body); larger bodies get 413. Default 16 MiB, the
	// data plane's default --max-body. POST /admin/backends reads at most
	// 64 KiB whatever this says.
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's head. Default 5 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included. Default
	// 30 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, from the end of the request
	// head. Default 30 s: a /metrics scrape of a large set takes
	// milliseconds.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default
	// 60 s.
	IdleTimeout time.Duration
	// Pprof serves Go's runtime profiles (net/http/pprof) under
	// /debug/pprof/, behind BearerToken like the rest. Default false: a
	// profile costs CPU and shows internals. A CPU profile must fit in
	// WriteTimeout (?seconds=20 with the default 30 s).
	Pprof bool
	// TLS, when not nil, makes the listener speak HTTPS with it (its
	// certificate from GetCertificate or Certificates; ClientAuth and
	// ClientCAs for client certificates). Default nil: plain HTTP.
	// The handshake is bounded by ReadHeaderTimeout (net/http).
	TLS *tls.Config
}

// DefaultConfig returns the defaults documented on [Config].
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:9180",
		MaxBodyBytes:      16 << 20,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
}

// Validate reports every invalid field, by name.
func (c Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("admin: Listen must be host:port, got %q: %v", c.Listen, err))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("admin: Listen must have a numeric port in [0, 65535], got %q", c.Listen))
	}
	for i := 0; i < len(c.BearerToken); i++ {
		if b := c.BearerToken[i]; b <= ' ' || b >= 0x7f {
			errs = append(errs, fmt.Errorf("admin: BearerToken must be printable ASCII without spaces (byte %d is %#x)", i, b))
			break
		}
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("admin: MaxBodyBytes must be positive, got %d", c.MaxBodyBytes))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"ReadHeaderTimeout", c.ReadHeaderTimeout},
		{"ReadTimeout", c.ReadTimeout},
		{"WriteTimeout", c.WriteTimeout},
		{"IdleTimeout", c.IdleTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("admin: %s must be positive, got %v", d.name, d.v))
		}
	}
	if c.TLS != nil && c.TLS.GetCertificate == nil && len(c.TLS.Certificates) == 0 {
		errs = append(errs, errors.New("admin: TLS has no certificate (GetCertificate or Certificates)"))
	}
	return errors.Join(errs...)
}
