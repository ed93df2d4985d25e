package reactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/queue"

	"github.com/saltus-lb/saltus/rules"
)

// Server is the HTTP/1.1 server: gnet event loops, one per shard.
type Server struct {
	cfg Config
	lim atomic.Pointer[limits] // cfg's limits as Retune last set them
	h   Handler
	own OwnAnswers // h's, if it counts the reactor's own answers; else nil
	log *slog.Logger
	m   *serverMetrics

	group  *rules.Group
	eng    gnet.Engine   // set in OnBoot, before booted is closed
	booted chan struct{} // closed by OnBoot
	ran    chan struct{} // closed when gnet.Run returned
	runErr error         // gnet.Run's error, read after ran is closed
	addr   string        // set by Start

	// loops[i] is loop i, made by NewServer; each is bound to its gnet
	// loop when discovered through its first connection (gnet gives out
	// a loop handle only through a connection, Conn.EventLoop).
	loops      []*Loop
	discovered atomic.Int32

	tls *tlsEdge // the TLS acceptor; nil without Config.TLS

	conns       atomic.Int64 // open connections
	upConns     atomic.Int64 // open upstream connections (Upstream)
	dialers     *rules.Workers
	sweepHook   func(l *Loop, now time.Time) // set before Start
	open        atomic.Int64                 // exchanges not yet ended
	accepting   atomic.Bool                  // StopAccepting clears it
	draining    atomic.Bool                  // answers close their connection
	stopped     atomic.Bool                  // Post refuses; set before the engine stops
	posting     atomic.Int64                 // Posts between their stopped check and Execute
	started     atomic.Bool
	discovering atomic.Bool // Start is finding the loops
}

// Loop is one event loop: the one value that holds a loop's state, made
// by NewServer (Server.Loops) and handed to every callback that runs on
// it (Exchange.Loop, Upstream.Loop, the OnSweep hook). The reactor's own
// part is below; the packages above attach theirs by type with a [Part]
// (part.go), never in tables indexed by a loop number. Its methods say
// who may call them; its fields say who owns them.
type Loop struct {
	s   *Server // immutable
	idx int     // immutable: the position in Server.Loops, for labels and partitions

	// Bound once, when the loop is discovered: el is written before
	// ready is set, and read only after ready was seen set (or on the
	// loop itself).
	claimed atomic.Bool // a gnet loop took this value (loopOf)
	ready   atomic.Bool // el is set: Post and Execute may reach the loop
	el      gnet.EventLoop

	mail atomic.Int64 // Post functions queued, not yet run

	// The mailbox (mailbox.go): Post's and Poster's functions.
	mbox       queue.AsyncTaskQueue
	inCB       atomic.Bool // the loop is inside a traffic callback: it runs mbox before leaving
	wakeQueued atomic.Bool // a wake-up (gnet Execute) is queued and has not started
	wake       gnet.RunnableFunc

	sweepQueued atomic.Bool // a sweep is queued: at most one at a time, even if the loop lags

	conns     map[*conn]struct{} // owned by the loop
	held      map[*conn]struct{} // paused for the answers they owe (conn.canParse): looked at every tickEvery; owned by the loop
	sweep     func(context.Context) error
	lastSweep time.Time // of the connections; owned by the loop
	scratch   []byte    // RespondLoop's answer buffer; owned by the loop

	// TLS on the loop (tlswire.go); owned by the loop.
	plain    []byte // the plaintext a TLS connection's records gave in this callback
	plainOff int    // how much of plain was taken
	tlsOut   []byte // the records a TLS write makes, staged for one gnet write

	// Write coalescing (cork.go); owned by the loop.
	corking bool   // inside an upstream traffic callback
	corked  *conn  // the connection whose bytes cbuf holds; nil: none
	cbuf    []byte // corked bytes, at most maxCork

	// The parts other packages attach (part.go): set before Start or on
	// the loop, read on the loop.
	parts []partEntry
}

