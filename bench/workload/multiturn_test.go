package workload

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
)

func TestMultiturnHistory(t *testing.T) {
	t.Parallel()
	w := mustNew(t, "multiturn", DefaultOptions()).(*multiturn)
	systems := map[string]bool{}
	for _, s := range w.systems {
		systems[s.text] = true
	}
	conversations, branches, requests := 0, 0, 0
	turnsSeen := map[int]int{} // requests per conversation -> conversations
	for id := range 4 {
		u := w.NewUser(id)
		var prev []Message // the last request's messages plus its reply
		inConv := 0
		for i := range 5000 {
			r, _ := u.Next()
			requests++
			ms := r.Messages
			if ms[0].Role != "system" || !systems[ms[0].Content] {
				t.Fatalf("request %d: first message is not one of the system prompts", i)
			}
			for j, m := range ms[1:] {
				if want := [2]string{"user", "assistant"}[j%2]; m.Role != want {
					t.Fatalf("request %d: message %d is %s, want %s", i, j+1, m.Role, want)
				}
			}
			if len(ms)%2 != 0 {
				t.Fatalf("request %d: %d messages, want system + pairs + user", i, len(ms))
			}
			history := ms[:len(ms)-1]
			switch {
			case r.Tag == "turn1":
				if inConv > 0 {
					turnsSeen[inConv]++
				}
				conversations, inConv = conversations+1, 0
				if len(ms) != 2 {
					t.Fatalf("request %d: turn1 with %d messages", i, len(ms))
				}
			case r.Tag == "branch":
				branches++
				// The branch keeps an earlier part of the conversation,
				// at least its first turn, and asks something new there.
				if len(history) < 3 || len(history) >= len(prev) || !reflect.DeepEqual(history, prev[:len(history)]) {
					t.Fatalf("request %d: branch history of %d messages is not a proper prefix of the last %d", i, len(history), len(prev))
				}
				if ms[len(ms)-1] == prev[len(history)] {
					t.Fatalf("request %d: the branch repeats the dropped user message", i)
				}
			default:
				// The history grows by the last request and its reply.
				if r.Tag != fmt.Sprintf("turn%d", len(ms)/2) || !reflect.DeepEqual(history, prev) {
					t.Fatalf("request %d (%s): history of %d messages is not the last request (%d) and its reply", i, r.Tag, len(history), len(prev))
				}
			}
			inConv++
			reply := fmt.Sprintf("reply %d of user %d", i, id)
			u.Reply(reply)
			prev = append(slices.Clone(ms), Message{"assistant", reply})
		}
	}
	for n := range turnsSeen {
		if n < multiturnMinTurns || n > multiturnMaxTurns {
			t.Errorf("a conversation of %d requests", n)
		}
	}
	if len(turnsSeen) != multiturnMaxTurns-multiturnMinTurns+1 {
		t.Errorf("conversation lengths seen: %v, want each of %d-%d", turnsSeen, multiturnMinTurns, multiturnMaxTurns)
	}
	// Binomial standard deviation over ~3,000 conversations: 0.7 points.
	share := 100 * float64(branches) / float64(conversations)
	if math.Abs(share-multiturnBranchPct) > 3 {
		t.Errorf("%.1f%% of %d conversations branch, want %d%% ± 3", share, conversations, multiturnBranchPct)
	}
	t.Logf("%d requests, %d conversations, %.1f%% branch", requests, conversations, share)
}

func TestMultiturnFailedTurn(t *testing.T) {
	t.Parallel()
	u := mustNew(t, "multiturn", DefaultOptions()).NewUser(0).(*multiturnUser)
	next := func(wantTag string, wantMessages int) []Message {
		t.Helper()
		r, _ := u.Next()
		if r.Tag != wantTag || len(r.Messages) != wantMessages {
			t.Fatalf("request %s with %d messages, want %s with %d", r.Tag, len(r.Messages), wantTag, wantMessages)
		}
		return r.Messages
	}
	next("turn1", 2)
	u.left, u.branchAt = 9, 0 // a long conversation without a branch
	u.Reply("first answer")
	second := next("turn2", 4)
	if second[2] != (Message{"assistant", "first answer"}) {
		t.Fatalf("second request: the reply is %+v", second[2])
	}
	u.Reply("") // failed: the second turn is forgotten
	third := next("turn2", 4)
	if !reflect.DeepEqual(third[:3], second[:3]) || third[3] == second[3] {
		t.Fatal("after a failed turn: want the first turn and a new question")
	}
	// No Reply at all also forgets the turn.
	next("turn2", 4)
	u.Reply("b")
	u.Reply("c") // a second Reply to one request is ignored
	fifth := next("turn3", 6)
	if fifth[4].Content != "b" {
		t.Fatalf("history ends with %+v, want the reply b", fifth[4])
	}
}
