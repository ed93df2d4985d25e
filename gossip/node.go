package gossip

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/hashicorp/memberlist"

	"github.com/saltus-lb/saltus/gossip/wire"
	"github.com/saltus-lb/saltus/rules"
)

// Table is the router's side of a Node: the route table and backend load
// it shares and receives. The dataplane implements it over shard.Router
// and backend.Set.
type Table interface {
	// ApplyRemote inserts peers' route changes with origin REMOTE (and
	// applies their demotions) through the owner shards, in order. It
	// posts and returns; the routes' slices are the Table's from then
	// on. unknown counts routes naming a backend this router does not
	// have, dropped those a full mailbox refused. Any goroutine but a
	// loop.
	ApplyRemote(routes []wire.Route) (unknown, dropped int)
	// Recent returns up to limit of the most recently used routes, most
	// recent first, waiting for the loops until ctx ends. Any goroutine
	// but a loop.
	Recent(ctx context.Context, limit int) []wire.Route
	// Load appends this router's own load per backend. Any goroutine.
	Load(dst []wire.Load) []wire.Load
	// SetPeerLoad replaces the peers' load per backend key, from their
	// latest reports: in-flight and prefill summed, footprint and pinned
	// the largest (backend.PeerLoad says why); a backend not in sum has
	// none. Any goroutine.
	SetPeerLoad(sum map[uint64]wire.Load)
}

// antiEntropyShare: the periodic push-pull (not a join) sends the
// SnapshotRoutes/antiEntropyShare most recent routes.
const antiEntropyShare = 10

// snapshotWait bounds how long a push-pull waits for the loops' routes.
const snapshotWait = time.Second

// resyncQueue bounds the returned peers waiting for a state exchange.
const resyncQueue = 16

// leaveTimeout bounds Close's goodbye broadcast.
const leaveTimeout = time.Second

// Node is this router's membership in a cluster. See the package doc.
type Node struct {
	cfg    Config
	table  Table
	logger *slog.Logger
	name   string
	ml     *memberlist.Memberlist
	mlp    atomic.Pointer[memberlist.Memberlist] // ml, for the queue's NumNodes during Create
	queue  *memberlist.TransmitLimitedQueue
	outbox chan wire.Route // bounded: Share drops when full
	group  *rules.Group
	m      *nodeMetrics
	seeds  []string    // cfg.Join
	self   string      // this router's own address (host:port), read once at Start
	resync chan string // peers back from dead to exchange states with (bounded: resyncQueue)
	closed atomic.Bool

	// Owned by the batch goroutine (run).
	batcher  *wire.Batcher
	loadBuf  []wire.Load
	lastLoad []wire.Load // the load last sent to the peers

	mu    sync.Mutex // guards the fields below (memberlist's goroutines and run)
	peers map[string]*peer
	dec   wire.Message      // NotifyMsg's decode scratch
	reasm *wire.Reassembler // split routes waiting for their parts
	lags  lagRing
}

// peer is what a Node knows of another node. Guarded by Node.mu.
type peer struct {
	addr        string
	state       string // alive, suspect, dead, left (memberlist's)
	joined      time.Time
	lastContact time.Time           // last message of ours from it
	routesIn    uint64              // routes received from it
	load        map[uint64]peerLoad // its last report per backend key (at most maxPeerLoads)
	loadAt      time.Time           // its last report; zero: none live
}

// peerLoad is a peer's last report on one backend and when the peer sent
// it (its clock, ms): a report comes in several messages when it does not
// fit one packet, and twice (at once, then through the queue), so each
// backend keeps the newest.
type peerLoad struct {
	wire.Load
	sent int64
}

// maxPeerLoads bounds the backends a peer's load is kept for: beyond
// tree.Config's default MaxBackends.
const maxPeerLoads = 4096

