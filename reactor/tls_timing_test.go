package reactor

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/internal/tlsconf/tlstest"
)

// BenchmarkTLSHandshake is one full handshake (no resumption), client and
// server in this process over net.Pipe: how long a loop would be held if
// it did the handshake itself. The handshake is ping-pong, so the time is
// about the sum of both sides' work; the server's share is mostly its
// private-key signature (BenchmarkTLSServerSign) plus its ECDHE.
func BenchmarkTLSHandshake(b *testing.B) {
	ca := tlstest.NewCA(b, "bench")
	for _, kt := range []struct {
		name string
		kt   tlstest.KeyType
	}{{"ECDSA-P256", tlstest.ECDSA}, {"RSA-2048", tlstest.RSA}} {
		leaf := ca.Issue(b, kt.kt, time.Hour, "127.0.0.1")
		for _, v := range []struct {
			name string
			v    uint16
		}{{"TLS1.3", tls.VersionTLS13}, {"TLS1.2", tls.VersionTLS12}} {
			b.Run(kt.name+"/"+v.name, func(b *testing.B) {
				scfg := &tls.Config{Certificates: []tls.Certificate{leaf.Cert}, MaxVersion: v.v, SessionTicketsDisabled: true}
				ccfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MaxVersion: v.v}
				b.ReportAllocs()
				for b.Loop() {
					cc, sc := net.Pipe()
					errc := make(chan error, 1)
					go func() { errc <- tls.Client(cc, ccfg).Handshake() }()
					if err := tls.Server(sc, scfg).Handshake(); err != nil {
						b.Fatal(err)
					}
					if err := <-errc; err != nil {
						b.Fatal(err)
					}
					_ = cc.Close() // a pipe
					_ = sc.Close() // a pipe
				}
			})
		}
	}
}

// BenchmarkTLSServerSign is the server's private-key operation of one
// handshake (CertificateVerify in TLS 1.3, ServerKeyExchange in 1.2): the
// part of a handshake only the server pays.
func BenchmarkTLSServerSign(b *testing.B) {
	ca := tlstest.NewCA(b, "bench")
	digest := sha256.Sum256([]byte("handshake transcript"))
	for _, kt := range []struct {
		name string
		kt   tlstest.KeyType
		opts crypto.SignerOpts
	}{{"ECDSA-P256", tlstest.ECDSA, crypto.SHA256}, {"RSA-2048", tlstest.RSA, &rsaPSS}} {
		signer := ca.Issue(b, kt.kt, time.Hour, "x").Cert.PrivateKey.(crypto.Signer)
		b.Run(kt.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := signer.Sign(rand.Reader, digest[:], kt.opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// rsaPSS is what TLS 1.3 signs with for an RSA key.
var rsaPSS = rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256}
