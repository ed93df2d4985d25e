package workload

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseMooncakeRow(t *testing.T) {
	t.Parallel()
	f := func(line string, want mooncakeRow) {
		t.Helper()
		got, err := parseMooncakeRow([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", line, got, want)
		}
	}
	f(`{"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}`, mooncakeRow{27482, 655, 52, []int64{46, 47}})
	f(` {"timestamp":0.5,"input_length":1,"output_length":1,"hash_ids":[0],"extra":"ignored"} `, mooncakeRow{0.5, 1, 1, []int64{0}})
	f(`{"timestamp":0,"input_length":1048576,"output_length":1048576,"hash_ids":[9007199254740991]}`, mooncakeRow{0, 1 << 20, 1 << 20, []int64{1<<53 - 1}})
}

func TestParseMooncakeRowErrors(t *testing.T) {
	t.Parallel()
	f := func(line, want string) {
		t.Helper()
		r, err := parseMooncakeRow([]byte(line))
		if err == nil {
			t.Fatalf("%s: parsed as %+v, want an error", line, r)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: error %q, want it to contain %q", line, err, want)
		}
	}
	ok := `"input_length":600,"output_length":5,"hash_ids":[1,2]`
	for _, line := range []string{"", "null", "[1]", `"x"`} {
		f(line, "not a JSON object")
	}
	f(`{`, "unexpected end of JSON input")
	f(`{`+ok+`}`, "timestamp: missing")
	f(`{"timestamp":null,`+ok+`}`, "timestamp: missing")
	f(`{"timestamp":-1,`+ok+`}`, "timestamp: want milliseconds in [0, 8589934592000], got -1")
	f(`{"timestamp":1e20,`+ok+`}`, "timestamp: want milliseconds")
	f(`{"timestamp":"5",`+ok+`}`, "timestamp")
	f(`{"timestamp":0,"output_length":5,"hash_ids":[1]}`, "input_length: missing")
	f(`{"timestamp":0,"input_length":0,"output_length":5,"hash_ids":[1]}`, "input_length: want tokens in [1, 1048576], got 0")
	f(`{"timestamp":0,"input_length":1048577,"output_length":5,"hash_ids":[1]}`, "input_length: want tokens")
	f(`{"timestamp":0,"input_length":1.5,"output_length":5,"hash_ids":[1]}`, "input_length")
	f(`{"timestamp":0,"input_length":5,"hash_ids":[1]}`, "output_length: missing")
	f(`{"timestamp":0,"input_length":5,"output_length":0,"hash_ids":[1]}`, "output_length: want tokens in [1, 1048576], got 0")
	f(`{"timestamp":0,"input_length":5,"output_length":1}`, "hash_ids: missing or empty")
	f(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[]}`, "hash_ids: missing or empty")
	f(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1,-2]}`, "hash_ids[1]: want an integer in [0, 2^53), got -2")
	f(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[9007199254740992]}`, "hash_ids[0]")
	f(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1.5]}`, "hash_ids")
	f(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":["a"]}`, "hash_ids")
	many := "[" + strings.Repeat("1,", maxMooncakeIDs) + "1]"
	f(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":`+many+`}`, "hash_ids: 65537 ids, want at most 65536")
}

func TestMooncakeRowFits(t *testing.T) {
	t.Parallel()
	f := func(input, ids, block int, want string) {
		t.Helper()
		r := mooncakeRow{input: input, ids: make([]int64, ids)}
		err := r.fits(block)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Fatalf("input %d, %d ids of %d: error %v, want %q", input, ids, block, err, want)
		}
	}
	f(1, 1, 512, "")
	f(512, 1, 512, "")
	f(513, 2, 512, "")
	f(6758, 14, 512, "") // the public trace's first row
	f(513, 1, 512, "input_length 513 does not fit 1 hash ids of 512 tokens (want 1 to 512")
	f(512, 2, 512, "want 513 to 1024")
	f(6758, 14, 16, "want 209 to 224")
}

func TestReadMooncake(t *testing.T) {
	t.Parallel()
	lim := traceLimits{line: 1000, bytes: 1 << 20}
	in := `{"timestamp": 3000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}` + "\r\n\n" +
		`{"timestamp": 0, "input_length": 10, "output_length": 7, "hash_ids": [2]}` + "\n" +
		`{"timestamp": 3000, "input_length": 1024, "output_length": 1, "hash_ids": [0, 3]}`
	rows, err := readMooncake(strings.NewReader(in), lim, 512)
	if err != nil {
		t.Fatal(err)
	}
	var inputs []int
	for _, r := range rows {
		inputs = append(inputs, r.input)
	}
	if want := []int{10, 600, 1024}; !slices.Equal(inputs, want) {
		t.Fatalf("rows by time (stable): inputs %v, want %v", inputs, want)
	}
	bad := func(in string, lim traceLimits, block int, want string) {
		t.Helper()
		_, err := readMooncake(strings.NewReader(in), lim, block)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to contain %q", err, want)
		}
	}
	good := `{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1]}` + "\n"
	bad(good+good+`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1,2]}`, lim, 512, "line 3: input_length 5 does not fit 2 hash ids")
	bad(good+"\n"+`{"timestamp":0}`, lim, 512, "line 3: input_length: missing")
	bad(good+`{"prompt":"a trace: line, not a Mooncake row"}`, lim, 512, "line 2: timestamp: missing")
	bad("\n\n", lim, 512, "no rows")
	bad(good+`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[`+strings.Repeat("1,", 600)+`1]}`, lim, 512, "line 2: longer than 1000 bytes")
	bad(strings.Repeat(good, 100), traceLimits{line: 1000, bytes: 1000}, 512, "larger than 1000 bytes")
}

