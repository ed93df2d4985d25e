package bench

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Sample is one request of a benchmark run.
type Sample struct {
	Tag string        `json:"tag,omitempty"` // the workload's class, e.g. "xlarge"
	At  time.Duration `json:"at_ns"`         // sent, since the run started
	// Due is when an open-loop trace replay was to send it (the trace's
	// time over the speed-up), and Input its prompt's length in token ids
	// as sent (a token-id prompt; 0 otherwise): together they name a
	// trace's request in every run of it, answered or not
	// (bench/common-ttft.py pairs runs by them).
	Due     time.Duration `json:"due_ns,omitempty"`
	Input   int           `json:"input_tokens,omitempty"`
	TTFT    time.Duration `json:"ttft_ns"`
	Latency time.Duration `json:"latency_ns"`
	Prompt  int           `json:"prompt_tokens"`
	Cached  int           `json:"cached_tokens"`
	Output  int           `json:"completion_tokens"`
	Backend string        `json:"backend,omitempty"`
	// Route is saltus's X-Saltus-Route ("12/40 tree …"), if any.
	Route string `json:"route,omitempty"`
	// Model is the model the request named; Status the answer's HTTP
	// status (0: no answer).
	Model  string `json:"model,omitempty"`
	Status int    `json:"status,omitempty"`
	Err    string `json:"err,omitempty"`
	// Incomplete: the stream ended without [DONE].
	Incomplete bool `json:"incomplete,omitempty"`
	// RetryAfter: the answer carried Retry-After.
	RetryAfter bool `json:"retry_after,omitempty"`
	// Priority and Key are the request's "priority" and tenant key
	// (workload.Request's); Late: an open-loop request sent more than
	// lateSend after its time, every user being busy.
	Priority int    `json:"priority,omitempty"`
	Key      string `json:"key,omitempty"`
	Late     bool   `json:"late,omitempty"`
	// Cut: the request was still in flight at the end of the run (and
	// its drain): no answer. Summarize counts it apart (Summary.Cut).
	Cut bool `json:"cut,omitempty"`
}

// SampleOf turns a client Outcome sent at `at` into a Sample.
func SampleOf(tag string, at time.Duration, o Outcome) Sample {
	s := Sample{Tag: tag, At: at, TTFT: o.TTFT, Latency: o.Latency, Backend: o.Backend, Route: o.Route, Status: o.Status, Incomplete: o.Incomplete, RetryAfter: o.RetryAfter,
		Prompt: max(o.PromptTokens, 0), Cached: max(o.CachedTokens, 0), Output: max(o.CompletionTokens, 0)}
	if o.Err != nil {
		s.Err = o.Err.Error()
	}
	return s
}

// Percentiles of a duration distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

// Summary is one (workload, policy) run.
type Summary struct {
	Workload string `json:"workload"`
	Policy   string `json:"policy"`
	// Fleet is the layout's name (RunConfig.Fleet); "" for a fleet of
	// one kind of engine.
	Fleet string `json:"fleet,omitempty"`
	// Duration is the measured span (first send to last answer).
	Duration time.Duration `json:"duration_ns"`
	Requests int           `json:"requests"`
	// Cut counts the requests still in flight at the end of the run
	// (Sample.Cut), which are in no other count but Overload's.
	Cut int `json:"cut,omitempty"`
	// Errors counts failed requests (any non-2xx, transport error, bad
	// stream); Incomplete those among them whose stream ended early.
	Errors     int `json:"errors"`
	Incomplete int `json:"incomplete"`
	// Token totals of the successful requests.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// TokenHitRatio is Σcached / Σprompt; RequestHitRate the fraction of
	// successful requests with any cached token.
	TokenHitRatio  float64     `json:"token_hit_ratio"`
	RequestHitRate float64     `json:"request_hit_rate"`
	TTFT           Percentiles `json:"ttft"`
	Latency        Percentiles `json:"latency"`
	RPS            float64     `json:"requests_per_s"`
	OutputTPS      float64     `json:"output_tokens_per_s"`
	// PerBackend counts successful requests by backend; LoadSpread is
	// max/mean of those counts (1 = perfectly even).
	PerBackend map[string]int `json:"per_backend"`
	LoadSpread float64        `json:"load_spread"`
	// RouterOverhead is the router's added latency (p50 and p99 of
	// through-saltus minus direct), measured separately; zero if not
	// measured.
	RouterOverhead Percentiles `json:"router_overhead"`
	// Classes breaks the hit ratio and TTFT down by Sample.Tag.
	Classes map[string]ClassSummary `json:"classes,omitempty"`
	// Models breaks a run whose requests name several models down by
	// model (SummarizeModels), and Engines is then what each engine
	// serves, in the run's engine order (nil when not known).
	Models  map[string]ModelSummary `json:"models,omitempty"`
	Engines []EngineModels          `json:"engines,omitempty"`
	// Overload is what the requests got by priority, tenant and class
	// (SummarizeOverload); nil when every answer was a 200 and no
	// request named a priority or a key.
	Overload *Overload `json:"overload,omitempty"`
	// SLO judges the run against a TTFT objective and compares the
	// router's predictions with the engines' cached tokens
	// (SummarizeSLO); nil unless RunConfig.SLO is set.
	SLO *SLOSummary `json:"slo,omitempty"`
	// KVEventsStored counts the BlockStored events the run's routers
	// received from the engines' KV events (LocalFleet.KVEvents), summed
	// over routers; 0 when the events are not wired.
	KVEventsStored int64 `json:"kv_events_stored,omitempty"`
}

