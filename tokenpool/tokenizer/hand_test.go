package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// handPatterns are the hand-matched regexes that run on the general
// splitter or were added with the o200k and DeepSeek-V3 matchers, each
// against the same regex on regexp2 (regex.go), whose agreement with
// HuggingFace the llama3-split-* goldens check.
func handPatterns(tb testing.TB) map[string][2]*splitter {
	tb.Helper()
	out := map[string][2]*splitter{}
	for src, p := range knownSplits {
		re, err := newRegexPattern(src)
		if err != nil {
			tb.Fatalf("%q: %v", src, err)
		}
		p := p
		out[src] = [2]*splitter{{hand: &p, how: isolated}, {re: re, how: isolated}}
	}
	return out
}

// piecesOf returns the pieces the splitter cuts s into, as the regex's
// matches and the text between them.
func piecesOf(sp *splitter, s string) []string {
	var out []string
	sp.split(s, func(start, end int) { out = append(out, s[start:end]) })
	return out
}

// TestHandMatchersAgree: on every corpus string, each hand matcher cuts as
// regexp2 running its regex does.
func TestHandMatchersAgree(t *testing.T) {
	t.Parallel()
	pats := handPatterns(t)
	for _, set := range []string{"targeted", "fuzz", "unicode", "real"} {
		for _, s := range loadCorpus(t, set) {
			if !utf8.ValidString(s) {
				continue
			}
			for src, p := range pats {
				if got, want := piecesOf(p[0], s), piecesOf(p[1], s); !slices.Equal(got, want) {
					t.Fatalf("%.40q on %q: hand %q, regexp2 %q", src, s, got, want)
				}
			}
		}
	}
}

// FuzzHandMatchers is TestHandMatchersAgree on fuzzed input.
func FuzzHandMatchers(f *testing.F) {
	for _, s := range []string{"", "Hello WORLD it's", "HELLOworld helloWorld", "ǅungla ʰa \u0301x", "''quoted''\n/", "x'S 123456 日本語のテキスト", "  \r\n\t x", "!abc\u200bdef", "ab\U0002EBF0c\u1C89", "3\u0660\U0001CCF0"} {
		f.Add(s)
	}
	pats := handPatterns(f)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for src, p := range pats {
			if got, want := piecesOf(p[0], s), piecesOf(p[1], s); !slices.Equal(got, want) {
				t.Fatalf("%.40q on %q: hand %q, regexp2 %q", src, s, got, want)
			}
		}
	})
}

// TestClassesAgree: the class table of the o200k and DeepSeek matchers
// agrees with the generated Unicode 16.0.0 tables where both say
// something (L, N, White_Space), for every code point.
func TestClassesAgree(t *testing.T) {
	t.Parallel()
	for r := rune(0); r <= unicode.MaxRune; r++ {
		c := classOf(r)
		if (c&cL != 0) != isL(r) || (c&cN != 0) != isN(r) || (c&cSpace != 0) != isS(r) {
			t.Fatalf("%U: classes %08b, L %v N %v space %v", r, c, isL(r), isN(r), isS(r))
		}
	}
}

// TestSPCutExact: cutting SentencePiece-style texts (spWord)
// gives the ids of BPE over the whole text, on every corpus string and
// around Gemma 3's bridging token '>▁</' and punctuation.
func TestSPCutExact(t *testing.T) {
	t.Parallel()
	extra := []string{"a> </b", "<p> </p>", "x>  </y", "> </", ">> <//", "a>\u2581</b", "int, x", "a,b", "f(x);", "\"q\"."}
	for _, m := range []string{"gemma3", "mistral7b"} {
		tok := loadModel(t, m)
		if !tok.spCut {
			t.Fatalf("%s: spCut off", m)
		}
		whole := *tok
		whole.spCut = false
		n := 0
		for _, set := range []string{"targeted", "fuzz", "unicode", "real"} {
			for _, s := range append(loadCorpus(t, set), extra...) {
				if got, want := tok.Encode(nil, s), whole.Encode(nil, s); !slices.Equal(got, want) {
					if n++; n <= 3 {
						t.Errorf("%s %q: cut %v, whole %v", m, s, got, want)
					}
				}
			}
		}
		if n > 0 {
			t.Errorf("%s: %d strings differ", m, n)
		}
	}
	tok := loadModel(t, "gemma3")
	p := int('>')*spJoinN + spMark
	start, n, _ := tok.bridges.get(uint64(p))
	if tok.spJoin[p] != spBridged || !slices.Contains(tok.bridgeList[start:start+n], bridge{">\u2581</", 1}) {
		t.Errorf("gemma3 '>' before \u2581: join %d, bridges %+v, want '>\u2581</' at 1 among them", tok.spJoin[p], tok.bridgeList[start:start+n])
	}
}

