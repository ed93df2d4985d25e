package tokenpool

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/tree"
)

func TestCutAt(t *testing.T) {
	t.Parallel()
	f := func(segs []string, budget int, whole bool, want Cut) {
		t.Helper()
		if got := cutAt(segs, budget, whole, nil); got != want {
			t.Errorf("cutAt(%.40q…, %d, %v) = %+v, want %+v", segs, budget, whole, got, want)
		}
	}
	prose := strings.Repeat("word ", 100) // 500 bytes, short runs
	f([]string{prose}, 500*32, false, Cut{})
	f([]string{prose}, 500, false, Cut{})
	// Byte 500 of prose is the 1st over a budget of 499: the last safe
	// point before it is the space at 499.
	f([]string{prose}, 499, false, Cut{Seg: 0, Off: 499, On: true})
	f([]string{prose}, 12, false, Cut{Seg: 0, Off: 9, On: true}) // "word word| word"
	// Whole-text encoders pay 32 per byte: 12*32 bytes of budget → 12 bytes.
	f([]string{prose}, 12*32, true, Cut{Seg: 0, Off: 9, On: true})
	// One letter: a single run, so no safe point but the segment's start;
	// the run turns long at byte 64, costing 64*32 at once.
	letter := strings.Repeat("a", 4<<20)
	f([]string{"<s>", letter}, 256<<10, false, Cut{Seg: 1, Off: 0, On: true})
	f([]string{"sys prompt ", "<sep>", "aaa " + letter}, 64*32, false, Cut{Seg: 2, Off: 3, On: true})
	// Segments before the cut cost what they cost alone.
	f([]string{prose, "x"}, 501, false, Cut{})
	f([]string{prose, "xy"}, 501, false, Cut{Seg: 1, Off: 0, On: true})
	// Spaces are a run too.
	f([]string{"ab" + strings.Repeat(" ", 100)}, 1000, false, Cut{Seg: 0, Off: 2, On: true})
}

var (
	modelsOnce sync.Once
	models     map[string]*tokenizer.Tokenizer
)

func testModels(tb testing.TB) map[string]*tokenizer.Tokenizer {
	tb.Helper()
	modelsOnce.Do(func() {
		models = map[string]*tokenizer.Tokenizer{"llama3": llama3(tb)}
		for _, m := range []string{"qwen3", "mistral7b"} {
			tok, err := tokenizer.Load("testdata/models/" + m + "/tokenizer.json.gz")
			if err != nil {
				tb.Fatal(err)
			}
			models[m] = tok
		}
	})
	return models
}

func realCorpus(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open("testdata/corpus/real.json.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var real []string
	if err := json.NewDecoder(zr).Decode(&real); err != nil {
		tb.Fatal(err)
	}
	return real
}

// TestCutExact: the ids of the text before a cut are the first ids of the
// whole text's, for every model here, at cuts all over the real corpus and
// the targeted strings: the token-keyed prefix is exact.
func TestCutExact(t *testing.T) {
	t.Parallel()
	corpus := realCorpus(t)
	corpus = append(corpus, "a  b", "x\n\ny", "it's  done", "1234 5678", "a\r\nb", "¿qué? sí", "日本語 の テキスト", "emoji 👍🏽 here")
	for name, tok := range testModels(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := 0
			for _, s := range corpus {
				whole := tok.Encode(nil, s)
				// Every 7th budget up to the string's cost.
				for b := 1; b < len(s); b += 1 + len(s)/7 {
					c := cutAt([]string{s}, b, false, nil)
					if !c.On {
						continue
					}
					got := tok.Encode(nil, s[:c.Off])
					if !slices.Equal(got, whole[:min(len(got), len(whole))]) {
						t.Fatalf("%q cut at %d: ids %v are not a prefix of %v", s[:min(len(s), 80)], c.Off, got, whole[:min(len(whole), len(got)+4)])
					}
					n++
				}
			}
			if n < 1000 {
				t.Fatalf("only %d cuts checked", n)
			}
		})
	}
}

