package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"
)

// logWriter turns memberlist's log lines ("[ERR] memberlist: …") into
// slog records at the matching level, component gossip. A level that
// logged within the last second is suppressed, counted: memberlist logs
// once per packet it cannot read (a peer with another key sends many).
type logWriter struct {
	logger *slog.Logger
	m      *nodeMetrics

	mu   sync.Mutex // guards last
	last [4]time.Time
}

var logLevels = [...]struct {
	tag   string
	level slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	li := 1 // untagged: info
	for i, l := range logLevels {
		if rest, ok := bytes.CutPrefix(line, []byte(l.tag)); ok {
			li, line = i, bytes.TrimSpace(rest)
			break
		}
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	lv := logLevels[li].level
	if !w.logger.Enabled(context.Background(), lv) {
		return len(p), nil
	}
	now := time.Now()
	w.mu.Lock()
	quiet := lv >= slog.LevelInfo && now.Sub(w.last[li]) < time.Second
	if !quiet {
		w.last[li] = now
	}
	w.mu.Unlock()
	if quiet {
		w.m.suppressed.Inc()
		return len(p), nil
	}
	w.logger.Log(context.Background(), lv, "memberlist: "+string(line))
	return len(p), nil
}
