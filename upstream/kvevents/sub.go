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

	"github.com/saltus-lb/saltus/rules"
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
	// ReplayEndpoint is the publisher's replay socket, tcp://HOST:PORT
	// (vLLM's replay_endpoint, tcp://*:5558 on the engine's side): a
	// batch that follows missed ones (a sequence gap, or batches dropped
	// here) is held while the missed ones are asked for there and, if
	// they all come back, delivered after them, not stale (doc.go,
	// "Replay"). "" (default): none, a miss marks the source stale.
	// Connecting subscriptions only.
	ReplayEndpoint string
	// ReplayTimeout bounds one replay, from its dial to its last batch
	// (default 1 s); past it the source is stale. It also bounds how long
	// the batches it brought back may wait for room in the channel.
	ReplayTimeout time.Duration
	// MaxReplay is the widest gap a replay is asked for, in batches
	// (default 10,000, vLLM's buffer_steps: a publisher keeps no more).
	MaxReplay int
	// MaxReplayBytes bounds the payload bytes one replay brings back
	// (default 64 MiB); past it the source is stale.
	MaxReplayBytes int
	// MaxPending bounds the live batches held while a replay runs
	// (default 1,024); one more abandons the replay: the held batches
	// are delivered, the first stale.
	MaxPending int
}

