package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/saltus-lb/saltus/rules/vet"
)

// audit prints the rules, how each is enforced, and every exception
// comment in the Go files under dir (testdata and vendor skipped) with
// its place and reason; it returns the exit code (1 if an exception
// names no rule or gives no reason).
func audit(w io.Writer, dir string) int {
	type exception struct {
		place string
		vet.Allow
	}
	byRule := map[string][]exception{}
	bad := 0
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != dir && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				a, ok := vet.ParseAllow(c.Text)
				if !ok {
					continue
				}
				p := fset.Position(c.Slash)
				if a.Reason == "" || !strings.HasPrefix(a.Rule, "R") {
					bad++
				}
				byRule[a.Rule] = append(byRule[a.Rule], exception{fmt.Sprintf("%s:%d", p.Filename, p.Line), a})
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "saltusvet -audit:", err)
		return 2
	}
	fmt.Fprintf(w, "# saltus rules audit (%s)\n\n", dir)
	for _, r := range vet.Rules {
		fmt.Fprintf(w, "%s  %s\n    enforced by: %s\n", r.ID, r.Title, r.Enforced)
		ex := byRule[r.ID]
		delete(byRule, r.ID)
		if len(ex) == 0 {
			fmt.Fprintf(w, "    exceptions: none\n\n")
			continue
		}
		fmt.Fprintf(w, "    exceptions: %d\n", len(ex))
		for _, e := range ex {
			fmt.Fprintf(w, "      %s: %s\n", e.place, e.Reason)
		}
		fmt.Fprintln(w)
	}
	for rule, ex := range byRule {
		for _, e := range ex {
			bad++
			fmt.Fprintf(w, "unknown rule %q: %s: %s\n", rule, e.place, e.Reason)
		}
	}
	if bad > 0 {
		fmt.Fprintf(w, "%d exceptions without a known rule or a reason\n", bad)
		return 1
	}
	return 0
}