// TestTailKeysGrowing: a conversation that grows past the budget keeps
// its keys: turn N+1's begin with turn N's, through the cut; the cut
// itself depends on the text before it only.
func TestTailKeysGrowing(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	seed := tree.ModelSeed("m")
	keys := func(segs []string, budget int) []uint64 {
		c := cutAt(segs, budget, false, nil)
		r := Result{Cut: c}
		upto := segs
		if c.On {
			upto = append(slices.Clone(segs[:c.Seg]), segs[c.Seg][:c.Off])
		}
		r.IDs, r.Ends = want(tok, upto)
		if !c.On {
			return tree.BlockKeys(nil, seed, r.IDs, 16)
		}
		k, _ := TailKeys(nil, seed, &r, segs, 16)
		return k
	}
	sys := strings.Repeat("You are a helpful assistant. ", 200) // 5.8 KB
	turns := []string{sys, "<|eot_id|>"}
	const budget = 16 << 10
	var prev []uint64
	cuts := 0
	for i := range 12 {
		turns = append(turns, strings.Repeat("Tell me more about topic "+string(rune('A'+i))+". ", 80), "<|eot_id|>")
		k := keys(turns, budget)
		if c := cutAt(turns, budget, false, nil); c.On {
			cuts++
		}
		// The last segment differs (a new one follows next turn) only
		// by what comes after it, so every full block of prev is kept.
		if !slices.Equal(k[:len(prev)], prev) {
			t.Fatalf("turn %d: keys do not begin with turn %d's", i, i-1)
		}
		prev = k
	}
	if cuts < 6 {
		t.Fatalf("only %d turns were over the budget", cuts)
	}
	// The tail chain is not the token chain: a request cut at a
	// different place has different keys after the cut.
	a := keys([]string{sys + strings.Repeat("z", 5000)}, budget)
	b := keys([]string{sys + strings.Repeat("z", 5000)}, 1<<30)
	if len(a) == 0 || slices.Equal(a[len(a)-3:], b[len(b)-3:]) {
		t.Fatal("tail keys equal the token keys")
	}
}

// TestBudgetOneLetter: a 4 MiB prompt of one letter, then a short request
// on the same shard: the worker encodes only the text before the cut (the
// pool's own counter of bytes encoded), so the short request waits for at
// most that; the big one is counted and keyed past the cut as bytes.
func TestBudgetOneLetter(t *testing.T) {
	t.Parallel()
	tok := llama3(t)
	l := newLoop()
	p := newTestPool(t, DefaultConfig(), tok, l)
	s := p.Shard(0)
	big := []string{"<|begin_of_text|>", "<|start_header_id|>", "user", "<|end_header_id|>\n\n",
		"Please repeat: " + strings.Repeat("a", 4<<20), "<|eot_id|>"}
	small := []string{"<|begin_of_text|>", "hello there"}
	c := newCollector()
	var r Result
	if s.Tokenize(&r, big, c.done(0)) || s.Tokenize(&r, small, c.done(1)) {
		t.Fatal("completed synchronously")
	}
	l.runOne(t)
	l.runOne(t)
	st := p.Stats()
	encoded := 0
	for _, seg := range append(big[:4:4], "Please repeat:", small[0], small[1]) {
		encoded += len(seg)
	}
	if st.WorkerBytes != uint64(encoded) || st.BudgetCuts != 1 || st.WorkerJobs != 2 {
		t.Fatalf("worker encoded %d bytes in %d jobs, %d budget cuts; want %d bytes, 2 jobs, 1 cut",
			st.WorkerBytes, st.WorkerJobs, st.BudgetCuts, encoded)
	}
	got := c.got[0]
	if want := (Cut{Seg: 4, Off: len("Please repeat:"), On: true}); got.Cut != want || got.Reason != ReasonNone {
		t.Fatalf("big: cut %+v reason %v, want %+v", got.Cut, got.Reason, want)
	}
	checkIDs(t, tok, got, append(big[:4:4], "Please repeat:"), PathOwn)
	checkIDs(t, tok, c.got[1], small, PathOwn)
	if c.got[1].Cut.On {
		t.Fatal("small request cut")
	}
	keys, nTok := TailKeys(nil, 1, &got, big, 16)
	if nTok != len(got.IDs)/16 || len(keys) != nTok+(4<<20)/64 {
		t.Fatalf("%d keys, %d of tokens, from %d ids and 4 MiB of tail", len(keys), nTok, len(got.IDs))
	}
	// The same request again: the same cut, from the cache.
	if !s.Tokenize(&r, big, nil) || r.Path != PathCache || r.Cut != got.Cut {
		t.Fatalf("again: path %v cut %+v", r.Path, r.Cut)
	}
}