// NewServer checks cfg and returns a server; Start starts it.
func NewServer(cfg Config, h Handler, logger *slog.Logger, set *metrics.Set) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("reactor: nil Handler")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if set == nil {
		set = metrics.NewSet()
	}
	if cfg.Loops == 0 {
		cfg.Loops = runtime.GOMAXPROCS(0)
	}
	s := &Server{
		cfg:    cfg,
		h:      h,
		log:    logger.With("component", "reactor"),
		group:  rules.NewGroup(context.Background()),
		booted: make(chan struct{}),
		ran:    make(chan struct{}),
	}
	for i := range cfg.Loops {
		s.loops = append(s.loops, s.newLoop(i))
	}
	s.lim.Store(new(cfg.limits()))
	s.own, _ = h.(OwnAnswers)
	s.m = newServerMetrics(s, set)
	s.dialers = rules.NewWorkers(s.group, "reactor.dial", 10*time.Second)
	if cfg.TLS != nil {
		s.tls = newTLSEdge(s, set)
	}
	return s, nil
}

// Loops returns the event loops, Config.Loops of them, in index order
// (Loop.Index); the slice is the server's, not to be changed. They exist
// from NewServer on, so the packages above can attach their parts before
// Start; they reach their gnet loops at Start. Any goroutine.
func (s *Server) Loops() []*Loop { return s.loops }

// Index returns the loop's position in Server.Loops: for metric labels
// and for partitions that name a loop by number (the route table's
// owner shard). Any goroutine.
func (l *Loop) Index() int { return l.idx }

// Running reports whether the loops run: Start was called and the engine
// has not begun to stop. Any goroutine.
func (s *Server) Running() bool { return s.started.Load() && !s.stopped.Load() }

// Addr returns the address the server listens on (the real port for
// ":0"), once Start returned. Any goroutine.
func (s *Server) Addr() string { return s.addr }

// Start starts the event loops and returns once the server listens and
// every loop is known (so Post works on every Loop). Any goroutine but a
// loop; once.
func (s *Server) Start() error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("reactor: Start called twice")
	}
	s.accepting.Store(true)
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(s.cfg.Loops),
		gnet.WithLockOSThread(s.cfg.LockOSThread),
		gnet.WithLoadBalancing(gnet.RoundRobin),
		gnet.WithTicker(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		// SO_REUSEADDR, as Go's net.Listen sets it: a restart binds even
		// while the last run's connections sit in TIME_WAIT.
		gnet.WithReuseAddr(true),
		gnet.WithLogger(gnetLogger{s.log}),
	}
	h := &engineHandler{s: s}
	engineAddr := "tcp://" + s.cfg.Listen
	if s.tls != nil {
		// The TLS acceptor owns the listen address; the engine listens
		// on a unix socket in a private directory, which only
		// discoverLoops' probes use (gnet 2.9.7 cannot run without a
		// listener).
		if err := s.tls.listen(s.cfg.Listen); err != nil {
			s.group.Stop()
			return err
		}
		engineAddr = "unix://" + s.tls.sock
	}
	s.group.Go("reactor.engine", func(context.Context) {
		defer close(s.ran)
		s.runErr = gnet.Run(h, engineAddr, opts...)
	})
	select {
	case <-s.booted:
	case <-s.ran:
		s.group.Stop()
		if s.tls != nil {
			s.tls.closeListener()
			s.removeEngineDir()
		}
		return fmt.Errorf("cannot listen on %s: %w", s.cfg.Listen, s.runErr)
	}
	if s.tls != nil {
		s.addr = s.tls.ln.Addr().String()
	} else {
		addr, err := s.listenAddr()
		if err != nil {
			s.stopEngine(context.Background())
			return err
		}
		s.addr = addr
	}
	if err := s.discoverLoops(); err != nil {
		s.stopEngine(context.Background())
		return err
	}
	if s.tls != nil {
		s.group.Go("reactor.tls-accept", s.acceptTLS)
	}
	return nil
}

// removeEngineDir removes the TLS mode's private socket directory once
// the engine has stopped.
func (s *Server) removeEngineDir() {
	if err := os.RemoveAll(s.tls.dir); err != nil {
		s.log.Warn("cannot remove the event loops' socket directory", "dir", s.tls.dir, "err", err)
	}
}

// listenAddr asks the kernel for the listener's address.
func (s *Server) listenAddr() (string, error) {
	fd, err := s.eng.Dup()
	if err != nil {
		return "", fmt.Errorf("cannot get the listener: %w", err)
	}
	defer syscall.Close(fd) //nolint:errcheck // a dup only used for Getsockname
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return "", fmt.Errorf("cannot get the listen address: %w", err)
	}
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port)), nil
	case *syscall.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port)), nil
	}
	return "", fmt.Errorf("unexpected listen address %T", sa)
}

