package backend

import (
	"slices"
	"strings"
	"testing"
)

func urls(s *Set) []string {
	var out []string
	for _, b := range s.Snapshot() {
		st := b.URL
		if b.Draining() {
			st += " draining"
		}
		out = append(out, st)
	}
	return out
}

func TestManagedSync(t *testing.T) {
	s, _ := testSet(t, nil)
	admin, err := s.Add("http://127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	m := s.Managed("config")
	res := m.Sync([]Target{{URL: "http://127.0.0.1:9001"}, {Name: "b", URL: "http://127.0.0.1:9002/"}, {URL: "http://127.0.0.1:9001"}})
	if !slices.Equal(res.Added, []string{"http://127.0.0.1:9001", "http://127.0.0.1:9002"}) || len(res.Errors) != 0 {
		t.Fatalf("first sync: %+v", res)
	}
	// The admin API's backend is another source's: reported, left alone.
	res = m.Sync([]Target{{URL: "http://127.0.0.1:9001"}, {Name: "b", URL: "http://127.0.0.1:9002"}, {URL: "http://127.0.0.1:9000"}, {URL: "ftp://x"}})
	if res.Changed() || len(res.Errors) != 2 || !strings.Contains(res.Errors[0].Error(), "another source") {
		t.Fatalf("second sync: %+v %v", res, res.Errors)
	}
	// 9002 leaves while a request is in flight on it: drained, not removed.
	b2 := s.Lookup(2)
	b2.inFlight.Add(1)
	res = m.Sync([]Target{{URL: "http://127.0.0.1:9001"}})
	if !slices.Equal(res.Drained, []string{"http://127.0.0.1:9002"}) {
		t.Fatalf("drain: %+v", res)
	}
	if got, want := urls(s), []string{"http://127.0.0.1:9000", "http://127.0.0.1:9001", "http://127.0.0.1:9002 draining"}; !slices.Equal(got, want) {
		t.Fatalf("set after drain = %v, want %v", got, want)
	}
	if n := m.Reap(); n != 1 {
		t.Fatalf("Reap with a request in flight: %d draining, want 1", n)
	}
	// It comes back while draining: routable again, same backend.
	res = m.Sync([]Target{{URL: "http://127.0.0.1:9001"}, {Name: "b", URL: "http://127.0.0.1:9002"}})
	if !slices.Equal(res.Restored, []string{"http://127.0.0.1:9002"}) || s.Lookup(2) != b2 || b2.Draining() {
		t.Fatalf("restore: %+v", res)
	}
	// Leaves again; once idle, Reap removes it.
	m.Sync([]Target{{URL: "http://127.0.0.1:9001"}})
	b2.inFlight.Add(-1)
	if n := m.Reap(); n != 0 {
		t.Fatalf("Reap when idle: %d draining, want 0", n)
	}
	if got, want := urls(s), []string{"http://127.0.0.1:9000", "http://127.0.0.1:9001"}; !slices.Equal(got, want) {
		t.Fatalf("set after reap = %v, want %v", got, want)
	}
	if got := m.Owned(); !slices.Equal(got, []string{"http://127.0.0.1:9001"}) {
		t.Fatalf("Owned = %v", got)
	}
	if admin.Draining() || admin.removed.Load() {
		t.Fatal("the admin API's backend was touched")
	}
}

func TestManagedRenameAndAdopt(t *testing.T) {
	s, _ := testSet(t, nil)
	b, err := s.AddNamed("a", "http://127.0.0.1:9001")
	if err != nil {
		t.Fatal(err)
	}
	m := s.Managed("config", b.ID, 99)
	if res := m.Sync([]Target{{Name: "a", URL: "http://127.0.0.1:9001"}}); res.Changed() {
		t.Fatalf("adopted backend changed: %+v", res)
	}
	// Renamed while idle: the old one drains and is removed at once, the
	// new name takes the URL in the same Sync.
	res := m.Sync([]Target{{Name: "z", URL: "http://127.0.0.1:9001"}})
	if !slices.Equal(res.Drained, []string{"http://127.0.0.1:9001"}) || !slices.Equal(res.Added, []string{"http://127.0.0.1:9001"}) {
		t.Fatalf("rename: %+v %v", res, res.Errors)
	}
	snap := s.Snapshot()
	if len(snap) != 1 || snap[0].Name != "z" || snap[0].Draining() {
		t.Fatalf("after rename: %+v", snap)
	}
	// Renamed while busy: the new one waits for Reap.
	snap[0].inFlight.Add(1)
	m.Sync([]Target{{Name: "y", URL: "http://127.0.0.1:9001"}})
	if s := s.Snapshot(); len(s) != 1 || s[0].Name != "z" || !s[0].Draining() {
		t.Fatalf("busy rename: %+v", s)
	}
	snap[0].inFlight.Add(-1)
	m.Reap()
	if s := s.Snapshot(); len(s) != 1 || s[0].Name != "y" || s[0].Draining() {
		t.Fatalf("after reap: %+v", s)
	}
	// Removed by the admin API: the next Sync adds it again.
	if err := s.Remove(s.Snapshot()[0].ID); err != nil {
		t.Fatal(err)
	}
	if res := m.Sync([]Target{{Name: "y", URL: "http://127.0.0.1:9001"}}); len(res.Added) != 1 {
		t.Fatalf("re-add after admin removal: %+v", res)
	}
}

func TestManagedKeepsOperatorDrainAndMovedName(t *testing.T) {
	s, _ := testSet(t, nil)
	m := s.Managed("k8s")
	m.Sync([]Target{{Name: "pod-x", URL: "http://127.0.0.1:9001"}})
	x := s.Snapshot()[0]
	// The operator drains pod-x; its endpoint flaps while a stream runs.
	if err := s.Drain(x.ID); err != nil {
		t.Fatal(err)
	}
	x.inFlight.Add(1)
	m.Sync(nil)
	if res := m.Sync([]Target{{Name: "pod-x", URL: "http://127.0.0.1:9001"}}); len(res.Restored) != 0 || !x.Draining() {
		t.Fatalf("the operator's drain was undone: %+v draining=%v", res, x.Draining())
	}
	// pod-x moves to another address while its old backend drains: the
	// name waits for it, then Reap adds it.
	res := m.Sync([]Target{{Name: "pod-x", URL: "http://127.0.0.1:9002"}})
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "holds the name until it is idle") {
		t.Fatalf("moved name: %+v %v", res, res.Errors)
	}
	x.inFlight.Add(-1)
	m.Reap()
	if snap := s.Snapshot(); len(snap) != 1 || snap[0].URL != "http://127.0.0.1:9002" || snap[0].Name != "pod-x" || snap[0].Draining() {
		t.Fatalf("after Reap: %+v", snap)
	}
}
