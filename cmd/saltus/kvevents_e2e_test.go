package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// kvDeadPort is a port nothing listens on until the test ends (deadPort).
func kvDeadPort(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(deadPort(t))
	if err != nil {
		t.Fatal(err)
	}
	var p int
	if _, err := fmt.Sscanf(u.Port(), "%d", &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// idPrompt is a completions body whose prompt is token ids: saltus and
// the simulator both key it by those ids (tree.BlockKeys), and the
// simulator's BlockStored events carry them.
func idPrompt(t *testing.T, ids []int) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "llama3", "prompt": ids, "max_tokens": 2})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func idRange(salt, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = salt*10_000 + i + 1
	}
	return ids
}

// TestServeKVEvents (issue 31, items 1-3, connect wiring): four
// simulated engines publish their KV events (both hash forms, both
// layouts); saltus subscribes to each (--kv-events). Prefixes placed on
// engines directly, behind saltus's back, are routed to their holder;
// after one engine's cache is reset, its view is empty and its prefixes
// no longer match it.
func TestServeKVEvents(t *testing.T) {
	t.Parallel()
	const n = 4
	e := startEvented(t, n, func(i int, k *vllmsim.KVEventsConfig) {
		k.HashForm, k.Encoding = []string{"bytes", "int"}[i%2], []string{"map", "array"}[i/2]
	}, func(c *serveConfig, _ *evented) {
		c.Backend.HealthInterval = 100 * time.Millisecond // a killed engine is found soon
	})
	s, sims, names, byURL := e.s, e.sims, e.names, e.byURL
	blocks := func(i int) float64 { return e.blocks(t, i) }
	e.warm(t)
	// Six long prefixes (32 blocks each), placed directly.
	prefixes := placeAndRoute(t, s, sims, names, byURL, []int{0, 1, 2, 3, 0, 1})
	// Engine 0's cache is reset: its view empties, its prefixes match
	// nothing on it.
	if a := do(t, "POST", sims[0].URL()+"/reset_prefix_cache", ""); a.status != 200 {
		t.Fatalf("reset_prefix_cache: %d %s", a.status, a.body)
	}
	waitLong(t, "engine 0's view to empty", func() bool { return blocks(0) == 0 })
	if got := s.metrics(t)[`saltus_kvview_resets_total{reason="cleared"}`]; got < 1 {
		t.Errorf("resets cleared %v, want ≥ 1", got)
	}
	for _, p := range []int{0, 4} {
		ids := append(append([]int(nil), prefixes[p]...), 7, 8, 9)
		var d struct {
			Backend       int    `json:"backend"`
			URL           string `json:"url"`
			MatchedBlocks int    `json:"matched_blocks"`
		}
		waitLong(t, fmt.Sprintf("prefix %d to match nothing on engine 0", p), func() bool {
			a := s.adm(t, "POST", "/admin/explain?path=/v1/completions", idPrompt(t, ids))
			if a.status != 200 {
				t.Fatalf("explain: %d %s", a.status, a.body)
			}
			if err := json.Unmarshal([]byte(a.body), &d); err != nil {
				t.Fatal(err)
			}
			return !(strings.TrimSuffix(d.URL, "/") == strings.TrimSuffix(sims[0].URL(), "/") && d.MatchedBlocks > 0)
		})
	}
	// Engine 3 is killed: its health fails, its subscription stops and
	// its holders go from the route table.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := sims[3].Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "engine 3's view to go", func() bool {
		_, ok := s.metrics(t)[`saltus_kvview_blocks{backend="e3"}`]
		return !ok
	})
	t.Logf("engine 3's view dropped %d ms after it was killed", time.Since(t0).Milliseconds())
	if got := s.metrics(t)[`saltus_kvview_resets_total{reason="gone"}`]; got < 1 {
		t.Errorf("resets gone %v, want ≥ 1", got)
	}
	ids := append(append([]int(nil), prefixes[3]...), 7, 8, 9)
	a := s.adm(t, "POST", "/admin/explain?path=/v1/completions", idPrompt(t, ids))
	var d struct {
		URL           string `json:"url"`
		MatchedBlocks int    `json:"matched_blocks"`
	}
	if err := json.Unmarshal([]byte(a.body), &d); err != nil {
		t.Fatalf("explain: %d %s: %v", a.status, a.body, err)
	}
	if d.MatchedBlocks > 0 {
		t.Errorf("prefix 3 after its engine was killed: %d blocks matched on %s, want none", d.MatchedBlocks, d.URL)
	}
}