// discoverLoops connects to the server itself until every loop has had a
// connection: gnet 2.9.7 hands out a loop (EventLoop, whose Execute runs a
// function on it) only through a connection, and round-robin balancing
// gives N connections to N loops. The probes are closed at once. Loops
// that real clients reached first are known already.
func (s *Server) discoverLoops() error {
	host, port, _ := net.SplitHostPort(s.addr)
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	network, target := "tcp", net.JoinHostPort(host, port)
	if s.tls != nil {
		network, target = "unix", s.tls.sock
	}
	s.discovering.Store(true)
	defer s.discovering.Store(false)
	n := int32(s.cfg.Loops)
	for round := 0; round < 4 && s.discovered.Load() < n; round++ {
		var probes []net.Conn
		for i := int32(0); i < n; i++ {
			nc, err := net.DialTimeout(network, target, time.Second)
			if err != nil {
				return fmt.Errorf("cannot connect to %s to find the event loops: %w", target, err)
			}
			probes = append(probes, nc)
		}
		deadline := time.Now().Add(2 * time.Second)
		for s.discovered.Load() < n && time.Now().Before(deadline) {
			//saltus:allow R2 Start's caller, not a loop: the probes reaching every loop raise no event; at most 2 s, once
			time.Sleep(time.Millisecond)
		}
		for _, nc := range probes {
			_ = nc.Close() // a probe; nothing was sent on it
		}
	}
	if got := s.discovered.Load(); got < n {
		return fmt.Errorf("found only %d of %d event loops", got, n)
	}
	return nil
}

// newLoop makes loop i's value; it is bound to its gnet loop by loopOf.
func (s *Server) newLoop(i int) *Loop {
	l := &Loop{s: s, idx: i, conns: make(map[*conn]struct{}), held: make(map[*conn]struct{}), mbox: queue.NewLockFreeQueue()}
	l.wake = newWake(l)
	l.sweep = func(context.Context) error {
		l.sweepQueued.Store(false)
		now := time.Now()
		for c := range l.held {
			c.refresh() // resumes it once its client drained
		}
		if now.Sub(l.lastSweep) >= s.tick()-s.tickEvery()/2 {
			l.lastSweep = now
			s.sweepLoop(l, now)
		}
		if s.sweepHook != nil {
			s.sweepHook(l, now)
		}
		return nil
	}
	return l
}

// loopOf returns el's Loop, binding el to the first unbound one on first
// sight. Loop only (el's own loop): el is looked up, and bound, only by
// itself.
func (s *Server) loopOf(el gnet.EventLoop) *Loop {
	for _, l := range s.loops {
		if l.ready.Load() && l.el == el {
			return l
		}
	}
	for _, l := range s.loops {
		if l.claimed.CompareAndSwap(false, true) {
			l.el = el
			l.ready.Store(true)
			s.discovered.Add(1)
			return l
		}
	}
	// More loops than Config.Loops: impossible, gnet starts exactly that many.
	panic("BUG: reactor: more event loops than configured")
}

// Post runs fn on the loop, later. It never blocks: it returns false
// (and counts it) when the loop already has MailboxSize functions queued,
// when it is not running yet, or when the server has stopped. fn must not
// block. Any goroutine, loops included.
//
// It is the loop's mailbox (mailbox.go), bounded by a per-loop counter.
func (l *Loop) Post(fn func()) bool {
	s := l.s
	if !l.ready.Load() {
		s.m.mailboxFull.Inc()
		return false
	}
	if l.mail.Add(1) > int64(s.cfg.MailboxSize) {
		l.mail.Add(-1)
		s.m.mailboxFull.Inc()
		return false
	}
	if s.stopped.Load() {
		l.mail.Add(-1)
		s.m.mailboxFull.Inc()
		return false
	}
	s.enqueue(l, mailFn(fn))
	return true
}

