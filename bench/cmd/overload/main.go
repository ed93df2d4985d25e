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
// Every request has --answer-timeout to be answered (an unanswered one
// counts as err), and every scenario --scenario-timeout in all. Prompts are
// distinct per request (1–2 KB of text) so that no two share a prefix past
// a few words.
//
//	go run ./bench/cmd/overload --url http://127.0.0.1:8080 --model sim-llama
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
}

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
	flag.Parse()
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
	rs, wall := run(hc, o, "burst", cs)
	all := flatten(rs)
	return fmt.Sprintf("burst: requests %d, %s; non-200 with Retry-After %d, without %d; wall %.1fs",
		len(all), byStatus(all), countRA(all, true), countRA(all, false), wall.Seconds())
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
	rs, wall := run(hc, o, "priority", cs)
	var high, low []result
	for i, r := range rs {
		if i%2 == 0 {
			high = append(high, r...)
		} else {
			low = append(low, r...)
		}
	}
	return fmt.Sprintf("priority: high(-10) %s; low(10) %s; p50 high/low %s; all %s; wall %.1fs",
		classLine(high), classLine(low), ratio(p(high, 50), p(low, 50)), byStatus(append(high, low...)), wall.Seconds())
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
	rs, wall := run(hc, o, "fairness", cs)
	var small, big []result
	for i, r := range rs {
		if cs[i].key == "small" {
			small = append(small, r...)
		} else {
			big = append(big, r...)
		}
	}
	return fmt.Sprintf("fairness: small(4 clients) %s; big(44 clients) %s; p50 small/big %s; all %s; wall %.1fs",
		classLine(small), classLine(big), ratio(p(small, 50), p(big, 50)), byStatus(append(small, big...)), wall.Seconds())
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

// classLine is a class's requests, share of 200, and p50/p90 of the 200s.
func classLine(rs []result) string {
	ok := 0
	for _, r := range rs {
		if r.status == 200 {
			ok++
		}
	}
	return fmt.Sprintf("n %d, 200 %.0f%%, p50 %s, p90 %s", len(rs), 100*float64(ok)/float64(max(len(rs), 1)), secs(p(rs, 50)), secs(p(rs, 90)))
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
