// Command upstream is an instant OpenAI-compatible engine for measuring a
// router (bench.StartUpstream): it answers every completion at once.
//
//	go run ./bench/cmd/upstream --listen 127.0.0.1:8101
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/saltus-lb/saltus/bench"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8101", "host:port to listen on")
	events := flag.Int("sse-events", 0, "streamed answers: this many content events, each its own flushed chunk, then usage and [DONE] (0: three events in one body)")
	flag.Parse()
	up, err := bench.StartUpstreamEvents(*listen, *events)
	if err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		os.Exit(1)
	}
	fmt.Println("listening on", up.Addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = up.Close(context.Background()) // exiting: the process ends with it
}
