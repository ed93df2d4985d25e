package workload

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// Bounds on a Mooncake-format trace (outside input, read whole at New).
// The longest row of the public FAST'25 traces has 191,378 input tokens
// (374 hash ids) and 2,000 output tokens.
const (
	maxMooncakeInput  = 1 << 20 // input tokens a row; its ids are built per request (4 MiB)
	maxMooncakeOutput = 1 << 20 // output tokens a row
	maxMooncakeIDs    = 1 << 16 // hash ids a row (1M tokens of 16-token blocks)
	// maxHashID keeps hash ids exact in JSON (float64) and in the
	// prompt's first tokens (blockToken).
	maxHashID = 1<<53 - 1
	// maxMooncakeMS: timestamps in ms whose offset fits a time.Duration
	// (maxTimestamp seconds).
	maxMooncakeMS = maxTimestamp * 1000

	// The tokens a hash id stands for: Mooncake's 512 by default;
	// Options.TraceBlock within these bounds.
	defaultTraceBlock = 512
	minTraceBlock     = 16 // vLLM's block: the id must cover its first 4 tokens
	maxTraceBlock     = 1 << 16
)

// The token ids of generated prompts: in [tokenBase, tokenBase +
// tokenRange), clear of the low ids tokenizers give their special tokens
// (BOS, EOS, padding) and below Llama-2's vocabulary of 32,000, so that
// any engine takes them.
const (
	tokenBase  = 100
	tokenRange = 29_900
	// idDigits tokens spell a block's hash id in base tokenRange:
	// 29,900^4 > 2^53, so distinct ids differ in their first tokens.
	idDigits = 4
)

// mooncakeRow is one row of a Mooncake trace.
type mooncakeRow struct {
	ms     float64 // arrival, milliseconds (any origin)
	input  int     // prompt tokens
	output int     // output tokens
	ids    []int64 // one per block of the prompt, the last one partial
}

// mooncakeLine is a row as JSON; pointers tell a missing field.
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// parseMooncakeRow parses one row. Any input gives a row within the
// bounds or an error naming the field, never a panic
// (FuzzParseMooncakeRow); whether its ids fit its length is
// mooncakeRow.fits's question.
func parseMooncakeRow(b []byte) (mooncakeRow, error) {
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return mooncakeRow{}, errors.New("not a JSON object")
	}
	var l mooncakeLine
	if err := json.Unmarshal(b, &l); err != nil {
		return mooncakeRow{}, err
	}
	switch {
	case l.Timestamp == nil:
		return mooncakeRow{}, errors.New("timestamp: missing (milliseconds)")
	case !(*l.Timestamp >= 0 && *l.Timestamp <= maxMooncakeMS):
		return mooncakeRow{}, fmt.Errorf("timestamp: want milliseconds in [0, %d], got %v", int64(maxMooncakeMS), *l.Timestamp)
	case l.InputLength == nil:
		return mooncakeRow{}, errors.New("input_length: missing")
	case *l.InputLength < 1 || *l.InputLength > maxMooncakeInput:
		return mooncakeRow{}, fmt.Errorf("input_length: want tokens in [1, %d], got %d", maxMooncakeInput, *l.InputLength)
	case l.OutputLength == nil:
		return mooncakeRow{}, errors.New("output_length: missing")
	case *l.OutputLength < 1 || *l.OutputLength > maxMooncakeOutput:
		return mooncakeRow{}, fmt.Errorf("output_length: want tokens in [1, %d], got %d", maxMooncakeOutput, *l.OutputLength)
	case l.HashIDs == nil || len(*l.HashIDs) == 0:
		return mooncakeRow{}, errors.New("hash_ids: missing or empty")
	case len(*l.HashIDs) > maxMooncakeIDs:
		return mooncakeRow{}, fmt.Errorf("hash_ids: %d ids, want at most %d", len(*l.HashIDs), maxMooncakeIDs)
	}
	for i, id := range *l.HashIDs {
		if id < 0 || id > maxHashID {
			return mooncakeRow{}, fmt.Errorf("hash_ids[%d]: want an integer in [0, 2^53), got %d", i, id)
		}
	}
	return mooncakeRow{ms: *l.Timestamp, input: *l.InputLength, output: *l.OutputLength, ids: *l.HashIDs}, nil
}

// fits reports why the row's ids do not cover its input in blocks of
// block tokens: all but the last full, the last holding the rest (1 to
// block tokens); nil when they do.
func (r *mooncakeRow) fits(block int) error {
	n := len(r.ids)
	if lo, hi := block*(n-1), block*n; r.input <= lo || r.input > hi {
		return fmt.Errorf("input_length %d does not fit %d hash ids of %d tokens (want %d to %d; the block is --trace-block)", r.input, n, block, lo+1, hi)
	}
	return nil
}

