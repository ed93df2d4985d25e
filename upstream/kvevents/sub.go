package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-zeromq/zmq4"
)

// Config is one subscription: a SUB socket that connects to an engine's
// publisher, or binds an endpoint engines connect to.
type Config struct {
	// Endpoint is tcp://HOST:PORT: the engine's publisher (vLLM's
	// --kv-events-config endpoint, tcp://*:5557 on the engine's side),
	// or, with Bind, where saltus listens (tcp://*:PORT; port 0 picks
	// one, Addr says which). No default.
	Endpoint string
	// Bind listens on Endpoint for engines' publishers to connect (llm-d's
	// wiring); each message's topic names its engine. Default false.
	Bind bool
	// Topic is the subscription's prefix filter: "" (default) takes
	// every topic, as vLLM's default topic is "".
	Topic string
	// Limits bound each payload (DefaultLimits).
	Limits Limits
	// MinBackoff and MaxBackoff bound the wait before a socket is opened
	// again after an error: it doubles from MinBackoff (default 100 ms)
	// to MaxBackoff (default 5 s), and starts over after a socket that
	// received a batch.
	MinBackoff, MaxBackoff time.Duration
	// MaxSources bounds the sources whose sequence is tracked (default
	// 1,024): one for a connection, one a topic when bound. A batch of a
	// new source past it is dropped, counted.
	MaxSources int
}

// DefaultConfig is a connecting subscription with the defaults above;
// the caller sets Endpoint.
func DefaultConfig() Config {
	return Config{
		Limits:     DefaultLimits(),
		MinBackoff: 100 * time.Millisecond,
		MaxBackoff: 5 * time.Second,
		MaxSources: 1024,
	}
}

// maxTopic bounds a topic's length: kv@ip:port@model is well under it.
const maxTopic = 512

// Validate names the first field that is wrong.
func (c Config) Validate() error {
	if _, err := guarded(c.Endpoint); err != nil {
		return fmt.Errorf("kvevents: Endpoint: %w", err)
	}
	if len(c.Topic) > maxTopic {
		return fmt.Errorf("kvevents: Topic longer than %d bytes", maxTopic)
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("kvevents: MinBackoff %v, MaxBackoff %v: want 0 < MinBackoff ≤ MaxBackoff", c.MinBackoff, c.MaxBackoff)
	}
	if c.MaxSources < 1 {
		return fmt.Errorf("kvevents: MaxSources %d < 1", c.MaxSources)
	}
	return nil
}

// Message is one decoded batch and where it came from.
type Message struct {
	// Source names the publisher: the Endpoint of a connecting
	// subscription, the topic of a bound one.
	Source string
	Topic  string
	Seq    uint64
	Batch  Batch
	// Stale says events of Source before this batch were missed, so a
	// view built from its earlier batches is not the engine's (replay
	// would rebuild it; until then the view is stale). StaleReason is
	// why: start (the first batch seen: the engine may hold blocks
	// stored before), gap (seq skipped), reset (seq went back: the
	// publisher restarted), reconnect (the socket was re-opened), dropped
	// (a batch of the source was dropped here: malformed, over a limit,
	// or the channel was full).
	Stale       bool
	StaleReason string
}

// ParseTopic splits llm-d's topic kv@<ip>:<port>@<model> into the
// engine's address and its model; false if topic is not of that form.
func ParseTopic(topic string) (addr, model string, ok bool) {
	rest, ok := strings.CutPrefix(topic, "kv@")
	if !ok {
		return "", "", false
	}
	addr, model, ok = strings.Cut(rest, "@")
	if !ok || model == "" {
		return "", "", false
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", false
	}
	return addr, model, true
}

// Subscriber reads one subscription's batches and sends them to a
// channel. Run it once, in a rules.Group; Close after it returned.
type Subscriber struct {
	cfg   Config
	out   chan<- Message
	log   *slog.Logger
	m     *subMetrics
	guard guardStats

	mu   sync.Mutex // guards addr
	addr net.Addr
	// bound is closed once a bound subscription listens (Addr is set).
	bound     chan struct{}
	boundOnce sync.Once

	// Owned by Run's goroutine.
	dec     *Decoder
	sources map[string]*source
}

// source is a publisher's sequence state. Owned by Run's goroutine.
type source struct {
	next  uint64 // the seq expected next
	seen  bool
	stale string // the reason the next delivered batch is stale, or ""
}

// New validates cfg and returns a Subscriber that will send to out, a
// channel the caller bounds: a send that would block drops the batch
// (queue_full) and marks its source stale. Its series go in set, labelled
// by cfg.Endpoint.
func New(cfg Config, out chan<- Message, logger *slog.Logger, set *metrics.Set) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if out == nil {
		return nil, errors.New("kvevents: nil channel")
	}
	s := &Subscriber{
		cfg:     cfg,
		out:     out,
		log:     logger.With("component", "kvevents", "endpoint", cfg.Endpoint),
		bound:   make(chan struct{}),
		dec:     NewDecoder(cfg.Limits),
		sources: make(map[string]*source),
	}
	s.m = newSubMetrics(set, cfg.Endpoint, &s.guard)
	return s, nil
}

