package vet

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

// Each analyzer reports what breaks its rule (the want lines), honours an
// exception with a reason, reports one without, and leaves the rest.
func TestAnalyzers(t *testing.T) {
	dir := analysistest.TestData()
	analysistest.Run(t, dir, GoStmt, "gostmt")
	analysistest.Run(t, dir, ErrDrop, "errdrop")
	analysistest.Run(t, dir, LockOS, "lockos", "github.com/saltus-lb/saltus/reactor")
	analysistest.Run(t, dir, Sleep, "sleep")
	analysistest.Run(t, dir, LoopBlock, "loopblock/dep", "loopblock")
	analysistest.Run(t, dir, PkgState, "pkgstate")
	analysistest.Run(t, dir, LoopMetrics, "loopmetrics")
	analysistest.Run(t, dir, NumParse, "numparse")
	analysistest.Run(t, dir, Acquire, "acquire")
	analysistest.Run(t, dir, Borrowed, "borrowed")
	analysistest.Run(t, dir, PostCapture, "postcapture")
}

// TestRulesDocument: RULES.md has a section per rule of Rules, in order,
// with the same number, and no other numbered section.
func TestRulesDocument(t *testing.T) {
	data, err := os.ReadFile("../RULES.md")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, m := range regexp.MustCompile(`(?m)^## (R\d+)\b`).FindAllSubmatch(data, -1) {
		doc = append(doc, string(m[1]))
	}
	var want []string
	for _, r := range Rules {
		want = append(want, r.ID)
	}
	if !slices.Equal(doc, want) {
		t.Errorf("RULES.md's rules %v, want %v (rules/vet/rules.go)", doc, want)
	}
}

func TestParseAllow(t *testing.T) {
	f := func(text string, want Allow, wantOK bool) {
		t.Helper()
		got, ok := ParseAllow(text)
		if ok != wantOK || got != want {
			t.Errorf("ParseAllow(%q) = %+v, %v; want %+v, %v", text, got, ok, want, wantOK)
		}
	}
	f("//saltus:allow R5 the reason", Allow{Rule: "R5", Reason: "the reason"}, true)
	f("//saltus:allow R5", Allow{Rule: "R5"}, true)
	f("//saltus:allow  R12   two  spaces ", Allow{Rule: "R12", Reason: "two  spaces"}, true)
	f("// saltus:allow R5 x", Allow{}, false)
	f("//nolint", Allow{}, false)
}
