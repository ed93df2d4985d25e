package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// replayPair starts a publisher with a replay socket (mod adjusts its
// config) and a subscriber to it that replays there, joined.
func replayPair(t *testing.T, mod func(*PublisherConfig), smod func(*Config), joined bool) (*Publisher, *Subscriber, chan Message) {
	t.Helper()
	pcfg := PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Encoding: MapEncoding, ReplayEndpoint: "tcp://127.0.0.1:0"}
	if mod != nil {
		mod(&pcfg)
	}
	p, _ := startPub(t, pcfg)
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://" + p.Addr().String()
	cfg.ReplayEndpoint = "tcp://" + p.ReplayAddr().String()
	if smod != nil {
		smod(&cfg)
	}
	ch := make(chan Message, 64)
	s := startSub(t, cfg, ch)
	if joined {
		join(t, p, ch)
	}
	return p, s, ch
}

// until receives messages up to the first whose ts is ts, checking that
// each follows the one before (seq + 1) and is not stale; it returns
// the last seq.
func until(t *testing.T, s *Subscriber, ch <-chan Message, prev uint64, ts float64) uint64 {
	t.Helper()
	for {
		m := recv(t, ch)
		if m.Seq != prev+1 || m.Stale {
			t.Fatalf("seq %d after %d, stale %v (%s): want %d, not stale; replays %v", m.Seq, prev, m.Stale, m.StaleReason, prev+1, replayCounts(s))
		}
		prev = m.Seq
		if m.Batch.TS == ts {
			return prev
		}
	}
}

// TestReplayFillsGaps: the publisher loses every third batch on its PUB
// socket (LoseEvery) but keeps it for replay; the subscriber sees each
// gap, replays it, and delivers every batch in order, none stale.
func TestReplayFillsGaps(t *testing.T) {
	t.Parallel()
	p, s, ch := replayPair(t, func(c *PublisherConfig) { c.LoseEvery = 3 }, nil, false)
	// The first batch to arrive (a SUB misses what was sent before it
	// reached the PUB) is stale (start); every one after follows it.
	var first Message
	for end := time.Now().Add(waitFor); ; {
		p.Publish(marker(-1))
		select {
		case first = <-ch:
		case <-time.After(20 * time.Millisecond):
			if time.Now().After(end) {
				t.Fatal("the subscription never received a batch")
			}
			continue
		}
		break
	}
	if !first.Stale || first.StaleReason != "start" {
		t.Fatalf("first batch: stale %v (%s)", first.Stale, first.StaleReason)
	}
	for i := 1; i <= 12; i++ {
		p.Publish(marker(float64(i)))
	}
	// Two in a row: the second reveals the first if it was lost.
	p.Publish(marker(100))
	p.Publish(marker(101))
	until(t, s, ch, first.Seq, 100)
	filled := uint64(0)
	if got := s.m.replays[replayFilled].Get() - filled; got < 4 {
		t.Errorf("replays filled %d, want ≥ 4 (12 batches, one in 3 lost)", got)
	}
	if s.m.replayedBatches.Get() < 4 {
		t.Errorf("replayed batches %d, want ≥ 4", s.m.replayedBatches.Get())
	}
	for _, o := range replayOutcomes {
		if o != replayFilled && s.m.replays[o].Get() != 0 {
			t.Errorf("replays %s: %d, want 0", o, s.m.replays[o].Get())
		}
	}
	if p.Replays() == 0 {
		t.Error("the publisher answered no replay")
	}
}

// TestReplayTooOld: the publisher keeps one batch; a gap is older than
// that, so the replay cannot fill it and the batch after the gap is
// stale, as without replay.
func TestReplayTooOld(t *testing.T) {
	t.Parallel()
	p, s, ch := replayPair(t, func(c *PublisherConfig) { c.ReplayBuffer = 1 }, nil, true)
	await(t, "markers to drain", func() bool { return p.Sent() == p.seq.Load() })
	for len(ch) > 0 {
		<-ch
	}
	p.seq.Add(3) // three batches lost, never kept for replay
	p.Publish(marker(1))
	m := recv(t, ch)
	if !m.Stale || m.StaleReason != "gap" || m.Batch.TS != 1 {
		t.Fatalf("after an unreplayable gap: ts %v stale %v (%s), want ts 1 stale (gap)", m.Batch.TS, m.Stale, m.StaleReason)
	}
	if got := s.m.replays[replayTooOld].Get(); got != 1 {
		t.Errorf("replays too_old %d, want 1", got)
	}
	p.Publish(marker(2))
	if m := recv(t, ch); m.Stale || m.Batch.TS != 2 {
		t.Fatalf("next batch: ts %v stale %v (%s)", m.Batch.TS, m.Stale, m.StaleReason)
	}
}

