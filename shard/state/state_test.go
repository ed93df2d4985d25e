package state

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/gossip/wire"
)

func routes() []wire.Route {
	return []wire.Route{
		{Op: wire.OpInsert, Backend: 11, Age: 5, Keys: []uint64{1, 2, 3, 4}, Bounds: []uint32{2}},
		{Op: wire.OpInsert, Backend: 22, Age: 900, Keys: []uint64{9, 8}},
	}
}

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	saved := time.UnixMilli(1_700_000_000_000)
	data := Encode(routes(), saved, 1<<20)
	got, err := Decode(data, saved.Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got[0].Keys, []uint64{1, 2, 3, 4}) || !slices.Equal(got[0].Bounds, []uint32{2}) ||
		got[0].Age != 3005 || got[1].Backend != 22 || got[1].Age != 3900 {
		t.Fatalf("decoded %+v: want the routes, 3 s older", got)
	}
	// Every truncation, and every flipped byte, is refused.
	for n := range len(data) {
		if _, err := Decode(data[:n], saved); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorrupt", n, err)
		}
	}
	for i := range len(data) {
		if i == 8 || i == 9 {
			continue // the version: ErrVersion below
		}
		bad := slices.Clone(data)
		bad[i] ^= 0x40
		if _, err := Decode(bad, saved); err == nil {
			t.Fatalf("byte %d flipped: decoded", i)
		}
	}
	bad := slices.Clone(data)
	bad[8] = 2
	if _, err := Decode(bad, saved); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 2: %v", err)
	}
	// The byte bound keeps the most recent routes.
	if got, _ := Decode(Encode(routes(), saved, headerSize+600), saved); len(got) != 1 {
		t.Fatalf("a bound that fits one route kept %d", len(got))
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(routes(), time.UnixMilli(1), 1<<20))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Decode(data, time.UnixMilli(1))
		if err == nil {
			// What decodes, encodes again to a file that decodes alike.
			back, err := Decode(Encode(rs, time.UnixMilli(1), 1<<30), time.UnixMilli(1))
			if err != nil || len(back) != len(rs) {
				t.Fatalf("re-encoded: %v, %d routes of %d", err, len(back), len(rs))
			}
		}
	})
}

// table is a Table keeping what it was given.
type table struct {
	mu       sync.Mutex
	routes   []wire.Route
	partial  bool
	restored []wire.Route
}

func (tb *table) Saved(context.Context, int) ([]wire.Route, bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return slices.Clone(tb.routes), !tb.partial
}

func (tb *table) Restore(rs []wire.Route) (int, int) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.restored = append(tb.restored, rs...)
	return 0, 0
}

func newSaver(t *testing.T, dir string, tb Table) (*Saver, *metrics.Set) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir = dir
	set := metrics.NewSet()
	s, err := NewSaver(cfg, tb, slog.New(slog.DiscardHandler), set)
	if err != nil {
		t.Fatal(err)
	}
	return s, set
}

func metric(set *metrics.Set, name string) string {
	var b strings.Builder
	set.WritePrometheus(&b)
	for line := range strings.Lines(b.String()) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestSaveRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := &table{routes: routes()}
	s, set := newSaver(t, dir, a)
	if err := s.Save(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A loop that did not answer: the whole snapshot is kept.
	a.partial, a.routes = true, nil
	if err := s.Save(context.Background()); err == nil {
		t.Fatal("a partial snapshot was written")
	}
	if got := metric(set, `saltus_state_saves_total{result="error"}`); got != "1" {
		t.Errorf("save errors %s, want 1", got)
	}
	b := &table{}
	r, set2 := newSaver(t, dir, b)
	if n := r.Restore(); n != 2 || len(b.restored) != 2 || b.restored[0].Backend != 22 {
		t.Fatalf("restored %d: %+v, want both, oldest first", n, b.restored)
	}
	if got := metric(set2, "saltus_state_restored_routes_total"); got != "2" {
		t.Errorf("restored_routes %s", got)
	}
	// No temporary file is left behind.
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("state dir holds %d entries, want the snapshot only", len(ents))
	}
}

func TestRestoreBadFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reason string
		data         func(good []byte) []byte
	}{
		{"truncated", "corrupt", func(g []byte) []byte { return g[:len(g)-3] }},
		{"flipped", "corrupt", func(g []byte) []byte { g[len(g)-1] ^= 1; return g }},
		{"garbage", "corrupt", func([]byte) []byte { return []byte("not a snapshot") }},
		{"version", "version", func(g []byte) []byte { g[8] = 9; return g }},
		{"too large", "too_large", func([]byte) []byte { return make([]byte, DefaultConfig().MaxBytes+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			data := tc.data(Encode(routes(), time.Now(), 1<<20))
			if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
				t.Fatal(err)
			}
			tb := &table{}
			s, set := newSaver(t, dir, tb)
			if n := s.Restore(); n != 0 || len(tb.restored) != 0 {
				t.Fatalf("restored %d from a bad file", n)
			}
			if got := metric(set, `saltus_state_restore_errors_total{reason="`+tc.reason+`"}`); got != "1" {
				t.Errorf("restore errors{%s} = %q, want 1", tc.reason, got)
			}
		})
	}
}

func TestSaveError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, set := newSaver(t, dir, &table{routes: routes()})
	// The directory goes away (a disk unmounted, removed by hand): the
	// write fails, logged and counted, and the saver keeps going.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("a file now"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(context.Background()); err == nil {
		t.Fatal("saved into a file")
	}
	if got := metric(set, `saltus_state_saves_total{result="error"}`); got != "1" {
		t.Errorf("save errors %s, want 1", got)
	}
}
