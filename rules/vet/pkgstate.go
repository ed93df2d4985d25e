package vet

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// PkgState checks R12: no package-level mutable state except metrics and
// sentinel errors. A package-level variable written at run time (in any
// function but init: assigned, incremented, or an element or field of it
// assigned) is shared by every server, shard and test in the process.
var PkgState = &analysis.Analyzer{
	Name: "pkgstate",
	Doc:  "R12: package-level variables are not written at run time (only in init)",
	Run:  runPkgState,
}

func runPkgState(pass *analysis.Pass) (any, error) {
	for _, f := range pass.Files {
		if !checked(pass, f) {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || (fd.Recv == nil && fd.Name.Name == "init") {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				var targets []ast.Expr
				switch n := n.(type) {
				case *ast.AssignStmt:
					if n.Tok != token.DEFINE {
						targets = n.Lhs
					}
				case *ast.IncDecStmt:
					targets = []ast.Expr{n.X}
				}
				for _, e := range targets {
					if v := rootVar(pass, e); v != nil && v.Parent() == pass.Pkg.Scope() {
						report(pass, f, e.Pos(), "R12", "the package-level variable %s is written at run time: keep the state in the value that owns it", v.Name())
					}
				}
				return true
			})
		}
	}
	return nil, nil
}

// rootVar is the variable an assignment target writes into: v in v, v[k],
// v.f, (*v).f; nil for a blank or anything else.
func rootVar(pass *analysis.Pass, e ast.Expr) *types.Var {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			v, _ := pass.TypesInfo.Uses[x].(*types.Var)
			return v
		case *ast.IndexExpr:
			e = x.X // an element of a map, slice or array variable
		case *ast.SelectorExpr:
			if _, ok := pass.TypesInfo.TypeOf(x.X).Underlying().(*types.Pointer); ok {
				return nil // a field through a pointer: the pointee is not the package's variable
			}
			e = x.X
		case *ast.StarExpr:
			return nil
		case *ast.ParenExpr:
			e = x.X
		default:
			return nil
		}
	}
}
