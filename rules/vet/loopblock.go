package vet

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// LoopBlock checks R2 through the call graph: a function that runs on an
// event loop blocks neither itself nor through the module's functions it
// calls, however deep. A function runs on a loop when its doc comment
// says "Loop only" (CONVENTIONS.md § Documentation: every loop-facing method says so) or
// it is a gnet or reactor event callback (OnTraffic, OnOpen, OnClose,
// OnTick, OnBoot, OnShutdown, OnUpstreamOpen, OnUpstreamData,
// OnUpstreamClose), and every function posted to a loop (a literal or a
// named function passed to Post, postTo, post, Execute, or a Poster held
// in a field). Blocking is: time.Sleep; sync.Mutex and RWMutex
// Lock/RLock, WaitGroup.Wait, Cond.Wait; a channel send or receive, or a
// select, that has no default case; ranging over a channel; dialing, and
// opening, reading or writing files (net, os). Each module function that
// blocks carries a fact saying why, so a loop function three calls and
// two packages away from a mutex is found. Calls into other modules are
// not followed (the standard library's internal locks are not this
// rule's concern; its blocking entry points are listed above); function
// literals and calls through function values (hooks, method values) are
// not followed either: the callee is not known statically. A blocking step or call with an exception
// (//saltus:allow R2 <why it never waits, or never runs on a loop>) does
// not make its function block.
var LoopBlock = &analysis.Analyzer{
	Name:      "loopblock",
	Doc:       "R2: functions that run on an event loop do not block, directly or through the module functions they call",
	Run:       runLoopBlock,
	FactTypes: []analysis.Fact{new(blocksFact)},
}

// blocksFact marks a module function that may block, and why.
type blocksFact struct{ Why string }

func (*blocksFact) AFact()           {}
func (f *blocksFact) String() string { return "blocks: " + f.Why }

const modulePath = "github.com/saltus-lb/saltus"

// loopCallbacks are the event callbacks that run on a loop.
var loopCallbacks = map[string]bool{"OnTraffic": true, "OnOpen": true, "OnClose": true, "OnTick": true, "OnBoot": true,
	"OnShutdown": true, "OnUpstreamOpen": true, "OnUpstreamData": true, "OnUpstreamClose": true}

// blockingCalls are the blocking entry points, by package path and
// function or method name ("Type.Method").
var blockingCalls = map[string]map[string]string{
	"time": {"Sleep": "time.Sleep"},
	"sync": {"Mutex.Lock": "locks a sync.Mutex", "RWMutex.Lock": "locks a sync.RWMutex", "RWMutex.RLock": "read-locks a sync.RWMutex",
		"WaitGroup.Wait": "waits on a sync.WaitGroup", "Cond.Wait": "waits on a sync.Cond"},
	"net": {"Dial": "dials", "DialTimeout": "dials", "Dialer.Dial": "dials", "Dialer.DialContext": "dials",
		"LookupHost": "resolves a name", "LookupIP": "resolves a name"},
	"os": {"ReadFile": "reads a file", "WriteFile": "writes a file", "Open": "opens a file", "OpenFile": "opens a file",
		"Create": "creates a file", "File.Read": "reads a file", "File.Write": "writes a file", "File.Sync": "syncs a file"},
}

func runLoopBlock(pass *analysis.Pass) (any, error) {
	return nil, reach(pass, reachRule{
		rule: "R2",
		direct: func(body *ast.BlockStmt, found func(ast.Node, string) bool) {
			walkBlocking(pass, body, found)
		},
		importFact: func(fn *types.Func) string {
			var f blocksFact
			if pass.ImportObjectFact(fn, &f) {
				return f.Why
			}
			return ""
		},
		exportFact: func(fn *types.Func, why string) { pass.ExportObjectFact(fn, &blocksFact{Why: why}) },
	})
}

