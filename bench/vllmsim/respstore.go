package vllmsim

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// stored is one stored response: the conversation it answered and its
// output text, so a later request's previous_response_id continues it
// (vLLM's msg_store and response_store), and its JSON for GET.
type stored struct {
	msgs   []chat.Message // the request's messages, instructions (system) included
	output string         // the assistant's text
	body   []byte         // the response object, as answered
	size   int            // bytes counted against the store's bound
}

func (s *stored) bytes() int {
	n := len(s.output) + len(s.body)
	for _, m := range s.msgs {
		n += len(m.Role) + len(m.Content) + len(m.Reasoning)
	}
	return n
}

// respStore holds stored responses, bounded by count and bytes; the
// oldest goes first (vLLM keeps them all, in memory, until it restarts:
// its store warns of the leak). Safe for concurrent use.
type respStore struct {
	max, maxBytes int
	evicted       *metrics.Counter

	mu    sync.Mutex // guards the fields below
	m     map[string]*stored
	order []string // ids, oldest first; each in m
	bytes int
}

func newRespStore(maxN, maxBytes int, set *metrics.Set, label string) *respStore {
	st := &respStore{max: maxN, maxBytes: maxBytes, m: make(map[string]*stored),
		evicted: set.NewCounter("vllmsim_responses_evicted_total" + label)}
	set.NewGauge("vllmsim_responses_stored"+label, func() float64 {
		st.mu.Lock()
		defer st.mu.Unlock()
		return float64(len(st.m))
	})
	return st
}

// put stores r under id (ids are unique), evicting the oldest while over
// a bound; one larger than the byte bound alone is not kept (counted as
// evicted).
func (st *respStore) put(id string, r *stored) {
	r.size = r.bytes()
	if r.size > st.maxBytes {
		st.evicted.Inc()
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for len(st.order) > 0 && (len(st.m) >= st.max || st.bytes+r.size > st.maxBytes) {
		old := st.order[0]
		st.order[0] = ""
		st.order = st.order[1:]
		st.bytes -= st.m[old].size
		delete(st.m, old)
		st.evicted.Inc()
	}
	st.m[id] = r
	st.order = append(st.order, id)
	st.bytes += r.size
}

// get returns the response stored under id, or nil.
func (st *respStore) get(id string) *stored {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.m[id]
}
