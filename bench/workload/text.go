package workload

import (
	"math"
	"math/rand/v2"
)

// Generated text is a sequence of units, each one Llama-3 token: a word
// from words (" word" inside a paragraph, "word" at its start), or the end
// of a sentence: "." inside a paragraph, ".\n\n" at its end (Llama-3 has
// both as single tokens, and its pre-tokenizer never merges across a
// word, a "." run and the next word). So n units are n tokens with that
// tokenizer; TestTextTokenCount measures it. Other tokenizers split some
// words in two: Options.TokensPerWord scales the unit count for them.

// Sentence and paragraph shapes: enough punctuation to look like prose,
// too little to matter for byte-block keys.
const (
	minSentenceWords   = 6
	maxSentenceWords   = 16
	minParagraphLength = 3 // sentences
	maxParagraphLength = 6
)

// Text returns deterministic English-like text of n Llama-3 tokens for a
// seed (n < 1 gives one token). Any goroutine.
func Text(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, streamText))
	return string(appendText(nil, r, n, nil, nil))
}

// appendText appends n units (at least one) of text to dst, starting
// whose first words are those at the indices in lead (then random
// words), and returns
// it. A first word gets a leading space unless dst is empty or ends in a
// newline. With ends non-nil, it appends, for every unit, the length dst
// would have if the text stopped after that unit; a paragraph end counts
// as "." there, so that a text cut at any recorded end is a byte prefix of
// the whole without trailing whitespace.
func appendText(dst []byte, r *rand.Rand, n int, lead []int, ends *[]int32) []byte {
	n = max(n, 1)
	sentence := sentenceWords(r) // words left in the current sentence
	paragraph := paragraphSentences(r)
	nw := 0 // words emitted
	for i := range n {
		if sentence == 0 {
			paragraph--
			last := i == n-1
			if paragraph == 0 && !last {
				dst = append(dst, ".\n\n"...)
				paragraph = paragraphSentences(r)
			} else {
				dst = append(dst, '.')
			}
			sentence = sentenceWords(r)
			if ends != nil {
				end := len(dst)
				if dst[end-1] == '\n' {
					end -= 2
				}
				*ends = append(*ends, int32(end))
			}
			continue
		}
		w := 0
		if nw < len(lead) {
			w = lead[nw]
		} else {
			w = r.IntN(len(words))
		}
		if len(dst) > 0 && dst[len(dst)-1] != '\n' {
			dst = append(dst, ' ')
		}
		dst = append(dst, words[w]...)
		nw++
		sentence--
		if ends != nil {
			*ends = append(*ends, int32(len(dst)))
		}
	}
	return dst
}

func sentenceWords(r *rand.Rand) int {
	return minSentenceWords + r.IntN(maxSentenceWords-minSentenceWords+1)
}

func paragraphSentences(r *rand.Rand) int {
	return minParagraphLength + r.IntN(maxParagraphLength-minParagraphLength+1)
}

// pooled is a shared text (a prefix, a document, a system prompt),
// generated once per workload and never modified: every user sends the
// same bytes.
type pooled struct {
	text string
	ends []int32 // ends[i]: length of the text cut after unit i (appendText)
}

// cut returns the text's first units units (all of it if it is shorter).
func (p *pooled) cut(units int) string {
	if units >= len(p.ends) {
		return p.text
	}
	return p.text[:p.ends[max(units, 1)-1]]
}

// newPooled generates a pooled text of n units whose first word is
// opener, so that texts with different openers differ in their first
// token (and so in their first block of 16).
func newPooled(seed int64, stream uint64, n, opener int) *pooled {
	r := rand.New(rand.NewPCG(uint64(seed), stream))
	ends := make([]int32, 0, n)
	b := appendText(make([]byte, 0, 6*n), r, n, []int{opener}, &ends)
	return &pooled{text: string(b), ends: ends}
}

// openers hands out distinct first words for a workload's pooled texts,
// in a seeded order. Owned by New.
type openers struct {
	perm []int
	next int
}

func newOpeners(seed int64) *openers {
	r := rand.New(rand.NewPCG(uint64(seed), streamOpeners))
	return &openers{perm: r.Perm(len(words))}
}

// take returns a word index no earlier take returned.
func (o *openers) take() int {
	if o.next == len(o.perm) {
		panic("BUG: more pooled texts than words")
	}
	o.next++
	return o.perm[o.next-1]
}

// sizer turns token counts into unit counts.
type sizer struct{ tokensPerWord float64 }

func (s sizer) units(tokens int) int {
	return max(1, int(math.Round(float64(tokens)/s.tokensPerWord)))
}

// Random streams: every random sequence of a workload is a PCG seeded by
// (Options.Seed, stream), so that adding a user or a pool entry shifts no
// other sequence.
const (
	streamText    uint64 = 0x7465787400000000 // Text
	streamOpeners uint64 = 0x6f70656e00000000
	streamPool    uint64 = 0x706f6f6c00000000 // + pool kind << 24 + index
	streamUser    uint64 = 0x7573657200000000 // mixed with the user id
)

// poolStream is the stream of entry i of pool kind k.
func poolStream(k, i int) uint64 { return streamPool + uint64(k)<<24 + uint64(i) }

// userRand is user id's random source in a workload of kind k.
func userRand(seed int64, k, id int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), mix(streamUser+uint64(k)<<40+uint64(uint32(id)))))
}

// mix is splitmix64's finalizer: nearby inputs give unrelated outputs.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
