package tokenpool

import (
	"context"
	"fmt"
	"github.com/saltus-lb/saltus/tree"
	"strings"
	"testing"
)

// chatSegs is a rendered Llama-3 chat of two turns: special tokens and
// text runs, as stage 3 produces them.
var chatSegs = []string{
	"<|begin_of_text|>", "<|start_header_id|>", "system", "<|end_header_id|>\n\n",
	strings.Repeat("You are a helpful assistant who answers in detail. ", 20), "<|eot_id|>",
	"<|start_header_id|>", "user", "<|end_header_id|>\n\n",
	"Explain how a KV cache speeds up transformer inference, with an example.", "<|eot_id|>",
	"<|start_header_id|>", "assistant", "<|end_header_id|>\n\n",
}

func textBytes(segs []string) (n int64) {
	for _, s := range segs {
		n += int64(len(s))
	}
	return n
}

// BenchmarkTokenizeHit: every segment of a 14-segment request is cached.
func BenchmarkTokenizeHit(b *testing.B) {
	l := newLoop()
	p, err := New(DefaultConfig(), llama3(b), []func(func()){l.post}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer closePool(b, p)
	s := p.Shard(0)
	var r Result
	s.Tokenize(&r, chatSegs, func(Result) {})
	l.runOne(b)
	b.SetBytes(textBytes(chatSegs))
	b.ReportAllocs()
	for b.Loop() {
		if !s.Tokenize(&r, chatSegs, nil) {
			b.Fatal("miss")
		}
	}
}

// BenchmarkTokenizeMiss: one new user turn per request (the other 13
// segments cached) goes to the shard's worker and back through a fake post
// (a channel that the benchmark goroutine, standing for the loop, reads).
func BenchmarkTokenizeMiss(b *testing.B) {
	tok := llama3(b)
	cfg := DefaultConfig()
	// Room for about 20 turns: each of the 1,024 turns below is evicted
	// long before it comes round again, so every request misses once.
	cfg.CacheBytes = 16 << 10
	l := newLoop()
	p, err := New(cfg, tok, []func(func()){l.post}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer closePool(b, p)
	s := p.Shard(0)
	turns := make([]string, 1024)
	for i := range turns {
		turns[i] = fmt.Sprintf("%s (request %d)", turnText, i)
	}
	segs := slicesClone(chatSegs)
	var r Result
	done := func(Result) {}
	s.Tokenize(&r, segs, done) // cache the other segments
	l.runOne(b)
	b.SetBytes(int64(len(turns[0])))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		segs[9] = turns[i%len(turns)]
		if s.Tokenize(&r, segs, done) {
			b.Fatalf("completed synchronously: %+v", r)
		}
		l.runOne(b)
	}
	if st := s.Stats(); st.OwnJobs < uint64(b.N) || st.CacheHits < 13*uint64(b.N) {
		b.Fatalf("%d jobs and %d cache hits for %d requests", st.OwnJobs, st.CacheHits, b.N)
	}
}

var turnText = strings.Repeat("Explain how a KV cache speeds up transformer inference. ", 5)

// BenchmarkEncodeTurn: the tokenizer alone on the missing turn, the floor
// under BenchmarkTokenizeMiss.
func BenchmarkEncodeTurn(b *testing.B) {
	tok := llama3(b)
	text := turnText + " (request 1)"
	var ids []int32
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		ids = tok.Encode(ids[:0], text)
	}
}

func BenchmarkByteBlockKeys(b *testing.B) {
	seed := tree.ByteBlockSeed("m")
	for _, n := range []int{1 << 10, 16 << 10, 256 << 10} {
		text := strings.Repeat("0123456789abcdef", n/16)
		b.Run(fmt.Sprintf("one/%dKiB", n>>10), func(b *testing.B) {
			keys := make([]uint64, 0, n/64)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				keys = tree.ByteBlockKeys(keys[:0], seed, text)
			}
		})
	}
	b.Run("chat-segments", func(b *testing.B) {
		keys := make([]uint64, 0, 64)
		b.SetBytes(textBytes(chatSegs))
		b.ReportAllocs()
		for b.Loop() {
			keys = tree.ByteBlockKeys(keys[:0], seed, chatSegs...)
		}
	})
}

func closePool(tb testing.TB, p *Pool) {
	tb.Helper()
	if err := p.Close(context.Background()); err != nil {
		tb.Error(err)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// BenchmarkBudgetDelay: a 4 MiB prompt (one repeated letter, or prose from
// the real corpus), then a short request, on one shard: how long the short
// one waits for its ids, by TokenBudget ("none": no budget, as before it
// existed). Nothing is cached, so every iteration encodes again.
func BenchmarkBudgetDelay(b *testing.B) {
	tok := llama3(b)
	prose := strings.Join(realCorpus(b), "")
	for len(prose) < 4<<20 {
		prose += prose
	}
	texts := []struct{ name, text string }{
		{"letter", strings.Repeat("a", 4<<20)},
		{"prose", prose[:4<<20]},
		// Long runs with safe cuts between them: the worst case of a
		// budget that cuts (one repeated letter cuts at the start).
		{"letter-words", strings.Repeat(strings.Repeat("a", 1023)+" ", 4096)},
	}
	budgets := []struct {
		name string
		n    int
	}{{"none", 1 << 40}, {"1MiB", 1 << 20}, {"256KiB", 256 << 10}, {"128KiB", 128 << 10}, {"64KiB", 64 << 10}}
	for _, tx := range texts {
		for _, bu := range budgets {
			b.Run(tx.name+"/"+bu.name, func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.TokenBudget, cfg.MaxJobBytes, cfg.MaxSegmentBytes = bu.n, 8<<20, 1
				l := newLoop()
				p, err := New(cfg, tok, []func(func()){l.post}, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer closePool(b, p)
				s := p.Shard(0)
				big := []string{"<|begin_of_text|>", tx.text}
				small := []string{"<|begin_of_text|>", "hello there"}
				var r Result
				done := func(Result) {}
				for b.Loop() {
					if s.Tokenize(&r, big, done) || s.Tokenize(&r, small, done) {
						b.Fatal("completed synchronously")
					}
					// Not runOne: without a budget one letter
					// can take longer than its 10 s.
					(<-l.q)()
					(<-l.q)()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "delay-ms")
				b.ReportMetric(float64(p.Stats().WorkerBytes)/float64(b.N), "encoded-B")
			})
		}
	}
}

// BenchmarkCutAt: the budget's scan, which every request longer than
// TokenBudget/32 bytes pays on the loop, cached or not.
func BenchmarkCutAt(b *testing.B) {
	prose := strings.Join(realCorpus(b), "")
	for _, n := range []int{16 << 10, 200 << 10} {
		segs := []string{prose[:n]}
		b.Run(fmt.Sprintf("prose/%dKiB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if cutAt(segs, DefaultTokenBudget, false, nil).On {
					b.Fatal("cut")
				}
			}
		})
		// The segment is cached: its cost too.
		b.Run(fmt.Sprintf("prose-cached/%dKiB", n>>10), func(b *testing.B) {
			cache := NewSegmentCache(1<<20, 256<<10)
			cache.Put(segs[0], []int32{1})
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if cutAt(segs, DefaultTokenBudget, false, cache).On {
					b.Fatal("cut")
				}
			}
		})
	}
}
