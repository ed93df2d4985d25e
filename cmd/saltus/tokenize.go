package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	chatpkg "github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// maxTokenizeInput bounds what `saltus tokenize` reads from stdin.
const maxTokenizeInput = 64 << 20

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("tokenizer", "", "`path` of a HuggingFace tokenizer.json, a directory holding one, or a .json.gz (required)")
	special := fs.Bool("special", false, "add the tokenizer's special tokens around the text (BOS for Llama-3 and Mistral), as an engine does for a raw prompt")
	asJSON := fs.Bool("json", false, "read a JSON array of strings from stdin and print one JSON array of id arrays; with --chat, a JSON array of conversations and one JSON array of results (one a line; a conversation that fails is {\"error\": ...} and the exit code 1)")
	chat := fs.Bool("chat", false, "read an OpenAI messages array (or a request object with \"messages\") and print the prompt rendered with the model's chat template: segments, ids and message boundaries")
	chatTemplate := fs.String("chat-template", "", "with --chat: the built-in template by `name` ("+strings.Join(chatpkg.Names(), ", ")+"); default: the tokenizer_config.json's chat_template next to --tokenizer (a built-in where one renders it exactly, else its Jinja), else none with a warning")
	chatTemplateFile := fs.String("chat-template-file", "", "with --chat: `path` of a Jinja chat template to render with (as transformers renders it), instead of the tokenizer config's; excludes --chat-template")
	genPrompt := fs.Bool("add-generation-prompt", true, "with --chat: end with the assistant header the model answers after, as the chat completions API does (a request object's add_generation_prompt overrides it)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: saltus tokenize --tokenizer PATH [--special] [--json] < input\n"+
			"       saltus tokenize --tokenizer PATH --chat [--chat-template NAME | --chat-template-file PATH] [--json] < messages.json\n\n"+
			"Encodes stdin (UTF-8 text, at most %d MiB) to token ids, exactly as HuggingFace tokenizers\n"+
			"does, and prints them as a JSON array. With --chat, renders an OpenAI messages array with\n"+
			"the model's chat template and prints a JSON object: the template, the segments (added\n"+
			"tokens, \"special\": true, and the text runs between them, each with its ids), all ids, and\n"+
			"message_ends: for each message whose end falls between segments, the segment it ends with\n"+
			"and its end as a token offset (mistral and llama2 end user turns inside a text run).\n\nFlags:\n", maxTokenizeInput>>20)
		printFlags(stderr, fs, nil)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "saltus tokenize: unexpected argument %q (input comes on stdin)\n", fs.Arg(0))
		return 2
	}
	if *path == "" {
		return missingFlag(stderr, "saltus tokenize", "tokenizer")
	}
	if *chatTemplate != "" && !*chat {
		fmt.Fprintln(stderr, "saltus tokenize: --chat-template needs --chat")
		return 2
	}
	if *chatTemplateFile != "" && !*chat {
		fmt.Fprintln(stderr, "saltus tokenize: --chat-template-file needs --chat")
		return 2
	}
	if *chatTemplateFile != "" && *chatTemplate != "" {
		fmt.Fprintln(stderr, "saltus tokenize: --chat-template and --chat-template-file exclude each other")
		return 2
	}
	if *chat && *special {
		fmt.Fprintln(stderr, "saltus tokenize: --chat does not combine with --special (the template emits its own special tokens)")
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
	if *chat {
		return runTokenizeChat(tok, *path, *chatTemplate, *chatTemplateFile, *genPrompt, *asJSON, in, stdout, stderr)
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