// reachRule is a rule about what functions that run on a loop reach
// through the call graph: direct finds the steps that break it in one
// body; the facts carry "reaches one, and why" across packages.
type reachRule struct {
	rule       string
	direct     func(body *ast.BlockStmt, found func(n ast.Node, why string) bool)
	importFact func(fn *types.Func) string
	exportFact func(fn *types.Func, why string)
}

// reach computes, for the package's module functions, whether each
// reaches a step of r (itself, or through the functions it calls, to a
// fixpoint), exports that as a fact, and reports each such step and call
// in the functions that run on a loop. A step or call with an exception
// for r's rule does not count.
func reach(pass *analysis.Pass, r reachRule) error {
	if p := pass.Pkg.Path(); p != modulePath && !strings.HasPrefix(p, modulePath+"/") && !strings.HasPrefix(p, "loop") {
		return nil // other modules: not followed
	}
	decls := map[*types.Func]*ast.FuncDecl{}
	files := map[*types.Func]*ast.File{}
	for _, f := range pass.Files {
		if !checked(pass, f) {
			continue
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					decls[fn], files[fn] = fd, f
				}
			}
		}
	}
	callee := func(call *ast.CallExpr, local map[*types.Func]string) (*types.Func, string) {
		fn, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
		switch {
		case !ok || fn.Pkg() == nil:
			return nil, ""
		case fn.Pkg() == pass.Pkg:
			return fn, local[fn.Origin()]
		}
		return fn, r.importFact(fn.Origin())
	}
	// What each function does itself, then what it calls, to a fixpoint.
	why := map[*types.Func]string{}
	for fn, fd := range decls {
		r.direct(fd.Body, func(n ast.Node, reason string) bool {
			if allowed(pass, files[fn], n.Pos(), r.rule) {
				return true
			}
			why[fn] = reason
			return false
		})
	}
	for changed := true; changed; {
		changed = false
		for fn, fd := range decls {
			if why[fn] != "" {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if _, lit := n.(*ast.FuncLit); lit || why[fn] != "" {
					return false
				}
				if call, ok := n.(*ast.CallExpr); ok {
					if c, w := callee(call, why); w != "" && !allowed(pass, files[fn], call.Pos(), r.rule) {
						why[fn] = fmt.Sprintf("calls %s, which %s", c.Name(), w)
						changed = true
						return false
					}
				}
				return true
			})
		}
	}
	for fn, w := range why {
		r.exportFact(fn, w)
	}
	// The loop functions: each step and each call that reaches one.
	check := func(f *ast.File, name string, body *ast.BlockStmt) {
		r.direct(body, func(n ast.Node, reason string) bool {
			report(pass, f, n.Pos(), r.rule, "%s runs on an event loop and %s", name, reason)
			return true
		})
		ast.Inspect(body, func(n ast.Node) bool {
			if _, lit := n.(*ast.FuncLit); lit {
				return false
			}
			if call, ok := n.(*ast.CallExpr); ok {
				if c, w := callee(call, why); w != "" {
					report(pass, f, call.Pos(), r.rule, "%s runs on an event loop and calls %s, which %s", name, c.Name(), w)
				}
			}
			return true
		})
	}
	for fn, fd := range decls {
		if runsOnLoop(fd) {
			check(files[fn], fn.Name(), fd.Body)
		}
	}
	// Work posted to a loop (Post, postTo, post, Execute, a Poster's
	// function): a function literal is checked as a loop function; a
	// named function or method value is reported at the post when it
	// reaches a step.
	for _, f := range pass.Files {
		if !checked(pass, f) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !postsToLoop(pass, call) {
				return true
			}
			for _, arg := range call.Args {
				switch a := arg.(type) {
				case *ast.FuncLit:
					check(f, "a function posted to a loop", a.Body)
				case *ast.Ident, *ast.SelectorExpr:
					var id *ast.Ident
					if sel, ok := a.(*ast.SelectorExpr); ok {
						id = sel.Sel
					} else {
						id = a.(*ast.Ident)
					}
					fn, ok := pass.TypesInfo.Uses[id].(*types.Func)
					if !ok || fn.Pkg() == nil {
						continue
					}
					w := why[fn.Origin()]
					if fn.Pkg() != pass.Pkg {
						w = r.importFact(fn.Origin())
					}
					if w != "" {
						report(pass, f, arg.Pos(), r.rule, "%s is posted to a loop and %s", fn.Name(), w)
					}
				}
			}
			return true
		})
	}
	return nil
}

