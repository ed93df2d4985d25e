package backend

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/rules"
)

func TestParseEngineMetrics(t *testing.T) {
	f := func(text string, want EngineLoad, wantOK bool) {
		t.Helper()
		got, ok := ParseEngineMetrics([]byte(text))
		if ok != wantOK || got != want {
			t.Errorf("ParseEngineMetrics(%q) = %+v %v, want %+v %v", text, got, ok, want, wantOK)
		}
	}
	vllm := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
`
	f(vllm, EngineLoad{Waiting: 7, Running: 3, KVUsage: 0.25}, true)
	// Two series (two models, or two data-parallel engines): counts add,
	// the usage fraction averages.
	f(vllm+`vllm:num_requests_running{engine="1",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
`, EngineLoad{Waiting: 9, Running: 4, KVUsage: 0.5}, true)
	// The KV capacity from the cache config's info metric (vLLM exports
	// every CacheConfig field as a label); summed over engines; absent or
	// malformed labels give 0.
	info := `vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="1024",prefix_caching_hash_algo="builtin"} 1.0` + "\n"
	f(vllm+info, EngineLoad{Waiting: 7, Running: 3, KVUsage: 0.25, KVTokens: 16384}, true)
	f(vllm+info+strings.Replace(info, `engine="0"`, `engine="1"`, 1), EngineLoad{Waiting: 7, Running: 3, KVUsage: 0.25, KVTokens: 32768}, true)
	f(vllm+`vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1`+"\n", EngineLoad{Waiting: 7, Running: 3, KVUsage: 0.25}, true)
	f(vllm+`vllm:cache_config_info{num_gpu_blocks="1024"} 1`+"\n", EngineLoad{Waiting: 7, Running: 3, KVUsage: 0.25}, true)
	// vLLM's old name; the new one wins when both are there.
	f("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.5\n", EngineLoad{Running: 1, KVUsage: 0.5}, true)
	f("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc 0.1\n", EngineLoad{Running: 1, KVUsage: 0.1}, true)
	// Labels holding '}', quotes and spaces; CRLF; a timestamp; no KV.
	f("vllm:num_requests_running{model_name=\"a} \\\"b\\\" c\"} 2 1700000000000\r\nvllm:num_requests_waiting{} 1\r\n", EngineLoad{Waiting: 1, Running: 2}, true)
	// Clamped and rounded.
	f("vllm:num_requests_running -3\nvllm:num_requests_waiting 2.6\nvllm:kv_cache_usage_perc 1.5\n", EngineLoad{Waiting: 3, KVUsage: 1}, true)
	// Prefix names are other metrics.
	f("vllm:num_requests_running_x 1\nvllm:num_requests_waiting 1\n", EngineLoad{}, false)
	f("vllm:num_requests_running NaN\nvllm:num_requests_waiting 1\n", EngineLoad{}, false)
	f("vllm:num_requests_running +Inf\nvllm:num_requests_waiting 1\n", EngineLoad{}, false)
	f("vllm:num_requests_running abc\nvllm:num_requests_waiting 1\n", EngineLoad{}, false)
	f("vllm:num_requests_running{a=\"1\" 1\nvllm:num_requests_waiting 1\n", EngineLoad{}, false) // unterminated labels: not a sample
	f("", EngineLoad{}, false)
	f("<html>not found</html>", EngineLoad{}, false)
	f("\x00\xff garbage {{{", EngineLoad{}, false)
}

func FuzzParseEngineMetrics(f *testing.F) {
	f.Add([]byte("vllm:num_requests_running{m=\"}\"} 1\nvllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.5\n"))
	f.Add([]byte("# HELP x\nvllm:gpu_cache_usage_perc 2\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		l, ok := ParseEngineMetrics(text)
		if !ok {
			if l != (EngineLoad{}) {
				t.Fatalf("not ok but %+v", l)
			}
			return
		}
		if l.Waiting < 0 || l.Running < 0 || !(l.KVUsage >= 0 && l.KVUsage <= 1) || math.IsNaN(l.KVUsage) {
			t.Fatalf("out of range: %+v", l)
		}
		if !bytes.Contains(text, nameWaiting) || !bytes.Contains(text, nameRunning) {
			t.Fatalf("ok without both names: %q", text)
		}
	})
}

const simMetrics = "vllm:num_requests_running 2\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.5\n"

// TestScrapeFakeEngine: one scrape against an engine answering well,
// garbage, too much, 404, or nothing at all.
func TestScrapeFakeEngine(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	mux := map[string]http.HandlerFunc{
		"ok":      func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(simMetrics)) },
		"garbage": func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>hello</html>")) },
		"huge": func(w http.ResponseWriter, _ *http.Request) {
			chunk := []byte(strings.Repeat("# padding line\n", 1<<10))
			for n := 0; n <= MaxScrapeBody; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
		"404": func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
		"slow": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("vllm:num_requests_running 1\n"))
			w.(http.Flusher).Flush()
			select { // the body never ends: the scrape's deadline must
			case <-hang:
			case <-r.Context().Done(): // the scrape closed the connection
			}
		},
	}
	for name, h := range mux {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := upstream(t, h)
			s, _ := testSet(t, nil)
			b := mustAdd(t, s, u.URL)
			// Only the slow case meets its deadline; the others get one a
			// loaded machine (race detector, 2 cores) cannot reach.
			timeout := 30 * time.Second
			if name == "slow" {
				timeout = 200 * time.Millisecond
			}
			body, err := s.scrape(b, timeout)
			var res int
			switch {
			case errors.Is(err, errScrapeTooLarge):
				res = scrapeTooLarge
			case err != nil:
				res = scrapeError
			default:
				if _, ok := ParseEngineMetrics(body); !ok {
					res = scrapeParse
				}
			}
			want := map[string]int{"ok": scrapeOK, "garbage": scrapeParse, "huge": scrapeTooLarge, "404": scrapeError, "slow": scrapeError}[name]
			if res != want {
				t.Fatalf("%s: result %s (err %v, %d bytes), want %s", name, scrapeResults[res], err, len(body), scrapeResults[want])
			}
		})
	}
}

// TestScrapeLoop: the scraper records each good scrape, fresh for three
// intervals, counts each result, and a failing engine's values go stale.
func TestScrapeLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ScrapeInterval = time.Second
		ms := metrics.NewSet()
		s, err := NewSet(cfg, nil, ms)
		if err != nil {
			t.Fatal(err)
		}
		s.probeFn = func(*Backend, time.Duration) bool { return true }
		var mu sync.Mutex
		answer := []byte(simMetrics)
		var fail error
		s.scrapeFn = func(_ *Backend, timeout time.Duration) ([]byte, error) {
			if timeout != time.Second {
				t.Errorf("scrape timeout %s, want the interval", timeout)
			}
			mu.Lock()
			defer mu.Unlock()
			return answer, fail
		}
		b, err := s.Add("http://10.0.0.1:8000")
		if err != nil {
			t.Fatal(err)
		}
		g := rules.NewGroup(context.Background())
		s.Start(g)
		synctest.Wait() // the first scrape runs at once
		l, ok := b.Engine()
		if !ok || l.Waiting != 5 || l.Running != 2 || l.KVUsage != 0.5 || !l.Until.Equal(l.At.Add(3*time.Second)) {
			t.Fatalf("after the first scrape: %+v %v", l, ok)
		}
		mu.Lock()
		answer, fail = nil, errors.New("refused")
		mu.Unlock()
		time.Sleep(2500 * time.Millisecond) // two failed scrapes: still fresh
		if _, ok := b.Engine(); !ok {
			t.Fatal("stale within 3 intervals")
		}
		time.Sleep(time.Second)
		if _, ok := b.Engine(); ok {
			t.Fatal("fresh after 3 intervals of failed scrapes")
		}
		mu.Lock()
		answer, fail = []byte("garbage"), nil
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		if got := []uint64{s.scrapes[scrapeOK].Get(), s.scrapes[scrapeError].Get(), s.scrapes[scrapeParse].Get()}; got[0] != 1 || got[1] != 3 || got[2] != 1 {
			t.Errorf("scrapes ok/error/parse_error = %v, want [1 3 1]", got)
		}
		var out bytes.Buffer
		ms.WritePrometheus(&out)
		if !strings.Contains(out.String(), `saltus_engine_scrapes_total{result="ok"} 1`) {
			t.Errorf("metrics:\n%s", out.String())
		}
		// Remove stops the scraper.
		if err := s.Remove(b.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		n := s.scrapes[scrapeParse].Get()
		time.Sleep(5 * time.Second)
		if s.scrapes[scrapeParse].Get() != n {
			t.Error("scraped after Remove")
		}
		g.Stop()
		s.Close()
		_ = g.Wait(context.Background())
	})
}
