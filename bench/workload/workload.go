package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Message is one chat message. Its fields and JSON names are those of the
// OpenAI chat completions API (text content only).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is what a user sends next. The caller owns it: a user never
// modifies a Request (or its Messages) after returning it.
type Request struct {
	// Messages is a chat completions request; when empty, Prompt is a
	// (legacy) completions request.
	Messages []Message
	Prompt   string
	// PromptIDs, when not nil, is a completions request whose prompt is
	// these token ids (vLLM takes a list of ints as the prompt), so the
	// engine's token count is exact whatever its tokenizer; Messages and
	// Prompt are then empty. The mooncake workload sends them.
	PromptIDs []int32
	// IgnoreEOS asks the engine to generate exactly MaxTokens (vLLM's
	// ignore_eos), as a trace's output length says.
	IgnoreEOS bool
	// MaxTokens is the output length to ask for; 0 leaves it to the
	// engine (omit max_tokens).
	MaxTokens int
	// Model is the model to name; "" means the client's default.
	Model string
	// Think is how long the user waits before sending the request
	// (closed loop: after the previous answer).
	Think time.Duration
	// At is, for an open-loop trace replay, when to send the request,
	// counted from the start of the run; a request with At > 0 is sent
	// no earlier than that, whatever its user did before. 0 means "now":
	// a closed-loop request (after Think), or the first instant of a
	// timed trace.
	At time.Duration
	// Tag is the request's class in per-class statistics, e.g.
	// "xlarge/prefix3".
	Tag string
	// Priority is vLLM's request field "priority" (lower is served
	// first); 0, vLLM's default, is not sent.
	Priority int
	// Key, when set, is sent as "Authorization: Bearer Key": the
	// request's tenant, whose fair share a router's queue keeps.
	Key string
}

// User is one simulated user. A closed-loop client repeats: Next, wait
// Think (or until At), send, wait for the whole answer, Reply.
//
// A User is owned by one goroutine; distinct users of one Workload may
// run concurrently.
type User interface {
	// Next returns the user's next request; false when the user has no
	// more (the synthetic workloads never run out; a trace does).
	Next() (Request, bool)
	// Reply tells the user the assistant's answer to the request Next
	// last returned. A failed request is reported as Reply("") or by not
	// calling Reply before the next Next; multi-turn users then forget
	// that turn.
	Reply(text string)
}

// Workload makes users. Safe for concurrent use.
type Workload interface {
	// Name is the workload's name as New takes it ("stress").
	Name() string
	// Describe is one line for reports: what the workload sends, with
	// its parameters.
	Describe() string
	// NewUser returns user id's request stream. The same id in two
	// workloads made by New with the same name and Options gives the
	// same requests, given the same replies (trace: see its doc).
	NewUser(id int) User
}

// Replay is a Workload whose users share one schedule (a trace's
// cursor, the saturation workload's arrivals) that a run uses up or
// moves on. Restart rewinds it, so that every run of a benchmark (one
// per policy) sends the same requests at the same times. Call it
// between runs, never while a run's users are running.
type Replay interface {
	Workload
	Restart()
}

// Options configures New. Immutable once passed to New.
type Options struct {
	// Seed picks every random choice: equal seeds, equal requests.
	Seed int64
	// Model is copied into every request's Model; "" leaves the client's
	// default. For a trace, a non-empty Model replaces the lines' own.
	// The mixed workload ignores it: its users name their own models.
	Model string
	// Models, for the mixed workload, keeps the users of these models
	// and idles the rest (their Next returns false); nil keeps all. A
	// per-pool baseline so drives the very users the whole mixed fleet
	// had on that pool. The other workloads ignore it.
	Models []string
	// MaxTokens is the output length every synthetic request asks for,
	// and a trace line's when it names none. 0 leaves it to the engine.
	MaxTokens int
	// TokensPerWord is how many tokens the target tokenizer makes of one
	// generated word: text sized for n tokens has n/TokensPerWord words.
	// 1 is exact for Llama-3 (TestTextTokenCount).
	TokensPerWord float64
	// ThinkMin and ThinkMax bound every closed-loop request's think
	// time, drawn uniformly; both 0 means no thinking.
	ThinkMin, ThinkMax time.Duration
	// TraceFile is the JSONL file of the trace workload (format: doc.go).
	TraceFile string
	// Rate is the saturation workload's arrivals a second (in the
	// client's time: a caller driving sped-up engines scales it). The
	// other workloads ignore it.
	Rate float64
	// The mooncake workload (mooncake.go). TraceSpeed divides the
	// trace's arrival times (4: four times the trace's rate); 0 means 1.
	// Speedup is the engines' clock speed-up (the simulator's
	// --speedup), which divides them too, so that the load is the one
	// asked for in the engines' time; 0 means 1. TraceWindow keeps the
	// rows whose time is before it (trace time, from the first row; 0:
	// all), TraceRequests the first that many of them (0: all).
	// TraceBlock is the tokens a hash id stands for; 0 means 512, the
	// Mooncake traces' block.
	TraceSpeed    float64
	Speedup       float64
	TraceWindow   time.Duration
	TraceRequests int
	TraceBlock    int
}

