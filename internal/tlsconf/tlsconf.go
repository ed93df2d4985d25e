// Package tlsconf holds a listener's TLS certificate and key, loaded from
// files and reloaded in place, so that a renewed certificate reaches new
// handshakes without a restart and without dropping a connection: the TLS
// acceptor of the data plane (reactor) and the admin listener ask it for
// the certificate on every handshake (tls.Config.GetCertificate).
//
// A reload reads both files again and swaps the pair only when they parse
// and match; on any failure the pair in use stays, and the error says why
// and which certificate is still served. Connections already open keep the
// certificate they were made with (TLS authenticates a connection once).
//
// # Concurrency
//
// A Holder is safe for concurrent use: the pair in use is an immutable
// value behind an atomic.Pointer, GetCertificate is lock-free (it runs on
// the TLS acceptor's handshake goroutines, never on an event loop), and
// Reload serializes on a mutex held only by reloads.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_tls_cert_reloads_total":  "Reloads of a listener's TLS certificate and key files (SIGHUP), by listener (data, admin) and result (ok, error: the previous pair stays in use).",
		"saltus_tls_cert_expiry_seconds": "NotAfter of the TLS certificate a listener serves (data, admin), as a Unix time in seconds.",
	})
}

// pair is one loaded certificate; immutable.
type pair struct {
	cert     *tls.Certificate
	notAfter time.Time
	loaded   time.Time
}

// Holder serves the certificate loaded last from a pair of files.
type Holder struct {
	certFile, keyFile string
	cur               atomic.Pointer[pair]

	mu sync.Mutex // serializes Reload

	reloadsOK, reloadsErr *metrics.Counter // nil until Register
}

// Load reads the PEM certificate chain certFile and its private key
// keyFile. Any goroutine.
func Load(certFile, keyFile string) (*Holder, error) {
	h := &Holder{certFile: certFile, keyFile: keyFile}
	p, err := h.read()
	if err != nil {
		return nil, err
	}
	h.cur.Store(p)
	return h, nil
}

// Check reports whether certFile and keyFile load, without keeping them:
// configuration validation.
func Check(certFile, keyFile string) error {
	_, err := Load(certFile, keyFile)
	return err
}

// read loads and checks the pair.
func (h *Holder) read() (*pair, error) {
	if h.certFile == "" || h.keyFile == "" {
		return nil, errors.New("tls: both a certificate file and a key file are needed")
	}
	c, err := tls.LoadX509KeyPair(h.certFile, h.keyFile)
	if err != nil {
		return nil, fmt.Errorf("cannot load the TLS certificate %s and key %s: %w", h.certFile, h.keyFile, err)
	}
	leaf := c.Leaf // set by LoadX509KeyPair since Go 1.23
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("cannot parse the TLS certificate %s: %w", h.certFile, err)
		}
		c.Leaf = leaf
	}
	return &pair{cert: &c, notAfter: leaf.NotAfter, loaded: time.Now()}, nil
}

// Register exports the holder's series in set, labelled
// listener=name: saltus_tls_cert_reloads_total{listener,result} and
// saltus_tls_cert_expiry_seconds{listener}. Call it once, before Reload
// may run.
func (h *Holder) Register(set *metrics.Set, name string) {
	h.reloadsOK = set.NewCounter(`saltus_tls_cert_reloads_total{listener="` + name + `",result="ok"}`)
	h.reloadsErr = set.NewCounter(`saltus_tls_cert_reloads_total{listener="` + name + `",result="error"}`)
	set.NewGauge(`saltus_tls_cert_expiry_seconds{listener="`+name+`"}`, func() float64 {
		return float64(h.cur.Load().notAfter.Unix())
	})
}

// Reload reads the files again. On success new handshakes get the new
// pair; on failure the pair in use stays, and the error names the files
// and the certificate still served. Open connections are not touched.
// Any goroutine.
func (h *Holder) Reload() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, err := h.read()
	if err != nil {
		if h.reloadsErr != nil {
			h.reloadsErr.Inc()
		}
		old := h.cur.Load()
		return fmt.Errorf("%w; still serving the certificate loaded at %s (expires %s)", err,
			old.loaded.UTC().Format(time.RFC3339), old.notAfter.UTC().Format(time.RFC3339))
	}
	h.cur.Store(p)
	if h.reloadsOK != nil {
		h.reloadsOK.Inc()
	}
	return nil
}

// NotAfter is the expiry of the certificate in use. Any goroutine.
func (h *Holder) NotAfter() time.Time { return h.cur.Load().notAfter }

// Files returns the certificate and key file names. Any goroutine.
func (h *Holder) Files() (certFile, keyFile string) { return h.certFile, h.keyFile }

// GetCertificate is tls.Config.GetCertificate: the pair in use. Any
// goroutine.
func (h *Holder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return h.cur.Load().cert, nil
}

// ServerConfig returns a server tls.Config that takes its certificate from
// h on every handshake: TLS 1.2 and 1.3 with Go's default (modern) cipher
// suites and curves, and ALPN offering only "http/1.1" (saltus does not
// serve HTTP/2).
func (h *Holder) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: h.GetCertificate,
		NextProtos:     []string{"http/1.1"},
	}
}

// LoadCAFile reads a PEM bundle of CA certificates into a new pool (with
// the system roots first when withSystem). Any goroutine.
func LoadCAFile(file string, withSystem bool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cannot read the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if withSystem {
		if sys, err := x509.SystemCertPool(); err == nil {
			pool = sys
		} // else: no system roots on this host; the file's CAs only
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate found in the CA file %s", file)
	}
	return pool, nil
}
