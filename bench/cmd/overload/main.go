// Command overload measures how a router in front of saturated engines
// answers more requests than the engines hold (issue 30): four scenarios
// of non-streamed chat completions against one URL, each printed as one
// line of numbers. It sits outside the request path: a client of saltus
// (or of anything OpenAI-compatible). Each scenario's clients are
// goroutines of one rules.Group that own their own results, merged after
// the group is joined.
//
//   - burst: 48 clients × 4 requests, each client sending its next when the
//     previous one is answered: answers by status, and whether the non-200
//     ones carry Retry-After.
//   - priority: 24 clients with vLLM's "priority": -10 and 24 with 10, all
//     at once, 4 requests each: per class the median and p90 latency of the
//     200 answers and the share of 200; the ratio high/low of the medians.
//   - fairness: 44 clients of key "big" and 4 of key "small"
//     (Authorization: Bearer …), 4 requests each, at once: per key the
//     median latency of the 200 answers and the share of 200; the ratio
//     small/big of the medians.
//   - spike: 384 requests at once, one each: answers by status, the non-200
//     without Retry-After, and when the last answer came.
//
// --arrival says when the requests of burst, priority and fairness are
// sent (spike's are always at once):
//
//   - closed (default, the scenarios above): each client sends its next
//     request when the previous one is answered. Under strict priority the
//     low class then waits once, for its first requests, and runs alone
//     after that: the classes' medians are equal by construction and the
//     order shows in the tail only.
//   - burst: every client sends all its requests at once, without waiting
//     for answers (48 × 4 = 192 requests at the start).
//   - open: requests arrive at --rate a second for --duration (Poisson, or
//     evenly spaced with --spacing fixed), rate × duration in all, the k-th
//     sent as client k mod 48's, so each class keeps its share of the
//     clients (priority half and half, fairness 4 of 48) and saturation is
//     sustained: the queue's order shows at the median.
//
// Every request has --answer-timeout to be answered (an unanswered one
// counts as err), and every scenario --scenario-timeout in all. Prompts are
// distinct per request (1–2 KB of text) so that no two share a prefix past
// a few words. Each class's line gives its requests, share of 200, p50, p90
// and p99 of the 200s' latency (send to last body byte); each scenario's the
// answers by status and the non-200 with and without Retry-After.
//
//	go run ./bench/cmd/overload --url http://127.0.0.1:8080 --model sim-llama
//	go run ./bench/cmd/overload --arrival open --rate 12 --duration 30s --scenarios priority
//
// scripts/overload-scenarios.sh starts the engines and saltus around it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/saltus-lb/saltus/rules"
)

// options are the command's flags.
type options struct {
	url             string
	model           string
	maxTokens       int
	answerTimeout   time.Duration
	scenarioTimeout time.Duration
	scenarios       []string
	words           []string // the prompts' vocabulary
	// arrival is closed, burst or open (the command's doc); rate (a
	// second), duration and spacing (poisson or fixed) are open's.
	arrival  string
	rate     float64
	duration time.Duration
	spacing  string
}

// maxOpenRequests bounds an open run's requests (rate × duration): each
// is a goroutine waiting for its send time.
const maxOpenRequests = 20000

// result is one request's outcome.
type result struct {
	status     int           // 0: no answer (err)
	retryAfter bool          // the answer carried Retry-After
	sample     string        // a non-200 answer's headers of note and body, shortened
	latency    time.Duration // from sending to the answer's last body byte
	end        time.Duration // from the scenario's start to the answer's last body byte
	err        error
}

// client is one simulated user: count requests, one after another.
type client struct {
	id       int
	count    int
	priority *int   // vLLM's "priority" field, if set
	key      string // Authorization: Bearer key, if set
}

