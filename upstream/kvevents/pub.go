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
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/saltus-lb/saltus/rules"
)

// PublisherConfig is a PUB socket publishing batches as vLLM's
// ZmqEventPublisher does (the simulator's; tests').
type PublisherConfig struct {
	// Endpoint is tcp://HOST:PORT. As vLLM decides, an endpoint with *
	// or :: binds (tcp://*:5557, vLLM's default; port 0 picks one) and
	// subscribers connect; any other connects to a subscriber that binds
	// (a router's --kv-events-listen, llm-d's wiring).
	Endpoint string
	// Bind binds whatever the endpoint (tcp://127.0.0.1:0 in tests).
	Bind bool
	// Topic is every message's first frame: vLLM's default is "";
	// llm-d's wiring names the engine, kv@<ip>:<port>@<model>.
	Topic string
	// Encoding is the payload's layout (vLLM's newer default is the map).
	Encoding Encoding
	// Queue bounds the batches waiting to be encoded and sent (0: the
	// default, 1,024); Publish drops one past it. The socket's own queue (its
	// high-water mark) has the same bound and drops silently: either way
	// the sequence number skips, so a subscriber sees the gap.
	Queue int
	// ReplayEndpoint, when not "", binds a ROUTER socket there (vLLM's
	// replay_endpoint, tcp://*:5558; port 0 picks one, ReplayAddr says
	// which) that answers a subscriber's replay request with the buffered
	// batches from the sequence number it asks for, then the end marker
	// (doc.go, "Replay"). Default "": none.
	ReplayEndpoint string
	// ReplayBuffer bounds the batches kept for replay, the most recent
	// ones (0: the default, 10,000, vLLM's buffer_steps).
	ReplayBuffer int
	// LoseEvery, when N > 0, does not send the batches whose sequence
	// number is N-1 modulo N on the PUB socket, but keeps them for
	// replay: fault injection, so that a subscriber's gap and replay can
	// be seen without a lossy network. Default 0: none lost.
	LoseEvery int
}

// Validate names the first field that is wrong.
func (c PublisherConfig) Validate() error {
	if _, err := guarded(c.Endpoint); err != nil {
		return fmt.Errorf("kvevents: Endpoint: %w", err)
	}
	if c.Queue < 0 {
		return fmt.Errorf("kvevents: Queue %d < 0", c.Queue)
	}
	if len(c.Topic) > maxTopic {
		return fmt.Errorf("kvevents: Topic longer than %d bytes", maxTopic)
	}
	if c.ReplayEndpoint != "" {
		if _, err := guarded(c.ReplayEndpoint); err != nil {
			return fmt.Errorf("kvevents: ReplayEndpoint: %w", err)
		}
	}
	if c.ReplayBuffer < 0 || c.ReplayBuffer > maxReplayBuffer {
		return fmt.Errorf("kvevents: ReplayBuffer %d out of range [0, %d]", c.ReplayBuffer, maxReplayBuffer)
	}
	if c.LoseEvery < 0 {
		return fmt.Errorf("kvevents: LoseEvery %d < 0", c.LoseEvery)
	}
	return nil
}

// maxReplayBuffer bounds PublisherConfig.ReplayBuffer: ten times vLLM's
// default.
const maxReplayBuffer = 100_000

// binds is vLLM's rule: bind when the endpoint has a wildcard host.
func (c PublisherConfig) binds() bool {
	return c.Bind || strings.Contains(c.Endpoint, "*") || strings.Contains(c.Endpoint, "::")
}

// Publisher sends batches on a PUB socket, one message [topic, seq,
// payload] each, seq from 0. Publish is safe for concurrent use and never
// blocks; Run sends, in a rules.Group.
type Publisher struct {
	cfg  PublisherConfig
	log  *slog.Logger
	q    chan queued
	sock zmq4.Socket
	ctx  context.Context // the socket's; cancelled when Run returns
	stop context.CancelFunc

	seq  atomic.Uint64 // the next sequence number: taken by Publish, dropped or not
	sent atomic.Uint64 // batches sent to the socket (read by the tests)

	mu   sync.Mutex // guards addr
	addr net.Addr

	replay     zmq4.Socket // the ROUTER, nil without ReplayEndpoint
	replayAddr net.Addr
	replayed   atomic.Uint64 // replay requests answered
	ring       replayRing
}