// Bound is closed once a bound subscription listens; Addr then says
// where. Any goroutine.
func (s *Subscriber) Bound() <-chan struct{} { return s.bound }

// Addr is the address a bound subscription listens on, nil before it
// does (or when it connects). Any goroutine.
func (s *Subscriber) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Close unregisters the subscriber's series. Call it after Run returned.
// Any goroutine.
func (s *Subscriber) Close() { s.m.unregister() }

// Run opens the socket, reads until it fails, and opens it again after a
// backoff, until ctx is done. Start it once, in a rules.Group.
func (s *Subscriber) Run(ctx context.Context) {
	backoff := s.cfg.MinBackoff
	t := time.NewTimer(0)
	<-t.C
	defer t.Stop()
	for {
		got := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = s.cfg.MinBackoff
		}
		s.m.reconnects.Inc()
		t.Reset(backoff)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
		s.markAll("reconnect")
	}
}

// session runs one socket until it fails or ctx is done; it says whether
// a batch was received.
func (s *Subscriber) session(ctx context.Context) (got bool) {
	sctx, cancel := context.WithCancel(withGuardStats(ctx, &s.guard))
	defer cancel()
	ep, err := guarded(s.cfg.Endpoint)
	if err != nil {
		panic("BUG: kvevents: endpoint validated in New: " + err.Error())
	}
	// zmq4 logs to stderr by default; its errors reach Recv's.
	sock := zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer func() {
		_ = sock.Close() // its connections' errors were Recv's
	}()
	if s.cfg.Bind {
		if err := sock.Listen(ep); err != nil {
			s.log.Warn("cannot listen for KV events", "err", err)
			return false
		}
		s.mu.Lock()
		s.addr = sock.Addr()
		s.mu.Unlock()
		s.boundOnce.Do(func() { close(s.bound) })
	} else if err := sock.Dial(ep); err != nil {
		s.log.Debug("cannot connect to the KV-event publisher", "err", err)
		return false
	}
	if err := sock.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		s.log.Warn("cannot subscribe to KV events", "topic", s.cfg.Topic, "err", err)
		return false
	}
	for {
		msg, err := sock.Recv()
		if ctx.Err() != nil {
			return got
		}
		if err != nil {
			if s.cfg.Bind && !errors.Is(err, context.Canceled) {
				// One engine's connection ended; the listener goes on,
				// and that engine's next batches say how it came back.
				continue
			}
			s.log.Debug("KV-event subscription ended", "err", err)
			return got
		}
		if s.handle(msg.Frames) {
			got = true
		}
	}
}

// handle takes one message's frames; true if its batch was decoded.
func (s *Subscriber) handle(frames [][]byte) bool {
	if len(frames) != 3 || len(frames[1]) != 8 || len(frames[0]) > maxTopic {
		s.m.badFrame.Inc()
		if len(frames) > 0 && len(frames[0]) <= maxTopic {
			if src := s.source(string(frames[0])); src != nil {
				src.stale = "dropped"
			}
		}
		return false
	}
	topic := string(frames[0])
	src := s.source(topic)
	if src == nil {
		s.m.sources.Inc()
		return false
	}
	seq := binary.BigEndian.Uint64(frames[1])
	switch {
	case !src.seen:
		src.mark("start")
	case seq > src.next:
		s.m.gaps.Inc()
		src.mark("gap")
	case seq < src.next:
		s.m.gaps.Inc()
		src.mark("reset")
	}
	src.seen, src.next = true, seq+1
	b, err := s.dec.Decode(frames[2])
	if err != nil {
		s.m.drop(err)
		src.mark("dropped")
		return false
	}
	s.m.batches.Inc()
	for i := range b.Events {
		s.m.events[b.Events[i].Kind].Inc()
	}
	m := Message{Source: s.name(topic), Topic: topic, Seq: seq, Batch: b, Stale: src.stale != "", StaleReason: src.stale}
	select {
	case s.out <- m:
		src.stale = ""
	default:
		s.m.queueFull.Inc()
		src.mark("dropped")
	}
	return true
}

// mark records why the next delivered batch is stale; the first reason
// since the last delivery wins.
func (src *source) mark(reason string) {
	if src.stale == "" {
		src.stale = reason
	}
}

// name is a message's Source: the endpoint when connecting (one
// publisher), the topic when bound.
func (s *Subscriber) name(topic string) string {
	if s.cfg.Bind {
		return topic
	}
	return s.cfg.Endpoint
}

// source returns the state of the publisher of topic, nil when it is new
// and MaxSources are tracked.
func (s *Subscriber) source(topic string) *source {
	key := s.name(topic)
	if src := s.sources[key]; src != nil {
		return src
	}
	if len(s.sources) >= s.cfg.MaxSources {
		return nil
	}
	src := &source{}
	s.sources[key] = src
	return src
}

// markAll marks every source's next batch stale (a socket re-opened:
// anything may have been missed meanwhile).
func (s *Subscriber) markAll(reason string) {
	for _, src := range s.sources {
		src.mark(reason)
	}
}
