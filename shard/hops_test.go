package shard

import (
	"testing"
)

// TestTwoHops: a routed request whose prompt another loop owns makes two
// cross-loop messages, the lookup (to the owner) and the forward (back to
// the client's loop), also on a conversation's next turn, whose prompt
// grows: the decision recorded the whole chain as a pending route, so the
// 2xx answer has nothing to teach and no learn message goes out
// (saltus_route_learn_skipped_total).
func TestTwoHops(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 4})
	turn1 := chatBody("system", systemA, "user", "What is the notice period for a lease?")
	turn2 := chatBody("system", systemA, "user", "What is the notice period for a lease?",
		"assistant", "Usually one month, unless the contract says otherwise.", "user", "And for a shop?")
	// The connection's loop: the one that does not own the prompt.
	conn := -1
	for loop := range 2 {
		before := e.hops.Load()
		if e.serve(t, newExchange(loop, "POST", "/v1/chat/completions", turn1)) == nil {
			t.Fatal("turn 1 was not forwarded")
		}
		if e.hops.Load() > before {
			conn = loop
			break
		}
	}
	if conn < 0 {
		t.Fatal("neither loop posted: the prompt has no keys")
	}
	skipped := e.r.m.learnSkipped.Get()
	before := e.hops.Load()
	c := e.serve(t, newExchange(conn, "POST", "/v1/chat/completions", turn2))
	if c == nil || c.served < 0 {
		t.Fatalf("turn 2: %+v", c)
	}
	if n := e.hops.Load() - before; n != 2 {
		t.Errorf("turn 2 made %d cross-loop messages, want 2 (lookup, forward)", n)
	}
	if got := e.r.m.learnSkipped.Get(); got != skipped+1 {
		t.Errorf("learn skipped %d → %d, want one more", skipped, got)
	}
}
