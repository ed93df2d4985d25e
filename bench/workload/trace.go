package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Bounds on a trace, which is outside input read whole into memory.
const (
	maxTraceLine  = 16 << 20 // bytes; a longer line is an error naming it
	maxTraceBytes = 1 << 30  // bytes; a larger file is refused
	// maxTimestamp keeps (t - first t) in a time.Duration: 2^33 s is
	// 272 years, so Unix times fit.
	maxTimestamp = 1 << 33
)

// partSeparator joins the text parts of an array content, as vLLM does
// (and tokenpool/chat, which the router uses).
const partSeparator = "\n"

type trace struct {
	opts  Options
	file  string
	reqs  []Request // in send order; never modified after newTrace
	timed bool
	next  atomic.Int64 // index in reqs of the next request to hand out
}

func newTrace(opts Options) (Workload, error) {
	if opts.TraceFile == "" {
		return nil, errors.New("workload trace: TraceFile is empty (name the file: trace:FILE)")
	}
	f, err := os.Open(opts.TraceFile)
	if err != nil {
		return nil, fmt.Errorf("cannot open trace: %w", err)
	}
	defer f.Close() // read-only: a close error loses nothing
	reqs, timed, err := readTrace(f, traceLimits{maxTraceLine, maxTraceBytes})
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", opts.TraceFile, err)
	}
	return &trace{opts: opts, file: opts.TraceFile, reqs: reqs, timed: timed}, nil
}

func (w *trace) Name() string { return "trace" }

// Restart rewinds the cursor: the next run sends the trace from its
// first line.
func (w *trace) Restart() { w.next.Store(0) }

func (w *trace) Describe() string {
	if w.timed {
		return fmt.Sprintf("trace: %d requests from %s, replayed open-loop at their timestamps over %v",
			len(w.reqs), w.file, w.reqs[len(w.reqs)-1].At)
	}
	return fmt.Sprintf("trace: %d requests from %s in file order, closed loop; %s", len(w.reqs), w.file, tail(&w.opts))
}

// NewUser returns a user that takes the trace's next unsent request on
// every Next: the users of a trace share one cursor, so the trace is
// sent once, in order, whichever user is free; which user sends which
// line depends on timing, the order does not. Next returns false once the
// trace is used up.
func (w *trace) NewUser(id int) User {
	return &traceUser{w: w, r: userRand(w.opts.Seed, userTrace, id)}
}

// traceUser is owned by its goroutine.
type traceUser struct {
	w *trace
	r *rand.Rand
}

func (u *traceUser) Next() (Request, bool) {
	w := u.w
	i := w.next.Add(1) - 1 // an int64 of calls does not wrap
	if i >= int64(len(w.reqs)) {
		return Request{}, false
	}
	req := w.reqs[i]
	if w.opts.Model != "" {
		req.Model = w.opts.Model
	}
	if !w.timed {
		req.Think = w.opts.think(u.r)
	}
	if req.MaxTokens < 0 {
		req.MaxTokens = w.opts.MaxTokens
	}
	return req, true
}

// Reply is ignored: a trace holds its conversations' turns already.
func (u *traceUser) Reply(string) {}

// traceLimits bound what readTrace reads (tests use small ones).
type traceLimits struct {
	line  int   // bytes per line, without its \r\n
	bytes int64 // bytes in all
}

