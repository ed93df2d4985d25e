package backend

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/internal/promtext"
)

// The engine metrics scrape (Config.ScrapeInterval): one goroutine per
// backend, in the probes' group, GETs the engine's /metrics every
// interval and records its load (SetEngine), fresh for 3 intervals: a
// missed scrape or two keeps the last values, a dead scraper's go stale
// and Engine reports none.

func init() {
	promtext.Describe(map[string]string{
		"saltus_engine_scrapes_total": "Scrapes of the backends' engine /metrics (--scrape-interval), by result: ok, error (no connection, timeout, non-2xx), " +
			"too_large (over 4 MiB), parse_error (not Prometheus text, or without vllm:num_requests_waiting and vllm:num_requests_running).",
	})
}

// MaxScrapeBody bounds an engine's /metrics answer; a longer one counts
// as too_large and records nothing. vLLM's is ~50 KiB per model.
const MaxScrapeBody = 4 << 20

// scrape results, the result label of saltus_engine_scrapes_total.
const (
	scrapeOK = iota
	scrapeError
	scrapeTooLarge
	scrapeParse
	numScrapeResults
)

var scrapeResults = [numScrapeResults]string{"ok", "error", "too_large", "parse_error"}

var errScrapeTooLarge = errors.New("backend: engine /metrics answer over 4 MiB")

// startScrapeLocked starts b's scrape goroutine in s.probes; it stops with
// stop (b's probe stop: Remove, Close) or the group. s.mu held.
func (s *Set) startScrapeLocked(b *Backend, stop <-chan struct{}) {
	iv := s.cfg.ScrapeInterval
	s.probes.Go("backend-scrape", func(ctx context.Context) {
		t := time.NewTimer(0) // a first scrape at once
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-t.C:
			}
			now := time.Now()
			body, err := s.scrapeFn(b, iv)
			res := scrapeOK
			var l EngineLoad
			switch {
			case errors.Is(err, errScrapeTooLarge):
				res = scrapeTooLarge
			case err != nil:
				res = scrapeError
			default:
				var ok bool
				if l, ok = ParseEngineMetrics(body); !ok {
					res = scrapeParse
				}
			}
			s.scrapes[res].Inc()
			if res == scrapeOK {
				l.At, l.Until = now, now.Add(3*iv)
				b.SetEngine(l)
			}
			t.Reset(iv)
		}
	})
}

