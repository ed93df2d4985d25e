package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// goDuration matches a duration in Go's text form ("30s", "1m0s",
// "250µs"), which a log must not carry as a value.
var goDuration = regexp.MustCompile(`^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)

// checkNoNanos fails on a value under key (dotted for groups) of a JSON
// record that reads as a duration not in milliseconds: a Go duration
// string anywhere, or under a key without the _ms suffix a number of 1e9
// and more (a duration of a second or more in nanoseconds; no count these
// tests log comes near it). A key ending in _ms must hold a number.
func checkNoNanos(t *testing.T, line, key string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if key != "" {
				k = key + "." + k
			}
			checkNoNanos(t, line, k, x)
		}
	case string:
		if goDuration.MatchString(v) {
			t.Errorf("%s=%q is a Go duration, want %s_ms in milliseconds: %s", key, v, key, line)
		}
		if strings.HasSuffix(key, "_ms") {
			t.Errorf("%s=%q is not a number: %s", key, v, line)
		}
	case float64:
		if !strings.HasSuffix(key, "_ms") && (v >= 1e9 || v <= -1e9) {
			t.Errorf("%s=%v looks like nanoseconds: %s", key, v, line)
		}
	default:
		if strings.HasSuffix(key, "_ms") {
			t.Errorf("%s=%v is not a number: %s", key, v, line)
		}
	}
}

// records parses JSON log lines, checks each with checkNoNanos and returns
// them.
func records(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record: %v: %s", err, line)
		}
		checkNoNanos(t, line, "", rec)
		recs = append(recs, rec)
	}
	return recs
}

// find returns the first record with message msg.
func find(t *testing.T, recs []map[string]any, msg string) map[string]any {
	t.Helper()
	for _, r := range recs {
		if r["msg"] == msg {
			return r
		}
	}
	t.Fatalf("no %q record", msg)
	return nil
}

// msDuration is a LogValuer that resolves to a duration.
type msDuration time.Duration

func (d msDuration) LogValue() slog.Value { return slog.DurationValue(time.Duration(d)) }

// TestLogDurations runs saltus's logger over the shapes of its duration
// attributes: each is written in milliseconds under its key with _ms,
// in a group, a With, a LogValuer, in JSON and text alike.
func TestLogDurations(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := newLogger(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	serve := componentLogger(l, "serve")
	serve.Info("draining", "signal", "terminated", "drain_timeout", 30*time.Second)      // lifecycle.run
	serve.Info("drained", "after", (1234567 * time.Microsecond).Round(time.Millisecond)) // lifecycle.run
	componentLogger(l, "reactor").Error("cannot accept a TLS connection", "err", errors.New("EMFILE"), "retry_in", 5*time.Millisecond, "suppressed", 0)
	componentLogger(l, "discovery").Debug("the watch ended early without an event", "after", 250*time.Microsecond)
	componentLogger(l, "reload").Info("configuration reloaded", "applied", []string{"drain-timeout"}, "backends_added", []string{})
	componentLogger(l, "backend").Info("backend draining", "id", 1, "backend", "http://10.0.0.7:8000", "in_flight", 2)
	l.With("interval", time.Minute).WithGroup("probe").Info("grouped", "timeout", 2*time.Second,
		slog.Group("nested", slog.Duration("ttl", time.Hour), slog.Any("idle", msDuration(90*time.Second))))

	recs := records(t, buf.String())
	for _, c := range []struct {
		msg, key string
		want     float64
	}{
		{"draining", "drain_timeout_ms", 30000},
		{"drained", "after_ms", 1235},
		{"cannot accept a TLS connection", "retry_in_ms", 5},
		{"the watch ended early without an event", "after_ms", 0.25},
		{"grouped", "interval_ms", 60000},
	} {
		if got := find(t, recs, c.msg)[c.key]; got != c.want {
			t.Errorf("%s: %s = %v, want %v", c.msg, c.key, got, c.want)
		}
	}
	probe, _ := find(t, recs, "grouped")["probe"].(map[string]any)
	nested, _ := probe["nested"].(map[string]any)
	if probe["timeout_ms"] != 2000.0 || nested["ttl_ms"] != 3600000.0 || nested["idle_ms"] != 90000.0 {
		t.Errorf("grouped durations: probe %v", probe)
	}
	if r := find(t, recs, "backend draining"); r["backend"] != "http://10.0.0.7:8000" {
		t.Errorf("backend draining: %v, want the URL under backend (the metrics' label)", r)
	}

	buf.Reset()
	l, _ = newLogger(&buf, "text", "info")
	l.Info("draining", "drain_timeout", 30*time.Second, slog.Group("g", "wait", 1500*time.Microsecond))
	if want := "msg=draining drain_timeout_ms=30000 g.wait_ms=1.5\n"; !strings.HasSuffix(buf.String(), want) {
		t.Errorf("text: %q, want the suffix %q", buf.String(), want)
	}
}

// TestServeLogsJSON serves with --log-format json and goes through what
// logs a duration or a backend: startup, a backend added and drained
// through the admin API, a SIGHUP reload, the drain at SIGTERM. No line
// carries a duration in nanoseconds; drain_timeout_ms is there.
func TestServeLogsJSON(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "a")
	args := []string{"--log-format", "json", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--backend", up.srv.URL, "--health-interval", "1h", "--drain-timeout", "30s", "--shards", "2"}
	cfg, _, err := loadServeConfig(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := startServeCfg(t, cfg, args)
	other := newUpstream(t, "b")
	a := s.adm(t, "POST", "/admin/backends", fmt.Sprintf(`{"url":%q}`, other.srv.URL))
	var added struct{ ID int }
	if err := json.Unmarshal([]byte(a.body), &added); a.status != 201 || err != nil {
		t.Fatalf("POST /admin/backends: %d %v %s", a.status, err, a.body)
	}
	if a := s.adm(t, "POST", fmt.Sprintf("/admin/backends/%d/drain", added.ID), ""); a.status != 202 {
		t.Fatalf("drain: %d %s", a.status, a.body)
	}
	s.signals <- syscall.SIGHUP
	waitFor(t, func() bool { return strings.Contains(s.logs(), `"msg":"configuration reloaded"`) })
	s.term()
	if c := s.wait(t, 30*time.Second); c != 0 {
		t.Fatalf("exit code %d", c)
	}

	recs := records(t, s.logs())
	if r := find(t, recs, "draining"); r["drain_timeout_ms"] != 30000.0 {
		t.Errorf("draining: %v, want drain_timeout_ms 30000", r)
	}
	if r := find(t, recs, "drained"); r["after_ms"] == nil {
		t.Errorf("drained: %v, want after_ms", r)
	}
	var backends int
	for _, r := range recs {
		if r["url"] != nil {
			t.Errorf("%s: %v, want the URL under backend (the metrics' label)", r["msg"], r)
		}
		if r["backend"] == other.srv.URL && (r["msg"] == "backend added" || r["msg"] == "backend draining") {
			backends++
		}
	}
	if backends < 2 {
		t.Errorf("want the added backend's adding and draining logged under backend, got %d records", backends)
	}
}