// readTrace parses a JSONL trace (format: doc.go) within lim. Requests
// without max_tokens have MaxTokens -1. timed: the lines have timestamps;
// the requests are then in timestamp order (stable) with At set.
func readTrace(r io.Reader, lim traceLimits) (reqs []Request, timed bool, err error) {
	var times []float64
	err = scanLines(r, lim, func(line int, b []byte) error {
		req, t, hasT, err := parseTraceLine(b)
		if err != nil {
			return err
		}
		if len(reqs) == 0 {
			timed = hasT
		} else if hasT != timed {
			if timed {
				return errors.New("no timestamp, but earlier lines have one (all lines or none)")
			}
			return errors.New("a timestamp, but earlier lines have none (all lines or none)")
		}
		reqs = append(reqs, req)
		times = append(times, t)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if len(reqs) == 0 {
		return nil, false, errors.New("no requests")
	}
	if timed {
		order := make([]int, len(reqs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(times[a], times[b]) })
		sorted := make([]Request, len(reqs))
		t0 := times[order[0]]
		for i, j := range order {
			sorted[i] = reqs[j]
			sorted[i].At = time.Duration(math.Round((times[j] - t0) * 1e9))
		}
		reqs = sorted
	}
	return reqs, timed, nil
}

// scanLines calls each with every non-blank line of a JSONL file within
// lim (its number counted from 1, the line without its \r\n; the bytes
// are the scanner's, valid during the call). An error, each's or a
// bound's, names the line.
func scanLines(r io.Reader, lim traceLimits, each func(line int, b []byte) error) error {
	lr := &io.LimitedReader{R: r, N: lim.bytes + 1}
	sc := bufio.NewScanner(lr)
	// The buffer holds a longest line with its \r\n (which the scanner
	// drops); a line one byte longer still fits, for the check below.
	sc.Buffer(make([]byte, 0, min(64<<10, lim.line+2)), lim.line+2)
	line := 0
	for sc.Scan() {
		line++
		if lr.N == 0 { // read past the bound: the last lines may be cut
			return fmt.Errorf("larger than %d bytes", lim.bytes)
		}
		b := sc.Bytes()
		if len(b) > lim.line {
			return fmt.Errorf("line %d: longer than %d bytes", line, lim.line)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := each(line, b); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes", line+1, lim.line)
		}
		return fmt.Errorf("cannot read: %w", err)
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// traceLine is the part of a line readTrace looks at; encoding/json
// ignores every other field.
type traceLine struct {
	Model               *string         `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Timestamp           *float64        `json:"timestamp"`
	T                   *float64        `json:"t"`
	Tag                 *string         `json:"tag"`
}

type traceMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type tracePart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// parseTraceLine parses one line: the request (MaxTokens -1 when the
// line names none) and its timestamp in seconds, if it has one. Any
// input returns an error or a request, never a panic (FuzzParseTraceLine).
func parseTraceLine(b []byte) (req Request, t float64, hasT bool, err error) {
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return Request{}, 0, false, errors.New("not a JSON object")
	}
	var l traceLine
	if err := json.Unmarshal(b, &l); err != nil {
		return Request{}, 0, false, err
	}
	chat, completion := !isNull(l.Messages), !isNull(l.Prompt)
	switch {
	case chat && completion:
		return Request{}, 0, false, errors.New("both messages and prompt: want one")
	case chat:
		if req.Messages, err = parseMessages(l.Messages); err != nil {
			return Request{}, 0, false, err
		}
	case completion:
		if req.Prompt, err = parsePrompt(l.Prompt); err != nil {
			return Request{}, 0, false, err
		}
	default:
		return Request{}, 0, false, errors.New("neither messages (chat completions) nor prompt (completions)")
	}
	if l.Model != nil {
		req.Model = *l.Model
	}
	req.MaxTokens = -1
	for _, m := range []struct {
		name string
		v    *int
	}{{"max_tokens", l.MaxTokens}, {"max_completion_tokens", l.MaxCompletionTokens}} {
		if m.v == nil {
			continue
		}
		if *m.v < 0 {
			return Request{}, 0, false, fmt.Errorf("%s: must not be negative, got %d", m.name, *m.v)
		}
		req.MaxTokens = *m.v // max_completion_tokens, OpenAI's newer name, wins
	}
	if l.Timestamp != nil && l.T != nil {
		return Request{}, 0, false, errors.New(`both "timestamp" and "t": want one`)
	}
	ts := l.Timestamp
	if ts == nil {
		ts = l.T
	}
	if ts != nil {
		if !(*ts >= 0 && *ts <= maxTimestamp) {
			return Request{}, 0, false, fmt.Errorf("timestamp: want seconds in [0, %d], got %v", int64(maxTimestamp), *ts)
		}
		t, hasT = *ts, true
	}
	req.Tag = "trace"
	if l.Tag != nil {
		req.Tag = *l.Tag
	}
	return req, t, hasT, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func parseMessages(raw json.RawMessage) ([]Message, error) {
	var ms []traceMessage
	if err := json.Unmarshal(raw, &ms); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	if len(ms) == 0 {
		return nil, errors.New("messages: empty")
	}
	out := make([]Message, len(ms))
	for i, m := range ms {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d]: no role", i)
		}
		content, err := parseContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		out[i] = Message{Role: m.Role, Content: content}
	}
	return out, nil
}

// parseContent takes a string, null, or an array of text parts (joined
// by partSeparator). Other parts (images, audio) are refused: their bytes
// are not replayed, and a stand-in would change the prompt.
func parseContent(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []tracePart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string, an array of text parts or null")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("part %d has type %q; only text parts can be replayed", j, p.Type)
		}
		if p.Text == nil {
			return "", fmt.Errorf("part %d: no text", j)
		}
		if j > 0 {
			b.WriteString(partSeparator)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// parsePrompt takes a string or an array of one string. Batches and
// token-id prompts are refused: a trace line is one text request.
func parsePrompt(raw json.RawMessage) (string, error) {
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("prompt: %w", err)
		}
	} else {
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return "", errors.New("prompt: want a string or an array of one string (token ids are not replayed)")
		}
		if len(ss) != 1 {
			return "", fmt.Errorf("prompt: an array of %d prompts; want one request per line", len(ss))
		}
		s = ss[0]
	}
	if s == "" {
		return "", errors.New("prompt: empty")
	}
	return s, nil
}
