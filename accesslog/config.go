package accesslog

import (
	"errors"
	"fmt"
)

// Formats of a line.
const (
	FormatJSON   = "json"   // one JSON object per line
	FormatLogfmt = "logfmt" // key=value pairs, Go-quoted where needed
)

// Config is the access log's. Immutable once Open has it; a reload reopens
// the file (Reopen) but changes nothing else.
type Config struct {
	// Path is the file written: "" off (the default), "-" standard
	// output (never rotated nor reopened).
	Path string
	// Format is FormatJSON (default) or FormatLogfmt.
	Format string
	// MaxSize rotates the file when a line would take it past this many
	// bytes: path.1 ... path.MaxFiles hold the older lines, path.1 the
	// newest. Default 0: never (an external logrotate then moves it and
	// reloads saltus, which reopens Path).
	MaxSize int64
	// MaxFiles is the rotated files kept (path.1 ... path.MaxFiles); the
	// oldest goes. Default 5; 0 keeps none (a full file is removed).
	MaxFiles int
	// Sample is the fraction of answers under 400 logged, in (0, 1].
	// Answers of 400 and up, and requests whose client left, are always
	// logged: they are what an operator looks for. Default 1: every one.
	Sample float64
	// Buffer is the lines queued for the writer goroutine; a line that
	// finds it full is dropped and counted
	// (saltus_access_log_dropped_total), never waited for: an event
	// loop writes into it. Default 8192 (~2-4 MB of lines at most).
	Buffer int
}

// DefaultConfig returns the defaults: off, JSON, no rotation, 5 files
// kept when rotating, every answer, 8192 lines queued.
func DefaultConfig() Config {
	return Config{Format: FormatJSON, MaxFiles: 5, Sample: 1, Buffer: 8192}
}

// Validate checks c.
func (c Config) Validate() error {
	var errs []error
	if c.Format != FormatJSON && c.Format != FormatLogfmt {
		errs = append(errs, fmt.Errorf("access-log-format must be %s or %s, got %q", FormatJSON, FormatLogfmt, c.Format))
	}
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("access-log-max-size must not be negative, got %d", c.MaxSize))
	}
	if c.MaxFiles < 0 || c.MaxFiles > 1000 {
		errs = append(errs, fmt.Errorf("access-log-max-files must be in [0, 1000], got %d", c.MaxFiles))
	}
	if !(c.Sample > 0 && c.Sample <= 1) {
		errs = append(errs, fmt.Errorf("access-log-sample must be in (0, 1], got %v", c.Sample))
	}
	if c.Buffer < 1 || c.Buffer > 1<<20 {
		errs = append(errs, fmt.Errorf("access-log-buffer must be in [1, %d], got %d", 1<<20, c.Buffer))
	}
	if c.Path == "-" && c.MaxSize > 0 {
		errs = append(errs, errors.New("access-log-max-size needs a file: standard output (access-log -) is not rotated"))
	}
	return errors.Join(errs...)
}
