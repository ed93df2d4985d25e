package vet

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// Sleep checks R2's most common breach: time.Sleep. On an event loop it
// stops every connection of the loop for its length; off a loop, waiting
// for a condition by sleeping and polling is a latency floor and a CPU
// cost (wait on the event: a channel, a timer, a context). Each sleep
// outside tests carries an exception saying why it is neither.
var Sleep = &analysis.Analyzer{
	Name: "sleep",
	Doc:  "R2: no time.Sleep outside tests without an exception saying why it cannot run on a loop and why polling is acceptable there",
	Run:  runSleep,
}

func runSleep(pass *analysis.Pass) (any, error) {
	eachCall(pass, func(f *ast.File, call *ast.CallExpr, fn *types.Func) {
		if fn.Pkg().Path() == "time" && fn.Name() == "Sleep" {
			report(pass, f, call.Pos(), "R2", "time.Sleep: it blocks an event loop for its length, and off a loop it is polling; wait for the event instead")
		}
	})
	return nil, nil
}