func main() {
	var o options
	var scen string
	flag.StringVar(&o.url, "url", "http://127.0.0.1:8080", "router base `URL` (POST {url}/v1/chat/completions)")
	flag.StringVar(&o.model, "model", "sim-llama", "model `name` of each request")
	flag.IntVar(&o.maxTokens, "max-tokens", 50, "max_tokens of each request, `tokens`")
	flag.DurationVar(&o.answerTimeout, "answer-timeout", 90*time.Second, "`duration` each request has to be answered whole; past it, it counts as err")
	flag.DurationVar(&o.scenarioTimeout, "scenario-timeout", 5*time.Minute, "`duration` one scenario may last in all; past it, requests in flight count as err")
	flag.StringVar(&scen, "scenarios", "burst,priority,fairness,spike", "comma-separated `list` of scenarios to run, in order")
	flag.StringVar(&o.arrival, "arrival", "closed", "when burst, priority and fairness send, `mode`: closed (each client's next request after its last answer), burst (every request at once) or open (--rate a second for --duration)")
	flag.Float64Var(&o.rate, "rate", 12, "open arrival: requests a second, `rate` (12: about 1.1 × what scripts/overload-scenarios.sh's four engines answer)")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "open arrival: `duration` of the arrivals; rate × duration requests in all")
	flag.StringVar(&o.spacing, "spacing", "poisson", "open arrival: `spacing` of the arrivals, poisson (exponential gaps) or fixed (1/rate apart)")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "overload: %v\n", err)
		os.Exit(2)
	}
	o.scenarios = strings.Split(scen, ",")
	o.words = strings.Fields(fillerText)
	for _, s := range o.scenarios {
		if scenario(s) == nil {
			fmt.Fprintf(os.Stderr, "overload: unknown scenario %q\n", s)
			os.Exit(2)
		}
	}
	tr := &http.Transport{
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024, // the spike's 384 connections stay open for the next scenario
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for _, s := range o.scenarios {
		fmt.Println(scenario(s)(hc, &o))
		tr.CloseIdleConnections() // each scenario starts with fresh connections
	}
}

// validate checks the arrival flags.
func (o *options) validate() error {
	switch o.arrival {
	case "closed", "burst":
		return nil
	case "open":
	default:
		return fmt.Errorf("--arrival: want closed, burst or open, got %q", o.arrival)
	}
	if o.spacing != "poisson" && o.spacing != "fixed" {
		return fmt.Errorf("--spacing: want poisson or fixed, got %q", o.spacing)
	}
	if n := o.rate * o.duration.Seconds(); !(o.rate > 0) || !(n >= 1) || n > maxOpenRequests {
		return fmt.Errorf("--rate × --duration: want 1 to %d requests, got %v a second for %v", maxOpenRequests, o.rate, o.duration)
	}
	return nil
}

// scenario returns the run of the scenario named, which returns its line;
// nil for an unknown name.
func scenario(name string) func(*http.Client, *options) string {
	switch name {
	case "burst":
		return burst
	case "priority":
		return priority
	case "fairness":
		return fairness
	case "spike":
		return spike
	}
	return nil
}

func burst(hc *http.Client, o *options) string {
	cs := make([]client, 48)
	for i := range cs {
		cs[i] = client{id: i, count: 4}
	}
	rs, wall := sendAll(hc, o, "burst", cs)
	all := flatten(rs)
	return fmt.Sprintf("burst%s: requests %d, %s; non-200 with Retry-After %d, without %d; wall %.1fs",
		o.mode(), len(all), byStatus(all), countRA(all, true), countRA(all, false), wall.Seconds())
}

func priority(hc *http.Client, o *options) string {
	hi, lo := -10, 10
	cs := make([]client, 48)
	for i := range cs {
		p := &hi
		if i%2 == 1 {
			p = &lo // interleaved, so neither class starts first
		}
		cs[i] = client{id: i, count: 4, priority: p}
	}
	rs, wall := sendAll(hc, o, "priority", cs)
	var high, low []result
	for i, r := range rs {
		if i%2 == 0 {
			high = append(high, r...)
		} else {
			low = append(low, r...)
		}
	}
	all := append(high, low...)
	return fmt.Sprintf("priority%s: high(-10) %s; low(10) %s; p50 high/low %s, p90 %s; all %s; non-200 with Retry-After %d, without %d; wall %.1fs",
		o.mode(), classLine(high), classLine(low), ratio(p(high, 50), p(low, 50)), ratio(p(high, 90), p(low, 90)),
		byStatus(all), countRA(all, true), countRA(all, false), wall.Seconds())
}

