package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/saltus-lb/saltus/keys"
)

// keysEnv is the environment variable that holds API keys besides
// --api-keys-file, in the file's format.
const keysEnv = "SALTUS_API_KEYS"

// checkKeys validates the key list serve would load: the file (read
// now) and the environment's, so that a bad key fails at start and
// --dry-run, naming the line and field.
func checkKeys(c keys.Config) error {
	var errs []error
	if len(c.Env) > 0 {
		if _, err := keys.Parse(keysEnv, c.Env); err != nil {
			errs = append(errs, fmt.Errorf("config: api-keys-file: %w", err))
		}
	}
	if c.File != "" {
		data, err := os.ReadFile(c.File)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("config: api-keys-file: cannot read it: %v", err))
		case len(data) > keys.MaxFileBytes:
			errs = append(errs, fmt.Errorf("config: api-keys-file: %s: over the bound of %d bytes", c.File, keys.MaxFileBytes))
		default:
			if _, err := keys.Parse(c.File, data); err != nil {
				errs = append(errs, fmt.Errorf("config: api-keys-file: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

const keysUsage = `Usage:
  saltus keys hash [--name NAME] < secret   print the hash line of the secret on stdin
  saltus keys new [--name NAME]             print a new random secret, then its hash line

The hash line ("hash: sha256:<hex>", or a whole key entry with --name) goes
in the --api-keys-file; the secret goes to the client, never in the file.
`

// runKeys is `saltus keys`.
func runKeys(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "hash" && args[0] != "new") {
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the key's `name` (its tenant in metrics and the queue): print a whole key entry; empty: only the hash line")
	fs.Usage = func() { fmt.Fprint(stderr, keysUsage) }
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "saltus keys %s: unexpected argument %q (the secret is read from stdin)\n", args[0], fs.Arg(0))
		return 2
	}
	if *name != "" {
		if err := keys.CheckName(*name); err != nil {
			fmt.Fprintf(stderr, "saltus keys %s: --name: %v\n", args[0], err)
			return 2
		}
	}
	var secret string
	if args[0] == "new" {
		var b [32]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
		secret = "sk-" + base64.RawURLEncoding.EncodeToString(b[:])
		fmt.Fprintf(stdout, "# the secret, for the client only:\n# %s\n", secret)
	} else {
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintf(stderr, "saltus keys hash: cannot read the secret: %v\n", err)
			return 1
		}
		secret = strings.TrimRight(line, "\r\n")
		if err := checkSecret(secret); err != nil {
			fmt.Fprintf(stderr, "saltus keys hash: %v\n", err)
			return 1
		}
	}
	h := keys.FormatHash(keys.HashSecret(secret))
	if *name == "" {
		fmt.Fprintf(stdout, "hash: %s\n", h)
		return 0
	}
	fmt.Fprintf(stdout, "- name: %s\n  hash: %s\n", *name, h)
	return 0
}

// checkSecret refuses what no client could present as a key: empty, over
// 1024 bytes (saltus does not hash longer ones), spaces or control
// characters (a header value would lose or refuse them).
func checkSecret(s string) error {
	if s == "" {
		return errors.New("no secret on stdin (printf '%s' \"$SECRET\" | saltus keys hash)")
	}
	if len(s) > 1024 {
		return fmt.Errorf("the secret is %d bytes; at most 1024", len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("the secret has a space or a non-ASCII or control byte at %d: clients could not send it in a header", i)
		}
	}
	return nil
}