// Poster returns a function that runs its argument on the loop, for a
// caller that bounds its own posts: tokenpool.New's posts (the pool posts
// at most MaxInFlight completions per shard, and must never lose one while
// the loops run), and the router's forward hop back to a request's
// connection loop (one per request admitted, which must run once). Unlike
// Post it is not counted against MailboxSize and never refuses while the
// server runs; after Shutdown (or before the loop runs) it drops (counted
// in saltus_reactor_poster_dropped_total): the loop's requests are gone
// with it. The returned function is any goroutine.
func (l *Loop) Poster() func(func()) {
	s := l.s
	return func(fn func()) {
		if !l.ready.Load() || s.stopped.Load() {
			s.m.posterDropped.Inc()
			return
		}
		s.enqueue(l, fn)
	}
}

// execute queues fn on loop ls, unless the server has stopped: after the
// engine stops, gnet closes a loop's eventfd before it refuses Execute,
// so a late Execute could write to a closed (or reused) descriptor; the
// posting count lets stopEngine wait out the Executes that passed the
// check. Any goroutine.
func (s *Server) execute(ls *Loop, fn gnet.RunnableFunc) bool {
	s.posting.Add(1)
	defer s.posting.Add(-1)
	if s.stopped.Load() {
		return false
	}
	return ls.el.Execute(context.Background(), fn) == nil
}

// sweepLoop runs the timeouts over loop ls's connections. Loop only.
func (s *Server) sweepLoop(ls *Loop, now time.Time) {
	for c := range ls.conns {
		c.sweep(now)
	}
}

// tick is how often each loop's connections are swept for timeouts.
func (s *Server) tick() time.Duration {
	return min(max(min(s.cfg.HeaderTimeout, s.cfg.IdleTimeout)/10, 10*time.Millisecond), time.Second)
}

// tickEvery is the ticker's period, at most upstreamTick: the OnSweep hook
// and the connections paused for the answers they owe (Loop.held)
// need a finer one than tick (connections are still swept every tick).
func (s *Server) tickEvery() time.Duration {
	return min(s.tick(), upstreamTick)
}

// StopAccepting is drain step 1: connections that arrive from now on are
// closed at once, answers close their connection when they end, and idle
// keep-alive connections are closed. gnet 2.9.7 cannot close its listener
// alone (shutdown(2) on it makes its acceptor fail and stop the engine),
// so the socket itself stays open until Shutdown. Any goroutine.
func (s *Server) StopAccepting() {
	s.accepting.Store(false)
	s.draining.Store(true)
	if s.tls != nil {
		s.tls.closeListener() // the TLS listener can close alone
	}
}

// Shutdown stops accepting, waits until every open exchange has ended (or
// ctx is done), then stops the loops, closing every connection (Gone
// closes for exchanges still open). It returns ctx's error if exchanges
// were still open. Any goroutine but a loop.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.started.Load() {
		return nil
	}
	s.StopAccepting()
	var err error
	for s.open.Load() > 0 {
		if ctx.Err() != nil {
			err = fmt.Errorf("reactor: %d exchanges still open: %w", s.open.Load(), ctx.Err())
			break
		}
		//saltus:allow R2 Shutdown's caller, not a loop: the open-exchange count raises no event; polled every 5 ms until ctx ends
		time.Sleep(5 * time.Millisecond)
	}
	s.stopEngine(ctx)
	return err
}