func fairness(hc *http.Client, o *options) string {
	cs := make([]client, 48)
	for i := range cs {
		key := "big"
		if i%12 == 0 {
			key = "small" // 4 of 48, spread over the start order
		}
		cs[i] = client{id: i, count: 4, key: key}
	}
	rs, wall := sendAll(hc, o, "fairness", cs)
	var small, big []result
	for i, r := range rs {
		if cs[i].key == "small" {
			small = append(small, r...)
		} else {
			big = append(big, r...)
		}
	}
	all := append(small, big...)
	return fmt.Sprintf("fairness%s: small(4 clients) %s; big(44 clients) %s; p50 small/big %s, p90 %s; all %s; non-200 with Retry-After %d, without %d; wall %.1fs",
		o.mode(), classLine(small), classLine(big), ratio(p(small, 50), p(big, 50)), ratio(p(small, 90), p(big, 90)),
		byStatus(all), countRA(all, true), countRA(all, false), wall.Seconds())
}

func spike(hc *http.Client, o *options) string {
	cs := make([]client, 384)
	for i := range cs {
		cs[i] = client{id: i, count: 1}
	}
	rs, _ := run(hc, o, "spike", cs)
	all := flatten(rs)
	var last time.Duration
	for _, r := range all {
		last = max(last, r.end)
	}
	return fmt.Sprintf("spike: requests %d, %s; non-200 without Retry-After %d; last answer at %.1fs",
		len(all), byStatus(all), countRA(all, false), last.Seconds())
}

// mode names the arrival in a scenario's line: "" for closed (so that
// the closed loop's lines read as before), " (burst)", " (open 12/s
// poisson 30s)".
func (o *options) mode() string {
	switch o.arrival {
	case "burst":
		return " (burst)"
	case "open":
		return fmt.Sprintf(" (open %g/s %s %v)", o.rate, o.spacing, o.duration)
	}
	return ""
}

// sendAll sends the clients' requests as --arrival says and returns each
// client's results, in the clients' order, and the time until the last
// answer.
func sendAll(hc *http.Client, o *options, scenario string, cs []client) ([][]result, time.Duration) {
	switch o.arrival {
	case "burst":
		var shots []shot
		for _, c := range cs {
			for n := range c.count {
				shots = append(shots, shot{client: c.id, n: n})
			}
		}
		return runShots(hc, o, scenario, cs, shots)
	case "open":
		return runShots(hc, o, scenario, cs, openShots(o, len(cs), scenario))
	}
	return run(hc, o, scenario, cs)
}

// shot is one request of an open or burst run: its client, its number
// among the client's, and when to send it after the start.
type shot struct {
	client, n int
	at        time.Duration
}

// openShots are rate × duration arrivals (validate bounds the count),
// Poisson or evenly spaced, the k-th for client k mod clients. The draws
// are seeded by the scenario's name: a run is repeatable.
func openShots(o *options, clients int, scenario string) []shot {
	total := int(o.rate*o.duration.Seconds() + 0.5)
	rng := rand.New(rand.NewPCG(uint64(len(scenario)), 0x6f70656e))
	gap := float64(time.Second) / o.rate
	shots := make([]shot, total)
	var t float64
	for k := range shots {
		shots[k] = shot{client: k % clients, n: k / clients, at: time.Duration(t)}
		if o.spacing == "fixed" {
			t += gap
		} else {
			t += rng.ExpFloat64() * gap
		}
	}
	return shots
}

