//go:build !race

package queue

import "testing"

// The race detector allocates on its own; this runs without it.

func TestZeroAllocs(t *testing.T) {
	q, names := steady(t, 1024, 8)
	empty, _ := steady(t, 0, 8)
	i := 0
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"PushPop", func() {
			item, _, _ := q.Pop(0)
			q.Push(item, 0, names[item%8], 1, 1, 0)
		}},
		{"PushRemove", func() {
			i++
			id, _ := q.Push(i, 0, names[i%8], 1, 1, 0)
			q.Remove(id)
		}},
		{"PushPopEmpty", func() {
			i++
			empty.Push(i, 0, names[i%8], 1, 1, 0)
			empty.Pop(0)
		}},
		{"PopRequeue", func() {
			item, _, t, _ := q.PopTicket(0)
			q.Requeue(item, 0, names[item%8], t, 0)
		}},
		{"Expire", func() { _ = q.Expire(0, nil) }},
	} {
		tc.f() // warm: slices and maps at their steady size
		if n := testing.AllocsPerRun(1000, tc.f); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", tc.name, n)
		}
	}
}
