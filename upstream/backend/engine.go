package backend

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/saltus-lb/saltus/internal/httplex"
	"github.com/saltus-lb/saltus/reactor"
)

// ErrEnginesFull is an Outcome's Err when every candidate refused as full
// (requeued, or saltus's own 429/503 with Retry-After).
var ErrEnginesFull = errors.New("backend: every candidate is full")

// EngineLoad is what a backend's engine last reported about its own load
// on its Prometheus /metrics (vLLM's names: vllm:num_requests_waiting,
// vllm:num_requests_running, vllm:kv_cache_usage_perc), when the engine
// metrics are scraped.
type EngineLoad struct {
	Waiting int64   // requests queued in the engine, not yet scheduled
	Running int64   // requests the engine is running (prefill or decode)
	KVUsage float64 // fraction of the KV cache in use, 0 to 1
	// KVTokens is the KV cache's capacity in tokens (vllm:cache_config_info:
	// num_gpu_blocks × block_size, summed over its series); 0: not served.
	KVTokens int64
	// At is when the values were read; Until is when they go stale
	// (Engine reports nothing after it).
	At, Until time.Time
}

// engineState holds the last EngineLoad of a backend. Any goroutine.
type engineState struct {
	load    atomic.Pointer[EngineLoad]
	slots   slotLimit    // Slots; fed by the scraper, one goroutine per backend
	service atomic.Int64 // Service, nanoseconds
}

// slotLimit learns a concurrent-request limit from scrapes (learn): the
// limit (0 until learned), and the learner's state, the most requests
// seen running and how many scrapes showed that many with requests
// waiting. learn has one caller at a time (a backend's scraper, or under
// Fleet's lock); limit is read by any goroutine.
type slotLimit struct {
	limit            atomic.Int64
	runMax, slotSeen int64
}

// learn updates the limit from one scrape's load.
func (s *slotLimit) learn(l EngineLoad) {
	if l.Running > s.runMax {
		s.runMax, s.slotSeen = l.Running, 0
		if n := s.limit.Load(); n > 0 && l.Running > n {
			s.limit.Store(0) // it runs more: that was no limit
		}
	}
	// At a limit the engine runs its most ever while requests wait. A
	// request that came between two scheduler steps waits too, at any
	// running count: those teach nothing.
	if l.Waiting <= 0 || l.Running <= 0 || l.Running < s.runMax || l.KVUsage >= slotsKVRoom {
		return
	}
	s.slotSeen++
	if s.slotSeen >= slotsSeen {
		s.limit.Store(l.Running)
	}
}

// Engine returns the backend's last engine load and true while it is
// fresh (scraped, and not past its Until); the zero value and false when
// the engine is not scraped, the last scrape failed for too long, or the
// values are stale: a decision then uses saltus's own in-flight counts
// only. Any goroutine.
func (b *Backend) Engine() (EngineLoad, bool) {
	l := b.engine.load.Load()
	if l == nil || !time.Now().Before(l.Until) {
		return EngineLoad{}, false
	}
	return *l, true
}

// SetEngine records an engine load read from the backend (the scraper,
// or a test). Any goroutine.
func (b *Backend) SetEngine(l EngineLoad) {
	b.engine.load.Store(&l)
	b.engine.slots.learn(l) // the scraper is the only caller, one goroutine per backend
	if b.fleet != nil {
		b.fleet.learnSlots(l)
	}
}

// engineState's slot and service-time learning (the prefix policy's wait
// for a running slot, policy/cost.go).
//
// Slots is how many requests the engine runs at once, learned from the
// scrape: an engine that runs the most it was ever seen running while
// requests wait there, with KV room to spare (usage under slotsKVRoom),
// on slotsSeen scrapes, is at its limit (vLLM's --max-num-seqs); seen
// running more, what was learned is cleared. 0: not learned.
//
// Service is a running average of how long the backend's answers held a
// running slot (2xx, first try; the caller's measure: the prefix policy
// feeds the time from the prefill's start to the last byte, shard's
// job.slotHold), so how long one waiting for a slot waits. An
// exponentially weighted mean, weight serviceWeight per sample, so it
// follows a workload whose answers get longer or shorter within tens of
// requests; 0 until observed.