// postsToLoop reports whether call hands a function to an event loop: a
// call of a method or function named Post, postTo, post or Execute, or of
// a value of a Poster's type (func(func())).
func postsToLoop(pass *analysis.Pass, call *ast.CallExpr) bool {
	switch fun := call.Fun.(type) {
	case *ast.SelectorExpr:
		if posters[fun.Sel.Name] {
			return true
		}
	case *ast.Ident:
		if posters[fun.Name] {
			return true
		}
	}
	// A poster held in a field (r.shards[i].poster(fn)): a field, not a
	// method, of type func(func()).
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	if s := pass.TypesInfo.Selections[sel]; s == nil || s.Kind() != types.FieldVal {
		return false
	}
	sig, ok := pass.TypesInfo.TypeOf(call.Fun).Underlying().(*types.Signature)
	if !ok || sig.Params().Len() != 1 || sig.Results().Len() != 0 {
		return false
	}
	p, ok := sig.Params().At(0).Type().Underlying().(*types.Signature)
	return ok && p.Params().Len() == 0 && p.Results().Len() == 0
}

// runsOnLoop reports whether fd runs on an event loop: an event callback,
// or documented "Loop only".
func runsOnLoop(fd *ast.FuncDecl) bool {
	if fd.Recv != nil && loopCallbacks[fd.Name.Name] {
		return true
	}
	return fd.Doc != nil && strings.Contains(strings.ToLower(fd.Doc.Text()), "loop only")
}

// walkBlocking calls found for each blocking step directly in body
// (function literals not entered) until found returns false.
func walkBlocking(pass *analysis.Pass, body *ast.BlockStmt, found func(n ast.Node, reason string) bool) {
	nonBlocking := map[ast.Node]bool{} // the comm clauses of selects with a default
	more := true
	ast.Inspect(body, func(n ast.Node) bool {
		if !more {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.SelectStmt:
			hasDefault := false
			for _, c := range n.Body.List {
				if cc := c.(*ast.CommClause); cc.Comm == nil {
					hasDefault = true
				}
			}
			if hasDefault {
				for _, c := range n.Body.List {
					if cc := c.(*ast.CommClause); cc.Comm != nil {
						nonBlocking[cc.Comm] = true
						ast.Inspect(cc.Comm, func(m ast.Node) bool { nonBlocking[m] = true; return true })
					}
				}
			} else {
				more = found(n, "waits in a select without a default case")
				return more
			}
		case *ast.SendStmt:
			if !nonBlocking[n] {
				more = found(n, "sends on a channel outside a select with a default case")
			}
		case *ast.UnaryExpr:
			if n.Op.String() == "<-" && !nonBlocking[n] {
				more = found(n, "receives from a channel outside a select with a default case")
			}
		case *ast.RangeStmt:
			if t := pass.TypesInfo.TypeOf(n.X); t != nil {
				if _, ok := t.Underlying().(*types.Chan); ok {
					more = found(n, "ranges over a channel")
				}
			}
		case *ast.CallExpr:
			if r := blockingCall(pass, n); r != "" {
				more = found(n, r)
			}
		}
		return more
	})
}

// blockingCall is why call blocks when its callee is a listed blocking
// entry point, else "".
func blockingCall(pass *analysis.Pass, call *ast.CallExpr) string {
	fn, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return ""
	}
	names := blockingCalls[fn.Pkg().Path()]
	if names == nil {
		return ""
	}
	name := fn.Name()
	if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil {
		t := sig.Recv().Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if nt, ok := t.(*types.Named); ok {
			name = nt.Obj().Name() + "." + name
		}
	}
	return names[name]
}