// TestReplayDeadEndpoint: a replay endpoint that refuses connections, or
// accepts them and never answers, leaves the source stale: at once, or
// after ReplayTimeout.
func TestReplayDeadEndpoint(t *testing.T) {
	t.Parallel()
	// A TCP listener that never speaks ZMTP: the replay's handshake hangs.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	acceptDone := make(chan struct{})
	run(t, "mute", func(ctx context.Context) {
		defer close(acceptDone)
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = mute.Close() // ends the accept loop
		<-acceptDone
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close() // the test's own
		}
	})
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := refused.Addr().String()
	if err := refused.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, endpoint, outcome string
	}{
		{"refused", dead, replayError},
		{"mute", mute.Addr().String(), replayTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 300 * time.Millisecond
			p, s, ch := replayPair(t, nil, func(c *Config) {
				c.ReplayEndpoint = "tcp://" + tc.endpoint
				c.ReplayTimeout = timeout
			}, true)
			await(t, "markers to drain", func() bool { return p.Sent() == p.seq.Load() })
			for len(ch) > 0 {
				<-ch
			}
			p.seq.Add(2)
			t0 := time.Now()
			p.Publish(marker(1))
			m := recv(t, ch)
			if !m.Stale || m.StaleReason != "gap" || m.Batch.TS != 1 {
				t.Fatalf("ts %v stale %v (%s), want ts 1 stale (gap)", m.Batch.TS, m.Stale, m.StaleReason)
			}
			if got := s.m.replays[tc.outcome].Get(); got != 1 {
				t.Errorf("replays %s %d, want 1", tc.outcome, got)
			}
			if d := time.Since(t0); tc.outcome == replayTimeout && d < timeout {
				t.Errorf("stale after %v, before the replay's timeout %v", d, timeout)
			}
		})
	}
}

// TestReplayOverflow: more live batches than MaxPending arrive while a
// replay hangs: the replay is abandoned, the held batches go out in
// order (the first stale), and the live stream goes on.
func TestReplayOverflow(t *testing.T) {
	t.Parallel()
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptDone := make(chan struct{})
	var held []net.Conn
	run(t, "mute", func(ctx context.Context) {
		defer close(acceptDone)
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	})
	t.Cleanup(func() {
		_ = mute.Close() // ends the accept loop
		<-acceptDone
		for _, c := range held {
			_ = c.Close() // the test's own
		}
	})
	p, s, ch := replayPair(t, nil, func(c *Config) {
		c.ReplayEndpoint = "tcp://" + mute.Addr().String()
		c.ReplayTimeout = 5 * time.Second // outlasts the test's batches
		c.MaxPending = 3
	}, true)
	await(t, "markers to drain", func() bool { return p.Sent() == p.seq.Load() })
	for len(ch) > 0 {
		<-ch
	}
	p.seq.Add(1)
	for i := 1; i <= 5; i++ {
		p.Publish(marker(float64(i)))
	}
	for i := 1; i <= 5; i++ {
		m := recv(t, ch)
		if m.Batch.TS != float64(i) || m.Stale != (i == 1) {
			t.Fatalf("message %d: ts %v stale %v (%s)", i, m.Batch.TS, m.Stale, m.StaleReason)
		}
	}
	if got := s.m.replays[replayOverflow].Get(); got != 1 {
		t.Errorf("replays overflow %d, want 1", got)
	}
}

func TestParseReplay(t *testing.T) {
	t.Parallel()
	seq := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	f := func(frames [][]byte, wantSeq uint64, wantPayload string, wantEnd, wantErr bool) {
		t.Helper()
		s, p, end, err := parseReplay(frames)
		if (err != nil) != wantErr {
			t.Fatalf("%q: err %v", frames, err)
		}
		if err == nil && (s != wantSeq || string(p) != wantPayload || end != wantEnd) {
			t.Fatalf("%q: %d %q %v, want %d %q %v", frames, s, p, end, wantSeq, wantPayload, wantEnd)
		}
	}
	empty := []byte{}
	f([][]byte{empty, seq(7), []byte("x")}, 7, "x", false, false)                 // vLLM
	f([][]byte{empty, seq(replayEnd), empty}, replayEnd, "", true, false)         // vLLM's end
	f([][]byte{empty, []byte("kv@a"), seq(7), []byte("x")}, 7, "x", false, false) // llm-d-inference-sim
	f([][]byte{empty, empty, seq(replayEnd), empty}, replayEnd, "", true, false)  // its end
	f([][]byte{seq(7), []byte("x")}, 0, "", false, true)                          // no delimiter
	f([][]byte{[]byte("id"), seq(7), []byte("x")}, 0, "", false, true)
	f([][]byte{empty, []byte{1, 2}, []byte("x")}, 0, "", false, true)
	f([][]byte{empty, seq(1), seq(2), seq(3), seq(4)}, 0, "", false, true)
	f([][]byte{empty, make([]byte, maxTopic+1), seq(7), []byte("x")}, 0, "", false, true)
}

