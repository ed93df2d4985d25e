// Command loadgen drives a closed-loop HTTP/1.1 load of chat requests at a
// target (bench.Load) and prints requests/s and latency percentiles.
//
//	go run ./bench/cmd/loadgen --target 127.0.0.1:8080 --conns 32 --duration 3s
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/saltus-lb/saltus/bench"
)

func main() {
	target := flag.String("target", "127.0.0.1:8080", "host:port to load")
	conns := flag.Int("conns", 32, "keep-alive connections, each one request at a time")
	duration := flag.Duration("duration", 3*time.Second, "how long to run")
	requests := flag.Int("requests", 0, "stop after this many answers (0: only the duration)")
	size := flag.Int("body-bytes", 4096, "chat request body size in bytes")
	stream := flag.Bool("stream", false, "ask for streamed (SSE) answers")
	asJSON := flag.Bool("json", false, "print the result as JSON")
	tlsCA := flag.String("tls-ca", "", "speak TLS, trusting the PEM CA (or self-signed) certificates in this `file`")
	flag.Parse()
	cfg := bench.LoadConfig{
		Target: *target, Conns: *conns, Duration: *duration, Requests: *requests,
		Request: bench.ChatRequest(*target, *size, *stream),
	}
	if *tlsCA != "" {
		pem, err := os.ReadFile(*tlsCA)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(2)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintln(os.Stderr, "loadgen: no PEM certificate in", *tlsCA)
			os.Exit(2)
		}
		host, _, _ := strings.Cut(*target, ":")
		cfg.TLS = &tls.Config{RootCAs: pool, ServerName: host, NextProtos: []string{"http/1.1"}}
	}
	res, err := bench.Load(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{ // stdout gone: nobody to tell
			"rps": res.RPS, "p50_us": res.P50.Microseconds(), "p99_us": res.P99.Microseconds(),
			"requests": res.Requests, "non2xx": res.Non2xx, "errors": res.Errors,
		})
		return
	}
	fmt.Println(res)
}