// TestReloadKVEvents: kv-events is reloadable: a reload that names a
// backend's publisher subscribes to it, one that drops it forgets the
// engine.
func TestReloadKVEvents(t *testing.T) {
	t.Parallel()
	sim := startSim(t, func(c *vllmsim.Config) {
		c.Tokenizer, c.ChatTemplate = "", ""
		c.Speedup, c.MaxTokens = 20, 2
		c.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: "tcp://127.0.0.1:0", Bind: true}
	})
	path := filepath.Join(t.TempDir(), "saltus.yaml")
	write := func(extra string) {
		t.Helper()
		y := strings.Replace(reloadYAML([]string{"e0=" + sim.URL()}, 1, extra), "tokenizer: ../../tokenpool/testdata/models/llama3/tokenizer.json.gz\n", "", 1)
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	args := []string{"--config", path}
	cfg, _, err := loadServeConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := startServeCfg(t, cfg, args)
	const gauge = `saltus_kvview_blocks{backend="e0"}`
	if _, ok := s.metrics(t)[gauge]; ok {
		t.Fatal("a view before kv-events named the backend")
	}
	write("kv-events: [e0=tcp://" + sim.KVEventsAddr() + "]\n")
	if a := s.adm(t, "POST", "/admin/reload", ""); a.status != 200 {
		t.Fatalf("reload: %d %s", a.status, a.body)
	}
	try := 0
	waitLong(t, "the view after the reload", func() bool {
		if try < 200 {
			try++
			if a := do(t, "POST", sim.URL()+"/v1/completions", idPrompt(t, idRange(try, 32))); a.status != 200 {
				t.Fatalf("engine directly: %d %s", a.status, a.body)
			}
		}
		return s.metrics(t)[gauge] > 0
	})
	write("")
	if a := s.adm(t, "POST", "/admin/reload", ""); a.status != 200 {
		t.Fatalf("reload: %d %s", a.status, a.body)
	}
	waitLong(t, "the view to go after the second reload", func() bool {
		_, ok := s.metrics(t)[gauge]
		return !ok
	})
}

// freeLoopbackPort is a loopback port free a moment ago: the bind wiring
// needs each engine's port in its topic, and saltus's bind endpoint, before
// either starts. Another process may take it meanwhile (then the test
// fails at Start, not silently).
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// startSimAt is startSim at addr.
func startSimAt(t *testing.T, addr string, mod func(*vllmsim.Config)) *vllmsim.Sim {
	t.Helper()
	cfg := vllmsim.DefaultConfig()
	cfg.Model = "llama3"
	cfg.Tokenizer, cfg.ChatTemplate = "", ""
	cfg.Speedup, cfg.MaxTokens = 20, 2
	mod(&cfg)
	sim, err := vllmsim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sim.Close(ctx); err != nil {
			t.Errorf("sim close: %v", err)
		}
	})
	return sim
}

