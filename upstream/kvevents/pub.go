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
	return nil
}

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

	seq     atomic.Uint64 // the next sequence number: taken by Publish, dropped or not
	sent    atomic.Uint64
	dropped atomic.Uint64

	mu   sync.Mutex // guards addr
	addr net.Addr
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
	return p, nil
}

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
		p.dropped.Add(1)
		return false
	}
}

// Sent and Dropped count batches sent to the socket and dropped at
// Publish. Any goroutine.
func (p *Publisher) Sent() uint64    { return p.sent.Load() }
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Run dials (a connecting publisher, retrying every 100 ms to 2 s) and
// sends queued batches until ctx is done; then it closes the socket.
// Start it once, in a rules.Group.
func (p *Publisher) Run(ctx context.Context) {
	defer func() {
		p.stop()
		_ = p.sock.Close() // its connections' write errors are not reported by zmq4
	}()
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
			// Send copies nothing: the frames must not be reused until
			// zmq4's writer sent them, so each message gets its own.
			msg := zmq4.NewMsgFrom([]byte(p.cfg.Topic), bytesCopy(seq), bytesCopy(payload))
			if err := p.sock.Send(msg); err != nil {
				p.log.Warn("cannot publish a KV event batch", "err", err)
				continue
			}
			p.sent.Add(1)
		}
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
