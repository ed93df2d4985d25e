package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saltus-lb/saltus/bench/workload"
	"github.com/saltus-lb/saltus/rules"
)

// The workload types, as the benchmark drives them.
type (
	Message  = workload.Message
	Request  = workload.Request
	User     = workload.User
	Workload = workload.Workload
)

// Closer stops something the benchmark started.
type Closer interface {
	Close(ctx context.Context) error
}

// Fleet starts what one run needs, cold: the engines and a router in
// front of them with a policy.
type Fleet interface {
	// StartEngines starts n engines and returns their base URLs.
	StartEngines(n int) ([]string, Closer, error)
	// StartRouter starts a router with policy over backends (or a
	// cluster of routers sharing routes) and returns their base URLs.
	StartRouter(policy string, backends []string) ([]string, Closer, error)
}

// ModelFleet is a Fleet that knows which models its engines serve: a run
// whose requests name several models counts the answers from an engine
// that does not serve theirs (ModelSummary.WrongEngine).
type ModelFleet interface {
	// ServedModels returns the names each of engines serves.
	ServedModels(ctx context.Context, engines []string) (map[string][]string, error)
}

// RunConfig is one benchmark invocation.
type RunConfig struct {
	Backends  int           // engines per run
	Users     int           // closed-loop users
	Duration  time.Duration // measured time per run
	Policies  []string      // in order; each run starts cold
	Workloads []Workload
	Model     string
	// Fleet names the fleet's layout in the summaries (Summary.Fleet);
	// "" for a fleet of one kind of engine.
	Fleet string
	// TimeScale multiplies every measured duration (and divides rates):
	// the engines' --speedup, so reports read in simulated time. 0 = 1.
	TimeScale float64
	// Drain is how long each run's requests in flight at the end of
	// Duration get to finish (DriveConfig.Drain); 0 cuts them.
	Drain time.Duration
	// OverheadPairs > 0 measures the router's added latency after each
	// run with that many request pairs (MeasureOverhead).
	OverheadPairs int
	// SLO, when set, is a TTFT objective (simulated time) every run is
	// judged against (Summary.SLO); RouteBlock is the router's tokens
	// per route block, which turns its X-Saltus-Route into predicted
	// tokens (0: predictions not read).
	SLO        time.Duration
	RouteBlock int
	// Progress, when set, gets one progress bar per run.
	Progress io.Writer
	// Log, when set, gets a line per finished run.
	Log io.Writer
}

// Validate reports every invalid field.
func (c RunConfig) Validate() error {
	var errs []error
	if c.Backends <= 0 {
		errs = append(errs, fmt.Errorf("backends must be positive, got %d", c.Backends))
	}
	if c.Users <= 0 {
		errs = append(errs, fmt.Errorf("users must be positive, got %d", c.Users))
	}
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration must be positive, got %v", c.Duration))
	}
	if len(c.Policies) == 0 {
		errs = append(errs, errors.New("policies: name at least one"))
	}
	if len(c.Workloads) == 0 {
		errs = append(errs, errors.New("workloads: name at least one"))
	}
	return errors.Join(errs...)
}

// Run runs every workload under every policy on fresh engines and returns
// the report (its Command and Setup are the caller's to fill).
func Run(ctx context.Context, cfg RunConfig, fleet Fleet) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC(), Setup: map[string]string{}}
	for _, wl := range cfg.Workloads {
		for _, pol := range cfg.Policies {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			sum, samples, err := runOne(ctx, cfg, fleet, wl, pol)
			if err != nil {
				return rep, fmt.Errorf("%s with %s: %w", wl.Name(), pol, err)
			}
			rep.Runs = append(rep.Runs, sum)
			rep.Samples = append(rep.Samples, samples)
			if cfg.Log != nil {
				fmt.Fprintf(cfg.Log, "%-10s %-16s %5d requests %3d errors  hit ratio %.3f  TTFT p50 %6.0f ms  p99 %6.0f ms  %.2f req/s\n",
					sum.Workload, sum.Label(), sum.Requests, sum.Errors, sum.TokenHitRatio, sum.TTFT.P50, sum.TTFT.P99, sum.RPS)
				if x := sum.SLO; x != nil {
					fmt.Fprintf(cfg.Log, "    TTFT mean %.0f ms, goodput (TTFT <= %v) %.2f req/s, %d failed", x.TTFTMean, x.SLO, x.Goodput, x.Failed)
					if x.Predicted {
						fmt.Fprintf(cfg.Log, ", predicted hit ratio %.3f against the engines' %.3f", x.PredictedRatio, x.TokenHitRatio)
					}
					fmt.Fprintln(cfg.Log)
				}
				if sum.KVEventsStored > 0 {
					fmt.Fprintf(cfg.Log, "    saltus received %d BlockStored KV events from the engines\n", sum.KVEventsStored)
				}
				for _, m := range sortedKeys(sum.Models) {
					x := sum.Models[m]
					fmt.Fprintf(cfg.Log, "    %-14s %5d requests %3d non-200 %3d on a wrong engine  404 by saltus %d, by an engine %d  hit ratio %.3f\n",
						m, x.Requests, x.Non200, x.WrongEngine, x.NotFoundRouter, x.NotFoundEngine, x.TokenHitRatio)
				}
			}
		}
	}
	return rep, nil
}

