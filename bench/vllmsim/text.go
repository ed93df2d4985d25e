package vllmsim

import "math/rand/v2"

// words make the simulated output, one word a token: plain ASCII, so a
// piece needs no JSON escaping. The output is a function of (Config.Seed,
// the prompt), so a multi-turn conversation replays the same way.
var words = [...]string{
	"the", "ship", "sails", "north", "at", "dawn", "with", "a", "cargo", "of", "tea",
	"and", "copper", "while", "tides", "turn", "slowly", "near", "harbor", "lights",
	"crew", "charts", "course", "through", "calm", "water", "past", "old", "piers",
	"gulls", "circle", "over", "nets", "drying", "in", "wind", "captain", "logs",
	"every", "mile", "before", "storm", "clouds", "gather", "on", "horizon",
}

// output draws one request's words, in order.
type output struct{ r *rand.Rand }

func newOutput(seed int64, promptHash uint64) output {
	return output{rand.New(rand.NewPCG(uint64(seed), promptHash))}
}

// appendNext appends the next token's text: a word, after a space unless
// it is the first.
func (o output) appendNext(dst []byte, first bool) []byte {
	if !first {
		dst = append(dst, ' ')
	}
	return append(dst, words[o.r.IntN(len(words))]...)
}