// TestSPCutBridges: spWord cuts between characters that no token holds
// side by side, and not where a token holding them (a bridge) lies across.
func TestSPCutBridges(t *testing.T) {
	t.Parallel()
	tok, err := Parse([]byte(`{"normalizer": null, "pre_tokenizer": null, "post_processor": null, "added_tokens": [],
		"model": {"type": "BPE", "unk_token": "?", "vocab": {"?": 0, "a": 1, "b": 2, "c": 3, "bc": 4, "abc": 5},
		"merges": ["b c", "a bc"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.spCut || tok.spJoin[int('a')*spJoinN+'b'] != spBridged || tok.spJoin[int('c')*spJoinN+'a'] != spNever {
		t.Fatalf("spCut %v, join a-b %d, c-a %d", tok.spCut, tok.spJoin[int('a')*spJoinN+'b'], tok.spJoin[int('c')*spJoinN+'a'])
	}
	for s, want := range map[string][]int32{
		"abc":    {5},
		"ab":     {1, 2},
		"abcabc": {5, 5},
		"abbc":   {1, 2, 4},
		"xabc":   {0, 5},
	} {
		if got := tok.Encode(nil, s); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestFindAddedRuns: findAdded's search by length (runs of more than
// maxAddedScan tokens sharing two bytes: Gemma 3's '<unused…>', '\n\n…',
// '▁▁…') finds what comparing every added token finds: the leftmost, then
// longest, then first.
func TestFindAddedRuns(t *testing.T) {
	t.Parallel()
	tok := loadModel(t, "gemma3")
	if len(tok.addedTrie.slots) == 0 {
		t.Fatal("gemma3 has no long runs of added tokens")
	}
	naive := func(s string) (int, *addedToken) {
		for i := range len(s) {
			for k := range tok.added { // longest first
				if strings.HasPrefix(s[i:], tok.added[k].content) {
					return i, &tok.added[k]
				}
			}
		}
		return len(s), nil
	}
	for _, s := range []string{"<unused12>", "a <ul><li>x", "<unused6241>y", "<unused1", "<unused99", "x\n\n\n\ny", "\t\t\t", "\u2581\u2581\u2581 ", "<u", "\n\n", "<start_of_turn>", "<unused0><unused1>"} {
		for from := range len(s) {
			i, a := tok.findAdded(s, from)
			j, b := naive(s[from:])
			if j += from; i != j || a != b {
				t.Errorf("findAdded(%q, %d) = %d %v, want %d %v", s, from, i, a, j, b)
			}
		}
	}
}

// FuzzSPCutExact is TestSPCutExact on fuzzed input: spWord's cuts give
// what BPE over the whole text gives, on Gemma 3 and Mistral-7B.
func FuzzSPCutExact(f *testing.F) {
	for _, s := range []string{"a> </b", "int, x", "f(x);\n\tg()", "<p>\u00e9t\u00e9</p>", "\u2581\u2581x", "\xff a"} {
		f.Add(s)
	}
	var cut, whole []*Tokenizer
	for _, m := range []string{"gemma3", "mistral7b"} {
		tok := loadModel(f, m)
		w := *tok
		w.spCut = false
		cut, whole = append(cut, tok), append(whole, &w)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for k := range cut {
			if got, want := cut[k].Encode(nil, s), whole[k].Encode(nil, s); !slices.Equal(got, want) {
				t.Fatalf("%q: cut %v, whole %v", s, got, want)
			}
		}
	})
}