// runOne starts engines and a router, drives the workload's users for
// cfg.Duration, and stops everything.
func runOne(ctx context.Context, cfg RunConfig, fleet Fleet, wl Workload, policy string) (Summary, []Sample, error) {
	urls, engines, err := fleet.StartEngines(cfg.Backends)
	if err != nil {
		return Summary{}, nil, fmt.Errorf("engines: %w", err)
	}
	defer closeQuietly(engines)
	routerURLs, router, err := fleet.StartRouter(policy, urls)
	if err != nil {
		return Summary{}, nil, fmt.Errorf("router: %w", err)
	}
	defer closeQuietly(router)

	if r, ok := wl.(workload.Replay); ok {
		r.Restart() // the same requests at the same times for every policy
	}
	samples := Drive(ctx, DriveConfig{
		URLs: routerURLs, Users: cfg.Users, Duration: cfg.Duration, Model: cfg.Model,
		Progress: cfg.Progress, Label: wl.Name() + " " + policy, TimeScale: cfg.TimeScale, Drain: cfg.Drain,
	}, wl)
	sum := Summarize(wl.Name(), policy, urls, samples)
	sum.Fleet = cfg.Fleet
	if k, ok := router.(kvCounter); ok {
		sum.KVEventsStored = k.KVEventsStored() // before the deferred Close
	}
	if cfg.SLO > 0 {
		slo := SummarizeSLO(samples, cfg.SLO, sum.Duration, cfg.RouteBlock)
		sum.SLO = &slo
	}
	if severalModels(samples) {
		var served map[string][]string
		if mf, ok := fleet.(ModelFleet); ok {
			if served, err = mf.ServedModels(ctx, urls); err != nil && cfg.Log != nil {
				fmt.Fprintf(cfg.Log, "%s %s: the engines' models are not known, wrong-engine answers not counted: %v\n", wl.Name(), policy, err)
			}
		}
		sum.Models = SummarizeModels(samples, urls, served)
		if served != nil {
			for _, u := range urls {
				sum.Engines = append(sum.Engines, EngineModels{URL: u, Models: served[u]})
			}
		}
	}
	if cfg.OverheadPairs > 0 {
		oh, err := MeasureOverhead(ctx, routerURLs[0], cfg.OverheadPairs, cfg.Model)
		if err != nil && cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "%s %s: router overhead not measured: %v\n", wl.Name(), policy, err)
		}
		sum.RouterOverhead = oh
	}
	return sum, samples, nil
}

func closeQuietly(c Closer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Close(ctx) // the run's numbers are taken; a slow stop only delays the next run
}

// DriveConfig is one load run against a router (or an engine).
type DriveConfig struct {
	// URLs are the routers' base URLs, e.g. http://127.0.0.1:8080; with
	// several, requests go to them in turn (round robin over every
	// user's requests), as a TCP balancer in front of router replicas
	// spreads them.
	URLs     []string
	Users    int
	Duration time.Duration
	Model    string
	Progress io.Writer // optional progress bar
	Label    string
	// TimeScale multiplies the samples' durations (RunConfig.TimeScale).
	TimeScale float64
	// Drain is how long the requests in flight at the end of Duration
	// get to finish (nothing new is sent after Duration); 0 cuts them
	// then. A request still in flight after it is a Cut sample.
	Drain time.Duration
}

