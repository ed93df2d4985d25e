package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// TestDeployFiles: the example production config loads and validates,
// and every flag the systemd unit and the Dockerfile pass to saltus serve
// exists.
func TestDeployFiles(t *testing.T) {
	t.Parallel()
	if _, _, err := loadServeConfig([]string{"--config", "../../deploy/saltus.yaml"}, io.Discard); err != nil {
		t.Fatalf("deploy/saltus.yaml: %v", err)
	}
	flags := newServeFlags(io.Discard, nil).fs
	check := func(file string, args []string) {
		t.Helper()
		if len(args) == 0 || args[0] != "serve" {
			t.Fatalf("%s: runs %q, want saltus serve", file, args)
		}
		for _, a := range args[1:] {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if flags.Lookup(name) == nil {
				t.Errorf("%s: saltus serve has no flag --%s", file, name)
			}
		}
	}
	unit, err := os.ReadFile("../../deploy/saltus.service")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for line := range strings.Lines(string(unit)) {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			f := strings.Fields(rest)
			check("saltus.service", f[1:])
			found = true
		}
	}
	if !found {
		t.Fatal("saltus.service: no ExecStart")
	}
	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	found = false
	for line := range strings.Lines(string(docker)) {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				t.Fatalf("Dockerfile CMD is not a JSON array: %v", err)
			}
			check("Dockerfile", args)
			found = true
		}
	}
	if !found {
		t.Fatal("Dockerfile: no CMD")
	}
}
