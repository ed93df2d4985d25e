// Package reqlog is the record of one finished request: what saltus knows
// about it when its answer ends (who asked, what was routed where and why,
// tokens, timings, bytes), and the Sink interface its consumers (the
// access log, tracing) implement.
//
// It sits at the end of the request path: package shard builds one Record
// per answer (routed, refused by saltus, or the reactor's own) and hands it
// to its sinks; it imports nothing of saltus's request path, so the sinks
// do not either. A Record belongs to whoever builds it; a Sink sees it only
// during Log.
//
// # Concurrency
//
// A Record is plain data, owned by its builder. Sink.Log is called on an
// event loop, or on a goroutine that answered the request (saltus's own
// answers off the loops), concurrently from several: a Sink is safe for
// concurrent use, never blocks, and copies what it keeps, since the builder
// reuses the Record once Log returns. ParseTraceparent is a pure function.
package reqlog

import "time"

// Record is one finished request. Zero values mean "not known" where a
// field's comment says so; the Has* flags tell a known zero from an
// unknown one.
type Record struct {
	// Start is when saltus had the whole request (the reactor handed it
	// over); for an answer without a job (the reactor's own, /v1/models)
	// when it was answered, as End.
	Start time.Time
	// RequestID is the X-Request-ID the answer carried (the client's, or
	// the one saltus made); "" for the reactor's max-conns 503 and a
	// client gone before any answer that sent none.
	RequestID string
	// Trace is the client's W3C traceparent, when it sent a valid one
	// (Trace.Valid); a tracer may set Trace.ID to the trace it made.
	Trace Trace
	// Client is the client's address (host:port) as the listener saw it.
	Client string
	// Key is the name of the API key used (never its secret); "" when
	// keys are off or none was accepted.
	Key string
	// Model is the request body's model ("" when not read: saltus's
	// refusals before the body, routes that are not decoded, unless a
	// sink is set, in which case the model of every POST is read).
	Model        string
	Method, Path string // Path without the query
	// Status is the answer's status; 499 when the client left before an
	// answer head was sent (nginx's convention), as with a stream's
	// client that left: the status it was sent, with ClientGone.
	Status int
	// ClientGone: the client left before the answer ended.
	ClientGone bool
	// Own: saltus answered itself (a refusal, /v1/models, OPTIONS, the
	// reactor's framing errors), no backend's answer was relayed.
	Own bool
	// Backend is the label (X-Saltus-Backend) of the backend that
	// answered, or the last one tried; "" if none was.
	Backend string
	// RouteReason is the reason of X-Saltus-Route (tree, hash, fallback,
	// override, round_robin, ...); "" when not routed.
	RouteReason string
	// CachedPredicted is the prompt tokens the route table predicted the
	// answering backend held (matched blocks × block size, capped at the
	// prompt's tokens when known); HasPrediction false when the policy
	// made none (not the prefix policy, or not a routed chat/completion).
	CachedPredicted int
	HasPrediction   bool
	// Cached is usage.prompt_tokens_details.cached_tokens (HasCached);
	// PromptTokens and CompletionTokens the usage's (HasUsage). Read only
	// when a sink asks for tokens (Tokens).
	Cached                         int
	HasCached                      bool
	PromptTokens, CompletionTokens int
	HasUsage                       bool
	// Retries: candidates tried after the first (last forward); Requeues:
	// times it went back to its pool's gateway queue because every
	// candidate was full.
	Retries, Requeues int
	// QueueWait is the time spent in the pool's gateway queue, over all
	// requeues.
	QueueWait time.Duration
	// TTFT: Start to the first bytes of a streamed answer's body (the
	// engine's first event); 0 for an answer read whole or without body.
	TTFT time.Duration
	// Duration: Start to End.
	Duration time.Duration
	// BytesIn is the request body's bytes (de-chunked); BytesOut the
	// answer body's bytes sent to the client (heads not counted).
	BytesIn, BytesOut int64
	// FirstByte is when the answer's head arrived from the backend (zero
	// if none did); FirstData when its first streamed body bytes did
	// (zero if not streamed); End when the answer ended.
	FirstByte, FirstData, End time.Time
}

// Reset clears r for reuse.
func (r *Record) Reset() { *r = Record{} }

// Sink receives finished requests' records.
type Sink interface {
	// Log is given one finished request. It must not block, and must
	// copy what it keeps: r is reused once Log returns. Any goroutine
	// (event loops among them), concurrently.
	Log(r *Record)
}

// Tokens is an optional interface of a Sink: Tokens reports whether it
// wants the token counts (HasUsage, HasCached), which cost a parse of the
// answer's usage object per request (and the usage chunk of a stream whose
// client did not ask for it). A Sink without it gets none.
type Tokens interface {
	Tokens() bool
}

// WantsTokens reports whether s wants the token counts.
func WantsTokens(s Sink) bool {
	t, ok := s.(Tokens)
	return ok && t.Tokens()
}

// Sinks is several sinks as one: Log calls each in order. Tokens is true
// if any wants them.
type Sinks []Sink

// Log calls every sink with r.
func (ss Sinks) Log(r *Record) {
	for _, s := range ss {
		s.Log(r)
	}
}

// Tokens reports whether any of ss wants token counts.
func (ss Sinks) Tokens() bool {
	for _, s := range ss {
		if WantsTokens(s) {
			return true
		}
	}
	return false
}
