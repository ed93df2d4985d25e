// Command saltus is the KV-cache-aware load balancer for LLM inference.
//
// This file stays thin: it parses the subcommand and its flags, builds the
// component configs and runs them. Subcommands land with their issues; today
// there are `serve`, `sim`, `bench`, `demo`, `tokenize`, `cluster-key`,
// `keys` and `version`.
//
// Goroutines: main's own runs the subcommand and waits for it; `serve`
// starts the data plane (dataplane.Start: the reactor's event loops, each
// owning its connections and shard) and the admin listener, then waits for
// a signal and drains them in order (serve.go's lifecycle, which owns the
// process state). Every other goroutine belongs to the package that
// starts it, in a rules.Group, and ends with it.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/saltus-lb/saltus/gossip"
)

// version is set at build time by the Makefile (-ldflags -X main.version=...).
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `saltus — a KV-cache-aware load balancer for LLM inference

Usage:
  saltus <command> [flags]

Commands:
  demo      see it work: 4 simulated engines, round-robin vs prefix routing, then serves on :8080
  serve     run the load balancer (saltus serve --help lists every flag)
  sim       run a simulated vLLM engine (saltus sim --help)
  bench     compare routing policies on simulated (or real) engines; writes a report
  tokenize  encode text (or chat messages, --chat) to token ids with a HuggingFace tokenizer.json
  cluster-key  print a new random key for serve --cluster-key-file
  keys      hash an API key's secret for serve --api-keys-file (saltus keys hash < secret), or make a new one
  version   print the version and build information
  help      print this help
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "tokenize":
		return runTokenize(args[1:], stdin, stdout, stderr)
	case "sim":
		return runSim(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "cluster-key":
		if len(args) > 1 {
			fmt.Fprintln(stderr, "usage: saltus cluster-key > key  (prints a random 32-byte key, base64, for serve --cluster-key-file)")
			return 2
		}
		fmt.Fprintln(stdout, gossip.NewKey())
		return 0
	case "keys":
		return runKeys(args[1:], stdin, stdout, stderr)
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "saltus: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func versionString() string {
	v := version
	if v == "" {
		v = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("saltus %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
