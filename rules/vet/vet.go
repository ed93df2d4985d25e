// Package vet holds the analyzers that check saltus's numbered rules
// (rules/RULES.md) by machine, bundled into cmd/saltusvet and run by
// `make rules` (so `make check`) as `go vet -vettool`. Each diagnostic
// names its rule ("R5: ..."). A deliberate exception is written on the
// line of the finding or the line above it as
//
//	//saltus:allow R5 <the reason a reviewer would accept>
//
// and an exception without a reason is itself a finding. Test files
// (_test.go) are not checked: the leak check and the race detector watch
// them, and their stand-in goroutines and dropped errors are the tests'
// own business. `saltusvet -audit` lists every rule, how it is enforced,
// and every exception with its place and reason.
//
// # Concurrency
//
// The analyzers keep no state between runs; the go/analysis driver runs
// them on its own goroutines.
package vet

import (
	"go/ast"
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// All are the analyzers saltusvet runs.
var All = []*analysis.Analyzer{GoStmt, ErrDrop, LockOS, Sleep, LoopBlock, PkgState, LoopMetrics, NumParse, Acquire, Borrowed, PostCapture}

// AllowPrefix begins an exception comment.
const AllowPrefix = "//saltus:allow "

// Allow is one exception comment: the rule it exempts and why.
type Allow struct {
	Rule, Reason string
	Line         int
}

// ParseAllow reads an exception comment's text ("//saltus:allow R5
// reason"); ok is false for any other comment.
func ParseAllow(text string) (a Allow, ok bool) {
	rest, ok := strings.CutPrefix(text, AllowPrefix)
	if !ok {
		return a, false
	}
	rule, reason, _ := strings.Cut(strings.TrimSpace(rest), " ")
	return Allow{Rule: rule, Reason: strings.TrimSpace(reason)}, true
}

// allowed reports whether an exception for rule, with a reason, is on
// pos's line or the line above in file.
func allowed(pass *analysis.Pass, file *ast.File, pos token.Pos, rule string) bool {
	line := pass.Fset.Position(pos).Line
	for _, cg := range file.Comments {
		for _, c := range cg.List {
			if a, ok := ParseAllow(c.Text); ok && a.Rule == rule && a.Reason != "" {
				if l := pass.Fset.Position(c.Slash).Line; l == line || l == line-1 {
					return true
				}
			}
		}
	}
	return false
}

// report reports a finding of rule at pos unless an exception for that
// rule, with a reason, is on its line or the line above; one without a
// reason does not count, and the finding says so.
func report(pass *analysis.Pass, file *ast.File, pos token.Pos, rule, format string, args ...any) {
	line := pass.Fset.Position(pos).Line
	for _, cg := range file.Comments {
		for _, c := range cg.List {
			a, ok := ParseAllow(c.Text)
			if !ok || a.Rule != rule {
				continue
			}
			if l := pass.Fset.Position(c.Slash).Line; l != line && l != line-1 {
				continue
			}
			if a.Reason == "" {
				pass.Reportf(pos, "%s: an exception needs a reason (//saltus:allow %s <why>)", rule, rule)
			}
			return
		}
	}
	pass.Reportf(pos, rule+": "+format, args...)
}

// checked reports whether file is subject to the rules: not a test file.
func checked(pass *analysis.Pass, file *ast.File) bool {
	return !strings.HasSuffix(pass.Fset.Position(file.Package).Filename, "_test.go")
}
