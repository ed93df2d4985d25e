package queue

import (
	"fmt"
	"testing"
)

// steady returns a queue holding depth entries spread over tenants tenants
// (priority 0, weight 1 but every fourth tenant 2) and the tenant names.
func steady(tb testing.TB, depth, tenants int) (*Queue[int], []string) {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.MaxEntries = depth + 1
	q, err := New[int](cfg)
	if err != nil {
		tb.Fatal(err)
	}
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprint("key-", i)
	}
	for i := range depth {
		q.Push(i, 0, names[i%tenants], weightOf(i%tenants), 1, 0)
	}
	return q, names
}

func weightOf(tenant int) float64 {
	if tenant%4 == 3 {
		return 2
	}
	return 1
}

// BenchmarkPushPop is a full pool's steady state: a freed slot pops the
// next entry and a new request takes its place, the queue staying at
// depth. The item is the popped one, so the tenant mix stays as it was.
func BenchmarkPushPop(b *testing.B) {
	for _, depth := range []int{16, 1024} {
		for _, tenants := range []int{1, 8, 256} {
			if tenants > depth {
				continue
			}
			b.Run(fmt.Sprintf("depth=%d/tenants=%d", depth, tenants), func(b *testing.B) {
				q, names := steady(b, depth, tenants)
				b.ReportAllocs()
				now := int64(0)
				for b.Loop() {
					now += 1000
					item, _, _ := q.Pop(now)
					t := item % tenants
					q.Push(item, 0, names[t], weightOf(t), 1, now)
				}
			})
		}
	}
}

// BenchmarkPushPopEmpty is a pool that is just full: every request waits
// alone, so each Push creates its class and tenant record and each Pop
// drops them.
func BenchmarkPushPopEmpty(b *testing.B) {
	q, names := steady(b, 0, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		q.Push(i, 0, names[i%8], 1, 1, 0)
		q.Pop(0)
	}
}

// BenchmarkPushRemove: a request queued behind depth others whose client
// leaves.
func BenchmarkPushRemove(b *testing.B) {
	q, names := steady(b, 1024, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		id, _ := q.Push(i, 0, names[i%8], 1, 1, 0)
		q.Remove(id)
	}
}