// TestServeKVEventsBind (issue 31, the bind wiring, llm-d's): saltus
// listens (--kv-events-listen); two simulated engines' publishers connect
// to it, each message's topic kv@127.0.0.1:<engine port>@llama3 naming
// its engine. Prefixes placed on the engines directly are routed to their
// holder; a third publisher whose topic names no backend is counted and
// ignored.
func TestServeKVEventsBind(t *testing.T) {
	t.Parallel()
	const n = 2
	listen := fmt.Sprintf("tcp://127.0.0.1:%d", freeLoopbackPort(t))
	var (
		sims  []*vllmsim.Sim
		names []string
		byURL = map[string]int{}
	)
	for i := range n {
		addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
		s := startSimAt(t, addr, func(c *vllmsim.Config) {
			c.Seed = int64(i + 1)
			c.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: listen, Topic: "kv@" + addr + "@llama3",
				HashForm: []string{"bytes", "int"}[i], Encoding: []string{"map", "array"}[i]}
		})
		sims = append(sims, s)
		names = append(names, fmt.Sprintf("e%d", i))
		byURL[s.URL()] = i
	}
	stray := startSimAt(t, "127.0.0.1:0", func(c *vllmsim.Config) {
		c.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: listen, Topic: fmt.Sprintf("kv@127.0.0.1:%d@llama3", kvDeadPort(t))}
	})
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.KVEventsListen = listen
		c.Backend.HealthInterval = 100 * time.Millisecond // a killed engine is found soon
		for i, sim := range sims {
			c.Backends = append(c.Backends, names[i]+"="+sim.URL())
		}
	})
	blocks := func(i int) float64 {
		return s.metrics(t)[`saltus_kvview_blocks{backend="`+names[i]+`"}`]
	}
	direct := func(sim *vllmsim.Sim, ids []int) {
		t.Helper()
		if a := do(t, "POST", sim.URL()+"/v1/completions", idPrompt(t, ids)); a.status != 200 {
			t.Fatalf("engine %s directly: %d %s", sim.URL(), a.status, a.body)
		}
	}
	// Each publisher has connected once its view holds blocks (before,
	// ZMQ drops what it sends): a new warm-up prompt each try.
	for i := range n {
		try := 0
		waitLong(t, fmt.Sprintf("engine %d's view", i), func() bool {
			if try < 200 {
				try++
				direct(sims[i], idRange(1000+i*1000+try, 32))
			}
			return blocks(i) > 0
		})
	}
	try := 0
	waitLong(t, "the stray publisher's batches counted", func() bool {
		if try < 200 {
			try++
			direct(stray, idRange(5000+try, 32))
		}
		return s.metrics(t)[`saltus_kvevents_bind_ignored_total{reason="unknown"}`] > 0
	})
	placeAndRoute(t, s, sims, names, byURL, []int{0, 1, 0, 1})
	if got := s.metrics(t)[`saltus_kvevents_bind_ignored_total{reason="connect"}`]; got != 0 {
		t.Errorf("ignored as connect: %v, want 0 (no backend has --kv-events)", got)
	}
	// Engine 1 is killed: its health fails and its bound view goes,
	// with its holders.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := sims[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "engine 1's view to go", func() bool {
		_, ok := s.metrics(t)[`saltus_kvview_blocks{backend="e1"}`]
		return !ok
	})
	t.Logf("engine 1's view dropped %d ms after it was killed", time.Since(t0).Milliseconds())
	if got := s.metrics(t)[`saltus_kvview_resets_total{reason="gone"}`]; got < 1 {
		t.Errorf("resets gone %v, want ≥ 1", got)
	}
}

// TestServeKVEventsBindConnectWins: a backend with a connect
// subscription (--kv-events) takes its events from there only: its bind
// messages are counted (reason connect) and feed no view.
func TestServeKVEventsBindConnectWins(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("tcp://127.0.0.1:%d", freeLoopbackPort(t))
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	sim := startSimAt(t, addr, func(c *vllmsim.Config) {
		c.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: listen, Topic: "kv@" + addr + "@llama3"}
	})
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.KVEventsListen = listen
		c.Backends = append(c.Backends, "e0="+sim.URL())
		// Its publisher is not there: the connect subscription gets
		// nothing, and the bind messages must not fill the view either.
		c.KVEvents = append(c.KVEvents, fmt.Sprintf("e0=tcp://127.0.0.1:%d", kvDeadPort(t)))
	})
	try := 0
	waitLong(t, "the engine's bind batches counted as connect", func() bool {
		if try < 200 {
			try++
			if a := do(t, "POST", sim.URL()+"/v1/completions", idPrompt(t, idRange(try, 32))); a.status != 200 {
				t.Fatalf("engine directly: %d %s", a.status, a.body)
			}
		}
		return s.metrics(t)[`saltus_kvevents_bind_ignored_total{reason="connect"}`] > 0
	})
	if got := s.metrics(t)[`saltus_kvview_blocks{backend="e0"}`]; got != 0 {
		t.Errorf("e0's view holds %v blocks, want 0 (its events come from --kv-events only)", got)
	}
}

