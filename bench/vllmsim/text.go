package vllmsim

import "math/rand/v2"

// words make the simulated output: deterministic for (seed, prompt), so a
// multi-turn history replays the same way.
var words = []string{
	"the", "ship", "sails", "north", "at", "dawn", "with", "a", "cargo", "of", "tea",
	"and", "copper", "while", "tides", "turn", "slowly", "near", "harbor", "lights",
	"crew", "charts", "course", "through", "calm", "water", "past", "old", "piers",
	"gulls", "circle", "over", "nets", "drying", "in", "wind", "captain", "logs",
	"every", "mile", "before", "storm", "clouds", "gather", "on", "horizon",
}

// output is a deterministic word generator for one request.
type output struct{ r *rand.Rand }

func newOutput(seed int64, promptKey uint64) output {
	return output{rand.New(rand.NewPCG(uint64(seed), promptKey))}
}

// next returns the i-th token's text (a leading space after the first).
func (o output) next(i int) string {
	w := words[o.r.IntN(len(words))]
	if i == 0 {
		return w
	}
	return " " + w
}