// stopEngine stops gnet and joins its goroutine.
func (s *Server) stopEngine(ctx context.Context) {
	s.stopped.Store(true)
	if s.tls != nil {
		s.tls.closeListener() // the acceptor returns
	}
	for s.posting.Load() > 0 {
		// A Post between its stopped check and Execute: an instant.
		runtime.Gosched()
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	select {
	case <-s.ran:
	default:
		if err := s.eng.Stop(stopCtx); err != nil {
			s.log.Error("cannot stop the event loops", "err", err)
		}
	}
	s.group.Stop()
	if err := s.group.Wait(stopCtx); err != nil {
		s.log.Error("event loops did not stop", "running", s.group.Running())
	}
	if s.tls != nil {
		s.removeEngineDir()
	}
}

// ownAnswer tells the handler of an answer the reactor gave by itself.
// Loop only.
func (s *Server) ownAnswer(status int, client, requestID string) {
	if s.own != nil {
		s.own.OwnAnswer(status, client, requestID)
	}
}

// engineHandler is gnet's EventHandler (kept off Server's method set).
type engineHandler struct {
	gnet.BuiltinEventEngine
	s *Server
}

func (h *engineHandler) OnBoot(eng gnet.Engine) gnet.Action {
	h.s.eng = eng
	close(h.s.booted)
	return gnet.None
}

func (h *engineHandler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := h.s
	if u, ok := gc.Context().(*Upstream); ok {
		return nil, s.upOpen(u, gc)
	}
	ls := s.loopOf(gc.EventLoop())
	peer, isTLS := gc.Context().(*tlsPeer)
	if s.discovering.Load() {
		return nil, gnet.Close // a probe of discoverLoops (or a client too early)
	}
	if s.tls != nil && !isTLS {
		return nil, gnet.Close // the engine's private socket: only the probes use it
	}
	if isTLS {
		peer.wire.attach(gc, ls)
	}
	if !s.accepting.Load() {
		s.m.rejectedDraining.Inc()
		if isTLS {
			s.tls.release()
		}
		return nil, gnet.Close
	}
	if s.conns.Add(1) > int64(s.lim.Load().maxConns) {
		s.conns.Add(-1)
		s.m.rejectedMaxConns.Inc()
		client := ""
		if s.own != nil {
			if ra := gc.RemoteAddr(); ra != nil {
				client = ra.String() // refused: rare, and only for a handler that wants it
			}
		}
		s.ownAnswer(http.StatusServiceUnavailable, client, "")
		if isTLS {
			_ = peer.wire.write(response503()) // the records go out before the close, as OnOpen's bytes would
			s.tls.release()
			return nil, gnet.Close
		}
		return response503(), gnet.Close
	}
	s.m.accepted.Inc()
	now := time.Now()
	c := &conn{s: s, ls: ls, gc: gc, gone: make(chan struct{}), lastActive: now}
	if ra := gc.RemoteAddr(); ra != nil {
		c.remote = ra.String()
	}
	gc.SetContext(c)
	ls.conns[c] = struct{}{}
	if isTLS {
		c.tls = peer.wire
		s.tls.onLoop.Add(1)
		// The handshake may have read the client's first request with its
		// last flight: crypto/tls holds it, and no more bytes may come to
		// make gnet call OnTraffic.
		_ = gc.Wake(nil) // fails only when closing
	}
	return nil, gnet.None
}

func (h *engineHandler) OnClose(gc gnet.Conn, err error) gnet.Action {
	if u, ok := gc.Context().(*Upstream); ok {
		h.s.upClose(u, err)
		return gnet.None
	}
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None // rejected in OnOpen
	}
	c.onClose()
	delete(c.ls.conns, c)
	h.s.conns.Add(-1)
	if c.tls != nil {
		h.s.tls.onLoop.Add(-1)
		h.s.tls.release()
	}
	return gnet.None
}

func (h *engineHandler) OnTraffic(gc gnet.Conn) gnet.Action {
	if u, ok := gc.Context().(*Upstream); ok {
		u.ls.enter()
		h.s.upTraffic(u, gc)
		u.ls.leave()
		return gnet.None
	}
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	c.ls.enter()
	c.onTraffic(time.Now())
	c.ls.leave()
	return gnet.None
}

// OnTick runs on gnet's ticker goroutine: it posts a sweep to every loop.
func (h *engineHandler) OnTick() (time.Duration, gnet.Action) {
	s := h.s
	for _, ls := range s.loops {
		if !ls.ready.Load() || s.stopped.Load() {
			continue
		}
		if !ls.sweepQueued.CompareAndSwap(false, true) {
			continue // the last one has not run yet
		}
		if ls.el.Execute(context.Background(), gnet.RunnableFunc(ls.sweep)) != nil {
			ls.sweepQueued.Store(false)
		}
	}
	return s.tickEvery(), gnet.None
}

// Retune applies c's limits that may change while the server runs:
// MaxHeaderBytes, MaxBodyBytes, MaxConns, HeaderTimeout and IdleTimeout
// (only they are read, after c is validated). Requests already parsed
// keep what they were checked against; connections over a lowered
// MaxConns stay open, new ones are refused until the count is under it;
// the timeouts are checked at each loop's sweep, whose period stays the
// one the first configuration gave. Any goroutine.
func (s *Server) Retune(c Config) error {
	if c.Loops == 0 {
		c.Loops = s.cfg.Loops
	}
	if err := c.Validate(); err != nil {
		return err
	}
	s.lim.Store(new(c.limits()))
	return nil
}
