package shard

import (
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/policy"
)

// TestRouterTokenBudget: a chat over the token budget is keyed by token
// blocks up to the cut and byte blocks after it; the route it learns, at
// its message ends in the byte-keyed tail too, is the prefix of the next
// turn of the same conversation.
func TestRouterTokenBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{loops: 2, backends: 4, tokenizer: true, tokenBudget: 4 << 10})
	sys := strings.Repeat("You are a helpful assistant. ", 20) // 580 bytes of prose
	user := "Repeat after me: " + strings.Repeat("a", 6000)    // a run of one letter: cut
	turn1 := chatBody("system", sys, "user", user)
	_, m, total1, reason := routed(t, e, 0, "/v1/chat/completions", turn1)
	// 6,000 bytes of the tail alone make 93 byte blocks.
	if m != 0 || reason != policy.ReasonHash || total1 < 6000/64 {
		t.Fatalf("turn 1: %d/%d %s", m, total1, reason)
	}
	if _, m, total, reason := routed(t, e, 1, "/v1/chat/completions", turn1); m != total1 || total != total1 || reason != policy.ReasonTree {
		t.Fatalf("turn 1 again: %d/%d %s, want %d/%d tree", m, total, reason, total1, total1)
	}
	turn2 := chatBody("system", sys, "user", user, "assistant", "a a a", "user", "Thanks!")
	_, m, total2, reason := routed(t, e, 0, "/v1/chat/completions", turn2)
	if m != total1 || total2 <= total1 || reason != policy.ReasonTree {
		t.Fatalf("turn 2: %d/%d %s, want all %d blocks of turn 1 matched", m, total2, reason, total1)
	}
	if s := e.r.shards[0].tok.Stats(); s.BudgetCuts != 2 {
		t.Fatalf("shard 0: %d budget cuts, want 2", s.BudgetCuts)
	}
}
