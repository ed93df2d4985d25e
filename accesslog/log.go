// Package accesslog writes saltus's access log: one line per finished
// request (JSON or logfmt), to a file that it rotates by size and reopens
// on reload, or to standard output.
//
// It is a reqlog.Sink at the end of the request path: the shard hands it
// each request's Record (on the event loop that ended it, or the goroutine
// that answered); Log formats the line there, into a pooled buffer, and
// queues it to the one writer goroutine without waiting: a full queue
// drops the line, counted. Never the prompt or the answer: only what
// reqlog.Record holds.
//
// # Concurrency
//
// Log and Reopen are safe for concurrent use and never block. The file,
// its size and the rotation are owned by the writer goroutine (run), which
// Close stops after it wrote and flushed every queued line.
package accesslog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/rules"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_access_log_lines_total":        "Access log lines written (--access-log).",
		"saltus_access_log_dropped_total":      "Access log lines dropped because the writer's queue (access-log-buffer lines) was full, or the log was closed.",
		"saltus_access_log_sampled_out_total":  "Answers under 400 not logged by the access log's sampling (--access-log-sample).",
		"saltus_access_log_write_errors_total": "Access log writes, rotations and reopens that failed (logged; the lines of a failed write are lost).",
		"saltus_access_log_rotations_total":    "Access log files rotated by size (--access-log-max-size).",
	})
}

// maxLineBuf bounds a line buffer kept for reuse: one that grew past it
// (a line of long fields) goes to the collector.
const maxLineBuf = 16 << 10

// flushBytes is the writer's buffer: lines reach the file when the queue
// runs empty, or every flushBytes under load.
const flushBytes = 64 << 10

// Log is an open access log.
type Log struct {
	cfg    Config
	logger *slog.Logger
	lines  chan *[]byte
	reopen chan struct{} // 1: a Reopen is pending
	bufs   sync.Pool     // *[]byte line buffers
	closed atomic.Bool
	group  *rules.Group

	written, dropped, sampledOut, writeErrs, rotations *metrics.Counter

	// Owned by the writer goroutine.
	f        *os.File
	w        *bufio.Writer
	size     int64
	lastFail time.Time // fail's throttle
}

// Open opens cfg.Path (created, appended to) and starts the writer.
// Its metrics go to set. Close it.
func Open(cfg Config, logger *slog.Logger, set *metrics.Set) (*Log, error) {
	l, err := newLog(cfg, logger, set)
	if err != nil {
		return nil, err
	}
	l.start()
	return l, nil
}

// start starts the writer goroutine.
func (l *Log) start() {
	l.group = rules.NewGroup(context.Background())
	l.group.Go("accesslog.writer", l.run)
}

// newLog is Open without the writer goroutine (tests drive it).
func newLog(cfg Config, logger *slog.Logger, set *metrics.Set) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Path == "" {
		return nil, errors.New("accesslog: no path")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{cfg: cfg, logger: logger.With("component", "accesslog"),
		lines: make(chan *[]byte, cfg.Buffer), reopen: make(chan struct{}, 1),
		written:    set.NewCounter("saltus_access_log_lines_total"),
		dropped:    set.NewCounter("saltus_access_log_dropped_total"),
		sampledOut: set.NewCounter("saltus_access_log_sampled_out_total"),
		writeErrs:  set.NewCounter("saltus_access_log_write_errors_total"),
		rotations:  set.NewCounter("saltus_access_log_rotations_total"),
	}
	l.bufs.New = func() any { b := make([]byte, 0, 512); return &b }
	if cfg.Path == "-" {
		l.f = os.Stdout
	} else if err := l.open(); err != nil {
		return nil, err
	}
	l.w = bufio.NewWriterSize(l.f, flushBytes)
	return l, nil
}

// Tokens: the access log shows token counts (reqlog.Tokens).
func (l *Log) Tokens() bool { return true }

// Log formats r's line and queues it for the writer; a full queue drops
// it, counted. Sampled: see Config.Sample. Any goroutine; never blocks.
func (l *Log) Log(r *reqlog.Record) {
	if l.cfg.Sample < 1 && r.Status < 400 && !r.ClientGone && rand.Float64() >= l.cfg.Sample {
		l.sampledOut.Inc()
		return
	}
	if l.closed.Load() {
		l.dropped.Inc()
		return
	}
	bp := l.bufs.Get().(*[]byte)
	*bp = appendLine((*bp)[:0], r, l.cfg.Format)
	select {
	case l.lines <- bp:
	default:
		l.dropped.Inc()
		l.putBuf(bp)
	}
}

func (l *Log) putBuf(bp *[]byte) {
	if cap(*bp) <= maxLineBuf {
		l.bufs.Put(bp)
	}
}