// FuzzCut: wherever the budget cuts a text, the ids before the cut are the
// first ids of the whole text's (Llama-3), and text appended after the cut
// does not move it.
func FuzzCut(f *testing.F) {
	for _, s := range []string{"hello world foo", "a  b\n\nc", "<|eot_id|> x", "x>\n\n y", strings.Repeat("ab ", 40), "日本 語 😀 e\u0301 x"} {
		f.Add(s, uint16(7), " tail")
	}
	tok := llama3(f)
	f.Fuzz(func(t *testing.T, s string, budget uint16, more string) {
		c := cutAt([]string{s}, int(budget)+1, false, nil)
		if !c.On {
			return
		}
		whole := tok.Encode(nil, s)
		got := tok.Encode(nil, s[:c.Off])
		if len(got) > len(whole) || !slices.Equal(got, whole[:len(got)]) {
			t.Fatalf("%q cut at %d: %v not a prefix of %v", s, c.Off, got, whole)
		}
		if c2 := cutAt([]string{s + more}, int(budget)+1, false, nil); c2 != c {
			t.Fatalf("%q: cut %+v, with %q appended %+v", s, c, more, c2)
		}
	})
}

// TestFitsLocal: the loop's own tokenization is bounded by cost, not
// bytes: 1,000 bytes of prose fit 8 KiB, 1,000 bytes of one letter do not.
func TestFitsLocal(t *testing.T) {
	t.Parallel()
	f := func(text string, max int, whole, want bool) {
		t.Helper()
		j := &job{segs: []jobSeg{{text: "cached"}, {text: text, miss: true}}, missBytes: len(text)}
		if got := j.fitsLocal(max, whole); got != want {
			t.Errorf("fitsLocal(%.20q… %d bytes, %d, whole %v) = %v, want %v", text, len(text), max, whole, got, want)
		}
	}
	f(strings.Repeat("word ", 200), 8<<10, false, true)
	f(strings.Repeat("a", 1000), 8<<10, false, false)
	f(strings.Repeat("a", 250), 8<<10, false, true)
	f(strings.Repeat("word ", 200), 8<<10, true, false) // 1,000 × 32 > 8 KiB
	f(strings.Repeat("word ", 50), 8<<10, true, true)
	f("", 0, false, true)
	f("x", 0, false, false)
}

// TestCutAtCached: the costs the segment cache remembers never move a
// cut: every replica cuts where a cold one would, whatever it has cached.
func TestCutAtCached(t *testing.T) {
	t.Parallel()
	cache := NewSegmentCache(1<<20, 64<<10)
	var segs []string
	for i := range 40 {
		seg := strings.Repeat(fmt.Sprintf("turn %d says hello. ", i), 10+i*7)
		if i%9 == 4 {
			seg += strings.Repeat("z", 300) // a long run
		}
		segs = append(segs, seg, "<|eot_id|>")
		if i%3 != 2 {
			cache.Put(seg, []int32{1})
		}
		for _, budget := range []int{4 << 10, 16 << 10, 64 << 10} {
			want := cutAt(segs, budget, false, nil)
			// Twice: the first records costs, the second uses them.
			for k := range 2 {
				if got := cutAt(segs, budget, false, cache); got != want {
					t.Fatalf("turn %d budget %d pass %d: cut %+v with the cache, %+v without", i, budget, k, got, want)
				}
			}
		}
	}
	e := cache.peek(segs[0])
	c := newCoster(1<<30, false)
	c.add(segs[0])
	if e == nil || e.work != c.work+1 {
		t.Fatalf("cached cost of segment 0: %+v, want %d", e, c.work+1)
	}
}