// Label names the run in tables and plots: its policy, and its fleet
// when it has one.
func (s *Summary) Label() string {
	if s.Fleet == "" {
		return s.Policy
	}
	return s.Policy + " (" + s.Fleet + ")"
}

// EngineModels is one engine of a run and the names it serves.
type EngineModels struct {
	URL    string   `json:"url"`
	Models []string `json:"models"`
}

// ModelSummary is one model's requests in a run: issue 29's model pools,
// where each went and how it fared.
type ModelSummary struct {
	Requests int `json:"requests"`
	// OK counts whole 200 streams; Non200 the answers with another
	// status (0 for none: a transport error).
	OK     int `json:"ok"`
	Non200 int `json:"non_200"`
	// WrongEngine counts answers from an engine (X-Saltus-Backend) that
	// does not serve the model, whatever their status; -1 when the
	// engines' models are not known.
	WrongEngine int `json:"wrong_engine"`
	// NotFoundRouter counts the 404s saltus answered itself (no
	// X-Saltus-Backend: nothing was forwarded), NotFoundEngine those an
	// engine sent.
	NotFoundRouter int `json:"not_found_by_router"`
	NotFoundEngine int `json:"not_found_by_engine"`
	// TokenHitRatio and TTFT are of its whole 200 streams.
	TokenHitRatio float64     `json:"token_hit_ratio"`
	TTFT          Percentiles `json:"ttft"`
	// PerEngine counts its answers (any status) by engine, in the run's
	// engine order; answers from elsewhere are not in it.
	PerEngine []int `json:"per_engine"`
}

// severalModels reports whether the samples name more than one model.
func severalModels(samples []Sample) bool {
	for _, x := range samples {
		if x.Model != samples[0].Model {
			return true
		}
	}
	return false
}

// SummarizeModels breaks samples down by the model they named. engines
// are the run's engine URLs (as X-Saltus-Backend gives them) and served
// what each serves; nil served leaves WrongEngine at -1.
func SummarizeModels(samples []Sample, engines []string, served map[string][]string) map[string]ModelSummary {
	index := make(map[string]int, len(engines))
	for i, e := range engines {
		index[e] = i
	}
	type acc struct {
		ModelSummary
		prompt, cached int64
		ttft           []time.Duration
	}
	accs := map[string]*acc{}
	for _, x := range samples {
		if x.Cut {
			continue // no answer: nothing to say about its model's pool
		}
		a := accs[x.Model]
		if a == nil {
			a = &acc{ModelSummary: ModelSummary{PerEngine: make([]int, len(engines))}}
			if served == nil {
				a.WrongEngine = -1
			}
			accs[x.Model] = a
		}
		a.Requests++
		if x.Status != 200 {
			a.Non200++
		}
		if x.Status == 404 {
			if x.Backend == "" {
				a.NotFoundRouter++
			} else {
				a.NotFoundEngine++
			}
		}
		if x.Backend != "" {
			if i, ok := index[x.Backend]; ok {
				a.PerEngine[i]++
			}
			if served != nil && !slices.Contains(served[x.Backend], x.Model) {
				a.WrongEngine++
			}
		}
		if x.Err == "" {
			a.OK++
			a.prompt += int64(x.Prompt)
			a.cached += int64(x.Cached)
			a.ttft = append(a.ttft, x.TTFT)
		}
	}
	out := make(map[string]ModelSummary, len(accs))
	for m, a := range accs {
		if a.prompt > 0 {
			a.TokenHitRatio = float64(a.cached) / float64(a.prompt)
		}
		a.TTFT = percentiles(a.ttft)
		out[m] = a.ModelSummary
	}
	return out
}

