package vet

import (
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// LoopMetrics checks R10 where it matters most: a function that runs on an
// event loop never resolves or registers a metric by name, itself or
// through the module functions it calls (VictoriaMetrics' GetOrCreate*
// and New* hash the name and take the set's lock: microseconds and a
// lock every loop contends on). Handles are resolved once, where their
// owner is built, and only incremented on the loop.
var LoopMetrics = &analysis.Analyzer{
	Name:      "loopmetrics",
	Doc:       "R10: functions that run on an event loop do not resolve or register metrics by name, directly or through module functions",
	Run:       runLoopMetrics,
	FactTypes: []analysis.Fact{new(metricsFact)},
}

// metricsFact marks a module function that resolves a metric by name.
type metricsFact struct{ Why string }

func (*metricsFact) AFact()           {}
func (f *metricsFact) String() string { return "resolves metrics: " + f.Why }

const metricsPath = "github.com/VictoriaMetrics/metrics"

func runLoopMetrics(pass *analysis.Pass) (any, error) {
	return nil, reach(pass, reachRule{
		rule: "R10",
		direct: func(body *ast.BlockStmt, found func(ast.Node, string) bool) {
			ast.Inspect(body, func(n ast.Node) bool {
				if _, lit := n.(*ast.FuncLit); lit {
					return false
				}
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fn, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
				if ok && fn.Pkg() != nil && fn.Pkg().Path() == metricsPath &&
					(strings.HasPrefix(fn.Name(), "GetOrCreate") || strings.HasPrefix(fn.Name(), "New")) {
					return found(call, "resolves a metric by name (metrics."+fn.Name()+")")
				}
				return true
			})
		},
		importFact: func(fn *types.Func) string {
			var f metricsFact
			if pass.ImportObjectFact(fn, &f) {
				return f.Why
			}
			return ""
		},
		exportFact: func(fn *types.Func, why string) { pass.ExportObjectFact(fn, &metricsFact{Why: why}) },
	})
}
