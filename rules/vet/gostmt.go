package vet

import (
	"go/ast"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// GoStmt checks R1: every goroutine starts through the supervisor
// (rules.Group.Go, rules.Workers), which names it, ties it to a context
// and joins it on shutdown; a bare go statement outside package rules is
// a goroutine nobody waits for.
var GoStmt = &analysis.Analyzer{
	Name: "gostmt",
	Doc:  "R1: goroutines start through rules.Group.Go (no bare go statement outside package rules)",
	Run:  runGoStmt,
}

func runGoStmt(pass *analysis.Pass) (any, error) {
	if p := pass.Pkg.Path(); p == "github.com/saltus-lb/saltus/rules" || strings.HasSuffix(p, "/rules/vet/testdata/src/supervisor") {
		return nil, nil // the supervisor itself
	}
	for _, f := range pass.Files {
		if !checked(pass, f) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				report(pass, f, g.Go, "R1", "a bare go statement: start the goroutine through rules.Group.Go, which names it and joins it on shutdown")
			}
			return true
		})
	}
	return nil, nil
}
