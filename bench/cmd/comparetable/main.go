// Command comparetable prints, from `saltus bench` results.json files,
// one table per workload: token hit ratio, P99 TTFT and requests/s per
// policy, the best baseline marked, and whether the candidate policy
// beats it (bench.CompareTable). bench/policy-compare.sh runs it.
//
//	go run ./bench/cmd/comparetable [--candidate prefix] bench/results/NAME/*/results.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/saltus-lb/saltus/bench"
)

func main() {
	candidate := flag.String("candidate", "prefix", "the `policy` compared with the others (the baselines)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: comparetable [--candidate policy] results.json...")
		os.Exit(2)
	}
	var order []string
	byWorkload := map[string][]bench.Summary{}
	for _, path := range flag.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "comparetable: %v\n", err)
			os.Exit(1)
		}
		var rep bench.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			fmt.Fprintf(os.Stderr, "comparetable: %s: %v\n", path, err)
			os.Exit(1)
		}
		for _, s := range rep.Runs {
			if _, ok := byWorkload[s.Workload]; !ok {
				order = append(order, s.Workload)
			}
			byWorkload[s.Workload] = append(byWorkload[s.Workload], s)
		}
	}
	for _, wl := range order {
		fmt.Printf("## %s\n\n%s\n", wl, bench.CompareTable(byWorkload[wl], *candidate))
	}
}
