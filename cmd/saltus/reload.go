package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/dataplane"
	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/upstream/backend"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_config_reloads_total":                         "Configuration reloads (SIGHUP, POST /admin/reload), by result: ok, or error (the file was invalid: the running configuration stayed).",
		"saltus_config_restart_required":                      "Keys whose value in the configuration differs from the one the process runs with and that only a restart applies (listen addresses, shards, …), as of the last good reload.",
		"saltus_config_last_reload_success_timestamp_seconds": "Unix time of the last good configuration reload; 0 before the first.",
	})
}

// liveSettings is what a reload changes in the serving path while it
// serves; *dataplane.Path satisfies it.
type liveSettings interface {
	// Retune applies the settings each component may change at run time
	// (serveKey.live) and ignores the others.
	Retune(cfg dataplane.Config) error
	// SyncBackends makes the configured backends the list's.
	SyncBackends(list, models []string) backend.SyncResult
}

// tokenSetter is the admin listener's token as a reload changes it;
// *admin.Server satisfies it.
type tokenSetter interface{ SetBearerToken(token string) error }

// reloader re-reads serve's configuration (the same arguments: the
// --config file, then the flags given) on SIGHUP and POST /admin/reload
// and applies the keys marked live in serveKeys. A file that does not
// load or validate changes nothing and its errors are returned as they
// would be at start. Keys that only a restart applies are reported.
// Any goroutine; reloads serialize.
type reloader struct {
	args   []string
	start  serveConfig  // what the process started with
	path   liveSettings // nil: nothing of the serving path is applied (tests with fakes)
	level  *slog.LevelVar
	logger *slog.Logger
	drain  atomic.Int64 // drain-timeout in force, in ns

	ok, failed *metrics.Counter
	restart    atomic.Int64 // keys waiting for a restart
	lastOK     atomic.Int64 // unix seconds of the last good reload

	certs tlsCerts // the listeners' TLS certificates, read again by every reload; set before the first

	mu    sync.Mutex
	admin tokenSetter // set once the admin listener is built; nil before
	last  serveConfig // the last configuration loaded (live keys compare against it)
}

// reloadReport is a reload's answer (POST /admin/reload's JSON) and log.
type reloadReport struct {
	// Applied: live keys whose value changed; the new value is in force.
	Applied []string `json:"applied"`
	// RestartRequired: keys whose value differs from the one the process
	// started with; only a restart applies them.
	RestartRequired []string           `json:"restart_required"`
	Backends        backend.SyncResult `json:"backends"`
	// BackendErrors: configured backends not applied (their URL or name
	// belongs to a backend added through the admin API).
	BackendErrors []string `json:"backend_errors,omitempty"`
	// TLSReloaded: the listeners (data, admin) whose certificate files
	// were read again; TLSErrors: those whose pair did not load (the old
	// one stays).
	TLSReloaded []string `json:"tls_reloaded,omitempty"`
	TLSErrors   []string `json:"tls_errors,omitempty"`
}

func newReloader(args []string, cfg serveConfig, path liveSettings, level *slog.LevelVar, logger *slog.Logger, set *metrics.Set) *reloader {
	r := &reloader{args: args, start: cfg, last: cfg, path: path, level: level, logger: logger}
	r.drain.Store(int64(cfg.DrainTimeout))
	if set == nil {
		set = metrics.NewSet()
	}
	r.ok = set.GetOrCreateCounter(`saltus_config_reloads_total{result="ok"}`)
	r.failed = set.GetOrCreateCounter(`saltus_config_reloads_total{result="error"}`)
	set.GetOrCreateGauge("saltus_config_restart_required", func() float64 { return float64(r.restart.Load()) })
	set.GetOrCreateGauge("saltus_config_last_reload_success_timestamp_seconds", func() float64 { return float64(r.lastOK.Load()) })
	return r
}

// setAdmin gives the reloader the admin listener whose token it changes.
func (r *reloader) setAdmin(a tokenSetter) {
	r.mu.Lock()
	r.admin = a
	r.mu.Unlock()
}

// drainTimeout is the drain-timeout in force. Any goroutine.
func (r *reloader) drainTimeout() time.Duration { return time.Duration(r.drain.Load()) }

