package policy

import (
	"math/rand/v2"
	"testing"

	"github.com/saltus-lb/saltus/tree"
)

// BenchmarkDecide is one decision per policy over 16 backends with
// varied loads and a 12-block request; prefix gets three tree holders. It
// allocates only the Candidates slice (1 alloc/op).
func BenchmarkDecide(b *testing.B) {
	bs := viewFleet(16)
	for i := range bs {
		bs[i].InFlight = int64(i % 5)
	}
	keys := randKeys(rand.New(rand.NewPCG(1, 2)), 12)
	hits := []tree.Hit{{Backend: 3, Blocks: 12}, {Backend: 7, Blocks: 8}, {Backend: 11, Blocks: 4}}
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			kind, _ := Parse(name)
			p := testPolicy
			p.Kind = kind
			s := Scratch{Rand: rand.New(rand.NewPCG(3, 4))}
			b.ReportAllocs()
			for b.Loop() {
				Decide(p, bs, hits, keys, true, &s)
			}
		})
	}
}