// readMooncake parses a Mooncake trace within lim, each row checked
// against block, and returns its rows in timestamp order (stable).
func readMooncake(r io.Reader, lim traceLimits, block int) ([]mooncakeRow, error) {
	var rows []mooncakeRow
	err := scanLines(r, lim, func(_ int, b []byte) error {
		row, err := parseMooncakeRow(b)
		if err == nil {
			err = row.fits(block)
		}
		if err != nil {
			return err
		}
		row.ids = slices.Clip(row.ids)
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, errors.New("no rows")
	}
	slices.SortStableFunc(rows, func(a, b mooncakeRow) int { return cmpFloat(a.ms, b.ms) })
	return rows, nil
}

// mooncake replays a Mooncake trace open loop. Immutable after
// newMooncake but for the cursor; safe for concurrent use.
type mooncake struct {
	opts  Options
	file  string
	block int
	speed float64 // TraceSpeed × Speedup: trace time over client time
	rows  []mooncakeRow
	at    []time.Duration // each row's send time, client time from the start
	span  time.Duration   // the kept rows' span, trace time
	total int             // rows in the file
	next  atomic.Int64    // index in rows of the next request to hand out
}

func newMooncake(opts Options) (Workload, error) {
	if opts.TraceFile == "" {
		return nil, errors.New("workload mooncake: TraceFile is empty (name the file: mooncake:FILE)")
	}
	f, err := os.Open(opts.TraceFile)
	if err != nil {
		return nil, fmt.Errorf("cannot open trace: %w", err)
	}
	defer f.Close() // read-only: a close error loses nothing
	block := cmp.Or(opts.TraceBlock, defaultTraceBlock)
	rows, err := readMooncake(f, traceLimits{maxTraceLine, maxTraceBytes}, block)
	if err != nil {
		return nil, fmt.Errorf("mooncake trace %s: %w", opts.TraceFile, err)
	}
	return newMooncakeRows(opts, opts.TraceFile, rows), nil
}

// newMooncakeRows keeps the rows within the options' window and count
// and times them.
func newMooncakeRows(opts Options, file string, rows []mooncakeRow) *mooncake {
	w := &mooncake{opts: opts, file: file, block: cmp.Or(opts.TraceBlock, defaultTraceBlock), total: len(rows)}
	w.speed = cmp.Or(opts.TraceSpeed, 1) * cmp.Or(opts.Speedup, 1)
	t0 := rows[0].ms
	for _, r := range rows {
		off := time.Duration(math.Round((r.ms - t0) * float64(time.Millisecond)))
		if opts.TraceWindow > 0 && off >= opts.TraceWindow {
			break // sorted: the rest are later
		}
		if opts.TraceRequests > 0 && len(w.rows) == opts.TraceRequests {
			break
		}
		w.rows = append(w.rows, r)
		w.at = append(w.at, time.Duration(float64(off)/w.speed))
		w.span = off
	}
	return w
}

// Name is "mooncake-x4": the workload and its load point (TraceSpeed),
// so that every load point has its own table.
func (w *mooncake) Name() string {
	return fmt.Sprintf("mooncake-x%g", cmp.Or(w.opts.TraceSpeed, 1))
}

func (w *mooncake) Describe() string {
	var in, out int64
	for _, r := range w.rows {
		in, out = in+int64(r.input), out+int64(r.output)
	}
	n := int64(len(w.rows))
	return fmt.Sprintf("mooncake: %d of %d rows of %s (%v of trace time), replayed open loop at %g× the trace's arrival rate; "+
		"prompts of token ids, %d tokens a hash id (mean %d input, %d output tokens)",
		n, w.total, w.file, w.span.Round(time.Millisecond), cmp.Or(w.opts.TraceSpeed, 1), w.block, in/n, out/n)
}

// Restart rewinds the cursor: the next run replays from the first row.
func (w *mooncake) Restart() { w.next.Store(0) }

// Span is the replay's length in client time: the last kept row's send
// time (Request.At).
func (w *mooncake) Span() time.Duration { return w.at[len(w.at)-1] }

// NewUser returns a user that takes the trace's next unsent row on every
// Next, as trace's users do (one shared cursor, each row sent once).
func (w *mooncake) NewUser(int) User { return &mooncakeUser{w: w} }

// mooncakeUser is owned by its goroutine.
type mooncakeUser struct{ w *mooncake }

func (u *mooncakeUser) Next() (Request, bool) {
	w := u.w
	i := w.next.Add(1) - 1 // an int64 of calls does not wrap
	if i >= int64(len(w.rows)) {
		return Request{}, false
	}
	r := &w.rows[i]
	return Request{
		PromptIDs: appendPrompt(make([]int32, 0, r.input), w.opts.Seed, r, w.block),
		MaxTokens: r.output, IgnoreEOS: true, Model: w.opts.Model, At: w.at[i], Tag: inputClass(r.input),
	}, true
}

// Reply is ignored: the trace's rows hold their conversations' turns.
func (u *mooncakeUser) Reply(string) {}

// inputClass is a row's class by prompt length.
func inputClass(n int) string {
	switch {
	case n < 2048:
		return "in<2k"
	case n < 8192:
		return "in2k-8k"
	case n < 32768:
		return "in8k-32k"
	}
	return "in32k+"
}

// appendPrompt appends r's prompt: for each hash id its block of block
// tokens (the last one cut to the row's length), each block a function
// of the seed and the id alone, so rows sharing leading ids share that
// prefix token for token and differ from the first id they do not share.
func appendPrompt(dst []int32, seed int64, r *mooncakeRow, block int) []int32 {
	for i, id := range r.ids {
		n := block
		if i == len(r.ids)-1 {
			n = r.input - block*i
		}
		dst = appendBlock(dst, seed, id, n)
	}
	return dst
}

// appendBlock appends the first n tokens of hash id's block: its first
// idDigits tokens spell the id (distinct ids, distinct blocks), the rest
// are drawn from (seed, id, position).
func appendBlock(dst []int32, seed int64, id int64, n int) []int32 {
	v := uint64(id)
	k := mix(uint64(seed)^0x6d6f6f6e) ^ mix(uint64(id))
	for p := range n {
		var t uint64
		if p < idDigits {
			t = v % tokenRange
			v /= tokenRange
		} else {
			t = mix(k+uint64(p)) % tokenRange
		}
		dst = append(dst, int32(tokenBase+t))
	}
	return dst
}