// replayRing is the batches kept for replay, the most recent
// PublisherConfig.ReplayBuffer, in sequence order. Run appends; the
// replay server reads.
type replayRing struct {
	mu    sync.Mutex // guards the fields below
	buf   []replayEntry
	first int // index of the oldest entry once buf is full
}

type replayEntry struct {
	seq     uint64
	payload []byte // never written after it is stored
}

func (r *replayRing) add(seq uint64, payload []byte, limit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) < limit {
		r.buf = append(r.buf, replayEntry{seq, payload})
		return
	}
	r.buf[r.first] = replayEntry{seq, payload}
	r.first = (r.first + 1) % len(r.buf)
}

// since appends to dst the entries from seq from on, oldest first.
func (r *replayRing) since(dst []replayEntry, from uint64) []replayEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.buf {
		if e := r.buf[(r.first+i)%len(r.buf)]; e.seq >= from {
			dst = append(dst, e)
		}
	}
	return dst
}

type queued struct {
	seq uint64
	b   Batch
}

// NewPublisher opens the socket: a binding one listens now (its errors
// are New's), a connecting one dials in Run.
func NewPublisher(cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ep, err := guarded(cfg.Endpoint)
	if err != nil {
		panic("BUG: kvevents: endpoint validated: " + err.Error())
	}
	if cfg.Queue == 0 {
		cfg.Queue = 1024
	}
	if cfg.ReplayBuffer == 0 {
		cfg.ReplayBuffer = 10_000
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, log: logger.With("component", "kvevents.pub", "endpoint", cfg.Endpoint),
		q: make(chan queued, cfg.Queue), ctx: ctx, stop: cancel}
	p.sock = zmq4.NewPub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	if err := p.sock.SetOption(zmq4.OptionHWM, cfg.Queue); err != nil {
		cancel()
		return nil, fmt.Errorf("kvevents: cannot set the publisher's high-water mark: %w", err)
	}
	if cfg.binds() {
		if err := p.sock.Listen(ep); err != nil {
			cancel()
			_ = p.sock.Close() // never used
			return nil, fmt.Errorf("kvevents: cannot listen on %s: %w", cfg.Endpoint, err)
		}
		p.addr = p.sock.Addr()
	}
	if cfg.ReplayEndpoint != "" {
		rep, err := guarded(cfg.ReplayEndpoint)
		if err != nil {
			panic("BUG: kvevents: replay endpoint validated: " + err.Error())
		}
		p.replay = zmq4.NewRouter(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
		if err := p.replay.Listen(rep); err != nil {
			cancel()
			_ = p.sock.Close()   // never used
			_ = p.replay.Close() // never used
			return nil, fmt.Errorf("kvevents: cannot listen for replay requests on %s: %w", cfg.ReplayEndpoint, err)
		}
		p.replayAddr = p.replay.Addr()
	}
	return p, nil
}

// ReplayAddr is where the replay socket listens, nil without one. Any
// goroutine.
func (p *Publisher) ReplayAddr() net.Addr { return p.replayAddr }

// Addr is where a binding publisher listens (nil for a connecting one).
// Any goroutine.
func (p *Publisher) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Publish queues b; false if the queue was full (b dropped, its sequence
// number skipped). Never blocks; any goroutine. b is the publisher's
// from now on.
func (p *Publisher) Publish(b Batch) bool {
	b.Encoding = p.cfg.Encoding
	// The seq is taken here, under the send order the channel keeps:
	// concurrent callers must serialize themselves (the simulator's one
	// scheduler does) for seqs to leave in order.
	seq := p.seq.Add(1) - 1
	select {
	case p.q <- queued{seq: seq, b: b}:
		return true
	default:
		return false // the caller counts it
	}
}

// Run dials (a connecting publisher, retrying every 100 ms to 2 s) and
// sends queued batches until ctx is done; then it closes the socket.
// Start it once, in a rules.Group.
func (p *Publisher) Run(ctx context.Context) {
	defer func() {
		p.stop()
		_ = p.sock.Close() // its connections' write errors are not reported by zmq4
	}()
	if p.replay != nil {
		g := rules.NewGroup(ctx)
		g.Go("kvevents.replay", p.serveReplay)
		defer func() {
			g.Stop()
			_ = p.replay.Close() // ends serveReplay's Recv; its peers' errors are theirs
			// serveReplay returns once its Recv or Send fails, which the
			// Close makes them do: waiting is bounded.
			_ = g.Wait(context.Background()) // background: never done, so never an error
		}()
	}
	if !p.cfg.binds() && !p.dial(ctx) {
		return
	}
	enc := NewEncoder()
	var payload []byte
	seq := make([]byte, 8)
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-p.q:
			var err error
			payload, err = enc.Append(payload[:0], &q.b)
			if err != nil {
				p.log.Error("cannot encode a KV event batch", "err", err)
				continue
			}
			binary.BigEndian.PutUint64(seq, q.seq)
			p.send(q.seq, seq, bytesCopy(payload))
		}
	}
}

