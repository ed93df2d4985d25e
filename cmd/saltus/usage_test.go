package main

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// TestUsageStyle: every subcommand's --help lists its flags one way, with
// the double dash the README uses, each with its help text indented
// under it, and the same output for -h.
func TestUsageStyle(t *testing.T) {
	t.Parallel()
	flagLine := regexp.MustCompile(`^  --[a-z][a-z0-9-]*( [A-Za-z:]+)?$`)
	for _, cmd := range []string{"serve", "sim", "bench", "demo", "tokenize"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			if code := run([]string{cmd, "--help"}, strings.NewReader(""), &out, &errb); code != 0 {
				t.Fatalf("saltus %s --help: exit %d", cmd, code)
			}
			help := errb.String()
			if !strings.HasPrefix(help, "Usage: saltus "+cmd+" ") {
				t.Errorf("saltus %s --help does not start with its usage line: %.60q", cmd, help)
			}
			_, list, ok := strings.Cut(help, "\nFlags:\n")
			if !ok {
				t.Fatalf("saltus %s --help has no Flags: section:\n%s", cmd, help)
			}
			lines := strings.Split(strings.TrimSuffix(list, "\n"), "\n")
			flags := 0
			for i, l := range lines {
				switch {
				case i%2 == 0 && !flagLine.MatchString(l):
					t.Errorf("saltus %s --help: %q is not a flag line (  --name ARG)", cmd, l)
				case i%2 == 1 && (!strings.HasPrefix(l, "      ") || !strings.HasSuffix(l, ")") || !strings.Contains(l, " (default ")):
					t.Errorf("saltus %s --help: %q is not a help line (indented text, then its default)", cmd, l)
				case i%2 == 0:
					flags++
				}
			}
			if flags < 5 || len(lines)%2 != 0 {
				t.Errorf("saltus %s --help lists %d flags in %d lines", cmd, flags, len(lines))
			}
			var short bytes.Buffer
			run([]string{cmd, "-h"}, strings.NewReader(""), &out, &short)
			if short.String() != help {
				t.Errorf("saltus %s -h differs from --help", cmd)
			}
		})
	}
}

func TestPrintFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("b-name", "", "the `thing` to use")
	fs.Int("a", 3, "a count")
	fs.Bool("c", false, "a switch")
	f := func(names []string, want string) {
		t.Helper()
		var b bytes.Buffer
		printFlags(&b, fs, names)
		if b.String() != want {
			t.Errorf("printFlags(%q) =\n%s\nwant\n%s", names, b.String(), want)
		}
	}
	f(nil, "  --a int\n      a count (default 3)\n  --b-name thing\n      the thing to use (default none)\n  --c\n      a switch (default false)\n")
	f([]string{"c", "a"}, "  --c\n      a switch (default false)\n  --a int\n      a count (default 3)\n")
	var b bytes.Buffer
	if code := missingFlag(&b, "saltus x", "b-name"); code != 2 || b.String() != "saltus x: missing --b-name (saltus x --help lists the flags)\n" {
		t.Errorf("missingFlag: %d %q", code, b.String())
	}
}