// slotsKVRoom: a scrape showing requests waiting teaches Slots only with
// the KV cache used below this fraction (above it they wait for KV room,
// which depends on what they share). slotsSeen: only once that many such
// scrapes showed the engine at its most ever. Measured on bench workload
// multiturn (a100-13b, 256 slots): learning from any scrape with requests
// waiting took the requests that arrived between two scheduler steps for a
// limit and cut the token hit ratio from 0.81 to 0.77.
const (
	slotsKVRoom = 0.9
	slotsSeen   = 3
)

// serviceWeight is the weight of a new sample in the service average.
const serviceWeight = 0.05

// Slots returns the engine's learned concurrent-request limit, else its
// fleet's (Fleet: the same learning over every backend's scrapes), 0 if
// neither is learned. Any goroutine.
func (b *Backend) Slots() int64 {
	if n := b.engine.slots.limit.Load(); n > 0 || b.fleet == nil {
		return n
	}
	return b.fleet.slots.limit.Load()
}

// learnSlots is the slot learning over the scrapes of every backend of
// the fleet: their most running while requests wait, seen slotsSeen
// times, is the fleet's limit; one seen running more clears it (a fleet
// of unlike engines has no one limit; each then learns its own). Any
// goroutine.
func (f *Fleet) learnSlots(l EngineLoad) {
	f.slotMu.Lock()
	defer f.slotMu.Unlock()
	f.slots.learn(l)
}

// Service returns the backend's running average time an answer holds a
// slot, 0 until observed. Any goroutine.
func (b *Backend) Service() time.Duration { return time.Duration(b.engine.service.Load()) }

// ObserveService feeds Service how long one answer held its slot (2xx,
// first try). Lock-free. Any goroutine.
func (b *Backend) ObserveService(d time.Duration) { ewma(&b.engine.service, int64(d), serviceWeight) }

// Full engines (issue 30): an engine that answers 429 or 503 before any
// answer byte is full, not broken. It is marked full until its
// Retry-After (or fullFor) has passed, so that the router sends its next
// requests elsewhere in the pool (Full), and the breaker is not told.

// fullFor is how long an engine that refused without a Retry-After
// counts as full at most: short enough that a fleet whose engines are all
// full tries again soon. Its mark ends sooner, when one of the requests
// the engine holds ends (slotFreed): that frees the room it lacked. A
// fixed second alone left a saturated engine idle between its answers
// when they are short (issue 30's saturation bench: 2.73 answers/s at
// --speedup 20 against 4.73 at 2, same fleet).
const fullFor = time.Second

// maxFullFor bounds an engine's own Retry-After: a full engine is asked
// again at least this often.
const maxFullFor = 10 * time.Second

// MarkFull marks b full until now+d (the loop path, on an engine's
// refusal). Any goroutine.
func (b *Backend) MarkFull(now time.Time, d time.Duration) { b.markFull(now, d, false) }

// markFull is MarkFull; soft: d is fullFor, not the engine's own
// Retry-After, so the mark ends when a request of b's ends (slotFreed).
func (b *Backend) markFull(now time.Time, d time.Duration, soft bool) {
	until := now.Add(d).UnixNano()
	for {
		old := b.fullUntil.Load()
		if old >= until {
			return
		}
		if b.fullUntil.CompareAndSwap(old, until) {
			if soft {
				b.fullSoft.Store(until)
			}
			return
		}
	}
}

// slotFreed is the end of a request b took (answered, failed or
// abandoned after the engine accepted it): one less in flight, and a full
// mark b's own Retry-After did not set ends now, since the engine has the
// room it refused for (fullFor). A mark a later refusal or a Retry-After
// set stays (fullUntil moved past the soft one). Any goroutine.
func (b *Backend) slotFreed(now time.Time) {
	b.inFlight.Add(-1)
	if u := b.fullSoft.Load(); u != 0 && b.fullUntil.Load() == u && u > now.UnixNano() {
		b.fullUntil.CompareAndSwap(u, now.UnixNano())
	}
}