// FuzzParseReplay: parseReplay never panics, and what it accepts has an
// 8-byte sequence frame and a payload from the frames.
func FuzzParseReplay(f *testing.F) {
	f.Add(uint8(3), []byte{}, binary.BigEndian.AppendUint64(nil, 7), []byte("payload"))
	f.Add(uint8(4), []byte("kv@10.0.0.1:8000@m"), binary.BigEndian.AppendUint64(nil, replayEnd), []byte{})
	f.Add(uint8(2), []byte{}, []byte{1}, []byte{})
	f.Fuzz(func(t *testing.T, n uint8, a, b, c []byte) {
		frames := [][]byte{{}, a, b, c}
		switch n % 5 {
		case 0:
			frames = frames[:0]
		case 1:
			frames = frames[:1]
		case 2:
			frames = [][]byte{a, b, c}
		case 3:
			frames = [][]byte{{}, b, c}
		}
		seq, payload, end, err := parseReplay(frames)
		if err != nil {
			if !errors.Is(err, errReplayFrames) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if end != (seq == replayEnd) {
			t.Fatalf("end %v for seq %d", end, seq)
		}
		if len(frames) < 3 || len(frames[0]) != 0 || string(payload) != string(frames[len(frames)-1]) {
			t.Fatalf("accepted %q: payload %q", frames, payload)
		}
	})
}

// TestPublisherReplaySocket: vLLM's wire, from a bare DEALER: the
// buffered batches from the asked seq on, then the end marker; a start
// older than the buffer gets what it holds.
func TestPublisherReplaySocket(t *testing.T) {
	t.Parallel()
	p, _ := startPub(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0", ReplayBuffer: 3})
	for i := range 5 {
		p.Publish(marker(float64(i)))
	}
	await(t, "the batches to be sent", func() bool { return p.Sent() == 5 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer func() {
		_ = d.Close() // the test's
	}()
	if err := d.Dial("tcp://" + p.ReplayAddr().String()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from uint64
		want []uint64
	}{{3, []uint64{3, 4}}, {0, []uint64{2, 3, 4}}, {9, nil}} {
		if err := d.Send(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, tc.from))); err != nil {
			t.Fatal(err)
		}
		var got []uint64
		dec := NewDecoder(DefaultLimits())
		for {
			msg, err := d.Recv()
			if err != nil {
				t.Fatal(err)
			}
			seq, payload, end, err := parseReplay(msg.Frames)
			if err != nil {
				t.Fatalf("%q: %v", msg.Frames, err)
			}
			if end {
				break
			}
			b, err := dec.Decode(payload)
			if err != nil || b.TS != float64(seq) {
				t.Fatalf("seq %d: ts %v, %v", seq, b.TS, err)
			}
			got = append(got, seq)
		}
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || (len(got) > 0 && got[len(got)-1] != tc.want[len(tc.want)-1]) {
			t.Errorf("from %d: %v, want %v", tc.from, got, tc.want)
		}
	}
}

func replayCounts(s *Subscriber) map[string]uint64 {
	m := map[string]uint64{}
	for o, c := range s.m.replays {
		m[o] = c.Get()
	}
	return m
}

// TestReplayDropped: a batch dropped here (the consumer's channel was
// full) is replayed too: once there is room, the next batch brings it
// back first, and none is stale.
func TestReplayDropped(t *testing.T) {
	t.Parallel()
	p, _ := startPub(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0"})
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://" + p.Addr().String()
	cfg.ReplayEndpoint = "tcp://" + p.ReplayAddr().String()
	ch := make(chan Message, 4)
	s := startSub(t, cfg, ch)
	join(t, p, ch)
	await(t, "markers to drain", func() bool { return p.Sent() == p.seq.Load() })
	for len(ch) > 0 {
		<-ch
	}
	// The channel holds cap(ch); the batches after (one at least, more
	// if joining markers were still on their way) are dropped.
	for i := range cap(ch) + 1 {
		p.Publish(marker(float64(10 + i)))
	}
	await(t, "the drop", func() bool { return s.m.queueFull.Get() >= 1 })
	var prev uint64
	for range cap(ch) {
		prev = recv(t, ch).Seq
	}
	p.Publish(marker(99))
	until(t, s, ch, prev, 99)
	if got := s.m.replays[replayFilled].Get(); got != 1 {
		t.Errorf("replays filled %d, want 1", got)
	}
}