// runShots sends each shot from its own goroutine at its time and returns
// each client's results (its shots in order of n) and the time until the
// last answer. Goroutines: one per shot, at most maxOpenRequests (open)
// or 48 × 4 (burst).
func runShots(hc *http.Client, o *options, scenario string, cs []client, shots []shot) ([][]result, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), o.scenarioTimeout)
	defer cancel()
	g := rules.NewGroup(ctx)
	rs := make([]result, len(shots)) // rs[i] is shot i's, written by its goroutine only
	start := make(chan struct{})
	var t0 time.Time // set before start is closed; read after
	for i, s := range shots {
		c := cs[s.client]
		g.Go(fmt.Sprintf("overload-%s-%d", scenario, i), func(ctx context.Context) {
			rng := rand.New(rand.NewPCG(uint64(c.id)<<20|uint64(s.n), uint64(len(scenario))))
			body := requestBody(o, scenario, c, s.n, rng)
			select {
			case <-start:
			case <-ctx.Done():
				rs[i] = result{err: ctx.Err()}
				return
			}
			if wait := s.at - time.Since(t0); wait > 0 {
				tm := time.NewTimer(wait)
				select {
				case <-tm.C:
				case <-ctx.Done():
					tm.Stop()
					rs[i] = result{err: ctx.Err()}
					return
				}
			}
			r := send(ctx, hc, o, c, body)
			r.end = time.Since(t0)
			rs[i] = r
		})
	}
	t0 = time.Now()
	close(start)
	// Every shot returns by the scenario's deadline (each request's
	// context ends with ctx), so this Wait is bounded by it.
	if err := g.Wait(context.Background()); err != nil {
		panic("BUG: Wait without a deadline returned " + err.Error())
	}
	wall := time.Since(t0)
	g.Stop()
	out := make([][]result, len(cs))
	for i, s := range shots { // shots are in order of n within each client
		out[s.client] = append(out[s.client], rs[i])
	}
	return out, wall
}

// run starts every client at once and returns each one's results, in the
// clients' order, and the time until the last one finished.
func run(hc *http.Client, o *options, scenario string, cs []client) ([][]result, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), o.scenarioTimeout)
	defer cancel()
	g := rules.NewGroup(ctx)
	out := make([][]result, len(cs))
	start := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(len(cs))
	t0 := time.Now()
	for i := range cs {
		c := cs[i]
		g.Go(fmt.Sprintf("overload-%s-%d", scenario, c.id), func(ctx context.Context) {
			rng := rand.New(rand.NewPCG(uint64(c.id), uint64(len(scenario))))
			ready.Done()
			<-start // closed once every client is here: bounded
			rs := make([]result, 0, c.count)
			for n := range c.count {
				if ctx.Err() != nil {
					rs = append(rs, result{err: ctx.Err()})
					continue
				}
				body := requestBody(o, scenario, c, n, rng)
				r := send(ctx, hc, o, c, body)
				r.end = time.Since(t0)
				rs = append(rs, r)
			}
			out[c.id] = rs
		})
	}
	ready.Wait()
	t0 = time.Now()
	close(start)
	// Every client returns by the scenario's deadline (each request's
	// context ends with ctx), so this Wait is bounded by it.
	if err := g.Wait(context.Background()); err != nil {
		panic("BUG: Wait without a deadline returned " + err.Error())
	}
	g.Stop()
	return out, time.Since(t0)
}