// Start starts this node's side of the cluster cfg describes (memberlist
// listens, peers may join it) and shares table's routes and load in it;
// JoinSeeds then joins the Join peers. A Join peer that does not answer
// is logged and retried every ReconnectInterval, so a router starts
// serving alone rather than not at all. Close it after the data plane
// stopped. Any goroutine but a loop.
func Start(cfg Config, table Table, logger *slog.Logger, set *metrics.Set) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("gossip: Start without cluster-bind")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if set == nil {
		set = metrics.NewSet()
	}
	n := &Node{
		cfg:    cfg,
		table:  table,
		logger: logger.With("component", "gossip"),
		outbox: make(chan wire.Route, cfg.Outbox),
		group:  rules.NewGroup(context.Background()),
		seeds:  slices.Clone(cfg.Join),
		resync: make(chan string, resyncQueue),
		peers:  map[string]*peer{},
		reasm:  wire.NewReassembler(cfg.MaxPending, cfg.PartTimeout),
		m:      newNodeMetrics(set),
	}
	mlc, err := n.memberlistConfig()
	if err != nil {
		return nil, err
	}
	n.name = mlc.Name
	n.batcher = wire.NewBatcher(n.name, cfg.BatchBytes)
	n.queue = &memberlist.TransmitLimitedQueue{NumNodes: n.numNodes, RetransmitMult: mlc.RetransmitMult}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("gossip: cannot start the cluster listener on %s: %w", cfg.Bind, err)
	}
	n.ml = ml
	n.mlp.Store(ml)
	n.m.register(set, n)
	n.self = ml.LocalNode().Address()
	n.logger.Info("cluster listening", "node", n.name, "addr", n.self, "encrypted", cfg.Key != nil)
	n.group.Go("gossip.batch", n.run)
	return n, nil
}

// JoinSeeds joins the cluster through Config.Join (logging why not) and
// starts rejoining missing seeds every ReconnectInterval. Call it once
// the data plane runs: the join's push-pull hands the peers' routes to
// the loops, which refuse them before they start. Any goroutine but a
// loop (it waits on the network).
func (n *Node) JoinSeeds() {
	if len(n.seeds) > 0 {
		n.join(n.seeds)
	}
	n.group.Go("gossip.reconnect", n.reconnect)
}

// memberlistConfig starts from memberlist's LAN defaults; Config's
// fields document each value changed and why.
func (n *Node) memberlistConfig() (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	host, port, err := splitHostPort(n.cfg.Bind)
	if err != nil {
		return nil, err // Validate checked it
	}
	c.BindAddr, c.BindPort, c.AdvertisePort = host, port, port
	if n.cfg.Advertise != "" {
		ah, ap, err := splitHostPort(n.cfg.Advertise)
		if err != nil {
			return nil, err
		}
		c.AdvertiseAddr, c.AdvertisePort = ah, ap
	}
	c.Name = n.cfg.NodeName
	if c.Name == "" {
		c.Name = defaultName(port)
	}
	if n.cfg.Key != nil {
		c.SecretKey = n.cfg.Key
	}
	c.GossipInterval = n.cfg.GossipInterval
	c.GossipNodes = n.cfg.GossipNodes
	c.PushPullInterval = n.cfg.PushPullInterval
	// Route keys are hashes: LZW finds nothing to compress in them and
	// costs CPU on every packet.
	c.EnableCompression = false
	c.Delegate = delegate{n}
	c.Events = events{n}
	c.Logger = log.New(&logWriter{logger: n.logger, m: n.m}, "", 0)
	if n.cfg.tune != nil {
		n.cfg.tune(c)
	}
	return c, nil
}

func defaultName(port int) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "saltus"
	}
	if port != 0 {
		return host + "-" + strconv.Itoa(port)
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "-" + hex.EncodeToString(b[:])
}

func (n *Node) numNodes() int {
	if ml := n.mlp.Load(); ml != nil {
		return ml.NumMembers()
	}
	return 1
}

// Members is the number of alive members, this node included. Any
// goroutine.
func (n *Node) Members() int { return n.ml.NumMembers() }

// Name is this node's name in the cluster. Any goroutine.
func (n *Node) Name() string { return n.name }

// Addr is the host:port peers reach this node at. Any goroutine.
func (n *Node) Addr() string { return n.ml.LocalNode().Address() }

// Share queues a route change for the peers. It never blocks: when the
// outbox is full the change is dropped, counted. r's slices must not be
// written afterwards. Any goroutine (the owner loops call it).
func (n *Node) Share(r wire.Route) {
	select {
	case n.outbox <- r:
	default:
		n.m.routesDropped[dropOutbox].Inc()
	}
}

// join joins the cluster through seeds and logs why not. Any goroutine
// but a loop (it waits on the network).
func (n *Node) join(seeds []string) {
	got, err := n.ml.Join(seeds)
	if err != nil {
		hint := "they may be down or unreachable"
		if n.cfg.Key != nil {
			hint += ", or use another cluster key than --cluster-key-file's"
		} else {
			hint += ", or require a cluster key (--cluster-key-file) this node does not have"
		}
		n.logger.Error("cannot join the cluster; retrying every "+n.cfg.ReconnectInterval.String(), "peers", seeds, "joined", got, "err", err, "hint", hint)
		n.m.joinErrors.Inc()
		return
	}
	n.logger.Info("joined the cluster", "via", seeds, "members", n.ml.NumMembers())
}

