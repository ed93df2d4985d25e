// Package state keeps a router's route table across restarts: it writes
// the routes this router learned itself (origin local, with their ages)
// to a file in --state-dir, periodically and on shutdown, and reads them
// back at start, so a restarted router does not forget which engine holds
// which prefix. It sits beside the request path, never on it: the routes
// are collected from the loops by posting to them (shard.Router.Saved),
// and encoded and written on the saver's own goroutine; a Saver's state
// is owned by that goroutine, and Save is safe for concurrent use.
//
// # File
//
//	magic "SALTUSRT" | version uint16 LE (1) | reserved uint16 | saved at (Unix ms, int64 LE)
//	| payload length uint32 LE | CRC-32C of the rest of the file uint32 LE | payload
//
// The payload is a gossip/wire KindState message (routes as block-key
// chains with boundaries, the backend's identity key and the age at
// saving). A file is written to a temporary name, synced, renamed over
// the old one and the directory synced, so a crash leaves the old file
// or the new one, never half of one. A file that is truncated, corrupt,
// of another version or over MaxBytes is reported and ignored: the router
// starts cold rather than not at all.
package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_state_saves_total":           "Route table snapshots written to --state-dir, by result (ok, error: the log says why).",
		"saltus_state_saved_routes":          "Routes in the last snapshot written.",
		"saltus_state_restored_routes_total": "Routes read back from --state-dir at start and handed to the route table.",
		"saltus_state_restore_errors_total":  "Snapshots found at start and ignored, by reason (corrupt, version, too_large, read): the router started cold.",
	})
}

// FileName is the snapshot's name in the state directory.
const FileName = "routes.state"

const (
	magic      = "SALTUSRT"
	version    = 1
	headerSize = 8 + 2 + 2 + 8 + 4 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors Load returns for a file it ignores.
var (
	ErrCorrupt  = errors.New("state: corrupt snapshot")
	ErrVersion  = errors.New("state: snapshot written by another version")
	ErrTooLarge = errors.New("state: snapshot over the size bound")
)

// Config configures persistence. Zero values are not defaults: start
// from DefaultConfig.
type Config struct {
	// Dir is the state directory (--state-dir); "" disables persistence.
	Dir string
	// Interval between snapshots. Default 1m: a crash loses at most a
	// minute of learning; a snapshot of the default bound costs a few
	// milliseconds of loop time, spread over the loops.
	Interval time.Duration
	// MaxRoutes bounds a snapshot, most recently used first. Default
	// 100,000.
	MaxRoutes int
	// MaxBytes bounds the file, written and read. Default 64 MiB.
	MaxBytes int
}

// DefaultConfig returns the defaults documented on Config (disabled).
func DefaultConfig() Config {
	return Config{Interval: time.Minute, MaxRoutes: 100_000, MaxBytes: 64 << 20}
}

// Validate names every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("state: Interval must be positive, got %v", c.Interval))
	}
	if c.MaxRoutes < 1 {
		errs = append(errs, fmt.Errorf("state: MaxRoutes must be at least 1, got %d", c.MaxRoutes))
	}
	if c.MaxBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("state: MaxBytes must be at least 1 KiB, got %d", c.MaxBytes))
	}
	return errors.Join(errs...)
}

// Encode returns the file for routes saved at saved, within maxBytes
// (the most recent routes first, those that do not fit dropped).
func Encode(routes []wire.Route, saved time.Time, maxBytes int) []byte {
	kept := wire.WholeRoutes(routes, maxBytes-headerSize-512)
	payload := wire.AppendMessage(nil, &wire.Message{Header: wire.Header{Kind: wire.KindState, Node: "state", Sent: saved.UnixMilli()}, Routes: kept})
	out := make([]byte, headerSize, headerSize+len(payload))
	copy(out, magic)
	binary.LittleEndian.PutUint16(out[8:], version)
	binary.LittleEndian.PutUint64(out[12:], uint64(saved.UnixMilli()))
	binary.LittleEndian.PutUint32(out[20:], uint32(len(payload)))
	out = append(out, payload...)
	binary.LittleEndian.PutUint32(out[24:], checksum(out))
	return out
}

// checksum is the CRC-32C of a file but its checksum field.
func checksum(file []byte) uint32 {
	c := crc32.Update(0, castagnoli, file[:24])
	return crc32.Update(c, castagnoli, file[headerSize:])
}