// send posts one chat completion and reads its answer whole.
func send(ctx context.Context, hc *http.Client, o *options, c client, body []byte) result {
	ctx, cancel := context.WithTimeout(ctx, o.answerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	t := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return result{err: err, latency: time.Since(t)}
	}
	defer resp.Body.Close()
	var ans bytes.Buffer
	_, err = io.Copy(&ans, io.LimitReader(resp.Body, 1<<20))
	r := result{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After") != "", latency: time.Since(t)}
	if r.status != 200 {
		r.sample = fmt.Sprintf("Retry-After %q, X-Saltus-Backend %q, after %.2fs: %.300s",
			resp.Header.Get("Retry-After"), resp.Header.Get("X-Saltus-Backend"), r.latency.Seconds(), ans.Bytes())
	}
	if err != nil {
		r.status, r.err = 0, fmt.Errorf("cannot read the answer (status %d): %w", resp.StatusCode, err)
	}
	return r
}

// fillerText is the vocabulary of the prompts' text.
const fillerText = ("the router sends each request to the engine that holds its prefix and queues what no engine can take until a slot frees up so that clients see an answer rather than a refusal")

// requestBody is one request's JSON: a prompt of 1–2 KB that starts with
// the scenario, the client and the request, so prompts share no prefix.
func requestBody(o *options, scenario string, c client, n int, rng *rand.Rand) []byte {
	size := 1024 + rng.IntN(1024)
	var b strings.Builder
	fmt.Fprintf(&b, "%s client %d request %d %x:", scenario, c.id, n, rng.Uint64())
	for b.Len() < size {
		b.WriteByte(' ')
		b.WriteString(o.words[rng.IntN(len(o.words))])
	}
	m := map[string]any{
		"model":      o.model,
		"messages":   []map[string]string{{"role": "user", "content": b.String()}},
		"max_tokens": o.maxTokens,
		"stream":     false,
	}
	if c.priority != nil {
		m["priority"] = *c.priority
	}
	body, err := json.Marshal(m)
	if err != nil {
		panic("BUG: cannot encode a request: " + err.Error())
	}
	return body
}

func flatten(rs [][]result) []result {
	var all []result
	for _, r := range rs {
		all = append(all, r...)
	}
	return all
}

// byStatus counts answers by status, "err" for none, in status order, and
// names the first error.
func byStatus(rs []result) string {
	n := map[int]int{}
	var first error
	for _, r := range rs {
		if n[r.status] == 0 && r.sample != "" {
			fmt.Fprintf(os.Stderr, "  first %d: %s\n", r.status, r.sample)
		}
		n[r.status]++
		if r.err != nil && first == nil {
			first = r.err
		}
	}
	codes := make([]int, 0, len(n))
	for c := range n {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		if c == 200 {
			continue
		}
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for _, r := range rs {
			if r.status == c {
				lo, hi = min(lo, r.end), max(hi, r.end)
			}
		}
		fmt.Fprintf(os.Stderr, "  %d answers (or err: 0) between %.2fs and %.2fs after the start\n", c, lo.Seconds(), hi.Seconds())
	}
	parts := []string{}
	if n[200] == 0 {
		parts = append(parts, "200 0")
	}
	for _, c := range codes {
		if c != 0 {
			parts = append(parts, fmt.Sprintf("%d %d", c, n[c]))
		}
	}
	if n[0] > 0 {
		kind := "error"
		if errors.Is(first, context.DeadlineExceeded) {
			kind = "timeout"
		}
		parts = append(parts, fmt.Sprintf("err %d (first: %s: %v)", n[0], kind, first))
	}
	return strings.Join(parts, ", ")
}

// countRA counts the non-200 answers that carry Retry-After (with) or not.
func countRA(rs []result, with bool) int {
	k := 0
	for _, r := range rs {
		if r.status != 0 && r.status != 200 && r.retryAfter == with {
			k++
		}
	}
	return k
}

// p is the q-th percentile (nearest rank) of the 200 answers' latencies;
// 0 if there is none.
func p(rs []result, q int) time.Duration {
	var ls []time.Duration
	for _, r := range rs {
		if r.status == 200 {
			ls = append(ls, r.latency)
		}
	}
	if len(ls) == 0 {
		return 0
	}
	slices.Sort(ls)
	i := (q*len(ls)+99)/100 - 1
	return ls[max(i, 0)]
}

// classLine is a class's requests, share of 200, and p50/p90/p99 of the
// 200s.
func classLine(rs []result) string {
	ok := 0
	for _, r := range rs {
		if r.status == 200 {
			ok++
		}
	}
	return fmt.Sprintf("n %d, 200 %.0f%%, p50 %s, p90 %s, p99 %s", len(rs), 100*float64(ok)/float64(max(len(rs), 1)), secs(p(rs, 50)), secs(p(rs, 90)), secs(p(rs, 99)))
}

func secs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func ratio(a, b time.Duration) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}