// maxThink bounds think times: longer is no benchmark, and the bound
// keeps the draw's arithmetic far from overflow.
const maxThink = time.Hour

// DefaultOptions returns the options the benchmark uses unless told
// otherwise.
func DefaultOptions() Options {
	return Options{
		Seed:          1,
		MaxTokens:     100,                    // Ranvier's benchmark: 100 output tokens
		TokensPerWord: 1,                      // Llama-3, measured: exactly one token a word
		ThinkMin:      500 * time.Millisecond, // Ranvier's closed-loop users think 0.5–2 s
		ThinkMax:      2 * time.Second,
	}
}

// Validate reports every invalid field, by name.
func (o Options) Validate() error {
	var errs []error
	if o.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("MaxTokens must not be negative, got %d", o.MaxTokens))
	}
	if !(o.TokensPerWord > 0 && o.TokensPerWord <= 16) {
		errs = append(errs, fmt.Errorf("TokensPerWord must be in (0, 16], got %v", o.TokensPerWord))
	}
	if o.ThinkMin < 0 || o.ThinkMax < o.ThinkMin || o.ThinkMax > maxThink {
		errs = append(errs, fmt.Errorf("ThinkMin and ThinkMax must satisfy 0 <= ThinkMin <= ThinkMax <= %v, got %v and %v", maxThink, o.ThinkMin, o.ThinkMax))
	}
	if !(o.TraceSpeed >= 0 && o.TraceSpeed <= maxRate) {
		errs = append(errs, fmt.Errorf("TraceSpeed must be in [0, %.0f], got %v", maxRate, o.TraceSpeed))
	}
	if !(o.Speedup >= 0 && o.Speedup <= maxRate) {
		errs = append(errs, fmt.Errorf("speedup (Speedup) must be in [0, %.0f], got %v", maxRate, o.Speedup))
	}
	if o.TraceWindow < 0 || o.TraceRequests < 0 {
		errs = append(errs, fmt.Errorf("TraceWindow and TraceRequests must not be negative, got %v and %d", o.TraceWindow, o.TraceRequests))
	}
	if o.TraceBlock != 0 && (o.TraceBlock < minTraceBlock || o.TraceBlock > maxTraceBlock) {
		errs = append(errs, fmt.Errorf("TraceBlock must be 0 (512) or in [%d, %d] tokens, got %d", minTraceBlock, maxTraceBlock, o.TraceBlock))
	}
	if !(o.Rate >= 0 && o.Rate <= maxRate) {
		errs = append(errs, fmt.Errorf("rate (Rate) must be in [0, %.0f] a second, got %v", maxRate, o.Rate))
	}
	return errors.Join(errs...)
}

// maxRate bounds Options.Rate: a million requests a second is beyond any
// client this package drives, and the bound keeps the gaps positive.
const maxRate = 1e6

// think draws a think time.
func (o *Options) think(r *rand.Rand) time.Duration {
	return o.ThinkMin + time.Duration(r.Int64N(int64(o.ThinkMax-o.ThinkMin)+1))
}

// constructors are the workloads New knows, by name.
var constructors = map[string]func(Options) (Workload, error){
	"stress":     newStress,
	"multiturn":  newMultiturn,
	"rag":        newRAG,
	"unique":     newUnique,
	"hotspot":    newHotspot,
	"manydocs":   newManydocs,
	"mixed":      newMixed,
	"trace":      newTrace,
	"saturation": newSaturation,
	"mooncake":   newMooncake,
}

// Names lists the workload names New accepts, sorted; the traces are
// "trace" and "mooncake" (with Options.TraceFile), or "trace:FILE" and
// "mooncake:FILE".
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// New returns the workload called name. "trace:FILE" is the trace
// workload reading FILE (it overrides opts.TraceFile), "mooncake:FILE"
// the mooncake workload reading FILE. The shared texts of
// a synthetic workload are generated here, once (at most 4 ms and 3.5 MB,
// for rag: BenchmarkNew); a trace is read here, whole.
func New(name string, opts Options) (Workload, error) {
	if file, ok := strings.CutPrefix(name, "trace:"); ok {
		name, opts.TraceFile = "trace", file
	} else if file, ok := strings.CutPrefix(name, "mooncake:"); ok {
		name, opts.TraceFile = "mooncake", file
	}
	mk, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("unknown workload %q (valid: %s, trace:FILE, mooncake:FILE)", name, strings.Join(Names(), ", "))
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("workload %s: %w", name, err)
	}
	return mk(opts)
}
