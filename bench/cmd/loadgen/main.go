// Command loadgen drives a closed-loop HTTP/1.1 load of chat requests at a
// target (bench.Load) and prints requests/s and latency percentiles.
//
//	go run ./bench/cmd/loadgen --target 127.0.0.1:8080 --conns 32 --duration 3s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
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
	flag.Parse()
	res, err := bench.Load(context.Background(), bench.LoadConfig{
		Target: *target, Conns: *conns, Duration: *duration, Requests: *requests,
		Request: bench.ChatRequest(*target, *size, *stream),
	})
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