// placeAndRoute places a long prefix (32 blocks) directly on each
// holder[p] engine, behind saltus's back, waits until saltus's views hold
// them, then sends each prefix with five new suffixes through saltus:
// at least 90 % must reach the prefix's holder. It returns the prefixes.
func placeAndRoute(t *testing.T, s *served, sims []*vllmsim.Sim, names []string, byURL map[string]int, holder []int) [][]int {
	t.Helper()
	const prefixBlocks = 32
	blocks := func(i int) float64 {
		return s.metrics(t)[`saltus_kvview_blocks{backend="`+names[i]+`"}`]
	}
	want := make([]float64, len(sims))
	for i := range sims {
		want[i] = blocks(i)
	}
	prefixes := make([][]int, len(holder))
	for p, h := range holder {
		prefixes[p] = idRange(p+1, prefixBlocks*16)
		if a := do(t, "POST", sims[h].URL()+"/v1/completions", idPrompt(t, prefixes[p])); a.status != 200 {
			t.Fatalf("engine %d directly: %d %s", h, a.status, a.body)
		}
		want[h] += prefixBlocks - 1 // the prompt's last block may be its partial one
	}
	for i := range sims {
		waitLong(t, fmt.Sprintf("engine %d's placed blocks in its view", i), func() bool { return blocks(i) >= want[i] })
	}
	hits, total := routeToHolders(t, s, names, byURL, prefixes, holder)
	if hits*10 < total*9 {
		t.Fatalf("%d of %d requests went to their prefix's holder, want ≥ 90 %%", hits, total)
	}
	t.Logf("%d of %d requests to the holder", hits, total)
	return prefixes
}

// TestServeKVEventsReplay (issue 31, item 1: replay): two simulated
// engines lose every other batch on their PUB sockets
// (--kv-events-lose-every 2) but keep it for replay; saltus subscribes
// with their replay endpoints (--kv-events-replay). Every gap is
// replayed: the views are never reset as stale, and prefixes placed on
// the engines directly are routed to their holders.
func TestServeKVEventsReplay(t *testing.T) {
	t.Parallel()
	const n = 2
	e := startEvented(t, n, func(i int, k *vllmsim.KVEventsConfig) {
		k.ReplayEndpoint, k.LoseEvery = "tcp://127.0.0.1:0", 2
	}, func(c *serveConfig, e *evented) {
		for i, sim := range e.sims {
			c.KVEventsReplay = append(c.KVEventsReplay, e.names[i]+"=tcp://"+sim.KVEventsReplayAddr())
		}
	})
	s, names, byURL := e.s, e.names, e.byURL
	blocks := func(i int) float64 { return e.blocks(t, i) }
	direct := func(i int, ids []int) { t.Helper(); e.direct(t, i, ids) }
	filler := 0
	// A lost batch is replayed when the next one shows the gap: each
	// wait sends a new short prompt to the engine, which stores blocks.
	waitBlocks := func(i int, want float64) {
		t.Helper()
		waitLong(t, fmt.Sprintf("engine %d's view to hold %v blocks", i, want), func() bool {
			if filler < 400 {
				filler++
				direct(i, idRange(5000+filler, 32))
			}
			return blocks(i) >= want
		})
	}
	for i := range n {
		waitBlocks(i, 1)
	}
	stale := s.metrics(t)[`saltus_kvview_resets_total{reason="stale"}`]
	const prefixBlocks = 32
	holder := []int{0, 1, 0, 1}
	prefixes := make([][]int, len(holder))
	for p, h := range holder {
		prefixes[p] = idRange(p+1, prefixBlocks*16)
		want := blocks(h) + prefixBlocks - 1 // the prompt's last block may be its partial one
		direct(h, prefixes[p])
		waitBlocks(h, want)
	}
	hits, total := routeToHolders(t, s, names, byURL, prefixes, holder)
	if hits*10 < total*9 {
		t.Errorf("%d of %d requests went to their prefix's holder, want ≥ 90 %%", hits, total)
	}
	m := s.metrics(t)
	filled := metricSum(m, "saltus_kvevents_replays_total", `outcome="filled"`)
	failed := metricSum(m, "saltus_kvevents_replays_total") - filled
	gaps := metricSum(m, "saltus_kvevents_sequence_gaps_total")
	replayed := metricSum(m, "saltus_kvevents_replayed_batches_total")
	t.Logf("%d of %d to the holder; gaps %v, replays filled %v (%v batches), not filled %v", hits, total, gaps, filled, replayed, failed)
	if filled < float64(len(holder)) || replayed < filled || gaps < filled {
		t.Errorf("replays filled %v, batches replayed %v, gaps %v: want ≥ %d filled, one batch each at least, a gap each", filled, replayed, gaps, len(holder))
	}
	if failed != 0 {
		t.Errorf("%v replays not filled, want 0", failed)
	}
	if got := m[`saltus_kvview_resets_total{reason="stale"}`]; got != stale {
		t.Errorf("stale resets %v → %v: a replayed gap reset a view", stale, got)
	}
}

