package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// reloadYAML is a config file for TestReload: the test defaults of
// startServeWith, the backends and the keys given.
func reloadYAML(backends []string, shards int, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin-listen: 127.0.0.1:0
tokenizer: ../../tokenpool/testdata/models/llama3/tokenizer.json.gz
shards: %d
drain-timeout: 5s
health-interval: 1h
backends: [%s]
%s`, shards, strings.Join(backends, ", "), extra)
}

// TestReload changes the config file of a running serve and reloads it
// through POST /admin/reload and SIGHUP: backends added and drained,
// the admin token, a request limit and a policy knob applied, a listen
// setting reported as needing a restart, an invalid file refused with
// its error while the running configuration stays.
func TestReload(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	path := filepath.Join(t.TempDir(), "saltus.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadYAML([]string{a.srv.URL}, 2, "admin-token: one\n"))
	args := []string{"--config", path}
	cfg, _, err := loadServeConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := startServeCfg(t, cfg, args)
	adm := func(token, method, p string) answer {
		t.Helper()
		return do(t, method, "http://"+s.admin+p, "", "Authorization", "Bearer "+token)
	}
	if got := s.chat(t, chatJSON(false, "user", "hello")); got.status != 200 || !strings.Contains(got.body, `"a"`) && got.backend != a.srv.URL {
		t.Fatalf("before the reload: %d %s (backend %s)", got.status, got.body, got.backend)
	}

	// A good reload.
	write(reloadYAML([]string{"named-b=" + b.srv.URL}, 1, "admin-token: two\nmax-body: 4KiB\nload-slack: 0.5\nlog-level: debug\n"))
	got := adm("one", "POST", "/admin/reload")
	if got.status != 200 {
		t.Fatalf("POST /admin/reload: %d %s", got.status, got.body)
	}
	var rep struct {
		Applied         []string `json:"applied"`
		RestartRequired []string `json:"restart_required"`
		Backends        struct {
			Added, Drained []string
		} `json:"backends"`
	}
	if err := json.Unmarshal([]byte(got.body), &rep); err != nil {
		t.Fatalf("%v: %s", err, got.body)
	}
	if want := []string{"admin-token", "backends", "max-body", "load-slack", "log-level"}; !slices.Equal(rep.Applied, want) {
		t.Errorf("applied = %v, want %v", rep.Applied, want)
	}
	if want := []string{"shards"}; !slices.Equal(rep.RestartRequired, want) {
		t.Errorf("restart_required = %v, want %v", rep.RestartRequired, want)
	}
	if !slices.Equal(rep.Backends.Added, []string{b.srv.URL}) || !slices.Equal(rep.Backends.Drained, []string{a.srv.URL}) {
		t.Errorf("backends: %+v", rep.Backends)
	}
	// The new token, and only it.
	if got := adm("one", "GET", "/admin/backends"); got.status != 401 {
		t.Errorf("old token after the reload: %d", got.status)
	}
	// a is drained and removed once idle (it is: no request in flight).
	waitFor(t, func() bool {
		got := adm("two", "GET", "/admin/backends")
		return got.status == 200 && !strings.Contains(got.body, a.srv.URL) && strings.Contains(got.body, `"name":"named-b"`)
	})
	if got := s.chat(t, chatJSON(false, "user", "hello again")); got.status != 200 || b.calls.Load() != 1 {
		t.Fatalf("after the reload: %d %s; b answered %d", got.status, got.body, b.calls.Load())
	}
	if got := s.chat(t, chatJSON(false, "user", strings.Repeat("x", 5000))); got.status != 413 {
		t.Errorf("a 5 KB body under max-body 4KiB: %d %s", got.status, got.body)
	}
	if !strings.Contains(s.logs(), "changed settings that only a restart applies") {
		t.Error("no warning about shards in the log")
	}

	// An invalid file: refused with its error; nothing changes.
	write(reloadYAML([]string{b.srv.URL}, 1, "admin-token: three\nmax-body: lots\n"))
	got = adm("two", "POST", "/admin/reload")
	if got.status != 400 || !strings.Contains(got.body, "the running one stays") || !strings.Contains(got.body, "max-body") {
		t.Errorf("invalid file: %d %s", got.status, got.body)
	}
	s.signals <- syscall.SIGHUP
	waitFor(t, func() bool { return strings.Count(s.logs(), "configuration reload failed") == 2 })
	if got := adm("two", "GET", "/admin/backends"); got.status != 200 {
		t.Errorf("token after the failed reload: %d", got.status)
	}
	if got := s.chat(t, chatJSON(false, "user", strings.Repeat("x", 5000))); got.status != 413 {
		t.Errorf("max-body after the failed reload: %d", got.status)
	}
	got = adm("two", "GET", "/metrics")
	for _, want := range []string{`saltus_config_reloads_total{result="ok"} 1`, `saltus_config_reloads_total{result="error"} 2`, `saltus_config_restart_required 1`} {
		if !strings.Contains(got.body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