// errReload prefixes a reload's failure.
var errReload = errors.New("configuration not reloaded; the running one stays")

// reload loads the configuration again and applies what changed. Any
// goroutine but an event loop (it reads a file).
func (r *reloader) reload() (reloadReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The certificates first, whatever the file says: a renewal (a
	// certbot hook sending SIGHUP, say) must not wait on an unrelated key
	// of the configuration. Their file names are fixed until a restart.
	tlsDone, tlsErr := reloadTLS(r.certs, r.logger) // logged and counted by reloadTLS
	var warn bytes.Buffer
	cfg, _, err := loadServeConfig(r.args, &warn)
	if errors.Is(err, errUsage) {
		err = errors.New(strings.TrimSpace(warn.String())) // the flag package's words
	}
	if err != nil {
		r.failed.Inc()
		r.logger.Error("configuration reload failed; the running configuration stays", "err", err, "tls_reloaded", tlsDone)
		if len(tlsDone) > 0 {
			// Said, since the certificates were read anyway.
			err = fmt.Errorf("%w (the TLS certificates were read again: %s)", err, strings.Join(tlsDone, ", "))
		}
		return reloadReport{}, fmt.Errorf("%w: %w", errReload, err)
	}
	if w := strings.TrimSpace(warn.String()); w != "" {
		r.logger.Warn("configuration reload", "warning", w)
	}
	rep := reloadReport{Applied: []string{}, RestartRequired: []string{}, TLSReloaded: tlsDone}
	if tlsErr != nil {
		rep.TLSErrors = strings.Split(tlsErr.Error(), "\n") // errors.Join's: one per listener
	}
	for _, k := range serveKeys {
		switch {
		case k.deprecated:
		case k.live && k.bind(&r.last).String() != k.bind(&cfg).String():
			rep.Applied = append(rep.Applied, k.key)
		case !k.live && k.bind(&r.start).String() != k.bind(&cfg).String():
			rep.RestartRequired = append(rep.RestartRequired, k.key)
		}
	}
	if r.path != nil {
		if err := r.path.Retune(cfg.servingConfig()); err != nil { // validated: not expected
			r.failed.Inc()
			r.logger.Error("configuration reload failed; the running configuration stays", "err", err)
			return reloadReport{}, fmt.Errorf("%w: %w", errReload, err)
		}
		// Every reload re-applies the file's backends: one removed
		// through the admin API comes back.
		rep.Backends = r.path.SyncBackends(cfg.Backends, cfg.BackendModels)
		for _, e := range rep.Backends.Errors {
			rep.BackendErrors = append(rep.BackendErrors, e.Error())
		}
	}
	if r.admin != nil && cfg.Admin.BearerToken != r.last.Admin.BearerToken {
		if err := r.admin.SetBearerToken(cfg.Admin.BearerToken); err != nil { // validated: not expected
			r.logger.Error("admin token not changed", "err", err)
		}
	}
	if r.level != nil {
		if l, err := parseLevel(cfg.LogLevel); err == nil { // validated
			r.level.Set(l)
		}
	}
	r.drain.Store(int64(cfg.DrainTimeout))
	r.last = cfg
	r.ok.Inc()
	r.restart.Store(int64(len(rep.RestartRequired)))
	r.lastOK.Store(time.Now().Unix())
	attrs := []any{"applied", rep.Applied, "backends_added", rep.Backends.Added, "backends_drained", rep.Backends.Drained, "backends_restored", rep.Backends.Restored}
	if len(rep.RestartRequired) > 0 {
		attrs = append(attrs, "restart_required", rep.RestartRequired)
	}
	r.logger.Info("configuration reloaded", attrs...)
	for _, e := range rep.BackendErrors {
		r.logger.Warn("configured backend not applied", "err", e)
	}
	if len(rep.RestartRequired) > 0 {
		r.logger.Warn("changed settings that only a restart applies; they keep their running values", "keys", rep.RestartRequired)
	}
	return rep, nil
}

// adminReload is the admin listener's Config.Reload.
func (r *reloader) adminReload() (any, error) {
	rep, err := r.reload()
	if err != nil {
		return nil, err
	}
	return rep, nil
}
