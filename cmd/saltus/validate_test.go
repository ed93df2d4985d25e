package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/dataplane"
)

// TestComponentKeys: every key componentKeys names is a key of serve.
func TestComponentKeys(t *testing.T) {
	t.Parallel()
	keys := map[string]bool{}
	for _, k := range serveKeys {
		keys[k.key] = true
	}
	for _, k := range componentKeys {
		if !keys[k.key] {
			t.Errorf("componentKeys: %q is not a key of serve", k.key)
		}
	}
}

// TestValidateOnePlace: a setting a component checks fails the same way
// from a flag, a YAML key (start and reload load through
// loadServeConfig) and the benchmark: under its key, once, in the
// component's words, before anything starts.
func TestValidateOnePlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key, value, want string
	}{
		// Checked only by a component before: found at start, not by
		// --dry-run or a reload.
		{"queue-max-wait", "0s", "config: queue-max-wait: must be positive, got 0s"},
		{"queue-max-entries", "0", "config: queue-max-entries: must be in [1, 2^30], got 0"},
		{"adapter-engines", "-1", "config: adapter-engines: must not be negative, got -1"},
		// Checked by both before; by the component now.
		{"connect-timeout", "0s", "config: connect-timeout: must be positive, got 0s"},
		{"scrape-interval", "-1s", "config: scrape-interval: must not be negative (0 = off), got -1s"},
		{"max-retries", "11", "config: max-retries: must be between 0 and 10, got 11"},
		{"load-slack", "-1", "config: load-slack: must be a finite number of at least 0, got -1"},
		{"shards", "2000", "config: shards: must be between 0 (GOMAXPROCS) and 1024, got 2000"},
		{"header-timeout", "0s", "config: header-timeout: must be positive, got 0s"},
		{"models-interval", "-1s", "config: models-interval: must not be negative, got -1s"},
		{"state-interval", "0s", "config: state-interval: must be positive, got 0s"},
		{"discovery", "consul", `config: discovery: must be "k8s" or empty (none), got "consul"`},
		// A bound stricter than the component's: said once, in serve's
		// units.
		{"max-header", "512B", "config: max-header: must be between 1KiB and 1MiB, got 512B"},
	} {
		_, _, err := loadServeConfig([]string{"--" + tc.key, tc.value}, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("--%s %s: %v\nwant %s", tc.key, tc.value, err, tc.want)
		}
		p := writeFile(t, tc.key+".yaml", tc.key+": "+tc.value+"\n")
		_, _, err = loadServeConfig([]string{"--config", p}, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("YAML %s: %s: %v\nwant %s", tc.key, tc.value, err, tc.want)
		}
	}
	// Build checks the same (the benchmark's routers go through it).
	cfg := dataplane.DefaultConfig()
	cfg.Router.Queue.MaxWait = 0
	if _, err := dataplane.Build(cfg, nil, nil); err == nil || err.Error() != "shard: Queue: queue: MaxWait must be positive, got 0s" {
		t.Errorf("Build: %v", err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--load-slack", "-1", "--shards", "2000"}, strings.NewReader(""), &out, &errb); code != 2 ||
		errb.String() != "saltus bench: shards: must be between 0 (GOMAXPROCS) and 1024, got 2000\nload-slack: must be a finite number of at least 0, got -1\n" {
		t.Errorf("bench: exit %d, stderr %q", code, errb.String())
	}
}
