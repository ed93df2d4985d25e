package kvevents

import "net"

// What the tests read of a Publisher and a Subscriber; nothing outside
// the tests needs it.

// Replays counts the replay requests answered. Any goroutine.
func (p *Publisher) Replays() uint64 { return p.replayed.Load() }

// Sent counts batches sent to the socket. Any goroutine.
func (p *Publisher) Sent() uint64 { return p.sent.Load() }

// Bound is closed once a bound subscription listens; Addr then says
// where. Any goroutine.
func (s *Subscriber) Bound() <-chan struct{} { return s.bound }

// Addr is the address a bound subscription listens on, nil before it
// does (or when it connects). Any goroutine.
func (s *Subscriber) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}
