// Package tokenizer encodes text to token ids exactly as HuggingFace
// tokenizers does, for the tokenizer.json files it accepts, in pure Go.
//
// # Place in the request path
//
// DESIGN.md § Stage 4: the shard's tokenizer worker turns each rendered
// text segment into ids, which stage 5 cuts into block keys. Exactness
// matters: a router whose ids differ from the engine's computes keys the
// engine's cache never had.
//
// Supported: BPE, byte-level (a ByteLevel pre-tokenizer) or
// SentencePiece-style over characters with byte_fallback, unk_token and
// fuse_unk (Mistral, Llama-2, Gemma 3), with ignore_merges; pre-tokenizers
// Split in every form HuggingFace has (a String or a Regex pattern; the
// behaviors Removed, Isolated, MergedWithPrevious, MergedWithNext and
// Contiguous; invert; split.go), Digits, Metaspace, ByteLevel
// (add_prefix_space, use_regex with GPT-2's pattern) and Sequences of them,
// ByteLevel last (pipeline.go); normalizers NFC, Prepend, Replace (string
// patterns) and Sequence; post-processors TemplateProcessing and ByteLevel;
// added tokens (leftmost-longest, lstrip, rstrip, single_word). The Split
// regexes of Llama-3, Qwen, GPT-2, gpt-oss (o200k) and DeepSeek-V3 are
// matched by hand (pretok.go, classes.go); any other runs on regexp2
// (regex.go), which refuses at load the constructs whose meaning differs
// from Oniguruma's. Anything else is refused at load with an error naming
// the component. Character classes and NFC use the reference's Unicode
// versions, not Go's 15.0.0 (unicode_tables.go, nfc.go). Checked against
// HuggingFace on Llama-3, Qwen3, Mistral-7B, Gemma 3, DeepSeek-V3 and
// gpt-oss (TestGolden).
//
// # Concurrency
//
// A *Tokenizer is immutable after Load and safe for concurrent use.
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenizer is a loaded tokenizer.json.
type Tokenizer struct {
	normalizers []func(string) string
	// byteLevel: GPT-2 byte-level BPE (a ByteLevel pre-tokenizer ends the
	// pipeline). Else SentencePiece-style BPE over characters.
	byteLevel    bool
	byteFallback bool
	byteTok      [256]int32 // <0xXX> tokens, with byteFallback
	unk          int32      // -1: none
	fuseUnk      bool
	// stages are the pre-tokenizers, in order (pipeline.go); a ByteLevel
	// without add_prefix_space or use_regex has none. splitOnly: the
	// stages are one Split on a byte-level model (Llama-3, Qwen), which
	// encodeText runs without the general recursion.
	stages    []stage
	splitOnly bool
	vocab     map[string]int32 // raw bytes of a token -> id
	// short holds the tokens of at most 7 bytes again, keyed by packKey:
	// a 64-bit key skips string hashing and comparison, which was the
	// largest cost of Encode on prose (pprof: mapaccess2_faststr).
	short table // packKey -> id
	// long holds the longer tokens again, keyed by their maphash: a slot
	// holds the id and the offset in longBytes of the token's length byte
	// and bytes, which a hit compares. The vocab map's string hashing and
	// probing cost more than all short lookups together (pprof, Llama-3
	// prose: 13 % of pieces are longer than 7 bytes). longMap: a token of
	// more than 255 bytes or a hash collision made the table unusable, so
	// the vocab map serves instead.
	long      table
	longBytes []byte
	longSeed  maphash.Seed
	longMap   bool
	merges    table // (left id, right id) -> rank and result id
	// bytePair: the merge of each pair of bytes (rank -1: none), for
	// byte-level models: the first pass over a piece outside the vocab
	// looks up only byte pairs, and 512 KB stay in cache where the merge
	// table (16 MB for Llama-3) does not.
	bytePair []merge
	byteID   [256]int32 // id of each single byte
	ignore   bool       // ignore_merges: a piece in the vocab is one token
	// spChar and spPair: for SentencePiece-style models, the id of each
	// ASCII byte and ▁ (-1: none) and the merge of each pair of them
	// (buildSPPairs).
	spChar [spN]int32
	spPair []merge
	// selfMerging: bit id is set when BPE of token id's text gives id
	// (markSelfMerging).
	selfMerging []uint64
	// spCut: SentencePiece-style BPE may cut a text between characters
	// that no vocab token holds side by side (spWord): spJoin says, for
	// each pair of spJoinClass, whether some token does (spJoined), only
	// the tokens bridges lists (spBridged) or none (spNever).
	spCut      bool
	spJoin     []uint8
	bridges    table // spJoin index -> start in bridgeList, count
	bridgeList []bridge
	// bos and eos are the post-processor's special tokens around a single
	// sequence (TemplateProcessing), added by EncodeSpecial.
	bos, eos []int32
	added    []addedToken // longest first
	// startsAdded marks bytes that start some added token; oneStart is
	// that byte if only one does (all three models here: '<'), else -1,
	// so that findAdded skips to it with strings.IndexByte. prefixes maps
	// the first two bytes (a one-byte token: its byte and 0xff, which no
	// UTF-8 text contains) to a run of addedIdx, indices into added
	// longest first; a map lookup per '<' was 7 % of Encode on HTML.
	startsAdded [256]bool
	oneStart    int
	prefixes    table // prefix2 -> start in addedIdx, length of the run
	addedIdx    []int32
	// A run longer than maxAddedScan is searched in addedTrie instead,
	// a trie of the tokens of such runs: (node<<8 | byte) -> child node,
	// index into added of the token ending there (the first of equal
	// ones) or -1; node 0 is the root. Gemma 3 has runs of 6,245 added
	// tokens '<unused0>'... sharing '<u', 35 sharing '</' and 30 sharing
	// '\n\n': comparing them one by one at each '</' and '<ul>' of an
	// HTML text was 18 % of Encode (pprof); the walk stops at the first
	// byte no token continues with.
	addedTrie table
}

