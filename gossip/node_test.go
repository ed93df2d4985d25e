package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/tree"
)

// table is a Table over one route tree, as a router with one shard: it
// records when each route became matchable and what peers' load it was
// given.
type table struct {
	mu       sync.Mutex
	tree     *tree.Tree
	backends []uint64 // identity keys; the index is the tree's backend
	epoch    time.Time
	arrived  map[uint64]time.Time // first key → when ApplyRemote inserted it
	changed  chan struct{}        // signalled (non-blocking) on every change
	own      []wire.Load
	peer     map[uint64]wire.Load
}

func newTable(t *testing.T, backends ...uint64) *table {
	t.Helper()
	tr, err := tree.New(tree.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &table{tree: tr, backends: backends, epoch: time.Now(), arrived: map[uint64]time.Time{},
		changed: make(chan struct{}, 1), peer: map[uint64]wire.Load{}}
}

func (tb *table) now() int64 { return int64(time.Since(tb.epoch)) }

func (tb *table) signal() {
	select {
	case tb.changed <- struct{}{}:
	default:
	}
}

func (tb *table) ApplyRemote(routes []wire.Route) (unknown, dropped int) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, r := range routes {
		b := slices.Index(tb.backends, r.Backend)
		if b < 0 {
			unknown++
			continue
		}
		switch r.Op {
		case wire.OpInsert:
			bounds := make([]int, len(r.Bounds))
			for i, v := range r.Bounds {
				bounds[i] = int(v)
			}
			if err := tb.tree.Insert(r.Keys, bounds, b, tree.Remote, max(tb.now()-int64(r.Age)*1e6, 0)); err != nil {
				panic(err)
			}
			if _, ok := tb.arrived[r.Keys[0]]; !ok {
				tb.arrived[r.Keys[0]] = time.Now()
			}
		case wire.OpDemote:
			tb.tree.Demote(r.Keys, b, int(r.Keep), tb.now())
		}
	}
	tb.signal()
	return unknown, 0
}

func (tb *table) Recent(_ context.Context, limit int) []wire.Route {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []wire.Route
	now := tb.now()
	tb.tree.Recent(now, limit, 1<<20, func(keys []uint64, bounds []int, b int, _ tree.Origin, used int64) bool {
		bs := make([]uint32, len(bounds))
		for i, v := range bounds {
			bs[i] = uint32(v)
		}
		out = append(out, wire.Route{Op: wire.OpInsert, Backend: tb.backends[b], Keys: slices.Clone(keys), Bounds: bs, Age: uint32((now - used) / 1e6)})
		return true
	})
	return out
}

func (tb *table) Load(dst []wire.Load) []wire.Load {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append(dst, tb.own...)
}

func (tb *table) SetPeerLoad(sum map[uint64]wire.Load) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.peer = sum
	tb.signal()
}

// learn inserts a route locally, as an owner shard does, and returns it
// as the shard shares it.
func (tb *table) learn(t *testing.T, keys []uint64, b int) wire.Route {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if err := tb.tree.Insert(keys, nil, b, tree.Local, tb.now()); err != nil {
		t.Fatal(err)
	}
	return wire.Route{Op: wire.OpInsert, Backend: tb.backends[b], Keys: keys}
}

// matched is how many leading blocks of keys backend b holds here.
func (tb *table) matched(keys []uint64, b int) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	hits, _ := tb.tree.Match(nil, keys, tb.now())
	for _, h := range hits {
		if h.Backend == b {
			return h.Blocks
		}
	}
	return 0
}

// waitFor waits until cond holds, re-checking on every change of tb and
// at least every 20 ms; it fails the test after a minute (a bound for a
// broken build, not a timing assumption).
func waitFor(t *testing.T, tb *table, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tb.changed:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// chain returns n block keys identified by tag.
func chain(tag, n int) []uint64 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(tag*100000 + i)
	}
	return tree.BlockKeys(nil, 7, toks, 1)
}

// testConfig is a node on a free loopback port with fast failure
// detection.
func testConfig(join ...string) Config {
	c := DefaultConfig()
	c.Bind = "127.0.0.1:0"
	c.Join = join
	c.ReconnectInterval = 200 * time.Millisecond
	c.tune = func(mc *memberlist.Config) {
		mc.ProbeInterval = 100 * time.Millisecond
		mc.ProbeTimeout = 50 * time.Millisecond
		mc.SuspicionMult = 2
		mc.GossipToTheDeadTime = 500 * time.Millisecond
		mc.TCPTimeout = 2 * time.Second
	}
	return c
}