// Decode checks a file and returns its routes, their ages grown by the
// time between its saving and now.
func Decode(data []byte, now time.Time) ([]wire.Route, error) {
	if len(data) < headerSize || string(data[:8]) != magic {
		return nil, fmt.Errorf("%w: no header", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(data[8:]); v != version {
		return nil, fmt.Errorf("%w: version %d, this saltus reads %d", ErrVersion, v, version)
	}
	saved := time.UnixMilli(int64(binary.LittleEndian.Uint64(data[12:])))
	n := binary.LittleEndian.Uint32(data[20:])
	payload := data[headerSize:]
	if uint64(len(payload)) != uint64(n) {
		return nil, fmt.Errorf("%w: payload of %d bytes, the header says %d (truncated?)", ErrCorrupt, len(payload), n)
	}
	if binary.LittleEndian.Uint16(data[10:]) != 0 {
		return nil, fmt.Errorf("%w: reserved header bits set", ErrCorrupt)
	}
	if checksum(data) != binary.LittleEndian.Uint32(data[24:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	var m wire.Message
	if err := wire.Decode(payload, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if m.Kind != wire.KindState {
		return nil, fmt.Errorf("%w: payload kind %d", ErrCorrupt, m.Kind)
	}
	down := max(now.Sub(saved), 0) / time.Millisecond
	for i := range m.Routes {
		m.Routes[i].Age = uint32(min(uint64(m.Routes[i].Age)+uint64(down), 1<<32-1))
	}
	return m.Routes, nil
}

// Table is the router as the saver sees it (shard.Router).
type Table interface {
	// Saved returns up to limit of the routes learned here, most recent
	// first, and whether every loop answered. Any goroutine but a loop.
	Saved(ctx context.Context, limit int) (routes []wire.Route, complete bool)
	// Restore inserts saved routes with origin local. Any goroutine but
	// a loop.
	Restore(routes []wire.Route) (unknown, dropped int)
}

// Saver writes snapshots of a Table to Config.Dir.
type Saver struct {
	cfg    Config
	table  Table
	logger *slog.Logger
	mu     sync.Mutex // one write at a time (the periodic one, the last one)

	saves    [2]*metrics.Counter // ok, error
	saved    *metrics.Gauge
	restored *metrics.Counter
	rerrs    map[string]*metrics.Counter
	lastSave int64 // routes in the last snapshot; guarded by mu
}

// NewSaver returns a Saver; Restore and Run do the work.
func NewSaver(cfg Config, table Table, logger *slog.Logger, set *metrics.Set) (*Saver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("state: no directory")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: cannot create state-dir: %w", err)
	}
	s := &Saver{cfg: cfg, table: table, logger: logger.With("component", "state"),
		restored: set.NewCounter("saltus_state_restored_routes_total"), rerrs: map[string]*metrics.Counter{}}
	s.saves[0] = set.NewCounter(`saltus_state_saves_total{result="ok"}`)
	s.saves[1] = set.NewCounter(`saltus_state_saves_total{result="error"}`)
	s.saved = set.NewGauge("saltus_state_saved_routes", func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(s.lastSave)
	})
	for _, r := range []string{"corrupt", "version", "too_large", "read"} {
		s.rerrs[r] = set.NewCounter(fmt.Sprintf(`saltus_state_restore_errors_total{reason=%q}`, r))
	}
	return s, nil
}

// Path is the snapshot file's path.
func (s *Saver) Path() string { return filepath.Join(s.cfg.Dir, FileName) }

// Restore reads the snapshot, if any, into the table. A missing file is
// a cold start; a bad one is logged, counted and ignored. It returns the
// routes handed to the table.
func (s *Saver) Restore() int {
	f, err := os.Open(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		s.logger.Info("no route snapshot: starting cold", "path", s.Path())
		return 0
	}
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(f, int64(s.cfg.MaxBytes)+1))
		_ = f.Close() // read-only: nothing to flush
	}
	if err != nil {
		s.rerrs["read"].Inc()
		s.logger.Error("cannot read the route snapshot: starting cold", "path", s.Path(), "err", err)
		return 0
	}
	if len(data) > s.cfg.MaxBytes {
		s.rerrs["too_large"].Inc()
		s.logger.Error("route snapshot over its bound: starting cold", "path", s.Path(), "max_bytes", s.cfg.MaxBytes)
		return 0
	}
	routes, err := Decode(data, time.Now())
	if err != nil {
		reason := "corrupt"
		if errors.Is(err, ErrVersion) {
			reason = "version"
		}
		s.rerrs[reason].Inc()
		s.logger.Error("route snapshot ignored: starting cold", "path", s.Path(), "err", err)
		return 0
	}
	slices.Reverse(routes) // oldest first: tree.Recent's order for a receiver
	unknown, dropped := s.table.Restore(routes)
	n := len(routes) - unknown - dropped
	s.restored.Add(n)
	s.logger.Info("route snapshot restored", "path", s.Path(), "routes", n, "unknown_backend", unknown, "dropped", dropped)
	return n
}

// Run saves every Interval until ctx ends. Run it in a rules.Group.
func (s *Saver) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Save(ctx) // logged and counted by Save
		}
	}
}

// snapshotWait bounds how long a save waits for the loops.
const snapshotWait = 5 * time.Second

// Save writes one snapshot now: atomically (temporary file, fsync,
// rename, directory fsync). Its error is also logged and counted. Any
// goroutine but a loop.
func (s *Saver) Save(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotWait)
	routes, complete := s.table.Saved(c, s.cfg.MaxRoutes)
	cancel()
	if !complete {
		// A loop stopped or did not answer: a partial snapshot would
		// replace a whole one.
		s.saves[1].Inc()
		err := errors.New("state: a loop did not answer; the previous snapshot is kept")
		s.logger.Warn("route snapshot skipped", "path", s.Path(), "err", err)
		return err
	}
	data := Encode(routes, time.Now(), s.cfg.MaxBytes)
	if err := writeAtomic(s.cfg.Dir, FileName, data); err != nil {
		s.saves[1].Inc()
		s.logger.Error("cannot write the route snapshot", "path", s.Path(), "err", err)
		return err
	}
	s.saves[0].Inc()
	s.lastSave = int64(len(routes))
	return nil
}

func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return fmt.Errorf("cannot create a temporary file: %w", err)
	}
	tmp := f.Name()
	_, err = io.Copy(f, bytes.NewReader(data))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp) // best effort: the write already failed
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