// run batches route changes, reports this node's load and expires the
// peers' reports, until the Group stops.
func (n *Node) run(ctx context.Context) {
	batch := time.NewTicker(n.cfg.BatchInterval)
	defer batch.Stop()
	load := time.NewTicker(n.cfg.LoadInterval)
	defer load.Stop()
	for {
		select {
		case <-ctx.Done():
			n.batcher.Flush(time.Now(), n.emit)
			return
		case r := <-n.outbox:
			n.add(r)
		case now := <-batch.C:
			n.batcher.Flush(now, n.emit)
			n.sendLoadChange(now)
		case now := <-load.C:
			n.sendLoad(now)
			n.expireLoads(now)
		}
	}
}

// add puts one route change in the batch. Owned by run.
func (n *Node) add(r wire.Route) {
	if len(r.Keys) == 0 {
		return
	}
	if len(r.Keys) > wire.MaxChain {
		r.Keys = r.Keys[:wire.MaxChain]
	}
	n.batcher.Add(r, time.Now(), n.emit)
	n.m.routesSent.Inc()
}

// emit sends a full route message to every alive peer at once (Config.
// GossipInterval says why not through the broadcast queue). Owned by run.
func (n *Node) emit(msg []byte) {
	n.m.messagesSent[kindRoutes].Inc()
	n.sendAll(msg)
}

// sendAll sends msg to every alive or suspect peer, one UDP packet each.
func (n *Node) sendAll(msg []byte) {
	for _, a := range n.livePeers() {
		if err := n.ml.SendToAddress(a, msg); err != nil {
			n.m.sendErrors.Inc()
			n.logger.Debug("cannot send routes to a peer", "peer", a.Name, "err", err)
		}
	}
}

// livePeers are the peers not known dead or left, from the peer table:
// memberlist.Members returns its own nodes, which it goes on writing
// without our lock (a race under -race), so their fields are read only
// inside its event callbacks (event). Any goroutine.
func (n *Node) livePeers() []memberlist.Address {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]memberlist.Address, 0, len(n.peers))
	for name, p := range n.peers {
		if p.addr != "" && p.state != "dead" && p.state != "left" {
			out = append(out, memberlist.Address{Addr: p.addr, Name: name})
		}
	}
	return out
}

// bound prunes the broadcast queue to QueueLimit: memberlist's
// TransmitLimitedQueue has no bound of its own. Prune drops the messages
// sent most often first.
func (n *Node) bound() {
	if q := n.queue.NumQueued(); q > n.cfg.QueueLimit {
		n.queue.Prune(n.cfg.QueueLimit)
		n.m.queuePruned.Add(q - n.cfg.QueueLimit)
	}
}

// sendLoad queues this node's per-backend load, each message replacing
// its predecessor still in the queue. Owned by run.
func (n *Node) sendLoad(now time.Time) {
	n.loadBuf = n.table.Load(n.loadBuf[:0])
	for i, msg := range n.loadMessages(now, n.loadBuf) {
		n.queue.QueueBroadcast(loadBroadcast{msg: msg, name: "load/" + strconv.Itoa(i)})
		n.m.messagesSent[kindLoad].Inc()
	}
	n.bound()
}

// loadsPerMessage keeps a load message within BatchBytes: a load record
// is at most 8 + 5 + 3×10 bytes, the header at most 267.
func (n *Node) loadsPerMessage() int { return max((n.cfg.BatchBytes-267)/43, 1) }

// loadMessages encodes loads in as many messages as BatchBytes needs
// (one UDP packet each; memberlist's queue never sends a broadcast larger
// than a packet).
func (n *Node) loadMessages(now time.Time, loads []wire.Load) [][]byte {
	var out [][]byte
	per := n.loadsPerMessage()
	for len(loads) > 0 || out == nil {
		part := loads[:min(len(loads), per)]
		loads = loads[len(part):]
		out = append(out, wire.AppendMessage(nil, &wire.Message{Header: wire.Header{Kind: wire.KindLoad, Node: n.name, Sent: now.UnixMilli()}, Loads: part}))
	}
	return out
}