type cluster struct {
	nodes  []*Node
	tables []*table
}

func startNode(t *testing.T, cfg Config, tb *table) *Node {
	t.Helper()
	n, err := Start(cfg, tb, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.JoinSeeds()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Close(ctx) // a killed node's second shutdown is a no-op
	})
	return n
}

// startCluster starts k nodes, each joining the first, sharing backends.
func startCluster(t *testing.T, k int, tune func(i int, c *Config)) *cluster {
	t.Helper()
	c := &cluster{}
	for i := range k {
		var join []string
		if i > 0 {
			join = []string{c.nodes[0].Addr()}
		}
		cfg := testConfig(join...)
		cfg.NodeName = fmt.Sprintf("node-%d", i)
		if tune != nil {
			tune(i, &cfg)
		}
		tb := newTable(t, 11, 22, 33)
		c.nodes = append(c.nodes, startNode(t, cfg, tb))
		c.tables = append(c.tables, tb)
	}
	for i, n := range c.nodes {
		waitFor(t, c.tables[i], fmt.Sprintf("node %d to see %d members", i, k), func() bool { return n.ml.NumMembers() == k })
	}
	return c
}

func TestRouteReachesPeers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, nil)
	a := c.tables[0]
	// A short chain, and one of 600 blocks (9,600 tokens) that is split
	// across messages and joined again.
	short, long := chain(1, 12), chain(2, 600)
	c.nodes[0].Share(a.learn(t, short, 1))
	c.nodes[0].Share(a.learn(t, long, 2))
	for i := 1; i < 3; i++ {
		tb := c.tables[i]
		waitFor(t, tb, fmt.Sprintf("node %d to match both routes", i), func() bool {
			return tb.matched(short, 1) == len(short) && tb.matched(long, 2) == len(long)
		})
		if got := tb.matched(short, 0); got != 0 {
			t.Errorf("node %d: backend 0 matched %d blocks, want 0", i, got)
		}
	}
	// A demotion reaches them too.
	c.nodes[0].Share(wire.Route{Op: wire.OpDemote, Backend: 22, Keys: short, Keep: 4})
	for i := 1; i < 3; i++ {
		tb := c.tables[i]
		waitFor(t, tb, "the demotion", func() bool { return tb.matched(short, 1) < len(short) })
	}
	st := c.nodes[1].Status()
	if !st.Enabled || len(st.Members) != 3 || st.Routes.Received < 2 {
		t.Fatalf("status of node 1 = %+v, want 3 members and the routes received", st)
	}
}

// TestLearnToRemoteMatch measures the delay from a route's learning on
// one node (Share) to its match on the two others, over 200 routes sent
// over 2 seconds. The bound is a p99 of 100 ms; the test fails
// at 4 times that (a loaded CI machine running -race), and logs the
// numbers (the closing note's come from a run without -race).
func TestLearnToRemoteMatch(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, nil)
	a := c.tables[0]
	const routes = 200
	sent := make([]time.Time, routes)
	chains := make([][]uint64, routes)
	pace := time.NewTicker(10 * time.Millisecond) // a steady flow, as traffic learns routes
	defer pace.Stop()
	for i := range routes {
		chains[i] = chain(1000+i, 40+i%200)
		r := a.learn(t, chains[i], i%3)
		sent[i] = time.Now()
		c.nodes[0].Share(r)
		<-pace.C
	}
	var lags []time.Duration
	for _, tb := range c.tables[1:] {
		waitFor(t, tb, "every route", func() bool {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			return len(tb.arrived) == routes
		})
		tb.mu.Lock()
		for i, ch := range chains {
			lags = append(lags, tb.arrived[ch[0]].Sub(sent[i]))
		}
		tb.mu.Unlock()
	}
	slices.Sort(lags)
	p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
	t.Logf("learn → remote match over %d routes × 2 peers: p50 %v, p99 %v, max %v", routes, p50, p99, lags[len(lags)-1])
	if p99 > 400*time.Millisecond {
		t.Fatalf("p99 %v from learning to a remote match, want ≤ 100 ms (failing at 400 ms)", p99)
	}
}

