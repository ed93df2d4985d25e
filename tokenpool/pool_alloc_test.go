//go:build !race

package tokenpool

import (
	"github.com/saltus-lb/saltus/tree"
	"strings"
	"testing"
)

// TestZeroAllocs: the cache-hit path of a multi-segment request and
// byte-block keys do not allocate once their buffers have grown (the race
// detector allocates, hence the build tag).
func TestZeroAllocs(t *testing.T) {
	l := newLoop()
	p, err := New(DefaultConfig(), llama3(t), []func(func()){l.post}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closePool(t, p)
	s := p.Shard(0)
	var r Result
	s.Tokenize(&r, chatSegs, func(Result) {})
	l.runOne(t)
	if n := testing.AllocsPerRun(100, func() {
		if !s.Tokenize(&r, chatSegs, nil) {
			t.Fatal("miss")
		}
	}); n != 0 {
		t.Errorf("Tokenize, every segment cached: %v allocs per run, want 0", n)
	}
	keys := make([]uint64, 0, 1024)
	text := strings.Repeat("x", 40000)
	seed := tree.ByteBlockSeed("m")
	if n := testing.AllocsPerRun(100, func() {
		keys = tree.ByteBlockKeys(keys[:0], seed, chatSegs...)
		keys = tree.ByteBlockKeys(keys[:0], seed, text)
	}); n != 0 {
		t.Errorf("ByteBlockKeys: %v allocs per run, want 0", n)
	}
}