// mooncakeFile writes rows to a temporary trace and returns its path.
func mooncakeFile(t *testing.T, rows ...string) string {
	t.Helper()
	return writeTrace(t, rows...)
}

func TestMooncakeWorkload(t *testing.T) {
	t.Parallel()
	path := mooncakeFile(t,
		`{"timestamp": 1000, "input_length": 20, "output_length": 3, "hash_ids": [7, 8]}`,
		`{"timestamp": 0, "input_length": 30, "output_length": 9, "hash_ids": [7, 8]}`,
		`{"timestamp": 5000, "input_length": 17, "output_length": 1, "hash_ids": [7, 9]}`,
		`{"timestamp": 9000, "input_length": 16, "output_length": 2, "hash_ids": [1]}`)
	opts := DefaultOptions()
	opts.TraceBlock, opts.TraceSpeed, opts.Speedup, opts.Model = 16, 4, 10, "m"
	w := mustNew(t, "mooncake:"+path, opts)
	if w.Name() != "mooncake-x4" {
		t.Fatalf("name %q", w.Name())
	}
	if d := w.Describe(); !strings.Contains(d, "4 of 4 rows") || !strings.Contains(d, "16 tokens a hash id") {
		t.Fatalf("describe: %s", d)
	}
	u0, u1 := w.NewUser(0), w.NewUser(1)
	var reqs []Request
	for _, u := range []User{u0, u1, u0, u1} {
		r, ok := u.Next()
		if !ok {
			t.Fatal("used up early")
		}
		reqs = append(reqs, r)
	}
	if r, ok := u0.Next(); ok {
		t.Fatalf("a used-up trace gave %+v", r)
	}
	// Sent in time order, At = trace time / (4 × 10).
	wantAt := []time.Duration{0, 25 * time.Millisecond, 125 * time.Millisecond, 225 * time.Millisecond}
	wantLen := []int{30, 20, 17, 16}
	wantMax := []int{9, 3, 1, 2}
	for i, r := range reqs {
		if r.At != wantAt[i] || len(r.PromptIDs) != wantLen[i] || r.MaxTokens != wantMax[i] || !r.IgnoreEOS || r.Model != "m" ||
			r.Messages != nil || r.Prompt != "" || r.Think != 0 || r.Tag != "in<2k" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	// Shared ids, shared tokens: rows 0 and 1 share both blocks (row 1's
	// is a prefix of row 0's), row 2 the first; row 3 shares nothing.
	if !slices.Equal(reqs[0].PromptIDs[:20], reqs[1].PromptIDs) {
		t.Error("rows with equal ids differ")
	}
	if !slices.Equal(reqs[0].PromptIDs[:16], reqs[2].PromptIDs[:16]) || reqs[0].PromptIDs[16] == reqs[2].PromptIDs[16] {
		t.Error("rows sharing one id: want the first block equal, the second different")
	}
	if reqs[3].PromptIDs[0] == reqs[0].PromptIDs[0] {
		t.Error("distinct ids, equal first tokens")
	}

	// Restart rewinds; a window and a count keep the first rows.
	w.(Replay).Restart()
	if r, ok := u1.Next(); !ok || r.At != 0 || len(r.PromptIDs) != 30 {
		t.Fatalf("after Restart: %+v", r)
	}
	opts.TraceWindow = 5 * time.Second
	if n := drain(mustNew(t, "mooncake:"+path, opts)); n != 2 {
		t.Fatalf("window 5s: %d rows, want 2 (times 0 and 1s)", n)
	}
	opts.TraceWindow, opts.TraceRequests = 0, 3
	if n := drain(mustNew(t, "mooncake:"+path, opts)); n != 3 {
		t.Fatalf("3 requests: %d rows", n)
	}
	if sp := mustNew(t, "mooncake:"+path, opts).(interface{ Span() time.Duration }).Span(); sp != 125*time.Millisecond {
		t.Fatalf("span %v", sp)
	}

	// Errors name the file and the line; the default block is 512.
	opts = DefaultOptions()
	_, err := New("mooncake:"+path, opts)
	if err == nil || !strings.Contains(err.Error(), "trace.jsonl: line 1: input_length 20 does not fit 2 hash ids of 512 tokens") {
		t.Fatalf("error %v", err)
	}
	if _, err := New("mooncake", opts); err == nil || !strings.Contains(err.Error(), "TraceFile is empty") {
		t.Fatalf("error %v", err)
	}
	opts.TraceBlock = 8
	if _, err := New("mooncake:"+path, opts); err == nil || !strings.Contains(err.Error(), "TraceBlock must be 0 (512) or in [16, 65536]") {
		t.Fatalf("error %v", err)
	}
}

func drain(w Workload) int {
	u, n := w.NewUser(0), 0
	for {
		if _, ok := u.Next(); !ok {
			return n
		}
		n++
	}
}

// TestAppendBlock: a block is a function of the seed and its id alone,
// its tokens in the range every vocabulary has, and distinct ids differ
// in their first idDigits tokens.
func TestAppendBlock(t *testing.T) {
	t.Parallel()
	a := appendBlock(nil, 1, 42, 512)
	if !slices.Equal(a, appendBlock(nil, 1, 42, 512)) || !slices.Equal(a[:100], appendBlock(nil, 1, 42, 100)) {
		t.Fatal("a block is not a function of (seed, id)")
	}
	if slices.Equal(a[idDigits:], appendBlock(nil, 2, 42, 512)[idDigits:]) {
		t.Fatal("the seed changes nothing")
	}
	seen := map[[idDigits]int32]int64{}
	for _, id := range []int64{0, 1, tokenRange - 1, tokenRange, 1 << 40, 1<<53 - 1, 1<<53 - 2} {
		b := appendBlock(nil, 1, id, 16)
		for _, tok := range b {
			if tok < tokenBase || tok >= tokenBase+tokenRange {
				t.Fatalf("id %d: token %d out of range", id, tok)
			}
		}
		k := [idDigits]int32(b[:idDigits])
		if other, dup := seen[k]; dup {
			t.Fatalf("ids %d and %d: equal first tokens", id, other)
		}
		seen[k] = id
	}
}

// TestShippedTrace: bench/traces/mooncake-small.jsonl is what
// `go run ./bench/cmd/mooncaketrace` makes (DefaultConversationTrace), and
// a valid trace of conversations: 300 rows, each turn after the first
// sharing its previous turn's ids.
func TestShippedTrace(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile("../traces/mooncake-small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var made bytes.Buffer
	if err := MooncakeConversations(&made, DefaultConversationTrace()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(made.Bytes(), shipped) {
		t.Fatal("bench/traces/mooncake-small.jsonl is not what DefaultConversationTrace makes: run go run ./bench/cmd/mooncaketrace -out bench/traces/mooncake-small.jsonl")
	}
	rows, err := readMooncake(bytes.NewReader(shipped), traceLimits{maxTraceLine, maxTraceBytes}, 512)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 300 {
		t.Fatalf("%d rows", len(rows))
	}
	extends, maxIn := 0, 0
	for i, r := range rows {
		maxIn = max(maxIn, r.input)
		for _, p := range rows[:i] {
			if len(p.ids) < len(r.ids) && slices.Equal(p.ids, r.ids[:len(p.ids)]) && len(p.ids) > 4 {
				extends++
				break
			}
		}
	}
	if extends < 100 || maxIn > convMaxInput {
		t.Fatalf("%d rows extend an earlier one, longest input %d", extends, maxIn)
	}
	// Another seed, another trace; the same seed, the same.
	var other bytes.Buffer
	c := DefaultConversationTrace()
	c.Seed = 2
	if err := MooncakeConversations(&other, c); err != nil || bytes.Equal(other.Bytes(), shipped) {
		t.Fatalf("seed 2: %v", err)
	}
}

// FuzzParseMooncakeRow: any line gives a row within the bounds or an
// error, never a panic; a row survives a round trip through the format.
func FuzzParseMooncakeRow(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`,
		`{"timestamp": 27482.5, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}`,
		`{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[9007199254740991]}`,
		`{"timestamp":-1}`, `{}`, `null`, `{"hash_ids":[1e3]}`, `{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := parseMooncakeRow(line)
		if err != nil {
			return
		}
		if !(r.ms >= 0 && r.ms <= maxMooncakeMS) || r.input < 1 || r.input > maxMooncakeInput || r.output < 1 || r.output > maxMooncakeOutput ||
			len(r.ids) == 0 || len(r.ids) > maxMooncakeIDs || slices.ContainsFunc(r.ids, func(id int64) bool { return id < 0 || id > maxHashID }) {
			t.Fatalf("out of bounds: %+v", r)
		}
		b, err := json.Marshal(map[string]any{"timestamp": r.ms, "input_length": r.input, "output_length": r.output, "hash_ids": r.ids})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := parseMooncakeRow(b)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip through %s: %+v, %v", b, r2, err)
		}
		if r.fits(defaultTraceBlock) == nil {
			// A row that fits makes a prompt of exactly its length.
			if p := appendPrompt(nil, 1, &r, defaultTraceBlock); len(p) != r.input {
				t.Fatalf("prompt of %d tokens, want %d", len(p), r.input)
			}
		}
	})
}
