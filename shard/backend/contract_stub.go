// Package backend: contract stand-in (replaced at merge). Only what package
// shard uses, shaped as /work/contract.md says.
package backend

import (
	"context"
	"time"

	"github.com/saltus-lb/saltus/reactor"
)

// Backend is one upstream engine (stand-in).
type Backend struct {
	ID  int
	URL string
}

func (b *Backend) InFlight() int64 { return 0 }
func (b *Backend) Healthy() bool   { return true }
func (b *Backend) Routable() bool  { return true }

// Set is the backend registry (stand-in).
type Set struct{}

func (s *Set) Snapshot() []*Backend { return nil }
func (s *Set) Forward(req *reactor.Request, body []byte, candidates []*Backend, sink Sink, extraHdr []reactor.Header, h Hooks) bool {
	return false
}
func (s *Set) Models(ctx context.Context) ([]byte, error) { return nil, nil }

// Sink is where an answer goes; *reactor.Exchange satisfies it.
type Sink interface {
	Respond(status int, hdr []reactor.Header, body []byte)
	WriteHeader(status int, hdr []reactor.Header) error
	Write(p []byte) error
	Flush() error
	End() error
	Abort()
	Gone() <-chan struct{}
}

// Hooks are Forward's callbacks.
type Hooks struct {
	FirstByte func(b *Backend, status int)
	Done      func(o Outcome)
}

// Outcome is how a forwarded request ended.
type Outcome struct {
	Backend                            *Backend
	Status                             int
	Retries                            int
	Err                                error
	ClientGone, UpstreamDied, TimedOut bool
	TTFB, Total                        time.Duration
	Usage                              []byte
}