// DefaultConfig is a connecting subscription with the defaults above;
// the caller sets Endpoint.
func DefaultConfig() Config {
	return Config{
		Limits:     DefaultLimits(),
		MinBackoff: 100 * time.Millisecond,
		MaxBackoff: 5 * time.Second,
		MaxSources: 1024,

		ReplayTimeout:  time.Second,
		MaxReplay:      10_000,
		MaxReplayBytes: 64 << 20,
		MaxPending:     1024,
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
	if c.ReplayEndpoint == "" {
		return nil
	}
	if c.Bind {
		return errors.New("kvevents: ReplayEndpoint: a bound subscription has many publishers, no one replay endpoint")
	}
	if _, err := guarded(c.ReplayEndpoint); err != nil {
		return fmt.Errorf("kvevents: ReplayEndpoint: %w", err)
	}
	switch {
	case c.ReplayTimeout <= 0:
		return fmt.Errorf("kvevents: ReplayTimeout %v ≤ 0", c.ReplayTimeout)
	case c.MaxReplay < 1:
		return fmt.Errorf("kvevents: MaxReplay %d < 1", c.MaxReplay)
	case c.MaxReplayBytes < c.Limits.MaxPayload:
		return fmt.Errorf("kvevents: MaxReplayBytes %d < Limits.MaxPayload %d", c.MaxReplayBytes, c.Limits.MaxPayload)
	case c.MaxPending < 1:
		return fmt.Errorf("kvevents: MaxPending %d < 1", c.MaxPending)
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
	// view built from its earlier batches is not the engine's (a replay
	// that brought them back clears it; until the view is rebuilt it is
	// stale). StaleReason is why: start (the first batch seen: the
	// engine may hold blocks stored before), gap (seq skipped), reset
	// (seq went back: the publisher restarted), reconnect (the socket was
	// re-opened), dropped (a batch of the source was dropped here:
	// malformed, over a limit, or the channel was full).
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
	sources map[srcKey]*source
	rc      *replayClient // nil without Config.ReplayEndpoint
	// replaying is the source whose replay runs (one at a time), nil
	// when none; abandoned says its result is to be discarded.
	replaying *source
	abandoned bool
	tasks     *rules.Group      // the session's goroutines: the reader, the replay
	replayed  chan replayResult // the session's: the replay's result (one at a time)
}

// source is a publisher's sequence state. Owned by Run's goroutine.
type source struct {
	next  uint64 // the seq expected next
	seen  bool
	stale string // the reason the next delivered batch is stale, or ""
	// missFrom is the first batch missed since the last delivery, when
	// replayable: every reason since was a miss of known batches (a gap,
	// a batch dropped here), none a start, reset or reconnect.
	missFrom   uint64
	replayable bool
	// held are the batches received while this source's replay runs,
	// in order, the first the one that revealed the miss; nil when none
	// runs.
	held []heldMsg
}

// heldMsg is a batch held while a replay runs and, when it followed
// other missed batches, the first of them: its own replay comes next.
type heldMsg struct {
	m          Message
	missFrom   uint64
	replayable bool
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
		sources: make(map[srcKey]*source),
	}
	s.m = newSubMetrics(set, cfg.Endpoint, &s.guard, cfg.ReplayEndpoint != "")
	if cfg.ReplayEndpoint != "" {
		s.rc = &replayClient{endpoint: cfg.ReplayEndpoint, timeout: cfg.ReplayTimeout,
			maxBytes: cfg.MaxReplayBytes, limits: cfg.Limits, guard: &s.guard}
	}
	return s, nil
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
	// One goroutine reads the socket, so that a replay's result can be
	// taken while no batch comes; the channel is unbuffered: the reader
	// waits for handle, as a direct Recv did.
	in := make(chan received)
	s.tasks = rules.NewGroup(sctx)
	s.replayed = make(chan replayResult, 1)
	s.tasks.Go("kvevents.recv", func(gctx context.Context) { s.read(gctx, sock, in) })
	defer s.endSession(cancel)
	for {
		select {
		case <-ctx.Done():
			return got
		case res := <-s.replayed:
			s.replayDone(ctx, res)
		case r := <-in:
			if r.err != nil {
				if ctx.Err() == nil {
					s.log.Debug("KV-event subscription ended", "err", r.err)
				}
				return got
			}
			if s.handle(ctx, r.frames) {
				got = true
			}
		}
	}
}

// received is one Recv's result.
type received struct {
	frames [][]byte
	err    error
}

// read receives messages until the socket fails (a bound one goes on
// past one engine's connection ending) or ctx is done. In the session's
// group.
func (s *Subscriber) read(ctx context.Context, sock zmq4.Socket, in chan<- received) {
	for {
		msg, err := sock.Recv()
		if err != nil && s.cfg.Bind && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			// One engine's connection ended; the listener goes on,
			// and that engine's next batches say how it came back.
			continue
		}
		select {
		case in <- received{msg.Frames, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// endSession stops the session's goroutines (cancel ends the socket's
// context, so the reader's Recv fails) and forgets a replay in flight:
// its held batches go, and the reconnect's stale mark covers them.
func (s *Subscriber) endSession(cancel context.CancelFunc) {
	cancel()
	s.tasks.Stop()
	// Both return soon: the reader's Recv fails on the cancelled
	// socket context, the replay's connection ends with its context.
	_ = s.tasks.Wait(context.Background()) // background: never done, so never an error
	if s.replaying != nil {
		s.replaying.held = nil
		s.replaying, s.abandoned = nil, false
	}
	select {
	case <-s.replayed:
	default:
	}
}

// handle takes one message's frames; true if its batch was decoded.
func (s *Subscriber) handle(ctx context.Context, frames [][]byte) bool {
	if len(frames) != 3 || len(frames[1]) != 8 || len(frames[0]) > maxTopic {
		s.m.badFrame.Inc()
		if len(frames) > 0 && len(frames[0]) <= maxTopic {
			s.markName(s.name(string(frames[0])), func(src *source) { src.mark("dropped") })
		}
		return false
	}
	topic := string(frames[0])
	seq := binary.BigEndian.Uint64(frames[1])
	// The batch names its data-parallel rank, whose publisher numbers
	// its own sequence: decoded first, so that each rank's is tracked.
	b, err := s.dec.Decode(frames[2])
	if err != nil {
		s.m.drop(err)
		s.markName(s.name(topic), func(src *source) {
			if !src.seen || seq < src.next {
				src.mark("dropped") // not its batch, or not one a replay would find
				return
			}
			// Plausibly its own (the one source of a connection): what it
			// missed from its next on, this batch included, may be replayed.
			if seq > src.next {
				s.m.gaps.Inc()
			}
			src.miss(src.next, "dropped")
			src.next = seq + 1
		})
		return false
	}
	src := s.source(topic, b.DPRank.V)
	if src == nil {
		s.m.sources.Inc()
		return false
	}
	switch {
	case !src.seen:
		src.mark("start")
	case seq > src.next:
		s.m.gaps.Inc()
		src.miss(src.next, "gap")
	case seq < src.next:
		s.m.gaps.Inc()
		src.mark("reset")
	}
	src.seen, src.next = true, seq+1
	s.m.batches.Inc()
	s.m.count(&b)
	s.deliver(ctx, src, Message{Source: s.name(topic), Topic: topic, Seq: seq, Batch: b, Stale: src.stale != "", StaleReason: src.stale})
	return true
}

// deliver sends m, a batch of src, to the channel without blocking, or
// holds it: while src's replay runs, or to start one when m follows
// batches missed that a replay may bring back.
func (s *Subscriber) deliver(ctx context.Context, src *source, m Message) {
	h := heldMsg{m: m, missFrom: src.missFrom, replayable: m.Stale && src.replayable}
	if src.held != nil {
		if len(src.held) < s.cfg.MaxPending {
			src.held = append(src.held, h)
			src.delivered()
			return
		}
		// Too many live batches wait: the replay is abandoned (its
		// result discarded when it comes), and what waited goes out,
		// its first batch stale.
		s.m.replays[replayOverflow].Inc()
		held := src.held
		src.held, s.abandoned = nil, true
		msgs := make([]Message, len(held))
		for i := range held {
			msgs[i] = held[i].m
		}
		s.flush(ctx, src, msgs)
		if src.stale != "" && !m.Stale {
			m.Stale, m.StaleReason = true, src.stale // some held ones found no room
		}
		h.replayable = false // no replay starts while the abandoned one runs
	}
	if h.replayable && s.rc != nil && s.replaying == nil && s.replay(src, []heldMsg{h}) {
		src.delivered()
		return
	}
	select {
	case s.out <- m:
		src.delivered()
	default:
		s.m.queueFull.Inc()
		src.miss(m.Seq, "dropped")
	}
}

// replay starts the replay of the batches held[0] followed, holding
// held; false if the gap is too wide to ask for (counted).
func (s *Subscriber) replay(src *source, held []heldMsg) bool {
	from, to := held[0].missFrom, held[0].m.Seq
	if to-from > uint64(s.cfg.MaxReplay) {
		s.m.replays[replayTooOld].Inc() // no publisher keeps that many
		return false
	}
	s.replaying, src.held = src, held
	s.tasks.Go("kvevents.replay", func(gctx context.Context) {
		s.replayed <- s.rc.fetch(gctx, from, to) // one replay at a time: room for its result
	})
	return true
}

// replayDone takes a replay's result: the batches it brought back, then
// those held meanwhile, go out; if it failed, the held ones go out, the
// first stale. A held batch that followed missed ones of its own starts
// the next replay, holding it and those after it.
func (s *Subscriber) replayDone(ctx context.Context, res replayResult) {
	src := s.replaying
	s.replaying = nil
	if s.abandoned {
		s.abandoned = false
		return // counted as overflow, its held batches long delivered
	}
	if c := s.m.replays[res.outcome]; c != nil {
		c.Inc()
	}
	held := src.held
	src.held = nil
	first := held[0].m
	var msgs []Message
	if res.outcome == replayFilled {
		s.m.replayedBatches.Add(len(res.batches))
		first.Stale, first.StaleReason = false, ""
		msgs = make([]Message, 0, len(res.batches)+len(held))
		for _, r := range res.batches {
			s.m.count(&r.b)
			msgs = append(msgs, Message{Source: first.Source, Topic: first.Topic, Seq: r.seq, Batch: r.b})
		}
	} else {
		s.log.Debug("KV-event replay failed: the view is stale", "outcome", res.outcome, "from", res.from, "to", res.to, "err", res.err)
	}
	msgs = append(msgs, first)
	rest := held[1:]
	for len(rest) > 0 && !rest[0].replayable {
		msgs = append(msgs, rest[0].m)
		rest = rest[1:]
	}
	s.flush(ctx, src, msgs)
	if len(rest) == 0 {
		return
	}
	if src.stale == "" && s.replay(src, rest) {
		return
	}
	// Delivered stale: flush found no room above, or the gap is too
	// wide. Nothing of rest is replayable any more.
	msgs = msgs[:0]
	for _, h := range rest {
		msgs = append(msgs, h.m)
	}
	if src.stale != "" && !msgs[0].Stale {
		msgs[0].Stale, msgs[0].StaleReason = true, src.stale
	}
	if s.flush(ctx, src, msgs) {
		src.delivered() // msgs[0] carried the stale mark
	}
}

// flush sends msgs in order, waiting for room in the channel at most
// ReplayTimeout in all (they are many at once: a replay's). Those that
// found none are dropped, counted, and src's next batch is stale; true
// if all went.
func (s *Subscriber) flush(ctx context.Context, src *source, msgs []Message) bool {
	t := time.NewTimer(s.cfg.ReplayTimeout)
	defer t.Stop()
	for i, m := range msgs {
		select {
		case s.out <- m:
			continue
		case <-ctx.Done():
			return false // the subscription ends: nothing is delivered any more
		case <-t.C:
		}
		s.m.queueFull.Add(len(msgs) - i)
		// The first batch dropped is the first to replay (msgs were all
		// delivered as far as src's state went), unless src is stale
		// for a reason no replay covers.
		if src.stale == "" || src.replayable {
			src.stale, src.missFrom, src.replayable = "dropped", m.Seq, true
		}
		return false
	}
	return true
}

// mark records why the next delivered batch is stale; the first reason
// since the last delivery wins. What it marks cannot be replayed.
func (src *source) mark(reason string) {
	if src.stale == "" {
		src.stale = reason
	}
	src.replayable = false
}

// miss records that batches from seq from on were missed (a gap, a batch
// dropped here): the next delivered batch is stale unless a replay
// brings them back.
func (src *source) miss(from uint64, reason string) {
	if src.stale == "" {
		src.stale, src.missFrom, src.replayable = reason, from, true
	}
}

// delivered records that the next batch went out (or is held to go out
// in order).
func (src *source) delivered() {
	src.stale, src.replayable = "", false
}

// name is a message's Source: the endpoint when connecting (one
// publisher), the topic when bound.
func (s *Subscriber) name(topic string) string {
	if s.cfg.Bind {
		return topic
	}
	return s.cfg.Endpoint
}

// srcKey names a publisher: a message's Source and the data-parallel
// rank its batches carry (0 when they carry none). The ranks of one
// data-parallel vLLM share a topic (bound) and each numbers its own
// batches; connecting, each rank is its own endpoint (vLLM's port plus
// the rank).
type srcKey struct {
	name string
	rank int64
}

// source returns the state of topic's publisher of data-parallel rank
// rank, nil when it is new and MaxSources are tracked.
func (s *Subscriber) source(topic string, rank int64) *source {
	key := srcKey{s.name(topic), rank}
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

// markName applies f to every source named name, whatever its rank (a
// batch that cannot be read may be any rank's).
func (s *Subscriber) markName(name string, f func(*source)) {
	for k, src := range s.sources {
		if k.name == name {
			f(src)
		}
	}
}

// markAll marks every source's next batch stale (a socket re-opened:
// anything may have been missed meanwhile).
func (s *Subscriber) markAll(reason string) {
	for _, src := range s.sources {
		src.mark(reason)
	}
}