// buildAddedTrie fills addedTrie with the added tokens idx, in the order
// of added (longest first), so the first of equal tokens ends its node.
func (t *Tokenizer) buildAddedTrie(idx []int32) {
	slices.Sort(idx)
	// Built in a map first, to size the table by edges, not bytes:
	// Gemma 3's '<unused…>' share most of theirs.
	edges := map[uint64][2]int32{} // key -> child, end
	for _, a := range idx {
		c := t.added[a].content
		node := int32(0)
		for j := range len(c) {
			key := uint64(node)<<8 | uint64(c[j])
			e, ok := edges[key]
			if !ok {
				e = [2]int32{int32(len(edges)) + 1, -1}
			}
			if j == len(c)-1 && e[1] < 0 {
				e[1] = a
			}
			edges[key] = e
			node = e[0]
		}
	}
	t.addedTrie = newTable(len(edges))
	for key, e := range edges {
		t.addedTrie.put(key, e[0], e[1])
	}
}

// walkAdded returns the index into added of the longest token of
// addedTrie that s starts with, or -1.
func (t *Tokenizer) walkAdded(s string) int32 {
	node, best := int32(0), int32(-1)
	for j := range len(s) {
		child, end, ok := t.addedTrie.get(uint64(node)<<8 | uint64(s[j]))
		if !ok {
			break
		}
		if end >= 0 {
			best = end
		}
		node = child
	}
	return best
}

// maxAddedScan: the longest run of added tokens sharing a prefix2 that
// findAdded compares one by one.
const maxAddedScan = 8

func prefix2(s string) uint16 {
	if len(s) == 1 {
		return uint16(s[0])<<8 | 0xff
	}
	return uint16(s[0])<<8 | uint16(s[1])
}

type merge struct{ rank, id int32 }

type addedToken struct {
	content        string
	id             int32
	lstrip, rstrip bool // the match absorbs whitespace on that side
	// singleWord: a match counts only between non-word characters (or
	// the ends of the input), see singleWordOK.
	singleWord bool
}

// Load reads a tokenizer.json (or a directory holding one, or a .gz of it).
func Load(path string) (*Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read tokenizer: %w", err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("cannot read tokenizer %s: %w", path, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("cannot read tokenizer %s: %w", path, err)
		}
	}
	t, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

