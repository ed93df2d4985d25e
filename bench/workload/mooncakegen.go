package workload

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// ConversationTrace configures MooncakeConversations: a trace of
// multi-turn conversations in the Mooncake format, made by the project
// (bench/traces/mooncake-small.jsonl is one), so that `saltus bench` has a
// real-shaped trace without the public one.
type ConversationTrace struct {
	// Seed picks every random choice: equal seeds, equal traces.
	Seed int64
	// Rows is the trace's length: the first Rows turns by arrival.
	Rows int
	// Rate is new conversations a second of trace time.
	Rate float64
}

// DefaultConversationTrace is the shipped trace's configuration.
func DefaultConversationTrace() ConversationTrace {
	return ConversationTrace{Seed: 1, Rows: 300, Rate: 0.02}
}

// The shape of the conversations (trace time, tokens).
const (
	convBlock      = defaultTraceBlock // tokens a hash id stands for
	convSystems    = 4                 // shared system prompts, 1 to 4 blocks each
	convMinTurns   = 2
	convMaxTurns   = 8
	convMinUser    = 50 // a user message's tokens
	convMaxUser    = 1500
	convMinOutput  = 30 // an answer's tokens
	convMaxOutput  = 500
	convMinThinkMS = 10_000 // between a turn and the next
	convMaxThinkMS = 60_000
	// convMaxInput ends a conversation before a prompt passes it: with
	// its answer it stays within the simulator's --max-model-len of
	// 16,384 (profile a100-13b).
	convMaxInput = 12_000
	maxConvRows  = 1 << 20
)

// MooncakeConversations writes c.Rows rows of a Mooncake trace to w:
// conversations start at Poisson times (c.Rate a second); each opens with
// one of convSystems shared system prompts (1 to 4 whole blocks; the
// first is the most used: weights 4:3:2:1) and has 2 to 8 turns, each a
// user message of 50 to 1,500 tokens after the conversation so far (its
// earlier turns and their answers), answered in 30 to 500 tokens, the
// next turn 10 to 60 s later. A conversation's text is one sequence of
// blocks: a turn's hash ids are its system prompt's ids, then the
// conversation's own, as many as its input needs, so each turn shares
// its whole previous prompt (the last block included: a block's content
// is fixed by its id, a shorter turn holds its first tokens). Rows are in
// timestamp order (milliseconds from the first conversation's start),
// hash ids numbered in order of first use.
func MooncakeConversations(w io.Writer, c ConversationTrace) error {
	if c.Rows < 1 || c.Rows > maxConvRows {
		return fmt.Errorf("rows: want 1 to %d, got %d", maxConvRows, c.Rows)
	}
	if !(c.Rate > 0 && c.Rate <= maxRate) {
		return fmt.Errorf("rate: want conversations a second in (0, %.0f], got %v", maxRate, c.Rate)
	}
	r := rand.New(rand.NewPCG(uint64(c.Seed), 0x636f6e76))
	type system struct{ ids []int64 }
	var systems [convSystems]system
	next := int64(0) // the next unused hash id
	for i := range systems {
		for range i%4 + 1 {
			systems[i].ids = append(systems[i].ids, next)
			next++
		}
	}
	var rows []mooncakeRow
	start := 0.0 // ms
	// Conversations are made in start order until the next one starts
	// after the c.Rows-th earliest turn made so far: none of its turns
	// can be among the first c.Rows.
	for {
		start += r.ExpFloat64() / c.Rate * 1000
		if len(rows) >= c.Rows {
			slices.SortStableFunc(rows, func(a, b mooncakeRow) int { return cmp.Compare(a.ms, b.ms) })
			if rows[c.Rows-1].ms < start {
				rows = rows[:c.Rows]
				break
			}
		}
		sys := systems[pickWeighted(r)].ids
		ids := slices.Clone(sys)
		have := len(sys) * convBlock // tokens of the conversation so far
		at := start
		for turn := range convMinTurns + r.IntN(convMaxTurns-convMinTurns+1) {
			in := have + convMinUser + r.IntN(convMaxUser-convMinUser+1)
			if in > convMaxInput {
				break
			}
			for len(ids)*convBlock < in {
				ids = append(ids, next)
				next++
			}
			out := convMinOutput + r.IntN(convMaxOutput-convMinOutput+1)
			if turn > 0 {
				at += float64(convMinThinkMS + r.IntN(convMaxThinkMS-convMinThinkMS+1))
			}
			rows = append(rows, mooncakeRow{ms: math.Round(at), input: in, output: out, ids: slices.Clone(ids[:(in+convBlock-1)/convBlock])})
			have = in + out
		}
	}
	// Renumber the ids in order of first use, as the public traces
	// number theirs.
	renum := map[int64]int64{}
	for _, row := range rows {
		for i, id := range row.ids {
			n, ok := renum[id]
			if !ok {
				n = int64(len(renum))
				renum[id] = n
			}
			row.ids[i] = n
		}
	}
	t0 := rows[0].ms
	bw := bufio.NewWriter(w)
	var line []byte
	for _, row := range rows {
		line = appendMooncakeRow(line[:0], row.ms-t0, row)
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// pickWeighted draws a system prompt: 0 to 3 with weights 4:3:2:1.
func pickWeighted(r *rand.Rand) int {
	x := r.IntN(10)
	switch {
	case x < 4:
		return 0
	case x < 7:
		return 1
	case x < 9:
		return 2
	}
	return 3
}

// appendMooncakeRow appends row as a JSONL line (timestamp ms, an
// integer) in the public traces' field order.
func appendMooncakeRow(dst []byte, ms float64, row mooncakeRow) []byte {
	dst = append(dst, `{"timestamp": `...)
	dst = strconv.AppendInt(dst, int64(ms), 10)
	dst = append(dst, `, "input_length": `...)
	dst = strconv.AppendInt(dst, int64(row.input), 10)
	dst = append(dst, `, "output_length": `...)
	dst = strconv.AppendInt(dst, int64(row.output), 10)
	dst = append(dst, `, "hash_ids": [`...)
	for i, id := range row.ids {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = strconv.AppendInt(dst, id, 10)
	}
	return append(dst, "]}\n"...)
}
