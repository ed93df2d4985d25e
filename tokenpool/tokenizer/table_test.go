package tokenizer

import (
	"math/rand/v2"
	"testing"
)

func TestTable(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 1))
	want := map[uint64][2]int32{0: {7, 8}, 1<<63 - 1: {9, 10}}
	for len(want) < 5000 {
		want[r.Uint64()>>1] = [2]int32{r.Int32(), r.Int32()}
	}
	tab := newTable(len(want))
	for k, v := range want {
		if !tab.put(k, v[0], v[1]) {
			t.Fatalf("put(%d) refused a new key", k)
		}
	}
	if tab.put(0, 1, 1) {
		t.Fatal("put of a present key stored it again")
	}
	for k, v := range want {
		if a, b, ok := tab.get(k); !ok || a != v[0] || b != v[1] {
			t.Fatalf("get(%d) = %d, %d, %v; want %v", k, a, b, ok, v)
		}
	}
	misses := 0
	for i := 0; i < 5000; i++ {
		k := r.Uint64() >> 1
		if _, ok := want[k]; ok {
			continue
		}
		if _, _, ok := tab.get(k); ok {
			t.Fatalf("get(%d) found an absent key", k)
		}
		misses++
	}
	if misses == 0 {
		t.Fatal("no absent keys tried")
	}
}