// Drive runs cfg.Users closed-loop users of wl against cfg.URLs for
// cfg.Duration, or until every user has no more requests and its last
// one is answered (a trace), and returns every request's sample. Requests in flight when
// the time is up (Duration, then Drain) are cut: their samples have Cut
// set and no answer.
func Drive(ctx context.Context, cfg DriveConfig, wl Workload) []Sample {
	reqCtx, cancelReqs := context.WithTimeout(ctx, cfg.Duration+max(cfg.Drain, 0))
	defer cancelReqs()
	ctx, cancel := context.WithTimeout(reqCtx, cfg.Duration) // sends
	defer cancel()
	client := NewClient(cfg.Users)
	defer client.Close()
	start := time.Now()
	bar := newProgress(cfg.Progress, cfg.Label, cfg.Duration)
	defer bar.finish()

	var mu sync.Mutex
	var samples []Sample
	var turn atomic.Uint64 // the next request's router
	g := rules.NewGroup(ctx)
	for i := range cfg.Users {
		u := wl.NewUser(i)
		g.Go("bench.user", func(ctx context.Context) {
			for ctx.Err() == nil { // nothing new is sent after Duration
				req, ok := u.Next()
				if !ok {
					return
				}
				wait := req.Think
				if req.At > 0 { // open-loop trace: send at start+At
					wait = max(wait, req.At-time.Since(start))
				}
				if wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-ctx.Done():
						t.Stop()
						return
					case <-t.C:
					}
				}
				model := cfg.Model
				if req.Model != "" {
					model = req.Model
				}
				path, body := requestBody(req, model)
				at := time.Since(start)
				url := cfg.URLs[int((turn.Add(1)-1)%uint64(len(cfg.URLs)))]
				o := client.DoAs(reqCtx, url+path, body, req.Key)
				cut := o.Err != nil && reqCtx.Err() != nil // cut by the end of the run: no answer
				s := SampleOf(req.Tag, at, o)
				if cut {
					s = Sample{Tag: req.Tag, At: at, Cut: true, Err: "cut by the end of the run"}
				}
				s.Model, s.Priority, s.Key = model, req.Priority, req.Key
				s.Due, s.Input = req.At, len(req.PromptIDs)
				s.Late = req.At > 0 && at-req.At > lateSend
				if k := cfg.TimeScale; k > 0 && k != 1 {
					s.At = time.Duration(float64(s.At) * k)
					s.TTFT = time.Duration(float64(s.TTFT) * k)
					s.Latency = time.Duration(float64(s.Latency) * k)
				}
				mu.Lock()
				samples = append(samples, s)
				n := len(samples)
				mu.Unlock()
				bar.update(time.Since(start), n)
				if cut {
					return
				}
				u.Reply(o.Text)
			}
		})
	}
	// Until Duration, or until every user is done: a trace that is used
	// up and answered ends its run early.
	_ = g.Wait(ctx) // an error: Duration is over
	// The users send nothing more; those with a request in flight wait
	// for its answer until reqCtx ends (Drain).
	_ = g.Wait(reqCtx) // an error: the drain is over; Stop cuts the rest
	g.Stop()
	_ = g.Wait(context.Background()) // users return once their request is cut
	return samples
}

// lateSend is how long after its time (Request.At) an open-loop request
// may be sent before it counts as late (Sample.Late): every user was
// busy, so the load was less open than the workload asked.
const lateSend = 20 * time.Millisecond

// requestBody is the streamed OpenAI request for req.
func requestBody(req Request, model string) (path string, body []byte) {
	type streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	type chat struct {
		Model         string        `json:"model"`
		Messages      []Message     `json:"messages,omitempty"`
		Prompt        any           `json:"prompt,omitempty"`
		MaxTokens     int           `json:"max_tokens,omitempty"`
		IgnoreEOS     bool          `json:"ignore_eos,omitempty"`
		Priority      int           `json:"priority,omitempty"`
		Stream        bool          `json:"stream"`
		StreamOptions streamOptions `json:"stream_options"`
	}
	c := chat{Model: model, Messages: req.Messages, MaxTokens: req.MaxTokens, IgnoreEOS: req.IgnoreEOS, Priority: req.Priority, Stream: true, StreamOptions: streamOptions{true}}
	path = "/v1/chat/completions"
	switch {
	case req.PromptIDs != nil: // vLLM takes token ids as the prompt
		c.Prompt, path = req.PromptIDs, "/v1/completions"
	case len(req.Messages) == 0:
		c.Prompt, path = req.Prompt, "/v1/completions"
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic("BUG: cannot marshal a request: " + err.Error())
	}
	return path, b
}

// labelWidth pads progress labels so that bars line up.
func labelWidth(s string) string {
	if len(s) >= 28 {
		return s[:28]
	}
	return s + strings.Repeat(" ", 28-len(s))
}