type fileJSON struct {
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	PostProc     json.RawMessage `json:"post_processor"`
	Model        struct {
		Type         string            `json:"type"`
		Vocab        map[string]int32  `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		ByteFallback bool              `json:"byte_fallback"`
		FuseUnk      bool              `json:"fuse_unk"`
		IgnoreMerges bool              `json:"ignore_merges"`
		Dropout      *float64          `json:"dropout"`
		UnkToken     *string           `json:"unk_token"`
		Prefix       *string           `json:"continuing_subword_prefix"`
		Suffix       *string           `json:"end_of_word_suffix"`
	} `json:"model"`
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
}

type component struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Pattern     patternJSON       `json:"pattern"`
	Prepend     string            `json:"prepend"`
	Processors  []json.RawMessage `json:"processors"`
	Single      []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
	Content string `json:"content"`
}

// Parse builds a Tokenizer from tokenizer.json bytes.
func Parse(raw []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("cannot parse tokenizer.json: %w", err)
	}
	t := &Tokenizer{}
	if err := t.loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.loadPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	t.splitOnly = t.byteLevel && len(t.stages) == 1 && t.stages[0].kind == stageSplit
	if err := t.loadPostProcessor(f.PostProc); err != nil {
		return nil, err
	}
	m := f.Model
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("unsupported model type %q", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, errors.New("unsupported model option dropout")
	case m.Prefix != nil && *m.Prefix != "", m.Suffix != nil && *m.Suffix != "":
		return nil, errors.New("unsupported model option continuing_subword_prefix/end_of_word_suffix")
	case t.byteLevel && m.ByteFallback:
		return nil, errors.New("unsupported: byte_fallback with a byte-level pre-tokenizer")
	}
	t.ignore = m.IgnoreMerges
	t.byteFallback, t.fuseUnk, t.unk = m.ByteFallback, m.FuseUnk, -1
	decode := func(s string) (string, bool) { return s, true }
	if t.byteLevel {
		decode = byteLevelDecode
	}
	t.vocab = make(map[string]int32, len(m.Vocab))
	for tok, id := range m.Vocab {
		b, ok := decode(tok)
		if !ok {
			// Outside GPT-2's byte alphabet (DeepSeek-V3's special
			// tokens): no byte string maps to it, so the model never
			// produces it; only an added token can.
			continue
		}
		t.vocab[b] = id
	}
	nShort := 0
	for b := range t.vocab {
		if len(b) <= 7 {
			nShort++
		}
	}
	t.short = newTable(nShort)
	t.long = newTable(len(t.vocab) - nShort)
	t.longSeed = maphash.MakeSeed()
	for b, id := range t.vocab {
		switch {
		case len(b) <= 7:
			t.short.put(packKey(b), id, 0)
		case len(b) > 255 || !t.long.put(t.longKey(b), id, int32(len(t.longBytes))):
			t.longMap = true
		default:
			t.longBytes = append(t.longBytes, byte(len(b)))
			t.longBytes = append(t.longBytes, b...)
		}
	}
	if m.UnkToken != nil {
		id, ok := t.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocab", *m.UnkToken)
		}
		t.unk = id
	}
	for b := 0; b < 256; b++ {
		if t.byteLevel {
			id, ok := t.vocab[string([]byte{byte(b)})]
			if !ok {
				return nil, fmt.Errorf("byte-level vocab lacks byte %#x", b)
			}
			t.byteID[b] = id
		}
		if t.byteFallback {
			name := fmt.Sprintf("<0x%02X>", b)
			id, ok := t.vocab[name]
			if !ok {
				return nil, fmt.Errorf("byte_fallback vocab lacks %s", name)
			}
			t.byteTok[b] = id
		}
	}
	t.merges = newTable(len(m.Merges))
	for rank, rawm := range m.Merges {
		a, b, err := parseMerge(rawm)
		if err != nil {
			return nil, fmt.Errorf("merge %d: %w", rank, err)
		}
		ab, aok := decode(a)
		bb, bok := decode(b)
		ia, ok1 := t.vocab[ab]
		ib, ok2 := t.vocab[bb]
		res, ok3 := t.vocab[ab+bb]
		if !aok || !bok || !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("merge %d (%q %q) names a token outside the vocab", rank, a, b)
		}
		if ia < 0 || ib < 0 {
			return nil, fmt.Errorf("merge %d names a negative id", rank)
		}
		// The first of duplicate merges wins, as in HuggingFace.
		t.merges.put(uint64(ia)<<32|uint64(ib), int32(rank), res)
	}
	if t.byteLevel {
		t.bytePair = make([]merge, 1<<16)
		for p := range t.bytePair {
			m, ok := t.lookup(t.byteID[p>>8], t.byteID[p&0xff])
			if !ok {
				m.rank = -1
			}
			t.bytePair[p] = m
		}
	}
	if !t.byteLevel {
		t.buildSPPairs()
		if t.spCutSafe() {
			t.buildSPJoin()
		}
	}
	if !t.ignore {
		t.markSelfMerging()
	}
	for _, a := range f.AddedTokens {
		if a.Normalized && len(t.normalizers) > 0 {
			// HuggingFace matches such a token in the normalized text;
			// we match in the raw text, which is the same only without
			// normalizers. Refuse rather than approximate.
			return nil, fmt.Errorf("added token %q: normalized=true under a normalizer is not yet implemented", a.Content)
		}
		if a.Content == "" {
			continue
		}
		t.added = append(t.added, addedToken{content: a.Content, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord})
	}
	slices.SortStableFunc(t.added, func(x, y addedToken) int { return len(y.content) - len(x.content) })
	starts := 0
	for _, a := range t.added {
		if !t.startsAdded[a.content[0]] {
			t.startsAdded[a.content[0]] = true
			t.oneStart = int(a.content[0])
			starts++
		}
	}
	if starts != 1 {
		t.oneStart = -1
	}
	t.addedIdx = make([]int32, len(t.added))
	for k := range t.addedIdx {
		t.addedIdx[k] = int32(k)
	}
	// Stable: within a prefix, longest first stays.
	slices.SortStableFunc(t.addedIdx, func(x, y int32) int {
		return int(prefix2(t.added[x].content)) - int(prefix2(t.added[y].content))
	})
	t.prefixes = newTable(len(t.added))
	var trie []int32 // indices into added of the tokens in long runs
	for k := 0; k < len(t.addedIdx); {
		p := prefix2(t.added[t.addedIdx[k]].content)
		e := k + 1
		for e < len(t.addedIdx) && prefix2(t.added[t.addedIdx[e]].content) == p {
			e++
		}
		t.prefixes.put(uint64(p), int32(k), int32(e-k))
		if e-k > maxAddedScan {
			trie = append(trie, t.addedIdx[k:e]...)
		}
		k = e
	}
	t.buildAddedTrie(trie)
	return t, nil
}

func parseMerge(raw json.RawMessage) (string, string, error) {
	// Fast path for the common unescaped forms: "a b" and ["a","b"]
	// (json.Unmarshal per merge was 16 % of loading Llama-3's 280K merges).
	if !bytes.ContainsRune(raw, '\\') {
		if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
			if a, b, ok := strings.Cut(string(raw[1:n-1]), " "); ok {
				return a, b, nil
			}
		}
		if n := len(raw); n >= 2 && raw[0] == '[' && raw[n-1] == ']' {
			parts := bytes.Split(raw[1:n-1], []byte(","))
			if len(parts) == 2 {
				a, b := bytes.TrimSpace(parts[0]), bytes.TrimSpace(parts[1])
				if len(a) >= 2 && len(b) >= 2 && a[0] == '"' && a[len(a)-1] == '"' && b[0] == '"' && b[len(b)-1] == '"' {
					return string(a[1 : len(a)-1]), string(b[1 : len(b)-1]), nil
				}
			}
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return "", "", fmt.Errorf("merge %q has no space", s)
		}
		return a, b, nil
	}
	var p []string
	if err := json.Unmarshal(raw, &p); err != nil || len(p) != 2 {
		return "", "", fmt.Errorf("merge %s is neither \"a b\" nor [a, b]", raw)
	}
	return p[0], p[1], nil
}

// patternJSON is the pattern of Split and Replace: a regex or a string.
type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// decodeComponent parses a normalizer, pre-tokenizer or post-processor
// (what names it in the error) into c; false: it is absent (null).
func decodeComponent(raw json.RawMessage, what string, c any) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return false, fmt.Errorf("cannot parse %s: %w", what, err)
	}
	return true, nil
}

func (t *Tokenizer) loadNormalizer(raw json.RawMessage) error {
	var c component
	if ok, err := decodeComponent(raw, "normalizer", &c); !ok {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.loadNormalizer(n); err != nil {
				return err
			}
		}
	case "NFC":
		t.normalizers = append(t.normalizers, nfc)
	case "Prepend":
		p := c.Prepend
		t.normalizers = append(t.normalizers, func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		})
	case "Replace":
		if c.Pattern.String == nil {
			return fmt.Errorf("unsupported normalizer Replace with a regex pattern: %s", trim(raw))
		}
		from, to := *c.Pattern.String, c.Content
		t.normalizers = append(t.normalizers, func(s string) string { return strings.ReplaceAll(s, from, to) })
	default:
		return fmt.Errorf("unsupported normalizer %q (not yet implemented)", c.Type)
	}
	return nil
}

// loadPostProcessor accepts TemplateProcessing (its single-sequence
// template gives the tokens EncodeSpecial adds), ByteLevel (it only moves
// offsets, which saltus does not use) and Sequences of them.
func (t *Tokenizer) loadPostProcessor(raw json.RawMessage) error {
	var c component
	if ok, err := decodeComponent(raw, "post_processor", &c); !ok {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.loadPostProcessor(p); err != nil {
				return err
			}
		}
	case "ByteLevel":
	case "TemplateProcessing":
		seen := false
		for _, piece := range c.Single {
			switch {
			case piece.Sequence != nil:
				seen = true
			case piece.SpecialToken != nil:
				st, ok := c.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor names special token %q it does not define", piece.SpecialToken.ID)
				}
				if seen {
					t.eos = append(t.eos, st.IDs...)
				} else {
					t.bos = append(t.bos, st.IDs...)
				}
			default:
				return fmt.Errorf("unsupported TemplateProcessing piece in %s", trim(raw))
			}
		}
	default:
		return fmt.Errorf("unsupported post_processor %q", c.Type)
	}
	return nil
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// packKey packs a string of at most 7 bytes and its length into a uint64.
func packKey(s string) uint64 {
	k := uint64(len(s)) << 56
	for i := 0; i < len(s); i++ {
		k |= uint64(s[i]) << (8 * i)
	}
	return k
}

// token returns the id of the token spelled by the bytes b.
func (t *Tokenizer) token(b string) (int32, bool) {
	if len(b) <= 7 {
		id, _, ok := t.short.get(packKey(b))
		return id, ok
	}
	if t.longMap {
		id, ok := t.vocab[b]
		return id, ok
	}
	id, off, ok := t.long.get(t.longKey(b))
	if !ok || int(t.longBytes[off]) != len(b) || string(t.longBytes[int(off)+1:int(off)+1+len(b)]) != b {
		return 0, false
	}
	return id, true
}

// longKey is b's key in long: its hash, below the table's excluded key.
func (t *Tokenizer) longKey(b string) uint64 {
	return maphash.String(t.longSeed, b) >> 1
}

// byteLevelDecode maps GPT-2's byte-level alphabet back to raw bytes.
func byteLevelDecode(s string) (string, bool) {
	var buf [64]byte
	b := buf[:0]
	for _, r := range s {
		if r < 0 || int(r) >= len(unbyte) || unbyte[r] < 0 {
			return "", false
		}
		b = append(b, byte(unbyte[r]))
	}
	return string(b), true
}

// unbyte inverts GPT-2's bytes_to_unicode: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 onwards, in byte order. -1: not
// in the alphabet.
var unbyte = func() (m [256 + 68]int16) {
	for i := range m {
		m[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			m[b] = int16(b)
		} else {
			m[256+n] = int16(b)
			n++
		}
	}
	return m
}()

// Encode appends the ids of text to dst, without adding special tokens
// (no BOS): added tokens in the text are recognized. text should be valid
// UTF-8, as HuggingFace requires; invalid bytes still encode (byte-level
// models as their bytes, byte_fallback models as <0xXX> tokens) and never
// panic. Without rewriting normalizers (Llama-3; Qwen's NFC on text that
// is already NFC) it allocates only when dst lacks room or a piece exceeds
// 48 bytes (TestEncodeZeroAllocs checks Llama-3 prose); Prepend and
// Replace (Mistral) allocate a normalized copy, and so may Metaspace and
// ByteLevel's add_prefix_space, which rewrite pieces. Any goroutine.
func (t *Tokenizer) Encode(dst []int32, text string) []int32 {
	return t.encode(dst, text, true)
}

// encode is Encode for text at the start of the input (atStart) or after
// an added token (see EncodeSegment).
func (t *Tokenizer) encode(dst []int32, text string, atStart bool) []int32 {
	// text[start:] is not encoded yet; added tokens are searched from pos
	// on, which passes start only over a single_word match that HuggingFace
	// discards: like its Aho-Corasick iterator, the search resumes after
	// the discarded match, whose text stays ordinary text.
	start, pos := 0, 0
	for {
		i, tok := t.findAdded(text, pos)
		if tok == nil {
			break
		}
		end := i + len(tok.content)
		if tok.singleWord && !singleWordOK(text, i, end) {
			pos = end
			continue
		}
		before := text[start:i]
		if tok.lstrip {
			before = strings.TrimRightFunc(before, unicode.IsSpace)
		}
		dst = t.encodeText(dst, before, atStart && start == 0)
		dst = append(dst, tok.id)
		if tok.rstrip {
			end = len(text) - len(strings.TrimLeftFunc(text[end:], unicode.IsSpace))
		}
		start, pos = end, end
	}
	return t.encodeText(dst, text[start:], atStart && start == 0)
}

// singleWordOK reports whether a single_word match s[i:end] stands alone
// as HuggingFace checks it: no word character just before i, nor at end.
func singleWordOK(s string, i, end int) bool {
	if i > 0 {
		if r, _ := utf8.DecodeLastRuneInString(s[:i]); isWordChar(r) {
			return false
		}
	}
	if end < len(s) {
		if r, _ := utf8.DecodeRuneInString(s[end:]); isWordChar(r) {
			return false
		}
	}
	return true
}

// isWordChar is Rust regex's Unicode \w, which HuggingFace's single_word
// check uses: Alphabetic (letters, Nl, Other_Alphabetic), marks, decimal
// digits, connector punctuation and the joiners U+200C and U+200D, in
// Unicode 16.0.0 (unicode_tables.go).
func isWordChar(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || asciiClass[r]&(classL|classN) != 0
	}
	return unicode.Is(word16, r)
}

// EncodeSpecial is Encode plus the post-processor's special tokens (for
// Llama-3 and Mistral, BOS), as an engine tokenizes a raw prompt. Any
// goroutine.
func (t *Tokenizer) EncodeSpecial(dst []int32, text string) []int32 {
	dst = append(dst, t.bos...)
	dst = t.Encode(dst, text)
	return append(dst, t.eos...)
}

// findAdded returns the leftmost, then longest, added token in s[from:]
// and its offset in s, or len(s) and nil. Only bytes that start some added
// token are looked at (for Llama-3, '<'), then the tokens sharing the next
// byte too, longest first, then one-byte tokens.
func (t *Tokenizer) findAdded(s string, from int) (int, *addedToken) {
	if len(t.added) == 0 {
		return len(s), nil
	}
	for i := from; i < len(s); i++ {
		if t.oneStart >= 0 {
			k := strings.IndexByte(s[i:], byte(t.oneStart))
			if k < 0 {
				break
			}
			i += k
		} else if !t.startsAdded[s[i]] {
			continue
		}
		if i+1 < len(s) {
			p := uint64(s[i])<<8 | uint64(s[i+1])
			if start, n, ok := t.prefixes.get(p); ok && n <= maxAddedScan {
				for _, k := range t.addedIdx[start : start+n] {
					if strings.HasPrefix(s[i:], t.added[k].content) {
						return i, &t.added[k]
					}
				}
			} else if ok {
				if k := t.walkAdded(s[i:]); k >= 0 {
					return i, &t.added[k]
				}
			}
		}
		if start, _, ok := t.prefixes.get(uint64(s[i])<<8 | 0xff); ok {
			return i, &t.added[t.addedIdx[start]]
		}
	}
	return len(s), nil
}

func (t *Tokenizer) encodeText(dst []int32, s string, first bool) []int32 {
	if s == "" {
		return dst
	}
	for _, n := range t.normalizers {
		s = n(s)
	}
	if !t.splitOnly {
		return t.pretokenize(dst, s, 0, first)
	}
	split := t.stages[0].split
	llama := split.fn == nil // Llama-3 or Qwen, not o200k (pretok.go)
	for len(s) > 0 {
		var n int
		if c := s[0]; llama && c < utf8.RuneSelf && asciiClass[c]&classL != 0 {
			n = 1 + letters(s, 1) // an ASCII word, match's first fast path
		} else {
			n = split.next(s)
		}
		if n <= 7 {
			// A short piece that is a token, the commonest case, without
			// bpe's call and checks.
			if id, _, ok := t.short.get(packKey(s[:n])); ok && (t.ignore || n == 1 || t.whole(id)) {
				dst = append(dst, id)
				s = s[n:]
				continue
			}
		}
		dst = t.bpe(dst, s[:n])
		s = s[n:]
	}
	return dst
}

// WholeTextBPE reports whether the model runs BPE over each whole text
// between added tokens, without a pre-tokenizer that splits it (as
// Mistral-7B's tokenizer.json, or a ByteLevel without its regex): every
// byte then costs what a byte of one long piece costs. The token budget
// of package tokenpool reads it. Any goroutine.
func (t *Tokenizer) WholeTextBPE() bool {
	for _, st := range t.stages {
		if st.kind != stageByteLevel || st.useRegex {
			return false
		}
	}
	return true
}
