package vet

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// NumParse checks R14's sharpest edge: a string-to-number conversion
// whose error is dropped (`n, _ := strconv.Atoi(s)`) turns bad input into
// a zero that looks valid: a length of 0, a port of 0, a count of 0.
var NumParse = &analysis.Analyzer{
	Name: "numparse",
	Doc:  "R14: the error of a strconv conversion is never dropped",
	Run:  runNumParse,
}

var numParsers = map[string]bool{"Atoi": true, "ParseInt": true, "ParseUint": true, "ParseFloat": true, "ParseBool": true}

func runNumParse(pass *analysis.Pass) (any, error) {
	eachAssignedCall(pass, func(f *ast.File, as *ast.AssignStmt, fn *types.Func) {
		if fn.Pkg().Path() != "strconv" || !numParsers[fn.Name()] || len(as.Lhs) != 2 {
			return
		}
		if id, ok := as.Lhs[1].(*ast.Ident); ok && id.Name == "_" {
			report(pass, f, as.Pos(), "R14", "strconv.%s's error is dropped: bad input becomes a zero that looks valid", fn.Name())
		}
	})
	return nil, nil
}

// Acquire checks R9: a call that acquires (a method named acquire or
// Acquire, used as a statement) is followed at once by a deferred
// release of the same receiver; a release left to another path (a hook,
// a later call) needs an exception saying what guarantees it.
var Acquire = &analysis.Analyzer{
	Name: "acquire",
	Doc:  "R9: an acquire is followed at once by a deferred release of the same receiver",
	Run:  runAcquire,
}

func runAcquire(pass *analysis.Pass) (any, error) {
	eachFile(pass, func(f *ast.File, n ast.Node) {
		block, ok := n.(*ast.BlockStmt)
		if !ok {
			return
		}
		for i, st := range block.List {
			es, ok := st.(*ast.ExprStmt)
			if !ok {
				continue
			}
			recv, name := methodCall(es.X)
			if name != "acquire" && name != "Acquire" {
				continue
			}
			if i+1 < len(block.List) {
				if d, ok := block.List[i+1].(*ast.DeferStmt); ok {
					if r2, n2 := methodCall(d.Call); (n2 == "release" || n2 == "Release") && types.ExprString(r2) == types.ExprString(recv) {
						continue
					}
				}
			}
			report(pass, f, es.Pos(), "R9", "%s.%s is not followed at once by defer %s.release: a panic or a new early return would leak what it took", types.ExprString(recv), name, types.ExprString(recv))
		}
	})
	return nil, nil
}

// methodCall is e's receiver and method name when e is a method call
// x.m(...), else nil and "".
func methodCall(e ast.Expr) (ast.Expr, string) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return nil, ""
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, ""
	}
	return sel.X, sel.Sel.Name
}

// Borrowed checks R3 where a borrowed buffer is most easily kept: the
// bytes gnet lends (Conn.Peek, Conn.Next) stored into a field, which
// outlives the callback and reads the next request's bytes later.
var Borrowed = &analysis.Analyzer{
	Name: "borrowed",
	Doc:  "R3: gnet's Peek and Next results are not stored in fields (copy what outlives the callback)",
	Run:  runBorrowed,
}

func runBorrowed(pass *analysis.Pass) (any, error) {
	eachAssignedCall(pass, func(f *ast.File, as *ast.AssignStmt, fn *types.Func) {
		if fn.Pkg().Path() != "github.com/panjf2000/gnet/v2" || (fn.Name() != "Peek" && fn.Name() != "Next") {
			return
		}
		if _, field := as.Lhs[0].(*ast.SelectorExpr); field {
			report(pass, f, as.Pos(), "R3", "gnet's %s lends its buffer until the callback returns: a field keeps it longer; copy the bytes", fn.Name())
		}
	})
	return nil, nil
}

// PostCapture checks R7: a function literal posted to another loop
// (Post, postTo, poster, Execute) does not capture a byte slice of its
// enclosing function: the slice is usually a view of a connection's
// buffer, which the sender reuses while the other loop reads it. Copy it,
// or pass values (keys, strings) instead.
var PostCapture = &analysis.Analyzer{
	Name: "postcapture",
	Doc:  "R7: closures posted to a loop do not capture []byte variables of the poster",
	Run:  runPostCapture,
}

var posters = map[string]bool{"Post": true, "postTo": true, "post": true, "Execute": true}

func runPostCapture(pass *analysis.Pass) (any, error) {
	eachFile(pass, func(f *ast.File, n ast.Node) {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return
		}
		name := ""
		switch fun := call.Fun.(type) {
		case *ast.SelectorExpr:
			name = fun.Sel.Name
		case *ast.Ident:
			name = fun.Name
		}
		if !posters[name] {
			return
		}
		for _, arg := range call.Args {
			lit, ok := arg.(*ast.FuncLit)
			if !ok {
				continue
			}
			reported := map[types.Object]bool{}
			ast.Inspect(lit.Body, func(m ast.Node) bool {
				id, ok := m.(*ast.Ident)
				if !ok {
					return true
				}
				v, ok := pass.TypesInfo.Uses[id].(*types.Var)
				if !ok || v.IsField() || reported[v] || v.Parent() == pass.Pkg.Scope() {
					return true
				}
				if v.Pos() >= lit.Pos() && v.Pos() < lit.End() {
					return true // the literal's own
				}
				if s, ok := v.Type().Underlying().(*types.Slice); ok {
					if b, ok := s.Elem().Underlying().(*types.Basic); ok && b.Kind() == types.Byte {
						reported[v] = true
						report(pass, f, id.Pos(), "R7", "a closure posted to a loop captures the byte slice %s: it may view a buffer its owner reuses; copy it or pass values", v.Name())
					}
				}
				return true
			})
		}
	})
	return nil, nil
}

// eachAssignedCall calls fn for every assignment whose right side is one
// call of a function known statically (its callee fn).
func eachAssignedCall(pass *analysis.Pass, fn func(f *ast.File, as *ast.AssignStmt, callee *types.Func)) {
	eachFile(pass, func(f *ast.File, n ast.Node) {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Rhs) != 1 {
			return
		}
		if call, ok := as.Rhs[0].(*ast.CallExpr); ok {
			if c, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func); ok && c.Pkg() != nil {
				fn(f, as, c)
			}
		}
	})
}

// eachCall calls fn for every call of a function known statically (its
// callee fn) in the package's checked files.
func eachCall(pass *analysis.Pass, fn func(f *ast.File, call *ast.CallExpr, callee *types.Func)) {
	eachFile(pass, func(f *ast.File, n ast.Node) {
		if call, ok := n.(*ast.CallExpr); ok {
			if c, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func); ok && c.Pkg() != nil {
				fn(f, call, c)
			}
		}
	})
}

// eachFile calls fn for every node of the package's checked files.
func eachFile(pass *analysis.Pass, fn func(f *ast.File, n ast.Node)) {
	for _, f := range pass.Files {
		if !checked(pass, f) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			fn(f, n)
			return true
		})
	}
}