// sendLoadChange sends this node's load at once to every peer when it
// changed since it was last sent, checked every BatchInterval: the
// periodic report (sendLoad) is up to LoadInterval old, and on a router
// taking a request every few milliseconds its peers then decide on a
// load missing the requests sent since (three routers on stress, 60 s:
// P99 TTFT 592 ms, against 476 ms with reports 5 times as often and 299
// ms for one router alone). Owned by run.
func (n *Node) sendLoadChange(now time.Time) {
	n.loadBuf = n.table.Load(n.loadBuf[:0])
	if slices.Equal(n.loadBuf, n.lastLoad) {
		return
	}
	n.lastLoad = append(n.lastLoad[:0], n.loadBuf...)
	for _, msg := range n.loadMessages(now, n.loadBuf) {
		n.m.messagesSent[kindLoad].Inc()
		n.sendAll(msg)
	}
}

// expireLoads drops peers' load reports older than LoadTTL and publishes
// the sums. Any goroutine.
func (n *Node) expireLoads(now time.Time) {
	n.mu.Lock()
	changed := false
	for _, p := range n.peers {
		if !p.loadAt.IsZero() && now.Sub(p.loadAt) > n.cfg.LoadTTL {
			clear(p.load)
			p.loadAt = time.Time{}
			changed = true
		}
	}
	sum := n.sumLocked()
	n.mu.Unlock()
	if changed {
		n.m.loadExpired.Inc()
	}
	n.table.SetPeerLoad(sum)
}

// storeLoadLocked keeps a peer's report on each backend unless it holds a
// newer one (an older report, relayed late by the queue).
func (n *Node) storeLoadLocked(p *peer, sent int64, loads []wire.Load, now time.Time) {
	if p.load == nil {
		p.load = map[uint64]peerLoad{}
	}
	for _, l := range loads {
		old, ok := p.load[l.Backend]
		if ok && old.sent > sent {
			continue
		}
		if !ok && len(p.load) >= maxPeerLoads {
			n.m.peersFull.Inc()
			continue
		}
		p.load[l.Backend] = peerLoad{l, sent}
	}
	p.loadAt = now
}

// sumLocked is the peers' live load per backend key (Table.SetPeerLoad).
func (n *Node) sumLocked() map[uint64]wire.Load {
	sum := map[uint64]wire.Load{}
	for _, p := range n.peers {
		for _, l := range p.load {
			s := sum[l.Backend]
			s.Backend = l.Backend
			s.InFlight += l.InFlight
			s.Prefill += l.Prefill
			s.Footprint = max(s.Footprint, l.Footprint)
			s.Pinned = max(s.Pinned, l.Pinned)
			sum[l.Backend] = s
		}
	}
	return sum
}

// reconnect joins again the Join peers that are not alive members, every
// ReconnectInterval: memberlist stops talking to a node it declared dead
// after GossipToTheDeadTime, so without this two sides of a long
// partition would never meet again. It also exchanges states with each
// peer that came back (event), since a join is a push-pull.
func (n *Node) reconnect(ctx context.Context) {
	t := time.NewTicker(n.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case addr := <-n.resync:
			n.logger.Debug("exchanging states with a peer back", "addr", addr)
			n.m.resyncs.Inc()
			n.join([]string{addr}) // a join is a push-pull with that peer
			continue
		case <-t.C:
		}
		if len(n.seeds) == 0 {
			continue
		}
		alive := map[string]bool{}
		for _, a := range n.livePeers() {
			alive[a.Addr] = true
		}
		var missing []string
		for _, s := range n.seeds {
			if n.seedMissing(ctx, s, alive) {
				missing = append(missing, s)
			}
		}
		if len(missing) > 0 {
			n.m.reconnects.Inc()
			n.join(missing)
		}
	}
}

// resolveTimeout bounds the look-up of one --join seed's name.
const resolveTimeout = 2 * time.Second

// seedMissing reports whether the --join seed (host:port) names a router
// that is not an alive peer. A name may resolve to several addresses (a
// Kubernetes headless Service: every router's): each counts, but this
// router's own, so a router is never "missing" itself (it would rejoin,
// a push-pull with every peer, every ReconnectInterval). A seed that
// does not resolve counts as missing (the join logs why).
func (n *Node) seedMissing(ctx context.Context, seed string, alive map[string]bool) bool {
	host, port, err := net.SplitHostPort(seed)
	if err != nil {
		return true
	}
	lctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(lctx, host)
	if err != nil || len(addrs) == 0 {
		return true
	}
	for _, a := range addrs {
		if hp := net.JoinHostPort(a, port); hp != n.self && !alive[hp] {
			return true
		}
	}
	return false
}

