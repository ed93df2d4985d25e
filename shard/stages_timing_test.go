package shard

import (
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/policy"
	"github.com/saltus-lb/saltus/tree"
)

// chat4K is BenchmarkServeChat4K's request: a 3,000-byte system prompt and
// a 1,000-byte user turn.
func chat4K() string {
	system := strings.Repeat(systemA+" ", 3000/len(systemA)+1)[:3000]
	user := strings.Repeat("Please describe the maintenance schedule of the lamp, the lens and the fog horn in detail. ", 12)[:1000]
	return chatBody("system", system, "user", user)
}

// BenchmarkPrefixStages is the prefix policy's per-request work on a warm
// 4 KB chat of a known conversation (BenchmarkServeChat4K's request, after
// two of them were served), stage by stage, each on the loop with the
// loop's own scratch, allocations reported:
//
//   - decode: the body's members (openai.Decode);
//   - render: the chat template's segments (llama3);
//   - tokenize: the segments' ids from the tokenizer's cache (hits);
//   - keys: the block keys of the ids;
//   - match: the owner's tree walk;
//   - decide: the backends' views, the footprints' home and the cost
//     decision (policy.Decide);
//   - lookup: tokenize, keys, match and decide in a row, the part the
//     issue bounds at 2 µs.
//
// BenchmarkServeChat4K is the whole path (these, and the job's own
// bookkeeping, the gateway's admission and the forward call).
func BenchmarkPrefixStages(b *testing.B) {
	e := newEnv(b, envOpts{loops: 1, backends: 8, tokenizer: true, maintain: time.Hour})
	body := chat4K()
	for range 2 {
		if c := e.serve(b, newExchange(0, "POST", "/v1/chat/completions", body)); c == nil {
			b.Fatal("not forwarded")
		}
	}
	e.up.quiet.Store(true)
	r, sh := e.r, e.r.shards[0]
	raw := []byte(body)
	var (
		d     openai.Request
		texts []string
		keys  []uint64
	)
	decode := func() {
		if err := openai.Decode(&d, openai.KindChat, raw, r.cfg.Body.MaxDepth, &sh.dec.sc); err != nil {
			b.Fatal(err)
		}
	}
	render := func() {
		segs, err := sh.dec.sc.Chat.Render(r.tmpl, d.Messages, d.Options)
		if err != nil {
			b.Fatal(err)
		}
		texts = texts[:0]
		for _, s := range segs {
			texts = append(texts, s.Text)
		}
	}
	tokenize := func() {
		if !sh.tok.Tokenize(&sh.res, texts, nil) {
			b.Fatal("not a cache hit")
		}
	}
	seed := tree.ModelSeed(model)
	blockKeys := func() { keys = tree.BlockKeys(keys[:0], seed, sh.res.IDs, r.cfg.BlockSize) }
	match := func() { sh.hits, _ = sh.tree.Match(sh.hits[:0], keys, r.now()) }
	decide := func() {
		snap := r.up.Snapshot()
		sh.views = r.views(sh.views[:0], snap, nil)
		sh.sc.Home = sh.foot.scan(keys, sh.views, r.now())
		d := policy.Decide(*r.tuned.Load(), sh.views, sh.hits, keys, true, &sh.sc)
		if d.Reason != policy.ReasonTree {
			b.Fatalf("not routed by the tree: %+v", d)
		}
	}
	// One pass to fill every stage's input and scratch.
	e.loops.run(b, 0, func() {
		decode()
		render()
		tokenize()
		blockKeys()
		match()
		decide()
	})
	if len(sh.hits) == 0 {
		b.Fatal("the tree does not know the conversation")
	}
	misses := sh.tok.Stats().CacheMisses
	for _, st := range []struct {
		name string
		fn   func()
	}{
		{"decode", decode},
		{"render", render},
		{"tokenize", tokenize},
		{"keys", blockKeys},
		{"match", match},
		{"decide", decide},
		{"lookup", func() { tokenize(); blockKeys(); match(); decide() }},
	} {
		b.Run(st.name, func(b *testing.B) {
			b.ReportAllocs()
			e.loops.run(b, 0, func() {
				b.ResetTimer()
				for range b.N {
					st.fn()
				}
				b.StopTimer()
			})
		})
	}
	if s := sh.tok.Stats(); s.CacheMisses != misses {
		b.Fatalf("%d cache misses during the benchmark", s.CacheMisses-misses)
	}
}