// Full reports whether b refused a request as full (429 or 503 before
// any answer byte) within its Retry-After, at now. Any goroutine.
func (b *Backend) Full(now time.Time) bool { return b.fullUntil.Load() > now.UnixNano() }

// FullUntil is when b stops counting as full (the zero time: it does not).
// Any goroutine.
func (b *Backend) FullUntil() time.Time {
	if u := b.fullUntil.Load(); u > 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// retryAfter reads a Retry-After header in seconds (RFC 9110 also
// allows a date, which engines do not send: then def), bounded by
// maxFullFor, and whether the header gave it; def without one.
func retryAfter(hdr []reactor.Header, def time.Duration) (time.Duration, bool) {
	for _, h := range hdr {
		if !httplex.EqualFold(h.Name, "Retry-After") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(h.Value))
		if err != nil || n < 0 {
			return def, false
		}
		return min(time.Duration(n)*time.Second, maxFullFor), true
	}
	return def, false
}

// capFor is how long a capacity learned from a refusal holds without
// another refusal: an engine that was full under one burst may have more
// room later (its requests were longer then, another router's load left).
const capFor = 30 * time.Second

// learnCap records that b refused a request while holding held of this
// router's requests: it takes at most max(held, 1) at once, for capFor.
// Any goroutine.
func (b *Backend) learnCap(held int64, now time.Time) {
	b.capacity.Store(max(held, 1))
	b.capUntil.Store(now.Add(capFor).UnixNano())
}

// Capacity is how many requests at once b takes, as learned from its
// last refusal (learnCap), and 0 when unknown or older than capFor. Any
// goroutine.
func (b *Backend) Capacity(now time.Time) int64 {
	if b.capUntil.Load() <= now.UnixNano() {
		return 0
	}
	return b.capacity.Load()
}

// Free reports whether b may take one more request now: not full (Full),
// and below its Limit if any, counting the requests decided for it and
// not sent yet (Decided: a burst decided on one loop before the first is
// sent must not all pass a limit of 1). A backend that never refused and
// has no configured limit is free (one atomic load). Any goroutine.
func (b *Backend) Free(now time.Time) bool {
	if !b.Limited() {
		return true
	}
	if b.Full(now) {
		return false
	}
	l := b.Limit(now)
	return l == 0 || b.InFlight()+b.Decided() < l
}

// Limit is how many requests at once b is given now, 0 for no limit: the
// configured MaxConcurrency, and, while a refusal is recent (Capacity),
// what it held then, or its learned running limit (its /metrics) if
// lower: what it would queue waits in saltus instead, where priority and
// fair share order it (issue 30); its own queue is first come. With
// Config.EngineQueue, at most its learned running limit plus that. Any
// goroutine.
func (b *Backend) Limit(now time.Time) int64 {
	l := b.maxConc.Load()
	if c := b.Capacity(now); c > 0 {
		if s := b.Slots(); s > 0 && s < c {
			c = s
		}
		if l == 0 || c < l {
			l = c
		}
	}
	if h := b.holdAt(); h > 0 && (l == 0 || h < l) {
		l = h
	}
	return l
}

// holdAt is the engine's learned slots plus Config.EngineQueue, 0 when
// either is not set. Any goroutine.
func (b *Backend) holdAt() int64 {
	if b.fleet == nil {
		return 0
	}
	q := b.fleet.engineQueue.Load()
	if q == 0 {
		return 0
	}
	s := b.Slots()
	if s == 0 {
		return 0
	}
	return s + q - 1
}

// MaxConcurrency is the most requests at once configuration allows b
// (--backend-max-concurrency), 0 for no limit. Any goroutine.
func (b *Backend) MaxConcurrency() int64 { return b.maxConc.Load() }

// SetMaxConcurrency sets MaxConcurrency (0: none). Any goroutine.
func (b *Backend) SetMaxConcurrency(n int64) { b.maxConc.Store(max(n, 0)) }

// Limited reports whether b ever refused a request as full, has a
// configured limit or one from Config.EngineQueue (then Free needs the
// time). Any goroutine.
func (b *Backend) Limited() bool {
	return b.fullUntil.Load() != 0 || b.capUntil.Load() != 0 || b.maxConc.Load() != 0 || b.holdAt() != 0
}