// peerLocked returns the entry of node name, creating it within
// MaxPeers (a full table first forgets a dead or left peer; else nil).
func (n *Node) peerLocked(name string) *peer {
	if p := n.peers[name]; p != nil {
		return p
	}
	if len(n.peers) >= n.cfg.MaxPeers {
		for k, p := range n.peers {
			if p.state == "dead" || p.state == "left" {
				delete(n.peers, k)
				break
			}
		}
		if len(n.peers) >= n.cfg.MaxPeers {
			n.m.peersFull.Inc()
			return nil
		}
	}
	p := &peer{state: "alive"}
	n.peers[name] = p
	return p
}

// receive handles one of our messages from a peer (NotifyMsg). Called on
// memberlist's packet goroutine.
func (n *Node) receive(b []byte) {
	now := time.Now()
	n.mu.Lock()
	if err := wire.Decode(b, &n.dec); err != nil {
		n.mu.Unlock()
		n.dropped(err)
		return
	}
	m := &n.dec
	if m.Node == n.name {
		n.mu.Unlock()
		return // our own, relayed back
	}
	p := n.peerLocked(m.Node)
	if p != nil {
		p.lastContact = now
	}
	switch m.Kind {
	case wire.KindRoutes:
		n.m.messagesReceived[kindRoutes].Inc()
		n.lags.add(now.Sub(time.UnixMilli(m.Sent)))
		routes := make([]wire.Route, 0, len(m.Routes))
		for _, r := range m.Routes {
			whole, ok := n.reasm.Add(m.Node, r, now)
			if !ok {
				continue
			}
			if r.Parts <= 1 {
				whole = cloneRoute(whole) // it aliases n.dec, reused by the next message
			}
			routes = append(routes, whole)
		}
		if p != nil {
			p.routesIn += uint64(len(routes))
		}
		n.mu.Unlock()
		n.apply(routes)
	case wire.KindLoad:
		n.m.messagesReceived[kindLoad].Inc()
		// A report can come twice (sent at once, then relayed by the
		// queue) or late: an older one than held is ignored.
		if p != nil {
			n.storeLoadLocked(p, m.Sent, m.Loads, now)
		}
		sum := n.sumLocked()
		n.mu.Unlock()
		n.table.SetPeerLoad(sum)
	default:
		n.mu.Unlock()
		n.dropped(fmt.Errorf("%w: kind %d in a broadcast", wire.ErrMalformed, m.Kind))
	}
}

func (n *Node) dropped(err error) {
	if errors.Is(err, wire.ErrVersion) {
		n.m.messagesDropped[dropVersion].Inc()
	} else {
		n.m.messagesDropped[dropMalformed].Inc()
	}
	n.logger.Debug("dropped a cluster message", "err", err)
}

// apply hands whole routes to the table and counts the outcome.
func (n *Node) apply(routes []wire.Route) {
	if len(routes) == 0 {
		return
	}
	unknown, dropped := n.table.ApplyRemote(routes)
	n.m.routesReceived.Add(len(routes))
	n.m.routesDropped[dropUnknownBackend].Add(unknown)
	n.m.routesDropped[dropMailbox].Add(dropped)
}

func cloneRoute(r wire.Route) wire.Route {
	r.Keys = slices.Clone(r.Keys)
	r.Bounds = slices.Clone(r.Bounds)
	return r
}

// localState is this node's push-pull state: its most recently used
// routes and its load, within SnapshotBytes. Called on memberlist's
// goroutines.
func (n *Node) localState(join bool) []byte {
	limit := n.cfg.SnapshotRoutes
	if !join {
		// The periodic exchange heals what broadcasts lost lately: the
		// most recent routes, not the whole table again every 30 s.
		limit = max(limit/antiEntropyShare, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), snapshotWait)
	routes := n.table.Recent(ctx, limit)
	cancel()
	kept := wire.WholeRoutes(routes, n.cfg.SnapshotBytes-1024) // room for the header and the load
	loads := n.table.Load(nil)
	if len(loads) > 64<<10 {
		loads = loads[:64<<10]
	}
	msg := wire.AppendMessage(nil, &wire.Message{
		Header: wire.Header{Kind: wire.KindState, Node: n.name, Sent: time.Now().UnixMilli()},
		Routes: kept, Loads: loads,
	})
	n.m.snapshotSent.Add(len(kept))
	return msg
}

