package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The replay client: a DEALER socket that asks a publisher's ROUTER
// (vLLM's replay_endpoint) for the batches it missed. The wire is in
// doc.go ("Replay").

// replayEnd is the sequence number of the end marker: vLLM's -1 as a
// signed 8-byte big-endian integer, llm-d-inference-sim's 2⁶⁴-1 (the same
// bytes).
const replayEnd = ^uint64(0)

// Replay outcomes (saltus_kvevents_replays_total{outcome}).
const (
	replayFilled   = "filled"     // every missed batch came back: nothing is stale
	replayTooOld   = "too_old"    // the publisher no longer had the first missed batch, or the gap is wider than MaxReplay
	replayPartial  = "partial"    // it had the first but not all of them (a batch it never buffered)
	replayTimeout  = "timeout"    // no answer within ReplayTimeout
	replayError    = "error"      // no connection, or a malformed reply or batch
	replayOverLim  = "over_limit" // the missed batches' bytes are over MaxReplayBytes
	replayOverflow = "overflow"   // more than MaxPending live batches came during it
	replayCanceled = "canceled"   // the subscription ended first (not counted)
)

var replayOutcomes = []string{replayFilled, replayTooOld, replayPartial, replayTimeout, replayError, replayOverLim, replayOverflow}

var (
	errReplayFrames = errors.New("kvevents: replay reply is not [empty, (topic,) 8-byte seq, payload]")
	errReplayOrder  = errors.New("kvevents: replay reply out of order")
)

// parseReplay reads one reply of a replay socket, as a DEALER receives
// it: the empty delimiter, then vLLM's [seq, payload] or
// llm-d-inference-sim's [topic, seq, payload]. end is the end marker
// (seq 2⁶⁴-1, whatever its payload). payload aliases frames.
func parseReplay(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	if len(frames) < 3 || len(frames) > 4 || len(frames[0]) != 0 {
		return 0, nil, false, errReplayFrames
	}
	rest := frames[1:]
	if len(rest) == 3 {
		if len(rest[0]) > maxTopic {
			return 0, nil, false, errReplayFrames
		}
		rest = rest[1:]
	}
	if len(rest[0]) != 8 {
		return 0, nil, false, errReplayFrames
	}
	seq = binary.BigEndian.Uint64(rest[0])
	return seq, rest[1], seq == replayEnd, nil
}

// replayed is one batch a replay brought back.
type replayed struct {
	seq uint64
	b   Batch
}

// replayResult is what one replay brought back: on replayFilled, the
// batches [from, to) in order; otherwise none.
type replayResult struct {
	from, to uint64
	outcome  string
	batches  []replayed
	err      error // why, for the debug log
}

// replayClient fetches missed batches from one replay endpoint. Its
// fields are set once; fetch runs on one goroutine at a time (each call
// has its own socket and decoder).
type replayClient struct {
	endpoint string // tcp://HOST:PORT
	timeout  time.Duration
	maxBytes int
	limits   Limits
	guard    *guardStats
}

// dialHook is how fetch reaches the connection zmq4 hides: the guarded
// transport's Dial (frame.go) sets its deadline and hands it over.
type dialHook struct {
	ctx      context.Context // the caller's: ends a dial in progress
	deadline time.Time
	mu       sync.Mutex // guards the fields below
	conn     net.Conn
	expired  bool
}

type dialHookKey struct{}

func withDialHook(ctx context.Context, h *dialHook) context.Context {
	return context.WithValue(ctx, dialHookKey{}, h)
}

func dialHookOf(ctx context.Context) *dialHook {
	h, _ := ctx.Value(dialHookKey{}).(*dialHook)
	return h
}

// dialed bounds c by the hook's deadline (the handshake, the request and
// every reply) and keeps it for expire. False if c cannot take one.
func (h *dialHook) dialed(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conn = c
	d := h.deadline
	if h.expired {
		d = time.Unix(1, 0)
	}
	return c.SetDeadline(d) == nil
}

// expire ends the connection's reads and writes now: zmq4's reader then
// hands fetch an error, its last message.
func (h *dialHook) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expired = true
	if h.conn != nil {
		_ = h.conn.SetDeadline(time.Unix(1, 0)) // a connection that refuses it is closed, which ends its reads too
	}
}

// fetch asks for the batches from seq from on and returns those of
// [from, to), to > from. It returns within the client's timeout, or soon
// after ctx is done. Any goroutine, one call at a time per client.
func (c *replayClient) fetch(ctx context.Context, from, to uint64) (res replayResult) {
	res = replayResult{from: from, to: to}
	h := &dialHook{ctx: ctx, deadline: time.Now().Add(c.timeout)}
	// The socket's own context is not ctx: zmq4's reader goroutine hands
	// each message over without watching it, so cancelling it while a
	// message waits would leave that goroutine blocked for good. ctx and
	// the deadline end the connection instead, and fetch reads until
	// zmq4 says so.
	sctx, cancel := context.WithCancel(withDialHook(withGuardStats(context.Background(), c.guard), h))
	defer cancel()
	ep, err := guarded(c.endpoint)
	if err != nil {
		panic("BUG: kvevents: replay endpoint validated in New: " + err.Error())
	}
	sock := zmq4.NewDealer(sctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(c.timeout),
		zmq4.WithTimeout(c.timeout), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer func() {
		_ = sock.Close() // its connection ended: nothing more to say
	}()
	stop := context.AfterFunc(ctx, h.expire)
	defer stop()
	if err := sock.Dial(ep); err != nil {
		res.outcome, res.err = c.failed(ctx, err)
		return res
	}
	drained := false
	defer func() {
		if drained {
			return
		}
		h.expire()
		for {
			if _, err := sock.Recv(); err != nil {
				return // zmq4's reader is done
			}
		}
	}()
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	if err := sock.Send(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		res.outcome, res.err = c.failed(ctx, err)
		// zmq4 reports a failed write without ending its reader: it ends
		// when the connection does.
		return res
	}
	dec := NewDecoder(c.limits)
	size := 0
	next := from
	for {
		msg, err := sock.Recv()
		if err != nil {
			drained = true
			res.outcome, res.err = c.failed(ctx, err)
			res.batches = nil
			return res
		}
		seq, payload, end, err := parseReplay(msg.Frames)
		switch {
		case err != nil:
			res.outcome, res.err = replayError, err
		case end && next == from:
			res.outcome = replayTooOld // nothing from `from` on
		case end:
			res.outcome = replayPartial
		case seq < next:
			if next > from {
				res.outcome, res.err = replayError, fmt.Errorf("%w: %d after %d", errReplayOrder, seq, next-1)
			} else {
				continue // older than asked: skipped
			}
		case seq > next && next == from:
			res.outcome = replayTooOld // the first one asked for is gone
		case seq > next:
			res.outcome = replayPartial
		}
		if res.outcome != "" {
			drained = end && err == nil // nothing follows an end marker
			res.batches = nil
			return res
		}
		if size += len(payload); size > c.maxBytes {
			res.outcome, res.batches = replayOverLim, nil
			return res
		}
		b, err := dec.Decode(payload)
		if err != nil {
			res.outcome, res.err, res.batches = replayError, err, nil
			return res
		}
		res.batches = append(res.batches, replayed{seq: seq, b: b})
		if next++; next == to {
			res.outcome = replayFilled
			return res
		}
	}
}

// failed names the outcome of a socket error.
func (c *replayClient) failed(ctx context.Context, err error) (string, error) {
	switch {
	case ctx.Err() != nil:
		return replayCanceled, err
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return replayTimeout, err
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return replayTimeout, err
		}
		return replayError, err
	}
}