func TestLateJoinerGetsSnapshot(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, nil)
	var chains [][]uint64
	for i := range 50 {
		ch := chain(5000+i, 30+i)
		chains = append(chains, ch)
		c.tables[i%2].learn(t, ch, i%3) // learned before the joiner exists, never broadcast
	}
	cfg := testConfig(c.nodes[0].Addr())
	tb := newTable(t, 11, 22, 33)
	startNode(t, cfg, tb)
	// The join's push-pull brings node 0's routes; node 1's come with
	// the periodic push-pull, or the joiner's next one.
	waitFor(t, tb, "node 0's routes in the joiner", func() bool {
		for i := 0; i < len(chains); i += 2 {
			if tb.matched(chains[i], i%3) != len(chains[i]) {
				return false
			}
		}
		return true
	})
}

func TestWrongKeyRejected(t *testing.T) {
	t.Parallel()
	key := func(b byte) []byte { k := make([]byte, 32); k[0] = b; return k }
	c := startCluster(t, 1, func(_ int, c *Config) { c.Key = key(1) })
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"wrong key", key(2)}, {"no key", nil}} {
		cfg := testConfig(c.nodes[0].Addr())
		cfg.Key = tc.key
		cfg.ReconnectInterval = time.Hour
		var logs logSink
		n, err := Start(cfg, newTable(t, 11), slog.New(&logs), nil)
		if err != nil {
			t.Fatal(err)
		}
		n.JoinSeeds()
		if got := n.ml.NumMembers(); got != 1 {
			t.Errorf("%s: the node sees %d members, want only itself", tc.name, got)
		}
		if got := c.nodes[0].ml.NumMembers(); got != 1 {
			t.Errorf("%s: the cluster has %d members, want 1", tc.name, got)
		}
		if n.m.joinErrors.Get() != 1 || !logs.has("cannot join the cluster") {
			t.Errorf("%s: join errors %d, log %q: want one failed join, logged with why", tc.name, n.m.joinErrors.Get(), logs.text())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = n.Close(ctx) // never joined: Leave has nobody to tell
		cancel()
	}
}

// logSink is a slog.Handler that keeps the messages.
type logSink struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.msgs = append(l.msgs, s)
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }
func (l *logSink) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.msgs, func(m string) bool { return strings.Contains(m, sub) })
}
func (l *logSink) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.msgs)
}