// scrape GETs b's /metrics once, bounded by timeout (head and body), and
// returns at most MaxScrapeBody bytes of it. Set.scrapeFn, except in
// tests.
func (s *Set) scrape(b *Backend, timeout time.Duration) ([]byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI("/metrics")
	b.ctlScheme(req)
	req.Header.SetHost(b.host)
	deadline := time.Now().Add(timeout)
	if err := b.ctl.DoDeadline(req, resp, deadline); err != nil {
		return nil, err
	}
	defer resp.CloseBodyStream() //nolint:errcheck // an error only means the connection is not reused
	if code := resp.StatusCode(); code < 200 || code >= 300 {
		return nil, errors.New("backend: engine /metrics answered " + strconv.Itoa(code))
	}
	if resp.Header.ContentLength() > MaxScrapeBody {
		return nil, errScrapeTooLarge
	}
	bs := resp.BodyStream()
	if bs == nil {
		return resp.Body(), nil
	}
	if c := connOf(resp); c != nil {
		_ = c.SetReadDeadline(deadline) // the body too is bounded by timeout; fails only on a closed connection
	}
	body, err := io.ReadAll(io.LimitReader(bs, MaxScrapeBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > MaxScrapeBody {
		return nil, errScrapeTooLarge
	}
	return body, nil
}

// vLLM's load gauges. gpu_cache_usage_perc is the name before v0.9
// (v0 engine); kv_cache_usage_perc wins when both are served.
var (
	nameWaiting = []byte("vllm:num_requests_waiting")
	nameRunning = []byte("vllm:num_requests_running")
	nameKV      = []byte("vllm:kv_cache_usage_perc")
	nameKVOld   = []byte("vllm:gpu_cache_usage_perc")
	nameCache   = []byte("vllm:cache_config_info")
	labelBlocks = []byte(`num_gpu_blocks="`)
	labelBlock  = []byte(`block_size="`)
)

// intLabel is the value of the integer label that starts with key (its
// name, '=' and the opening quote) in line; -1 if absent or not a
// non-negative integer that fits 32 bits.
func intLabel(line, key []byte) int64 {
	i := bytes.Index(line, key)
	if i < 0 {
		return -1
	}
	v := line[i+len(key):]
	j := bytes.IndexByte(v, '"')
	if j < 0 {
		return -1
	}
	n, err := strconv.ParseInt(string(v[:j]), 10, 32)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ParseEngineMetrics reads an engine's load from its Prometheus text
// exposition: vllm:num_requests_waiting and vllm:num_requests_running
// summed over their series (one per model_name, or per engine of a
// data-parallel server), vllm:kv_cache_usage_perc (else
// vllm:gpu_cache_usage_perc) averaged over its series (a fraction of each
// engine's cache) and clamped to [0, 1], and the KV capacity from
// vllm:cache_config_info's num_gpu_blocks × block_size labels (summed;
// 0 when absent or malformed). Counts are rounded, negative
// values read as 0. ok is false when waiting or running is missing, or a
// sample of these names is not a finite number. At and Until are left
// zero. Any goroutine.
func ParseEngineMetrics(text []byte) (l EngineLoad, ok bool) {
	var waiting, running, kv, kvOld float64
	var nWaiting, nRunning, nKV, nKVOld int
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		name, val, found := promSample(line)
		if !found {
			continue
		}
		if bytes.Equal(name, nameCache) {
			if blocks, size := intLabel(line, labelBlocks), intLabel(line, labelBlock); blocks >= 0 && size > 0 {
				l.KVTokens = min(l.KVTokens+blocks*size, math.MaxInt32)
			}
			continue
		}
		var sum *float64
		var n *int
		switch {
		case bytes.Equal(name, nameWaiting):
			sum, n = &waiting, &nWaiting
		case bytes.Equal(name, nameRunning):
			sum, n = &running, &nRunning
		case bytes.Equal(name, nameKV):
			sum, n = &kv, &nKV
		case bytes.Equal(name, nameKVOld):
			sum, n = &kvOld, &nKVOld
		default:
			continue
		}
		v, err := strconv.ParseFloat(string(val), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return EngineLoad{}, false
		}
		*sum += max(v, 0)
		*n++
	}
	if nWaiting == 0 || nRunning == 0 {
		return EngineLoad{}, false
	}
	l.Waiting = int64(math.Round(min(waiting, math.MaxInt32)))
	l.Running = int64(math.Round(min(running, math.MaxInt32)))
	switch {
	case nKV > 0:
		l.KVUsage = min(kv/float64(nKV), 1)
	case nKVOld > 0:
		l.KVUsage = min(kvOld/float64(nKVOld), 1)
	}
	return l, true
}

// promSample splits a Prometheus text line into its metric name and value
// (`name{labels} value [timestamp]`); found is false for comments, blank
// and malformed lines.
func promSample(line []byte) (name, val []byte, found bool) {
	line = bytes.TrimRight(line, "\r")
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	if i == len(line) || line[i] == '#' {
		return nil, nil, false
	}
	s := i
	for i < len(line) && line[i] != '{' && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	name = line[s:i]
	if i < len(line) && line[i] == '{' {
		// Labels: quoted values may hold '}' and escaped quotes.
		inQ := false
		for i++; i < len(line); i++ {
			c := line[i]
			if inQ {
				if c == '\\' {
					i++
				} else if c == '"' {
					inQ = false
				}
				continue
			}
			if c == '"' {
				inQ = true
			} else if c == '}' {
				break
			}
		}
		if i >= len(line) {
			return nil, nil, false
		}
		i++
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	s = i
	for i < len(line) && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	if s == i || len(name) == 0 {
		return nil, nil, false
	}
	return name, line[s:i], true
}
