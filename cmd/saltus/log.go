package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"
)

// newLogger returns the process's one logger, writing to w in format
// ("text" or "json") at level and above. Components get theirs from
// componentLogger.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("config: log-level: %v", err)
	}
	lv := new(slog.LevelVar)
	lv.Set(l)
	return newLoggerVar(w, format, lv)
}

// newLoggerVar is newLogger at the level lv says, which may change (a
// configuration reload sets it).
func newLoggerVar(w io.Writer, format string, lv *slog.LevelVar) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: durationMS}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf(`config: log-format: must be "text" or "json", got %q`, format)
}

// componentLogger returns the logger of one component: every record
// carries component=name (CONVENTIONS.md § Errors and logs: one injected logger with a
// component attribute).
func componentLogger(l *slog.Logger, name string) *slog.Logger {
	return l.With(slog.String("component", name))
}

// durationMS writes a duration in milliseconds under its key with an _ms
// suffix ("drain_timeout_ms":30000), wherever it is logged, in a group or
// not (CONVENTIONS.md § Errors and logs): the handlers' own forms are
// nanoseconds in JSON and Go's "30s" in text, neither of which a log
// query can compare. A whole or long duration is an integer; a short one
// keeps its microseconds (0.25), so a sub-millisecond wait does not read
// as 0. It is the handlers' ReplaceAttr, called with each attribute
// already resolved (a LogValuer returning a duration is converted too).
func durationMS(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	d := a.Value.Duration()
	a.Key += "_ms"
	if d%time.Millisecond == 0 || d >= time.Second || d <= -time.Second {
		a.Value = slog.Int64Value(d.Round(time.Millisecond).Milliseconds())
	} else {
		a.Value = slog.Float64Value(float64(d.Round(time.Microsecond)) / float64(time.Millisecond))
	}
	return a
}