func TestKilledNodeLoadDisappears(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, nil)
	c.tables[2].mu.Lock()
	c.tables[2].own = []wire.Load{{Backend: 11, InFlight: 7, Prefill: 900}}
	c.tables[2].mu.Unlock()
	c.tables[1].mu.Lock()
	c.tables[1].own = []wire.Load{{Backend: 11, InFlight: 2}}
	c.tables[1].mu.Unlock()
	a := c.tables[0]
	peer := func() wire.Load {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.peer[11]
	}
	waitFor(t, a, "both peers' load", func() bool { return peer().InFlight == 9 && peer().Prefill == 900 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[2].kill(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "the killed node's load to disappear", func() bool { return peer().InFlight == 2 && peer().Prefill == 0 })
	waitFor(t, a, "the killed node to be declared dead", func() bool { return c.nodes[0].ml.NumMembers() == 2 })
	st := c.nodes[0].Status()
	for _, m := range st.Members {
		if m.Name == "node-2" && m.State != "dead" {
			t.Errorf("the killed node's state = %q, want dead", m.State)
		}
	}
}

// dropTransport is memberlist's NetTransport with a switchable partition:
// nothing is sent to, or dialled at, a blocked address.
type dropTransport struct {
	*memberlist.NetTransport
	blocked atomic.Pointer[map[string]bool]
}

func (d *dropTransport) cut(addr string) bool {
	m := d.blocked.Load()
	return m != nil && (*m)[addr]
}

func (d *dropTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if d.cut(addr) {
		return time.Now(), nil // lost on the way
	}
	return d.NetTransport.WriteTo(b, addr)
}

func (d *dropTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return d.WriteTo(b, a.Addr)
}

func (d *dropTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if d.cut(addr) {
		return nil, fmt.Errorf("partitioned from %s", addr)
	}
	return d.NetTransport.DialTimeout(addr, timeout)
}

func (d *dropTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return d.DialTimeout(a.Addr, timeout)
}

func TestPartitionHeals(t *testing.T) {
	t.Parallel()
	drops := make([]*dropTransport, 3)
	c := startCluster(t, 3, func(i int, c *Config) {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
		if err != nil {
			t.Fatal(err)
		}
		drops[i] = &dropTransport{NetTransport: nt}
		base := c.tune
		c.tune = func(mc *memberlist.Config) {
			base(mc)
			mc.Transport = drops[i]
			mc.BindPort = nt.GetAutoBindPort()
			mc.AdvertisePort = mc.BindPort
		}
	})
	addr := func(i int) string { return c.nodes[i].Addr() }
	// {0} | {1, 2}
	partition := func(on bool) {
		set := func(i int, addrs ...string) {
			m := map[string]bool{}
			for _, a := range addrs {
				m[a] = on
			}
			drops[i].blocked.Store(&m)
		}
		set(0, addr(1), addr(2))
		set(1, addr(0))
		set(2, addr(0))
	}
	partition(true)
	waitFor(t, c.tables[1], "node 1 to lose node 0", func() bool { return c.nodes[1].ml.NumMembers() == 2 })
	waitFor(t, c.tables[0], "node 0 to lose both", func() bool { return c.nodes[0].ml.NumMembers() == 1 })

	// Both sides keep learning, and the side of two keeps sharing.
	left, right, both := chain(7001, 50), chain(7002, 50), chain(7003, 20)
	c.nodes[0].Share(c.tables[0].learn(t, left, 0))
	c.nodes[1].Share(c.tables[1].learn(t, right, 1))
	waitFor(t, c.tables[2], "node 2 to get node 1's route during the partition", func() bool { return c.tables[2].matched(right, 1) == len(right) })
	if got := c.tables[1].matched(left, 0); got != 0 {
		t.Fatalf("node 1 matched %d blocks of a route learned across the partition", got)
	}

	partition(false)
	for i := range 3 {
		waitFor(t, c.tables[i], fmt.Sprintf("node %d to see 3 members again", i), func() bool { return c.nodes[i].ml.NumMembers() == 3 })
	}
	// The routes learned apart converge (the rejoin's push-pull), and
	// new ones flow both ways.
	c.nodes[2].Share(c.tables[2].learn(t, both, 2))
	for i := range 3 {
		tb := c.tables[i]
		waitFor(t, tb, fmt.Sprintf("node %d to hold every route", i), func() bool {
			return tb.matched(left, 0) == len(left) && tb.matched(right, 1) == len(right) && tb.matched(both, 2) == len(both)
		})
	}
}

// TestLoadOfManyBackends: a load report larger than one packet travels
// in several messages, and every backend's load arrives.
func TestLoadOfManyBackends(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, nil)
	const backends = 300
	c.tables[1].mu.Lock()
	for i := range backends {
		c.tables[1].own = append(c.tables[1].own, wire.Load{Backend: uint64(1000 + i), InFlight: uint32(i + 1), Prefill: 1 << 40, Footprint: 1 << 40, Pinned: 1 << 40})
	}
	c.tables[1].mu.Unlock()
	if per := c.nodes[1].loadsPerMessage(); per >= backends {
		t.Fatalf("%d loads fit one message: the test needs several", per)
	}
	a := c.tables[0]
	waitFor(t, a, "every backend's load", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for i := range backends {
			if a.peer[uint64(1000+i)].InFlight != uint32(i+1) {
				return false
			}
		}
		return true
	})
	for _, msg := range c.nodes[1].loadMessages(time.Now(), c.tables[1].own) {
		if len(msg) > c.nodes[1].cfg.BatchBytes {
			t.Fatalf("a load message of %d bytes, over BatchBytes %d", len(msg), c.nodes[1].cfg.BatchBytes)
		}
	}
}

// TestSeedMissing: a --join seed is missing when an address it resolves
// to is neither an alive peer nor this router (a headless Service's name
// resolves to every router's address, this one's included).
func TestSeedMissing(t *testing.T) {
	n := &Node{self: "127.0.0.1:7000"}
	alive := map[string]bool{"127.0.0.2:7000": true}
	for _, tc := range []struct {
		seed    string
		missing bool
	}{
		{"127.0.0.1:7000", false}, // itself
		{"127.0.0.2:7000", false}, // an alive peer
		{"127.0.0.3:7000", true},  // not a member
		{"127.0.0.2:7001", true},  // another port
		{"no-port", true},
	} {
		if got := n.seedMissing(t.Context(), tc.seed, alive); got != tc.missing {
			t.Errorf("seedMissing(%q) = %v, want %v", tc.seed, got, tc.missing)
		}
	}
}

// kill stops memberlist without a goodbye, as a crash would (tests).
func (n *Node) kill(ctx context.Context) error {
	n.closed.Store(true)
	n.group.Stop()
	werr := n.group.Wait(ctx)
	return errors.Join(werr, n.ml.Shutdown())
}