// mergeState applies a peer's push-pull state: its routes oldest first
// (tree.Recent: a full node keeps the most recent holders), and its load.
func (n *Node) mergeState(buf []byte) {
	var m wire.Message // its own: the routes' slices go to the table
	if err := wire.Decode(buf, &m); err != nil {
		n.dropped(err)
		return
	}
	if m.Kind != wire.KindState || m.Node == n.name {
		n.dropped(fmt.Errorf("%w: kind %d in a push-pull state", wire.ErrMalformed, m.Kind))
		return
	}
	now := time.Now()
	n.mu.Lock()
	if p := n.peerLocked(m.Node); p != nil {
		p.lastContact = now
		p.routesIn += uint64(len(m.Routes))
		n.storeLoadLocked(p, m.Sent, m.Loads, now)
	}
	sum := n.sumLocked()
	n.mu.Unlock()
	n.table.SetPeerLoad(sum)
	slices.Reverse(m.Routes)
	n.apply(m.Routes)
	n.m.snapshotReceived.Add(len(m.Routes))
	n.logger.Debug("merged a peer's routes", "peer", m.Node, "routes", len(m.Routes))
}

// event records a membership change (memberlist's EventDelegate). A peer
// that left or died stops counting at once: its load is dropped.
func (n *Node) event(node *memberlist.Node, what string) {
	if node.Name == n.name {
		return
	}
	now := time.Now()
	n.mu.Lock()
	p := n.peerLocked(node.Name)
	if p == nil {
		n.mu.Unlock()
		return
	}
	p.addr = node.Address()
	p.state = stateName(node.State)
	if what == "join" {
		if !p.joined.IsZero() {
			// A peer back from dead or left (a partition healed, a
			// restart under the same name): broadcasts sent meanwhile
			// were lost to both sides, so exchange states now rather
			// than at the next periodic push-pull.
			select {
			case n.resync <- p.addr:
			default: // the queue is full; the periodic push-pull covers the rest
			}
		}
		p.joined = now
		p.state = "alive"
	}
	gone := what == "leave"
	if gone {
		clear(p.load)
		p.loadAt = time.Time{}
		if node.State != memberlist.StateLeft {
			p.state = "dead"
		}
	}
	sum := n.sumLocked()
	n.mu.Unlock()
	if gone {
		n.table.SetPeerLoad(sum)
		n.logger.Info("cluster peer gone", "peer", node.Name, "addr", node.Address(), "left", node.State == memberlist.StateLeft)
	} else if what == "join" {
		n.logger.Info("cluster peer joined", "peer", node.Name, "addr", node.Address())
	}
}

// Close says goodbye to the cluster (peers drop this node's load at
// once), stops the goroutines and memberlist. Any goroutine but a loop.
func (n *Node) Close(ctx context.Context) error {
	if n.closed.Swap(true) {
		return nil
	}
	lerr := n.ml.Leave(leaveTimeout)
	n.group.Stop()
	werr := n.group.Wait(ctx)
	serr := n.ml.Shutdown()
	if lerr != nil {
		lerr = fmt.Errorf("gossip: leave: %w", lerr)
	}
	return errors.Join(lerr, werr, serr)
}

// delegate is memberlist's Delegate.
type delegate struct{ n *Node }

func (delegate) NodeMeta(int) []byte  { return nil }
func (d delegate) NotifyMsg(b []byte) { d.n.receive(b) }
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.n.queue.GetBroadcasts(overhead, limit)
}
func (d delegate) LocalState(join bool) []byte         { return d.n.localState(join) }
func (d delegate) MergeRemoteState(buf []byte, _ bool) { d.n.mergeState(buf) }

// events is memberlist's EventDelegate.
type events struct{ n *Node }

func (e events) NotifyJoin(node *memberlist.Node)   { e.n.event(node, "join") }
func (e events) NotifyLeave(node *memberlist.Node)  { e.n.event(node, "leave") }
func (e events) NotifyUpdate(node *memberlist.Node) { e.n.event(node, "update") }

// loadBroadcast is one message of this node's load report: a newer one
// of the same name (its index in the report) replaces an older one still
// queued (memberlist's NamedBroadcast).
type loadBroadcast struct {
	msg  []byte
	name string
}

func (b loadBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b loadBroadcast) Message() []byte                       { return b.msg }
func (b loadBroadcast) Finished()                             {}
func (b loadBroadcast) Name() string                          { return b.name }
