// Command mooncaketrace writes a trace of multi-turn conversations in the
// Mooncake format (JSONL rows of timestamp in ms, input_length,
// output_length and hash_ids of 512-token blocks; bench/workload's
// MooncakeConversations says how they are made), deterministic for a
// seed. It sits outside the request path: it makes input for `saltus
// bench --workloads mooncake:FILE`. The shipped trace is
//
//	go run ./bench/cmd/mooncaketrace -out bench/traces/mooncake-small.jsonl
//
// and a test checks that this command still makes it byte for byte.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/saltus-lb/saltus/bench/workload"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	c := workload.DefaultConversationTrace()
	fs := flag.NewFlagSet("mooncaketrace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Int64Var(&c.Seed, "seed", c.Seed, "random `seed`: equal seeds, equal traces")
	fs.IntVar(&c.Rows, "rows", c.Rows, "rows (requests) to write, `count`")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "new conversations a second of trace time, `rate`")
	out := fs.String("out", "", "`file` to write (default: standard output)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	w := stdout
	var f *os.File
	if *out != "" {
		var err error
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "mooncaketrace: %v\n", err)
			return 1
		}
		w = f
	}
	err := workload.MooncakeConversations(w, c)
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "mooncaketrace: %v\n", err)
		return 1
	}
	return 0
}
