package backend

import (
	"bytes"
	"fmt"

	"github.com/valyala/fasthttp"
)

// sseRelay is the loop path's SSE relay (loopstream.go): it splits a body
// into events as its bytes arrive, however the reads cut them, and
// decides what of each reaches the client (Hooks.DropUsage,
// DropUsageNull) and what the hooks see (Usage, Answer). Complete events
// are passed to emit as views of the bytes fed, without a copy; only an
// incomplete tail is kept (pend), and an event longer than relayBufSize
// goes out in pieces (same bytes, earlier flush), so a relay holds at
// most relayBufSize. The bytes the client gets are exactly the
// upstream's, minus what DropUsage removes. Owned by its request's loop.
type sseRelay struct {
	hooks   *Hooks
	b       *Backend
	status  int
	show    bool   // Hooks.Answer still wants events
	pend    []byte // an event not complete yet (< relayBufSize)
	partial bool   // a piece of an over-long event went out
	last    []byte // a copy of the last event that mentioned "usage", or (lastObj) of its usage object
	lastObj bool
	cut     []byte // DropUsageNull's copy of an event without its "usage":null
}

func newSSERelay(h *Hooks, b *Backend, status int) sseRelay {
	return sseRelay{hooks: h, b: b, status: status, show: h.Answer != nil}
}

// feed relays data: each complete event to emit, in order; an
// incomplete tail waits for the next feed. It stops at emit's first
// error and returns it.
func (r *sseRelay) feed(data []byte, emit func([]byte) error) error {
	for len(data) > 0 {
		buf := data
		if len(r.pend) > 0 {
			take := min(len(data), relayBufSize-len(r.pend))
			r.pend = append(r.pend, data[:take]...)
			buf, data = r.pend, data[take:]
		} else {
			data = nil
		}
		off, err := r.events(buf, emit)
		if err != nil {
			return err
		}
		rest := buf[off:]
		if len(rest) >= relayBufSize { // an event too long to hold: a piece goes out
			if err := emit(rest); err != nil {
				return err
			}
			r.pend, r.partial = r.pend[:0], true
			continue
		}
		r.pend = append(r.pend[:0], rest...) // copy within pend moves left: safe
	}
	return nil
}

// events relays buf's complete events and returns the bytes they took.
func (r *sseRelay) events(buf []byte, emit func([]byte) error) (int, error) {
	off := 0
	key := -1 // the next "usage" in buf at or after off; len(buf): none
	for {
		e := sseEventEnd(buf[off:])
		if e < 0 {
			return off, nil
		}
		ev := buf[off : off+e]
		// One scan of buf finds the key for every event before it (it
		// holds no line end, so it never spans two events).
		if key < off {
			key = len(buf)
			if k := bytes.Index(buf[off:], usageKey); k >= 0 {
				key = off + k
			}
		}
		has := key < off+e
		off += e
		if r.hooks.DropUsage && has {
			drop, cut, u := usageEvent(ev, r.hooks.DropUsageNull)
			if drop {
				// Its usage object, found already: usage need not
				// look for it again.
				r.last, r.lastObj = append(r.last[:0], u...), true
				r.partial = false
				continue
			}
			if cut[1] > cut[0] {
				ev = append(append(r.cut[:0], ev[:cut[0]]...), ev[cut[1]:]...)
				r.cut = ev
				has = bytes.Contains(ev, usageKey)
			}
		}
		if r.hooks.Usage && has {
			r.last, r.lastObj = append(r.last[:0], ev...), false
		}
		if r.show {
			r.show = r.hooks.Answer(r.b, r.status, true, ev)
		}
		if err := emit(ev); err != nil {
			return off, err
		}
		r.partial = false
	}
}

// flush relays what is left at the body's end (an event without its
// blank line), as is.
func (r *sseRelay) flush(emit func([]byte) error) error {
	if len(r.pend) == 0 {
		return nil
	}
	err := emit(r.pend)
	r.pend = r.pend[:0]
	return err
}

// usage is the usage object of the last event that had one, or nil.
func (r *sseRelay) usage() []byte {
	if r.lastObj {
		if len(r.last) > maxUsageParse {
			return nil
		}
		return bytes.Clone(r.last)
	}
	return sseUsage(r.last)
}

// errorEvent returns ev, the SSE error event that ends a failed stream,
// preceded by a blank line if a piece of an over-long event went out (so
// that it stands on its own); the unsent incomplete tail is dropped.
func (r *sseRelay) errorEvent(ev []byte) []byte {
	r.pend = r.pend[:0]
	if r.partial {
		return append([]byte("\n\n"), ev...)
	}
	return ev
}

// sseBodyUsage returns the usage object of the last SSE event of a whole
// body that mentions it, or nil.
func sseBodyUsage(body []byte) []byte {
	var last []byte
	for len(body) > 0 {
		e := sseEventEnd(body)
		if e < 0 {
			e = len(body)
		}
		if ev := body[:e]; bytes.Contains(ev, usageKey) {
			last = ev
		}
		body = body[e:]
	}
	return sseUsage(last)
}

// streamTimeout is how either transport ends a stream past a deadline
// (with the timeouts in force, Set.tune):
// the stream idle timeout (idle: the backend sent nothing for
// StreamIdleTimeout) or the request timeout; the kind counted, what the
// SSE error event tells the client, and the outcome's error.
func (c *Tunables) streamTimeout(idle bool) (errKind, sseFailure, error) {
	if idle {
		return kindStreamIdle, sseIdle(c.StreamIdleTimeout),
			fmt.Errorf("no data for %s (the stream idle timeout): %w", c.StreamIdleTimeout, fasthttp.ErrTimeout)
	}
	return kindMidstream, sseTimeout(c.RequestTimeout), fasthttp.ErrTimeout
}
