// Command saltusvet runs the analyzers of saltus's numbered rules
// (rules/RULES.md, rules/vet) as a vet tool:
//
//	go build -o bin/saltusvet ./cmd/saltusvet
//	go vet -vettool=bin/saltusvet ./...
//
// (`make rules` does both.) `saltusvet -audit [dir]` prints the audit an
// operator reads: each rule, how it is enforced, and every exception
// (//saltus:allow) under dir (default .) with its place and reason.
package main

import (
	"os"

	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/saltus-lb/saltus/rules/vet"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-audit" || os.Args[1] == "--audit") {
		dir := "."
		if len(os.Args) > 2 {
			dir = os.Args[2]
		}
		os.Exit(audit(os.Stdout, dir))
	}
	multichecker.Main(vet.All...)
}