// evented is n simulated engines publishing KV events (bound, for saltus
// to connect to: --kv-events NAME=ENDPOINT), named e0..e(n-1), behind one
// saltus. simEdit sets engine i's events beyond Enable, Endpoint and
// Bind; serveEdit adds to saltus's config (e has the engines).
type evented struct {
	s     *served
	sims  []*vllmsim.Sim
	names []string
	byURL map[string]int
}

func startEvented(t *testing.T, n int, simEdit func(i int, k *vllmsim.KVEventsConfig), serveEdit func(c *serveConfig, e *evented)) *evented {
	t.Helper()
	e := &evented{byURL: map[string]int{}}
	for i := range n {
		sim := startSim(t, func(c *vllmsim.Config) {
			c.Tokenizer, c.ChatTemplate = "", ""
			c.Speedup, c.MaxTokens, c.Seed = 20, 2, int64(i+1)
			c.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: "tcp://127.0.0.1:0", Bind: true}
			if simEdit != nil {
				simEdit(i, &c.KVEvents)
			}
		})
		e.sims = append(e.sims, sim)
		e.names = append(e.names, fmt.Sprintf("e%d", i))
		e.byURL[sim.URL()] = i
	}
	e.s = startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		for i, sim := range e.sims {
			c.Backends = append(c.Backends, e.names[i]+"="+sim.URL())
			c.KVEvents = append(c.KVEvents, e.names[i]+"=tcp://"+sim.KVEventsAddr())
		}
		if serveEdit != nil {
			serveEdit(c, e)
		}
	})
	return e
}

// blocks is engine i's view's size.
func (e *evented) blocks(t *testing.T, i int) float64 {
	return e.s.metrics(t)[`saltus_kvview_blocks{backend="`+e.names[i]+`"}`]
}

// direct sends ids to engine i itself, behind saltus's back.
func (e *evented) direct(t *testing.T, i int, ids []int) {
	t.Helper()
	if a := do(t, "POST", e.sims[i].URL()+"/v1/completions", idPrompt(t, ids)); a.status != 200 {
		t.Fatalf("engine %d directly: %d %s", i, a.status, a.body)
	}
}

// warm waits for every subscription: each is up once its view has seen a
// batch; until then (ZMQ's late joiner) an engine's events would be
// lost, so a warm-up prompt, a new one each try, goes to each engine
// until its view holds blocks.
func (e *evented) warm(t *testing.T) {
	t.Helper()
	for i := range e.sims {
		try := 0
		waitLong(t, fmt.Sprintf("engine %d's view", i), func() bool {
			if try < 200 {
				try++
				e.direct(t, i, idRange(1000+i*1000+try, 32))
			}
			return e.blocks(t, i) > 0
		})
	}
}

// routeToHolders sends 5 requests extending each of prefixes through
// saltus and counts those answered by the prefix's holder (holder[p],
// an index into names).
func routeToHolders(t *testing.T, s *served, names []string, byURL map[string]int, prefixes [][]int, holder []int) (hits, total int) {
	t.Helper()
	for p, h := range holder {
		for k := range 5 {
			ids := append(append([]int(nil), prefixes[p]...), idRange(100+p*10+k, 20)...)
			a := do(t, "POST", "http://"+s.addr+"/v1/completions", idPrompt(t, ids))
			if a.status != 200 {
				t.Fatalf("prefix %d through saltus: %d %s", p, a.status, a.body)
			}
			total++
			if byURL[a.backend] == h {
				hits++
			} else {
				t.Logf("prefix %d (on %s) went to %s", p, names[h], a.backend)
			}
		}
	}
	return hits, total
}

