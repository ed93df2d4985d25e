package main

import (
	"fmt"
	"io"
	"log/slog"
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
	opts := &slog.HandlerOptions{Level: lv}
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