// send publishes one encoded batch and keeps it for replay. Run only.
func (p *Publisher) send(seq uint64, seqFrame, payload []byte) {
	if p.replay != nil {
		// After the send, as vLLM does; kept even when the send fails:
		// the sequence number was taken either way.
		defer p.ring.add(seq, payload, p.cfg.ReplayBuffer)
	}
	if n := uint64(p.cfg.LoseEvery); n > 0 && seq%n == n-1 {
		return // lost on purpose (LoseEvery)
	}
	// Send copies nothing: the frames must not be reused until zmq4's
	// writer sent them, so each message gets its own (payload is never
	// written again: the ring shares it).
	msg := zmq4.NewMsgFrom([]byte(p.cfg.Topic), bytesCopy(seqFrame), payload)
	if err := p.sock.Send(msg); err != nil {
		p.log.Warn("cannot publish a KV event batch", "err", err)
		return
	}
	p.sent.Add(1)
}

// serveReplay answers replay requests until the ROUTER is closed: for a
// request [identity, empty, start seq], every buffered batch from start
// on as [identity, empty, seq, payload], then the end marker [identity,
// empty, 2⁶⁴-1, empty] (vLLM's ZmqEventPublisher._service_replay). In
// Run's group.
func (p *Publisher) serveReplay(ctx context.Context) {
	var batch []replayEntry
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			// zmq4's ROUTER fails Recv only when its socket is closed
			// (a peer's connection that ends is dropped silently).
			if ctx.Err() == nil {
				p.log.Debug("replay socket closed", "err", err)
			}
			return
		}
		f := msg.Frames
		if len(f) != 3 || len(f[1]) != 0 || len(f[2]) != 8 {
			p.log.Debug("ignoring a malformed replay request", "frames", len(f))
			continue
		}
		id := bytesCopy(f[0])
		batch = p.ring.since(batch[:0], binary.BigEndian.Uint64(f[2]))
		ok := true
		for _, e := range batch {
			var seq [8]byte
			binary.BigEndian.PutUint64(seq[:], e.seq)
			if err := p.replay.Send(zmq4.NewMsgFrom(id, []byte{}, seq[:], e.payload)); err != nil {
				p.log.Debug("cannot send a replayed batch", "err", err)
				ok = false
				break
			}
		}
		clear(batch) // the ring's payloads are not pinned by this slice
		if !ok {
			continue
		}
		var end [8]byte
		binary.BigEndian.PutUint64(end[:], replayEnd)
		if err := p.replay.Send(zmq4.NewMsgFrom(id, []byte{}, end[:], []byte{})); err != nil {
			p.log.Debug("cannot send the replay's end marker", "err", err)
			continue
		}
		p.replayed.Add(1)
	}
}

func bytesCopy(b []byte) []byte { return append([]byte(nil), b...) }

// dial connects to the subscriber's endpoint, retrying with backoff until
// it answers or ctx is done.
func (p *Publisher) dial(ctx context.Context) bool {
	ep, err := guarded(p.cfg.Endpoint)
	if err != nil {
		panic("BUG: kvevents: endpoint validated in NewPublisher: " + err.Error())
	}
	backoff := 100 * time.Millisecond
	t := time.NewTimer(0)
	<-t.C
	defer t.Stop()
	for {
		err := p.sock.Dial(ep)
		if err == nil {
			return true
		}
		if errors.Is(ctx.Err(), context.Canceled) || ctx.Err() != nil {
			return false
		}
		p.log.Debug("cannot connect to the KV-event subscriber", "err", err)
		t.Reset(backoff)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
