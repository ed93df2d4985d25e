package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// maxTokenizeInput bounds what `saltus tokenize` reads from stdin.
const maxTokenizeInput = 64 << 20

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("tokenizer", "", "path of a HuggingFace tokenizer.json, a directory holding one, or a .json.gz (required)")
	special := fs.Bool("special", false, "add the tokenizer's special tokens around the text (BOS for Llama-3 and Mistral), as an engine does for a raw prompt")
	asJSON := fs.Bool("json", false, "read a JSON array of strings from stdin and print one JSON array of id arrays")
	chat := fs.Bool("chat", false, "read an OpenAI messages array and print the rendered segments (not available yet: chat templates are still to come)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: saltus tokenize --tokenizer PATH [--special] [--json] < input\n\n"+
			"Encodes stdin (UTF-8 text, at most %d MiB) to token ids, exactly as HuggingFace tokenizers\n"+
			"does, and prints them as a JSON array.\n\nFlags:\n", maxTokenizeInput>>20)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if *chat {
		fmt.Fprintln(stderr, "saltus tokenize: --chat is not available yet (chat templates are not implemented)")
		return 2
	}
	tok, err := tokenizer.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: %v\n", err)
		return 1
	}
	in, err := io.ReadAll(io.LimitReader(stdin, maxTokenizeInput+1))
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: cannot read stdin: %v\n", err)
		return 1
	}
	if len(in) > maxTokenizeInput {
		fmt.Fprintf(stderr, "saltus tokenize: stdin is larger than %d MiB\n", maxTokenizeInput>>20)
		return 1
	}
	encode := tok.Encode
	if *special {
		encode = tok.EncodeSpecial
	}
	var out any
	if *asJSON {
		var texts []string
		if err := json.Unmarshal(in, &texts); err != nil {
			fmt.Fprintf(stderr, "saltus tokenize: --json wants a JSON array of strings on stdin: %v\n", err)
			return 1
		}
		all := make([][]int32, len(texts))
		for i, s := range texts {
			all[i] = encode([]int32{}, s)
		}
		out = all
	} else {
		if !utf8.Valid(in) {
			fmt.Fprintln(stderr, "saltus tokenize: stdin is not valid UTF-8")
			return 1
		}
		out = encode([]int32{}, string(in))
	}
	b, _ := json.Marshal(out) // slices of int32 always marshal
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}
