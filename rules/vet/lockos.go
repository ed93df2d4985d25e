package vet

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// LockOS checks R6: an OS thread is locked only where the shard loops
// start (package reactor, gnet.WithLockOSThread). Locked elsewhere, a
// goroutine pins a thread the Go scheduler then cannot use for the loops.
var LockOS = &analysis.Analyzer{
	Name: "lockos",
	Doc:  "R6: runtime.LockOSThread and gnet.WithLockOSThread only in package reactor",
	Run:  runLockOS,
}

func runLockOS(pass *analysis.Pass) (any, error) {
	if pass.Pkg.Path() == "github.com/saltus-lb/saltus/reactor" {
		return nil, nil
	}
	eachCall(pass, func(f *ast.File, call *ast.CallExpr, fn *types.Func) {
		switch {
		case fn.Pkg().Path() == "runtime" && fn.Name() == "LockOSThread",
			fn.Pkg().Path() == "github.com/panjf2000/gnet/v2" && fn.Name() == "WithLockOSThread":
			report(pass, f, call.Pos(), "R6", "%s.%s outside package reactor: only the shard loops lock their OS threads", fn.Pkg().Name(), fn.Name())
		}
	})
	return nil, nil
}
