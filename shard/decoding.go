package shard

import (
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// decodeTrack is a streamed request's place among its backend's decoding
// requests (upstream/backend/decoding.go), which the prefix policy reads
// to price the wait for a running slot (policy/cost.go: slotWait): from
// its first event (the prefill is over) to its end, with the end
// expected from its max_tokens, ignore_eos and the backend's learned
// decode speed. The hooks run on the client connection's loop, in order:
// FirstByte (head), FirstData (first event), Done.
type decodeTrack struct {
	on   bool             // the prefix policy, a streamed generation: track it
	b    *backend.Backend // the backend whose 2xx head came (FirstByte); nil: none yet
	cell int              // b.Track's cell; -1: not tracked
}

// start arms t for j's forward.
func (t *decodeTrack) start(j *job) {
	*t = decodeTrack{on: j.r.pol.Kind == policy.Prefix && j.d.Stream && generates(j.route), cell: -1}
}

// head records the backend that answered 2xx (FirstByte).
func (t *decodeTrack) head(b *backend.Backend, status int) {
	if t.on && status >= 200 && status < 300 {
		t.b = b
	}
}

// first tracks the request at its first event (FirstData), when its
// backend has learned how long a token takes and how long it expects the
// answer to be; one the table has no room for is counted.
func (t *decodeTrack) first(j *job) {
	b := t.b
	if b == nil || t.cell >= 0 {
		return
	}
	n, per := b.ExpectedTokens(j.d.MaxTokens, j.d.IgnoreEOS), b.TokenTime()
	if n <= 0 || per <= 0 {
		return
	}
	// On the router's clock, which decisions read it by (Scratch.Now).
	if t.cell = b.Track(j.r.now() + n*int64(per)); t.cell < 0 {
		j.r.fb.decodeUntracked.Inc()
	}
}

// done ends the tracking (Done).
func (t *decodeTrack) done() {
	if t.cell >= 0 {
		t.b.Untrack(t.cell)
		t.cell = -1
	}
}

// learn teaches the backend its decode speed and answer length from a
// 2xx streamed answer, first try, of completion tokens (job.feedback,
// from the usage it reads).
func (t *decodeTrack) learn(o backend.Outcome, completion int) {
	if t.on && o.Backend != nil && o.Err == nil && o.Status >= 200 && o.Status < 300 && o.FirstData > 0 && o.Total > o.FirstData {
		o.Backend.ObserveDecode(completion, o.Total-o.FirstData)
	}
}
