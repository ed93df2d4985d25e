// Package tlstest makes throwaway certificates for tests: a CA and the
// certificates it signs (ECDSA P-256 or RSA-2048), written as PEM files
// into a test's temporary directory, so no key is ever committed. Tests
// only.
//
// # Concurrency
//
// A CA is safe for concurrent use (it holds no mutable state after NewCA).
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// KeyType is the algorithm of a generated key.
type KeyType int

const (
	ECDSA KeyType = iota // P-256
	RSA                  // 2048 bits
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert    *x509.Certificate
	key     crypto.Signer
	CertPEM []byte
	File    string // CertPEM written in the test's temporary directory
}

func newKey(tb testing.TB, kt KeyType) crypto.Signer {
	tb.Helper()
	var (
		k   crypto.Signer
		err error
	)
	switch kt {
	case RSA:
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// NewCA makes a CA named name.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb, ECDSA)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.File = writeFile(tb, name+"-ca.pem", ca.CertPEM)
	return ca
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a certificate the CA signed, with its key.
type Leaf struct {
	Cert              tls.Certificate
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
	NotAfter          time.Time
}

// Issue signs a certificate for hosts (DNS names or IP addresses), valid
// for both server and client authentication, expiring after validFor.
func (ca *CA) Issue(tb testing.TB, kt KeyType, validFor time.Duration, hosts ...string) *Leaf {
	tb.Helper()
	key := newKey(tb, kt)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: "saltus test " + hosts[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validFor).Truncate(time.Second),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	l := &Leaf{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		NotAfter: tmpl.NotAfter,
	}
	if l.Cert, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		tb.Fatal(err)
	}
	l.CertFile = writeFile(tb, "", l.CertPEM)
	l.KeyFile = writeFile(tb, "", l.KeyPEM)
	return l
}

// WriteTo writes the leaf's certificate and key over the files certFile
// and keyFile (a renewal, for reload tests).
func (l *Leaf) WriteTo(tb testing.TB, certFile, keyFile string) {
	tb.Helper()
	if err := os.WriteFile(certFile, l.CertPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
}

func writeFile(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	var (
		f   *os.File
		err error
	)
	if name != "" {
		f, err = os.Create(filepath.Join(tb.TempDir(), name))
	} else {
		f, err = os.CreateTemp(tb.TempDir(), "*.pem")
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // written and checked below; a close error of a temp file in a test is noise
	if _, err := f.Write(data); err != nil {
		tb.Fatal(err)
	}
	return f.Name()
}
