package workload

import (
	"fmt"
	"reflect"
	"testing"
)

// TestMixedUsers: each user keeps one model by its id (40/20/40 %), its
// conversation is multiturn's user of the same id, and every 50th
// request, at the user's offset, is a one-turn request for org/gamma
// outside the conversation.
func TestMixedUsers(t *testing.T) {
	t.Parallel()
	opts := DefaultOptions()
	opts.Model = "ignored"
	w := mustNew(t, "mixed", opts)
	turns := mustNew(t, "multiturn", DefaultOptions())
	systems := map[string]bool{}
	for _, s := range w.(*mixed).turns.systems {
		systems[s.text] = true
	}
	const users, n = 10, 300
	perModel := map[string]int{}
	unknown := 0
	for id := range users {
		u, conv := w.NewUser(id), turns.NewUser(id)
		var model string
		for i := range n {
			req, ok := u.Next()
			if !ok {
				t.Fatalf("user %d: no request %d", id, i)
			}
			if req.Model == ModelUnknown {
				unknown++
				if req.Tag != "unknown" || len(req.Messages) != 2 || !systems[req.Messages[0].Content] || req.Messages[1].Role != "user" {
					t.Fatalf("user %d request %d: unknown-model request %+v, want a shared system prompt and a user turn, tag unknown", id, i, req.Tag)
				}
				if i%mixedUnknownEvery != id*mixedUnknownStep%mixedUnknownEvery {
					t.Fatalf("user %d: request %d names %s off its offset", id, i, ModelUnknown)
				}
				u.Reply("") // refused: not part of the conversation
				continue
			}
			if model == "" {
				model = req.Model
				perModel[model]++
			}
			if req.Model != model {
				t.Fatalf("user %d request %d: model %q, want %q throughout", id, i, req.Model, model)
			}
			want, _ := conv.Next()
			want.Model = model
			if !reflect.DeepEqual(req, want) {
				t.Fatalf("user %d request %d differs from multiturn's user %d", id, i, id)
			}
			reply := fmt.Sprintf("answer %d to user %d", i, id)
			u.Reply(reply)
			conv.Reply(reply)
		}
	}
	if want := map[string]int{ModelAlpha: 4, ModelAlphaTuned: 2, ModelBeta: 4}; !reflect.DeepEqual(perModel, want) {
		t.Errorf("users per model %v, want %v", perModel, want)
	}
	if unknown != users*n/mixedUnknownEvery {
		t.Errorf("%d unknown-model requests of %d, want 2%%", unknown, users*n)
	}
	if r, _ := w.NewUser(0).Next(); r.Model != ModelUnknown {
		t.Errorf("user 0's first request names %q, want %s (a short run sees one)", r.Model, ModelUnknown)
	}
}

// TestMixedOnlyModels: Options.Models idles the other models' users and
// leaves the kept users' requests as they were.
func TestMixedOnlyModels(t *testing.T) {
	t.Parallel()
	all := drive(t, mustNew(t, "mixed", DefaultOptions()), 5, 60)
	opts := DefaultOptions()
	opts.Models = []string{ModelBeta}
	w := mustNew(t, "mixed", opts)
	for id := range 5 {
		u := w.NewUser(id)
		req, ok := u.Next()
		if mixedSlots[id] != ModelBeta {
			if ok {
				t.Errorf("user %d of %s sends with Models %v", id, mixedSlots[id], opts.Models)
			}
			continue
		}
		if !ok || !reflect.DeepEqual(req, all[id][0]) {
			t.Fatalf("user %d of %s: first request differs from the whole workload's", id, ModelBeta)
		}
		for i, want := range all[id][1:] {
			u.Reply(fmt.Sprintf("answer %d to user %d", i, id))
			if got, _ := u.Next(); !reflect.DeepEqual(got, want) {
				t.Fatalf("user %d request %d differs from the whole workload's", id, i+1)
			}
		}
	}
}