// Reopen asks the writer to close and open the file again (a reload:
// logrotate moved it). Standard output is not reopened. Any goroutine;
// never blocks.
func (l *Log) Reopen() {
	select {
	case l.reopen <- struct{}{}:
	default: // one is pending already
	}
}

// Close stops the writer once it wrote and flushed every line queued,
// and closes the file; later lines are dropped, counted. Any goroutine
// but the writer.
func (l *Log) Close(ctx context.Context) error {
	if l.closed.Swap(true) {
		return nil
	}
	l.group.Stop()
	if err := l.group.Wait(ctx); err != nil {
		return fmt.Errorf("accesslog: the writer did not stop: %w", err)
	}
	return nil
}

// run is the writer goroutine.
func (l *Log) run(ctx context.Context) {
	for {
		select {
		case bp := <-l.lines:
			select {
			case <-l.reopen: // asked before this line was queued: it goes to the new file
				l.reopenFile()
			default:
			}
			l.write(bp)
			l.drain()
			l.flush()
		case <-l.reopen:
			l.reopenFile()
		case <-ctx.Done():
			l.drain()
			l.flush()
			if l.f != os.Stdout {
				l.closeFile()
			}
			return
		}
	}
}

// reopenFile closes the file and opens Path again.
func (l *Log) reopenFile() {
	l.flush()
	if l.f == os.Stdout {
		return
	}
	l.closeFile()
	if err := l.open(); err != nil {
		l.fail("cannot reopen the access log", err)
	}
}

// drain writes what is queued now, without waiting for more.
func (l *Log) drain() {
	for {
		select {
		case bp := <-l.lines:
			l.write(bp)
		default:
			return
		}
	}
}

// write writes one line, rotating first if it would take the file past
// MaxSize.
func (l *Log) write(bp *[]byte) {
	line := *bp
	defer l.putBuf(bp)
	if l.cfg.MaxSize > 0 && l.size > 0 && l.size+int64(len(line)) > l.cfg.MaxSize {
		l.rotate()
	}
	if l.f == nil {
		l.writeErrs.Inc() // no file (a failed reopen or rotation): the line is lost
		return
	}
	if _, err := l.w.Write(line); err != nil {
		l.fail("cannot write the access log", err)
		return
	}
	l.size += int64(len(line))
	l.written.Inc()
}

func (l *Log) flush() {
	if l.f == nil {
		return
	}
	if err := l.w.Flush(); err != nil {
		l.fail("cannot write the access log", err)
		l.w.Reset(l.f) // what it held is lost: counted, logged
	}
}

// open opens Path for appending; the writer's buffer then writes to it.
func (l *Log) open() error {
	f, err := os.OpenFile(l.cfg.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open the access log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // the Stat's error is the one to report
		return fmt.Errorf("cannot open the access log: %w", err)
	}
	l.f, l.size = f, st.Size()
	if l.w != nil {
		l.w.Reset(f)
	}
	return nil
}

// closeFile closes the file (flushed before).
func (l *Log) closeFile() {
	if l.f == nil {
		return
	}
	if err := l.f.Close(); err != nil {
		l.fail("cannot close the access log", err)
	}
	l.f = nil
}

// rotate renames path.i to path.i+1 (the last one removed), path to
// path.1, and opens a new path.
func (l *Log) rotate() {
	l.flush()
	l.closeFile()
	p, n := l.cfg.Path, l.cfg.MaxFiles
	name := func(i int) string { return p + "." + strconv.Itoa(i) }
	var err error
	if n == 0 {
		err = os.Remove(p)
	} else {
		for i := n - 1; i >= 1; i-- {
			if e := os.Rename(name(i), name(i+1)); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = errors.Join(err, e)
			}
		}
		err = errors.Join(err, os.Rename(p, name(1)))
	}
	if err != nil {
		l.fail("cannot rotate the access log", err)
	}
	l.rotations.Inc()
	if err := l.open(); err != nil {
		l.fail("cannot open the access log after rotating it", err)
	}
}

// fail counts and logs a failed write, rotation or reopen, at most once
// per failWindow (each counted).
func (l *Log) fail(msg string, err error) {
	l.writeErrs.Inc()
	if now := time.Now(); now.Sub(l.lastFail) >= failWindow {
		l.lastFail = now
		l.logger.Error(msg, "path", l.cfg.Path, "err", err)
	}
}

// failWindow throttles the writer's error logs.
const failWindow = 10 * time.Second

// Log is a Sink that wants tokens.
var (
	_ reqlog.Sink   = (*Log)(nil)
	_ reqlog.Tokens = (*Log)(nil)
)