// ClassSummary is one request class of a run.
type ClassSummary struct {
	Requests      int         `json:"requests"`
	TokenHitRatio float64     `json:"token_hit_ratio"`
	TTFT          Percentiles `json:"ttft"`
}

// Summarize computes a run's summary from its samples; backends are the
// run's backend URLs (so that one that got nothing counts in the spread).
func Summarize(workload, policy string, backends []string, samples []Sample) Summary {
	s := Summary{Workload: workload, Policy: policy, PerBackend: map[string]int{}}
	for _, b := range backends {
		s.PerBackend[b] = 0
	}
	var ttft, lat []time.Duration
	var hits int
	var first, last time.Duration = math.MaxInt64, 0
	classes := map[string][]Sample{}
	for _, x := range samples {
		if x.Cut {
			s.Cut++
			continue
		}
		s.Requests++
		first = min(first, x.At)
		last = max(last, x.At+x.Latency)
		if x.Err != "" {
			s.Errors++
			if x.Incomplete {
				s.Incomplete++
			}
			continue
		}
		s.PromptTokens += int64(x.Prompt)
		s.CachedTokens += int64(x.Cached)
		s.OutputTokens += int64(x.Output)
		if x.Cached > 0 {
			hits++
		}
		ttft = append(ttft, x.TTFT)
		lat = append(lat, x.Latency)
		if x.Backend != "" {
			s.PerBackend[x.Backend]++
		}
		if x.Tag != "" {
			classes[x.Tag] = append(classes[x.Tag], x)
		}
	}
	ok := s.Requests - s.Errors
	if s.PromptTokens > 0 {
		s.TokenHitRatio = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	if ok > 0 {
		s.RequestHitRate = float64(hits) / float64(ok)
	}
	s.TTFT, s.Latency = percentiles(ttft), percentiles(lat)
	if last > first {
		s.Duration = last - first
		s.RPS = float64(ok) / s.Duration.Seconds()
		s.OutputTPS = float64(s.OutputTokens) / s.Duration.Seconds()
	}
	s.LoadSpread = spread(s.PerBackend)
	s.Overload = SummarizeOverload(samples, s.Duration)
	if len(classes) > 0 {
		s.Classes = map[string]ClassSummary{}
		for tag, xs := range classes {
			var p, c int64
			var t []time.Duration
			for _, x := range xs {
				p += int64(x.Prompt)
				c += int64(x.Cached)
				t = append(t, x.TTFT)
			}
			cs := ClassSummary{Requests: len(xs), TTFT: percentiles(t)}
			if p > 0 {
				cs.TokenHitRatio = float64(c) / float64(p)
			}
			s.Classes[tag] = cs
		}
	}
	return s
}

// Overload is what users felt of an overloaded fleet (issue 30): each
// group of a run's requests, the answers it got and how long they took.
type Overload struct {
	All Outcomes `json:"all"`
	// ByPriority groups the requests by their "priority" ("-10", "0",
	// "10"), when some request named one; ByTenant by their key ("" is
	// "none"), when some request had one; ByClass by Sample.Tag.
	ByPriority map[string]Outcomes `json:"by_priority,omitempty"`
	ByTenant   map[string]Outcomes `json:"by_tenant,omitempty"`
	ByClass    map[string]Outcomes `json:"by_class,omitempty"`
	// Late counts the open-loop requests sent late (Sample.Late): more
	// users (--users) would have kept the arrivals open.
	Late int `json:"late"`
}

// Outcomes is one group of requests and what they got.
type Outcomes struct {
	Requests int `json:"requests"`
	// OK counts whole 200 streams; Failed the others, by status ("429",
	// "503"), "none" for no answer, "cut" for a 2xx whose stream failed
	// and "unfinished" for a request still in flight at the end of the
	// run (Sample.Cut); RetryAfter the non-2xx answers that carried
	// Retry-After.
	OK         int            `json:"ok"`
	Failed     map[string]int `json:"failed,omitempty"`
	RetryAfter int            `json:"retry_after"`
	// TTFT and Latency are of the OK requests; Goodput is OK requests a
	// second of the run (Summary.Duration).
	TTFT    Percentiles `json:"ttft"`
	Latency Percentiles `json:"latency"`
	Goodput float64     `json:"goodput_per_s"`
}

// OKShare is OK / Requests (0 for none).
func (o Outcomes) OKShare() float64 {
	if o.Requests == 0 {
		return 0
	}
	return float64(o.OK) / float64(o.Requests)
}

// SummarizeOverload groups samples by priority, tenant and class; nil
// when every one is a 200 stream (or cut at the end of the run) and none
// named a priority or a key.
// span is the run's (Summary.Duration), for goodput.
func SummarizeOverload(samples []Sample, span time.Duration) *Overload {
	interesting, priorities, tenants := false, false, false
	for _, x := range samples {
		priorities = priorities || x.Priority != 0
		tenants = tenants || x.Key != ""
		// A request cut at the end of a run (Cut) says nothing of
		// overload: every closed-loop run has some.
		interesting = interesting || (x.Err != "" && !x.Cut) || x.Priority != 0 || x.Key != ""
	}
	if !interesting {
		return nil
	}
	var o Overload
	byPriority, byTenant, byClass := map[string][]Sample{}, map[string][]Sample{}, map[string][]Sample{}
	for _, x := range samples {
		if x.Late {
			o.Late++
		}
		if priorities {
			k := strconv.Itoa(x.Priority)
			byPriority[k] = append(byPriority[k], x)
		}
		if tenants {
			k := cmp.Or(x.Key, "none")
			byTenant[k] = append(byTenant[k], x)
		}
		if x.Tag != "" {
			byClass[x.Tag] = append(byClass[x.Tag], x)
		}
	}
	o.All = outcomes(samples, span)
	group := func(m map[string][]Sample) map[string]Outcomes {
		if len(m) == 0 {
			return nil
		}
		out := make(map[string]Outcomes, len(m))
		for k, xs := range m {
			out[k] = outcomes(xs, span)
		}
		return out
	}
	o.ByPriority, o.ByTenant, o.ByClass = group(byPriority), group(byTenant), group(byClass)
	return &o
}

func outcomes(xs []Sample, span time.Duration) Outcomes {
	o := Outcomes{Requests: len(xs)}
	var ttft, lat []time.Duration
	for _, x := range xs {
		switch {
		case x.Cut:
			o.fail("unfinished")
		case x.Err == "":
			o.OK++
			ttft = append(ttft, x.TTFT)
			lat = append(lat, x.Latency)
			continue
		case x.Status == 0:
			o.fail("none")
		case x.Status/100 == 2:
			o.fail("cut")
		default:
			o.fail(strconv.Itoa(x.Status))
			if x.RetryAfter {
				o.RetryAfter++
			}
		}
	}
	o.TTFT, o.Latency = percentiles(ttft), percentiles(lat)
	if span > 0 {
		o.Goodput = float64(o.OK) / span.Seconds()
	}
	return o
}

func (o *Outcomes) fail(kind string) {
	if o.Failed == nil {
		o.Failed = map[string]int{}
	}
	o.Failed[kind]++
}

// percentiles returns the nearest-rank p50, p95 and p99 of ds in ms (ds
// is sorted in place).
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	return Percentiles{P50: ms(rank(ds, 0.50)), P95: ms(rank(ds, 0.95)), P99: ms(rank(ds, 0.99))}
}

// rank is the nearest-rank percentile q of sorted ds.
func rank(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// spread is max/mean of the counts; 0 when there are none.
func spread(m map[string]int) float64 {
	if len(m) == 0 {
		return 0
	}
	total, top := 0, 0
	for _, n := range m {
		total += n
		top = max(top, n)
	}
	if total == 0 {
		return 0
	}
	return float64(top) / (float64(total) / float64(len(m)))
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
