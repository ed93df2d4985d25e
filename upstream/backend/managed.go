package backend

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Target is one backend a source wants: its name ("" for none: the Set
// names it backend-<ID>), its URL, and the models configuration pins it
// to (none: what its /v1/models lists; see Backend.PinnedModels).
type Target struct {
	Name   string   `json:"name,omitempty"`
	URL    string   `json:"url"`
	Models []string `json:"models,omitempty"`
}

// Managed keeps the backends one source owns (the configuration file on
// reload, a service discovery) equal to the list the source last gave:
// Sync adds the new ones, drains those that left (requests in flight
// finish) and brings back a drained one that returns; Reap removes the
// drained ones once idle. Backends other sources added (the admin API,
// another Managed) are never touched: a target whose URL or name one of
// them holds is reported, not taken over. Create it with [Set.Managed].
// Any goroutine; Sync and Reap serialize on its mutex.
type Managed struct {
	s      *Set
	source string // in logs: "config", "k8s"

	mu    sync.Mutex
	owned map[string]*Backend // by normalized URL: what this source added and has not removed
	gone  map[string]*Backend // the subset drained because the source dropped them
	// held: the subset of gone an operator had drained already (the admin
	// API) when the source dropped them: never made routable again by a
	// Sync, only removed once idle.
	held map[string]bool
	// waiting: targets (by normalized URL) whose URL or name a draining
	// backend of this source still holds (renamed, or a name moved to
	// another URL); Reap adds them once it is gone.
	waiting map[string]Target
}

// SyncResult is what one Sync changed, by URL.
type SyncResult struct {
	Added    []string `json:"added,omitempty"`
	Drained  []string `json:"drained,omitempty"`  // left the list: removed once idle
	Restored []string `json:"restored,omitempty"` // back in the list while draining: routable again
	// Errors: targets not applied (bad URL or name, held by another
	// source), each naming its target.
	Errors []error `json:"-"`
}

// Changed reports whether r added, drained or restored a backend.
func (r SyncResult) Changed() bool {
	return len(r.Added)+len(r.Drained)+len(r.Restored) > 0
}

// Managed returns a reconciler for the backends source owns. adopt
// lists the IDs of backends already in the Set that belong to source
// (the configured backends Build added); unknown IDs are ignored.
func (s *Set) Managed(source string, adopt ...int) *Managed {
	m := &Managed{s: s, source: source, owned: make(map[string]*Backend), gone: make(map[string]*Backend),
		held: make(map[string]bool), waiting: make(map[string]Target)}
	for _, id := range adopt {
		if b := s.Lookup(id); b != nil {
			m.owned[b.URL] = b
		}
	}
	return m
}

// Sync makes the source's backends the targets: see [Managed]. A target
// listed twice (by URL) counts once, the first one's name winning. A
// target whose name changed is a new backend (the name is its identity in
// a cluster): the old one drains. Any goroutine.
func (m *Managed) Sync(targets []Target) SyncResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := m.syncLocked(targets)
	if m.reapLocked() > 0 {
		// A drained backend was idle and is gone: a target waiting for
		// its URL or name can be added now.
		res.Added = append(res.Added, m.addWaitingLocked()...)
	}
	return res
}

