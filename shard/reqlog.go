package shard

import (
	"strings"
	"time"

	"github.com/saltus-lb/saltus/keys"
	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/reqlog"
	"github.com/saltus-lb/saltus/tracing"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// The request log (issue 35): with a Sink set (UseSinks), every answer
// becomes one reqlog.Record, handed to it where the answer ends: a
// forward's Hooks.Events.Done (on the client connection's loop, into that
// shard's scratch Record), saltus's own answers (fail and the 200s of
// OPTIONS and /v1/models, on whichever goroutine answers, a Record each),
// a client gone before its forward (dispatch, the gate) and the reactor's
// own answers (OwnAnswer). Without a Sink none of this runs: each end
// tests one pointer, and a request allocates nothing more.

// UseSinks hands every finished request's record to s (nil: off). Call it
// before the loops start.
func (r *Router) UseSinks(s reqlog.Sink) {
	r.sink = s
	r.sinkTokens = s != nil && reqlog.WantsTokens(s)
}

// UseTracer makes the loops choose each forwarded request's trace
// context (tracing.Loop) and send the engine a traceparent naming
// saltus's span; the records carry it (Record.Span) to t, which must
// also be among the sinks (UseSinks) to export the spans. Call it before
// the loops start.
func (r *Router) UseTracer(t *tracing.Tracer) {
	for _, sh := range r.shards {
		sh.trace = t.Loop()
	}
}

// statusGone is the status logged for a request whose client left before
// an answer head was sent (nginx's 499).
const statusGone = 499

// logEnd builds the record of one request's end and hands it to the
// sinks. x is its exchange; o the forward's outcome, or nil for an end
// without one (saltus's own answer of status with bytesOut body bytes
// and X-Request-ID reqID, or a client gone before its forward). onLoop is
// the loop calling (its scratch Record is used), or -1 (any goroutine: a
// Record of its own). The one place a Record is filled: a sink's fields
// come from here.
func (r *Router) logEnd(onLoop int, x exchange, o *backend.Outcome, u openai.UsageCounts, status int, bytesOut int, reqID string) {
	var rec *reqlog.Record
	if onLoop >= 0 {
		rec = &r.shards[onLoop].rec
		rec.Reset()
	} else {
		rec = new(reqlog.Record)
	}
	now := time.Now()
	req := x.Request()
	j, key := jobOf(x)
	rec.End, rec.Status, rec.RequestID = now, status, reqID
	rec.Method, rec.Path, rec.Client = req.Method, req.Path, req.RemoteAddr
	rec.BytesIn, rec.BytesOut = int64(len(req.Body)), int64(bytesOut)
	if key != nil {
		rec.Key = key.Name
	}
	rec.Start = now
	if j != nil {
		if j.start != 0 {
			rec.Start = r.epoch.Add(time.Duration(j.start))
		}
		rec.Model, rec.Requeues, rec.QueueWait = j.d.Model, j.requeues, j.waited
		if j.hdrArr[0].Name == HeaderRoute {
			rec.RouteReason = routeReason(j.hdrArr[0].Value)
			rec.Policy = r.cfg.Policy
		}
		if !j.tc.Began() && onLoop >= 0 && r.shards[onLoop].trace.On() {
			// Refused before its forward: its span's IDs, from this loop.
			r.shards[onLoop].trace.Begin(&j.tc, req.HeaderValue(tracing.HeaderParent), req.HeaderValue(tracing.HeaderState))
		}
		if j.tc.Began() { // the client's traceparent was read there
			rec.Trace.ID, rec.Trace.Parent = j.tc.TraceID, j.tc.Parent
			rec.Span, rec.SpanSampled, rec.TraceState = j.tc.SpanID, j.tc.Sampled, j.tc.State
		}
	}
	if j == nil || !j.tc.Began() {
		rec.Trace, _ = reqlog.ParseTraceparent(req.HeaderValue(reqlog.TraceparentHeader))
	}
	rec.Own = o == nil && status != statusGone
	rec.ClientGone = status == statusGone
	if o != nil {
		r.logOutcome(rec, j, o, u)
	}
	rec.Duration = rec.End.Sub(rec.Start)
	r.sink.Log(rec)
}

// logOutcome fills rec from a forward's outcome.
func (r *Router) logOutcome(rec *reqlog.Record, j *job, o *backend.Outcome, u openai.UsageCounts) {
	rec.RequestID, rec.BytesOut, rec.Retries = o.RequestID, o.BytesOut, o.Retries
	rec.ClientGone = o.ClientGone
	if rec.Status == 0 {
		rec.Status, rec.ClientGone = statusGone, true
	}
	if o.Backend != nil {
		rec.Backend, rec.BackendURL = r.up.Label(o.Backend), o.Backend.URL
	}
	if !o.Sent.IsZero() {
		if o.TTFB > 0 {
			rec.FirstByte = o.Sent.Add(o.TTFB)
		}
		if o.FirstData > 0 {
			rec.FirstData = o.Sent.Add(o.FirstData)
			rec.TTFT = rec.FirstData.Sub(rec.Start)
		}
	}
	if r.sinkTokens || j != nil && j.tc.Sampled {
		rec.PromptTokens, rec.CompletionTokens, rec.HasUsage = u.Prompt, u.Completion, u.OK
		rec.Cached, rec.HasCached = u.Cached, u.HasCached
	}
	if j != nil && j.fb.decided && o.Backend != nil {
		pred := 0
		if o.Backend.ID == j.fb.backend {
			pred = j.fb.matched * r.cfg.BlockSize
		}
		if u.OK {
			pred = min(pred, u.Prompt)
		}
		rec.CachedPredicted, rec.HasPrediction = pred, true
	}
}

// routeReason is the reason in an X-Saltus-Route value
// ("matched/total reason[ receipt]").
func routeReason(v string) string {
	_, rest, ok := strings.Cut(v, " ")
	if !ok {
		return ""
	}
	reason, _, _ := strings.Cut(rest, " ")
	return reason
}

// jobOf finds the job and API key behind x: a keyed request's exchange,
// and every job's while a sink is set (serve wraps it), is a
// keyedExchange; a keyed GET /v1/models a keyHolder.
func jobOf(x exchange) (*job, *keys.Key) {
	switch v := x.(type) {
	case *keyedExchange:
		return v.j, v.j.key
	case *keyHolder:
		return nil, v.key
	}
	return nil, nil
}

// logGone logs j, whose client left before its forward. On a loop
// (onLoop's).
func (j *job) logGone(onLoop int) {
	if j.r.sink != nil && j.x != nil {
		j.r.logEnd(onLoop, j.x, nil, openai.UsageCounts{}, statusGone, 0, j.req.HeaderValue(reactor.RequestIDHeader))
	}
}

// OwnAnswer counts an answer the reactor gave by itself (framing errors,
// the max-conns 503: reactor.OwnAnswers) in saltus_requests_total, under
// route "none", and logs what is known of it: status, client, request
// id (no request was parsed). Loop only.
func (r *Router) OwnAnswer(status int, client, requestID string) {
	r.m.request(routeNone, status)
	if r.sink != nil {
		now := time.Now()
		r.sink.Log(&reqlog.Record{Start: now, End: now, Status: status, Own: true, Client: client, RequestID: requestID})
	}
}

// logOwn logs saltus's own answer to x (status, hdr, body as given to
// Respond), if a sink is set. Any goroutine.
func (r *Router) logOwn(x exchange, status int, hdr []reactor.Header, body []byte) {
	if r.sink == nil {
		return
	}
	id := ""
	for _, h := range hdr {
		if h.Name == reactor.RequestIDHeader {
			id = h.Value
			break
		}
	}
	r.logEnd(-1, x, nil, openai.UsageCounts{}, status, len(body), id)
}
