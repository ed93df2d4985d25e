package main

import (
	"flag"
	"fmt"
	"io"
)

// printFlags writes the flags of fs named in names (nil: all, sorted) the
// way every subcommand's --help lists them, with the double dash the
// README uses (Go's flag package accepts both):
//
//	--name ARG
//	    usage (default DEF)
//
// ARG is the usage's `quoted` word (flag.UnquoteUsage); an empty default
// reads "none".
func printFlags(w io.Writer, fs *flag.FlagSet, names []string) {
	one := func(fl *flag.Flag) {
		arg, usage := flag.UnquoteUsage(fl)
		def := fl.DefValue
		if def == "" {
			def = "none"
		}
		if arg != "" {
			arg = " " + arg
		}
		fmt.Fprintf(w, "  --%s%s\n      %s (default %s)\n", fl.Name, arg, usage, def)
	}
	if names == nil {
		fs.VisitAll(one)
		return
	}
	for _, name := range names {
		fl := fs.Lookup(name)
		if fl == nil {
			panic("BUG: printFlags: no flag --" + name)
		}
		one(fl)
	}
}

// missingFlag reports a required flag that was not given: "saltus
// tokenize: missing --tokenizer", and where the help is. It returns the
// usage-error exit code, 2.
func missingFlag(w io.Writer, cmd, name string) int {
	fmt.Fprintf(w, "%s: missing --%s (%s --help lists the flags)\n", cmd, name, cmd)
	return 2
}