func (m *Managed) syncLocked(targets []Target) SyncResult {
	var res SyncResult
	clear(m.waiting)
	want := make(map[string]bool, len(targets))
	for _, t := range targets {
		norm, _, err := ParseURL(t.URL)
		if err != nil {
			res.Errors = append(res.Errors, err)
			continue
		}
		if want[norm] {
			continue
		}
		if b := m.owned[norm]; b != nil && b.removed.Load() {
			// Removed behind our back (the admin API): this Sync adds it
			// again (the source still lists it).
			delete(m.owned, norm)
			delete(m.gone, norm)
			delete(m.held, norm)
		}
		if b := m.owned[norm]; b != nil && (t.Name == "" && isDefaultName(b) || b.Name == t.Name) {
			want[norm] = true
			if !slices.Equal(b.PinnedModels(), t.Models) {
				b.SetPinnedModels(t.Models) // the fleet re-reads them at its next refresh
			}
			if m.gone[norm] != nil && !m.held[norm] {
				delete(m.gone, norm)
				b.draining.Store(false)
				res.Restored = append(res.Restored, norm)
				m.s.logger.Info("backend back in its source: routable again", "source", m.source, "id", b.ID, "backend", b.URL)
			}
			continue
		}
		if b := m.owned[norm]; b != nil {
			// Renamed: the old identity drains and goes once idle; the
			// new one is added under another key once it is gone (the
			// Set holds one backend per URL).
			m.drainLocked(norm, b, &res)
			res.Errors = append(res.Errors, fmt.Errorf("backend %s: renamed from %s to %s: the old one drains; the new name is added once it is idle", norm, b.Name, t.Name))
			want[norm] = true // not drained again below
			m.waiting[norm] = t
			continue
		}
		b, err := m.s.AddTarget(t)
		if err != nil {
			if errors.Is(err, ErrDuplicate) {
				if old := m.holderLocked(t.Name); old != nil {
					err = fmt.Errorf("%w: %s's draining backend %s holds the name until it is idle; then it is added", err, m.source, old.URL)
					m.waiting[norm] = t
				} else {
					err = fmt.Errorf("%w (added by the admin API or another source; %s leaves it alone)", err, m.source)
				}
			}
			res.Errors = append(res.Errors, err)
			continue
		}
		want[norm] = true
		m.owned[norm] = b
		res.Added = append(res.Added, norm)
	}
	for norm, b := range m.owned {
		if !want[norm] && m.gone[norm] == nil {
			m.drainLocked(norm, b, &res)
		}
	}
	slices.Sort(res.Drained)
	return res
}

func (m *Managed) drainLocked(norm string, b *Backend, res *SyncResult) {
	if b.removed.Load() {
		delete(m.owned, norm)
		return
	}
	m.gone[norm] = b
	if b.Draining() {
		m.held[norm] = true // the operator's drain: a later Sync keeps it
	}
	if err := m.s.Drain(b.ID); err == nil {
		res.Drained = append(res.Drained, norm)
	}
}

// holderLocked is the draining backend of this source named name, if
// any.
func (m *Managed) holderLocked(name string) *Backend {
	if name == "" {
		return nil
	}
	for _, b := range m.gone {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// addWaitingLocked adds the waiting targets whose URL and name are free
// now, and returns their URLs.
func (m *Managed) addWaitingLocked() []string {
	var added []string
	for norm, t := range m.waiting {
		if m.owned[norm] != nil || m.holderLocked(t.Name) != nil {
			continue // still held
		}
		b, err := m.s.AddTarget(t)
		if err != nil {
			m.s.logger.Warn("backend waiting for its URL or name not added", "source", m.source, "backend", t.URL, "name", t.Name, "err", err)
		} else {
			m.owned[norm] = b
			added = append(added, norm)
		}
		delete(m.waiting, norm)
	}
	slices.Sort(added)
	return added
}

// isDefaultName reports whether b carries the name the Set gave it
// (backend-<ID>), so a target without a name matches it.
func isDefaultName(b *Backend) bool { return b.Name == fmt.Sprintf("backend-%d", b.ID) }

// Reap removes the drained backends that have no request in flight (and
// adds a renamed target whose URL they held), and reports how many remain
// draining. Call it now and then (the data plane does every second). Any
// goroutine.
func (m *Managed) Reap() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reapLocked() > 0 {
		m.addWaitingLocked() // AddNamed logs each
	}
	return len(m.gone)
}

// reapLocked removes the idle drained backends and returns how many it
// removed.
func (m *Managed) reapLocked() int {
	n := 0
	for norm, b := range m.gone {
		if b.removed.Load() {
			delete(m.gone, norm)
			delete(m.owned, norm)
			delete(m.held, norm)
			continue
		}
		if b.InFlight() > 0 {
			continue
		}
		if err := m.s.Remove(b.ID); err != nil && !errors.Is(err, ErrNotFound) {
			m.s.logger.Warn("cannot remove a drained backend", "source", m.source, "id", b.ID, "err", err)
			continue
		}
		delete(m.gone, norm)
		delete(m.owned, norm)
		delete(m.held, norm)
		n++
	}
	return n
}

// Owned returns the URLs of the backends the source holds now (draining
// ones included), sorted. Any goroutine.
func (m *Managed) Owned() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.owned))
	for u := range m.owned {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}
