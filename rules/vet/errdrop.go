package vet

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// ErrDrop checks R5: every error is handled or its dropping justified in
// a comment. An assignment of a call's results to blanks only (`_ = f()`,
// `_, _ = w.Write(b)`) that drops an error needs a comment on its line or
// the line above saying why nothing is lost.
var ErrDrop = &analysis.Analyzer{
	Name: "errdrop",
	Doc:  "R5: a dropped error (`_ = f()`) has a comment saying why",
	Run:  runErrDrop,
}

var errorType = types.Universe.Lookup("error").Type()

func runErrDrop(pass *analysis.Pass) (any, error) {
	for _, f := range pass.Files {
		if !checked(pass, f) {
			continue
		}
		commented := map[int]bool{}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if !strings.HasPrefix(c.Text, "// want ") { // analysistest's expectations say nothing about the error
					commented[pass.Fset.Position(c.Slash).Line] = true
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || as.Tok != token.ASSIGN || len(as.Rhs) != 1 || !allBlank(as.Lhs) {
				return true
			}
			call, ok := as.Rhs[0].(*ast.CallExpr)
			if !ok || !returnsError(pass.TypesInfo.TypeOf(call)) {
				return true
			}
			line := pass.Fset.Position(as.Pos()).Line
			if commented[line] || commented[line-1] {
				return true
			}
			report(pass, f, as.Pos(), "R5", "an error dropped without a comment saying why nothing is lost")
			return true
		})
	}
	return nil, nil
}

func allBlank(lhs []ast.Expr) bool {
	for _, e := range lhs {
		if id, ok := e.(*ast.Ident); !ok || id.Name != "_" {
			return false
		}
	}
	return true
}

// returnsError reports whether a call of type t has an error among its
// results.
func returnsError(t types.Type) bool {
	switch t := t.(type) {
	case *types.Tuple:
		for i := range t.Len() {
			if types.Identical(t.At(i).Type(), errorType) {
				return true
			}
		}
		return false
	case nil:
		return false
	default:
		return types.Identical(t, errorType)
	}
}