// startRankSims starts two simulated engines publishing their KV events
// at loopback ports P and P+1 (a data-parallel engine's ranks 0 and 1),
// trying other ports while another process takes one of them first.
func startRankSims(t *testing.T) (int, []*vllmsim.Sim) {
	t.Helper()
	for range 20 {
		p := freeLoopbackPort(t)
		if p >= 65535 {
			continue
		}
		var sims []*vllmsim.Sim
		for i := range 2 {
			cfg := vllmsim.DefaultConfig()
			cfg.Model = "llama3"
			cfg.Tokenizer, cfg.ChatTemplate = "", ""
			cfg.Speedup, cfg.MaxTokens, cfg.Seed = 20, 2, int64(i+1)
			cfg.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p+i), Bind: true}
			sim, err := vllmsim.New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := sim.Start("127.0.0.1:0"); err != nil {
				break // a port taken meanwhile: another pair
			}
			sims = append(sims, sim)
		}
		for _, sim := range sims {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := sim.Close(ctx); err != nil {
					t.Errorf("sim close: %v", err)
				}
			})
		}
		if len(sims) == 2 {
			return p, sims
		}
	}
	t.Fatal("no two free ports in a row")
	return 0, nil
}

// TestServeKVEventsRanks (issue 31: a data-parallel engine, connect
// wiring): vLLM with --data-parallel-size 2 publishes rank 0's events at
// its publisher's port and rank 1's at the next. Backend e0's rank 1 is
// a second simulated engine publishing at that next port; with
// --kv-events-ranks 2 a prefix placed on it directly is e0's, and
// requests extending it go to e0.
func TestServeKVEventsRanks(t *testing.T) {
	t.Parallel()
	p, sims := startRankSims(t)                               // e0's rank 0, e0's rank 1
	sims = append(sims, startSim(t, func(c *vllmsim.Config) { // e1
		c.Tokenizer, c.ChatTemplate = "", ""
		c.Speedup, c.MaxTokens, c.Seed = 20, 2, 3
		c.KVEvents = vllmsim.KVEventsConfig{Enable: true, Endpoint: "tcp://127.0.0.1:0", Bind: true}
	}))
	s := startServeWith(t, nil, func(c *serveConfig) {
		c.Tokenizer = ""
		c.Backends = []string{"e0=" + sims[0].URL(), "e1=" + sims[2].URL()}
		c.KVEvents = []string{fmt.Sprintf("e0=tcp://127.0.0.1:%d", p), "e1=tcp://" + sims[2].KVEventsAddr()}
		c.KVEventsRanks = 2
	})
	blocks := func() float64 { return s.metrics(t)[`saltus_kvview_blocks{backend="e0"}`] }
	// Rank 1's subscription is up once its blocks reach e0's view (only
	// rank 1 is sent anything).
	try := 0
	waitLong(t, "rank 1's blocks in e0's view", func() bool {
		if try < 200 {
			try++
			if a := do(t, "POST", sims[1].URL()+"/v1/completions", idPrompt(t, idRange(5000+try, 32))); a.status != 200 {
				t.Fatalf("rank 1 directly: %d %s", a.status, a.body)
			}
		}
		return blocks() > 0
	})
	prefix := idRange(77, 32*16)
	if a := do(t, "POST", sims[1].URL()+"/v1/completions", idPrompt(t, prefix)); a.status != 200 {
		t.Fatalf("rank 1 directly: %d %s", a.status, a.body)
	}
	ids := append(append([]int(nil), prefix...), 7, 8, 9)
	var d struct {
		URL           string `json:"url"`
		MatchedBlocks int    `json:"matched_blocks"`
	}
	waitLong(t, "the prefix rank 1 holds to route to e0", func() bool {
		a := s.adm(t, "POST", "/admin/explain?path=/v1/completions", idPrompt(t, ids))
		if a.status != 200 {
			t.Fatalf("explain: %d %s", a.status, a.body)
		}
		if err := json.Unmarshal([]byte(a.body), &d); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(d.URL, "/") == strings.TrimSuffix(sims[0].URL(), "/") && d.MatchedBlocks >= 30
	})
}
