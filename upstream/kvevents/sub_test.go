package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-zeromq/zmq4"

	"github.com/saltus-lb/saltus/internal/promtext"
	"github.com/saltus-lb/saltus/rules"
)

const waitFor = 10 * time.Second // every wait's bound

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// run starts fn in a group stopped and joined at cleanup.
func run(t *testing.T, name string, fn func(context.Context)) *rules.Group {
	t.Helper()
	g := rules.NewGroup(context.Background())
	g.Go(name, fn)
	t.Cleanup(func() {
		g.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := g.Wait(ctx); err != nil {
			t.Errorf("%s did not stop: %v", name, err)
		}
	})
	return g
}

func startPub(t *testing.T, cfg PublisherConfig) (*Publisher, *rules.Group) {
	t.Helper()
	p, err := NewPublisher(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return p, run(t, "pub", p.Run)
}

func startSub(t *testing.T, cfg Config, out chan Message) *Subscriber {
	t.Helper()
	set := metrics.NewSet()
	s, err := New(cfg, out, quiet, set)
	if err != nil {
		t.Fatal(err)
	}
	g := run(t, "sub", s.Run)
	t.Cleanup(func() {
		// after the group's cleanup (registered later, run earlier)
		var buf bytes.Buffer
		set.WritePrometheus(&buf)
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			name, _, _, err := promtext.SplitSample(line)
			if err != nil {
				t.Errorf("metrics: %v", err)
			} else if promtext.Help(name) == "" {
				t.Errorf("metric %s has no HELP text", name)
			}
		}
		s.Close()
		buf.Reset()
		set.WritePrometheus(&buf)
		if buf.Len() != 0 {
			t.Errorf("series left after Close:\n%s", buf.Bytes())
		}
	})
	_ = g // stopped by its cleanup
	return s
}

func recv(t *testing.T, ch <-chan Message) Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitFor):
		t.Fatal("no message")
		return Message{}
	}
}

// await polls cond until it holds, failing after waitFor.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(waitFor); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func marker(ts float64) Batch { return Batch{TS: ts, Events: []Event{{Kind: AllBlocksCleared}}} }

// join publishes markers until one arrives (a SUB misses what its PUB
// sent before the subscription reached it) and returns it.
func join(t *testing.T, p *Publisher, ch <-chan Message) Message {
	t.Helper()
	end := time.Now().Add(waitFor)
	for time.Now().Before(end) {
		p.Publish(marker(-1))
		select {
		case m := <-ch:
			for len(ch) > 0 { // markers in flight
				<-ch
			}
			return m
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("the subscription never received a batch")
	return Message{}
}

func TestSubscriberConnect(t *testing.T) {
	t.Parallel()
	pcfg := PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Encoding: MapEncoding}
	p, pg := startPub(t, pcfg)
	ep := "tcp://" + p.Addr().String()
	cfg := DefaultConfig()
	cfg.Endpoint = ep
	cfg.Limits.MaxPayload = 2048
	ch := make(chan Message, 64)
	s := startSub(t, cfg, ch)

	first := join(t, p, ch)
	if !first.Stale || first.Source != ep {
		t.Fatalf("first message: %+v, want stale, source %s", first, ep)
	}
	await(t, "markers to drain", func() bool { return p.Sent() == p.seq.Load() })
	for len(ch) > 0 {
		<-ch
	}

	t.Run("in order", func(t *testing.T) {
		last := p.seq.Load()
		for i := range 5 {
			p.Publish(sample(MapEncoding, sha))
			_ = i
		}
		for i := range 5 {
			m := recv(t, ch)
			if m.Seq != last+uint64(i) || m.Stale || len(m.Batch.Events) != 5 || m.Batch.Encoding != MapEncoding {
				t.Fatalf("message %d: seq %d stale %v (%s), %d events; want seq %d, fresh", i, m.Seq, m.Stale, m.StaleReason, len(m.Batch.Events), last+uint64(i))
			}
		}
	})

	t.Run("gap", func(t *testing.T) {
		gaps := s.m.gaps.Get()
		p.seq.Add(3) // three batches lost on the way
		p.Publish(marker(1))
		m := recv(t, ch)
		if !m.Stale || m.StaleReason != "gap" || s.m.gaps.Get() != gaps+1 {
			t.Fatalf("after a gap: stale %v (%s), gaps %d→%d", m.Stale, m.StaleReason, gaps, s.m.gaps.Get())
		}
		p.Publish(marker(2))
		if m := recv(t, ch); m.Stale {
			t.Fatalf("the batch after the gap's is stale: %s", m.StaleReason)
		}
	})

	t.Run("oversize", func(t *testing.T) {
		big := Batch{Events: []Event{{Kind: BlockStored, Hashes: []Hash{sha(1)}, Tokens: make([]uint32, 3000), BlockSize: 3000}}}
		p.Publish(big)
		p.Publish(marker(3))
		m := recv(t, ch)
		if m.Batch.TS != 3 || !m.Stale || m.StaleReason != "dropped" || s.m.oversize.Get() != 1 {
			t.Fatalf("after an oversize batch: ts %v stale %v (%s), oversize %d", m.Batch.TS, m.Stale, m.StaleReason, s.m.oversize.Get())
		}
	})

	t.Run("queue full", func(t *testing.T) {
		// fill the channel, then one more
		for range cap(ch) + 1 {
			p.Publish(marker(4))
		}
		await(t, "the drop", func() bool { return s.m.queueFull.Get() >= 1 })
		for len(ch) > 0 {
			<-ch
		}
		p.Publish(marker(5))
		for {
			m := recv(t, ch)
			if m.Batch.TS == 5 {
				if !m.Stale || m.StaleReason != "dropped" {
					t.Fatalf("after a full channel: stale %v (%s)", m.Stale, m.StaleReason)
				}
				break
			}
		}
	})

	t.Run("publisher restart", func(t *testing.T) {
		addr := p.Addr().String()
		pg.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := pg.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, "the subscriber to notice", func() bool { return s.m.reconnects.Get() >= 1 })
		var p2 *Publisher
		await(t, "the port to be free", func() bool {
			var err error
			p2, err = NewPublisher(PublisherConfig{Endpoint: "tcp://" + addr, Bind: true}, quiet)
			return err == nil
		})
		run(t, "pub2", p2.Run)
		m := join(t, p2, ch)
		if !m.Stale {
			t.Fatalf("first batch after a restart is not stale")
		}
		if m.Batch.Encoding != ArrayEncoding {
			t.Fatalf("encoding %d", m.Batch.Encoding)
		}
	})
}

func TestSubscriberBind(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://127.0.0.1:0"
	cfg.Bind = true
	cfg.MaxSources = 2
	ch := make(chan Message, 64)
	s := startSub(t, cfg, ch)
	select {
	case <-s.Bound():
	case <-time.After(waitFor):
		t.Fatal("not bound")
	}
	ep := "tcp://" + s.Addr().String()
	topics := []string{"kv@10.0.0.1:8000@llama", "kv@10.0.0.2:8000@llama"}
	var pubs []*Publisher
	for _, topic := range topics {
		p, _ := startPub(t, PublisherConfig{Endpoint: ep, Topic: topic})
		pubs = append(pubs, p)
	}
	for i, p := range pubs {
		var m Message
		for m.Source != topics[i] {
			m = join(t, p, ch)
		}
		addr, model, ok := ParseTopic(m.Source)
		if !ok || addr != topics[i][3:16] || model != "llama" {
			t.Fatalf("ParseTopic(%q) = %q %q %v", m.Source, addr, model, ok)
		}
	}

	// A third engine is past MaxSources: dropped, counted.
	p3, _ := startPub(t, PublisherConfig{Endpoint: ep, Topic: "kv@10.0.0.3:8000@llama"})
	await(t, "the third source's drop", func() bool {
		p3.Publish(marker(1))
		return s.m.sources.Get() >= 1
	})

	// A message that is not [topic, 8-byte seq, payload].
	raw := zmq4.NewPub(context.Background())
	defer raw.Close()
	if err := raw.Dial(ep); err != nil {
		t.Fatal(err)
	}
	await(t, "the bad frame's count", func() bool {
		if err := raw.Send(zmq4.NewMsgFrom([]byte(topics[0]), []byte{1, 2, 3}, []byte{0x90})); err != nil {
			t.Fatal(err)
		}
		return s.m.badFrame.Get() >= 1
	})
	pubs[0].Publish(marker(7))
	for {
		m := recv(t, ch)
		if m.Source == topics[0] && m.Batch.TS == 7 {
			if !m.Stale || m.StaleReason != "dropped" {
				t.Fatalf("after a bad frame: stale %v (%s)", m.Stale, m.StaleReason)
			}
			break
		}
	}
}

// TestFrameOverLimit: a peer that declares a frame over MaxFrame loses
// its connection before anything is allocated for it.
func TestFrameOverLimit(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://127.0.0.1:0"
	cfg.Bind = true
	s := startSub(t, cfg, make(chan Message, 1))
	<-s.Bound()
	c, err := net.DialTimeout("tcp", s.Addr().String(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	greeting := make([]byte, greetingLen)
	greeting[0], greeting[9], greeting[10] = 0xff, 0x7f, 3
	copy(greeting[12:], "NULL")
	frame := []byte{flagLong | flagCommand, 0, 0, 0, 1, 0, 0, 0, 0} // 2^32 bytes
	if _, err := c.Write(append(greeting, frame...)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil { // until saltus closes it
		t.Fatal(err)
	}
	if got := s.guard.oversize.Get(); got != 1 {
		t.Fatalf("frame_over_limit = %d, want 1", got)
	}
}

func TestFrameGuardFollowsFrames(t *testing.T) {
	t.Parallel()
	g := &frameGuard{greet: greetingLen, st: statsOf(context.Background())}
	var stream []byte
	stream = append(stream, make([]byte, greetingLen)...)
	stream = append(stream, flagCommand, 3, 'a', 'b', 'c') // short command
	long := make([]byte, 9)
	long[0] = flagLong
	binary.BigEndian.PutUint64(long[1:], 300)
	stream = append(stream, long...)
	stream = append(stream, make([]byte, 300)...)
	stream = append(stream, 0, 0) // empty frame
	for i := range stream {       // one byte at a time: every split
		if err := g.follow(stream[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if g.state != 0 || g.greet != 0 {
		t.Fatalf("state %d greet %d after whole frames", g.state, g.greet)
	}
	binary.BigEndian.PutUint64(long[1:], MaxFrame+1)
	if err := g.follow(long); err != errFrameTooLarge {
		t.Fatalf("follow = %v, want errFrameTooLarge", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, f := range []func(*Config){
		func(c *Config) { c.Endpoint = "ipc:///tmp/x" },
		func(c *Config) { c.Endpoint = "tcp://" },
		func(c *Config) { c.MinBackoff = 0 },
		func(c *Config) { c.MaxBackoff = time.Millisecond },
		func(c *Config) { c.MaxSources = 0 },
		func(c *Config) { c.Limits.MaxPayload = MaxFrame + 1 },
		func(c *Config) { c.Limits.MaxEvents = 0 },
		func(c *Config) { c.ReplayEndpoint = "ipc:///tmp/r" },
		func(c *Config) { c.ReplayEndpoint, c.Bind = "tcp://127.0.0.1:5558", true },
		func(c *Config) { c.ReplayEndpoint, c.ReplayTimeout = "tcp://127.0.0.1:5558", 0 },
		func(c *Config) { c.ReplayEndpoint, c.MaxReplay = "tcp://127.0.0.1:5558", 0 },
		func(c *Config) { c.ReplayEndpoint, c.MaxReplayBytes = "tcp://127.0.0.1:5558", 1024 },
		func(c *Config) { c.ReplayEndpoint, c.MaxPending = "tcp://127.0.0.1:5558", 0 },
	} {
		c := DefaultConfig()
		c.Endpoint = "tcp://127.0.0.1:5557"
		f(&c)
		if c.Validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	for _, pc := range []PublisherConfig{
		{Endpoint: "tcp://*:5557", ReplayEndpoint: "udp://*:5558"},
		{Endpoint: "tcp://*:5557", ReplayBuffer: -1},
		{Endpoint: "tcp://*:5557", ReplayBuffer: maxReplayBuffer + 1},
		{Endpoint: "tcp://*:5557", LoseEvery: -1},
	} {
		if pc.Validate() == nil {
			t.Errorf("accepted %+v", pc)
		}
	}
	for _, bad := range []string{"kv@", "kv@10.0.0.1:8000", "kv@10.0.0.1@m", "x@10.0.0.1:1@m", "kv@10.0.0.1:1@"} {
		if _, _, ok := ParseTopic(bad); ok {
			t.Errorf("ParseTopic(%q) ok", bad)
		}
	}
}

// TestSubscriberDPRanks: the ranks of a data-parallel engine share its
// topic and each numbers its own batches; interleaved, neither is a gap
// or a restart of the other, and a gap of one is that rank's alone.
func TestSubscriberDPRanks(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://127.0.0.1:0"
	cfg.Bind = true
	ch := make(chan Message, 64)
	s, err := New(cfg, ch, quiet, metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	enc := NewEncoder()
	const topic = "kv@10.0.0.1:8000@llama"
	send := func(rank int64, seq uint64, ts float64) Message {
		t.Helper()
		b := marker(ts)
		if rank >= 0 {
			b.DPRank = Some(rank)
		}
		payload, err := enc.Append(nil, &b)
		if err != nil {
			t.Fatal(err)
		}
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], seq)
		if !s.handle(context.Background(), [][]byte{[]byte(topic), sb[:], payload}) {
			t.Fatalf("rank %d seq %d not decoded", rank, seq)
		}
		select {
		case m := <-ch:
			return m
		default:
			t.Fatalf("rank %d seq %d not delivered", rank, seq)
			return Message{}
		}
	}
	// Rank 0 without a rank field and with rank 0 is one publisher.
	if m := send(-1, 0, 1); !m.Stale || m.StaleReason != "start" {
		t.Fatalf("first batch: stale %v (%s), want start", m.Stale, m.StaleReason)
	}
	if m := send(1, 0, 2); !m.Stale || m.StaleReason != "start" {
		t.Fatalf("rank 1's first batch: stale %v (%s), want start", m.Stale, m.StaleReason)
	}
	for seq := uint64(1); seq < 5; seq++ {
		for _, rank := range []int64{0, 1} {
			if m := send(rank, seq, 3); m.Stale {
				t.Fatalf("rank %d seq %d: stale (%s)", rank, seq, m.StaleReason)
			}
		}
	}
	if n := s.m.gaps.Get(); n != 0 {
		t.Fatalf("%d gaps counted for interleaved ranks", n)
	}
	if m := send(1, 7, 4); !m.Stale || m.StaleReason != "gap" {
		t.Fatalf("rank 1 skipping seq 5-6: stale %v (%s), want gap", m.Stale, m.StaleReason)
	}
	if m := send(0, 5, 5); m.Stale {
		t.Fatalf("rank 0 after rank 1's gap: stale (%s)", m.StaleReason)
	}
	if m := send(0, 0, 6); !m.Stale || m.StaleReason != "reset" {
		t.Fatalf("rank 0 starting over: stale %v (%s), want reset", m.Stale, m.StaleReason)
	}
	// A batch that cannot be read may be either rank's: both are stale
	// after it, and neither counts a gap for it.
	gaps := s.m.gaps.Get()
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], 1)
	if s.handle(context.Background(), [][]byte{[]byte(topic), sb[:], {0xc1}}) {
		t.Fatal("an unreadable batch was taken")
	}
	if m := send(0, 2, 7); !m.Stale || m.StaleReason != "dropped" {
		t.Fatalf("rank 0 after an unreadable batch: stale %v (%s), want dropped", m.Stale, m.StaleReason)
	}
	if m := send(1, 8, 8); !m.Stale || m.StaleReason != "dropped" {
		t.Fatalf("rank 1 after an unreadable batch: stale %v (%s), want dropped", m.Stale, m.StaleReason)
	}
	if got := s.m.gaps.Get(); got != gaps {
		t.Fatalf("gaps %d → %d over an unreadable batch", gaps, got)
	}
}

// FuzzSubscriberHandle: any run of messages (topics, data-parallel
// ranks, sequence numbers, payloads good or not) is taken without a
// panic; sources stay within MaxSources; what is delivered carries its
// topic; and a batch that follows its rank's previous one without a gap
// or a bad frame between is not stale.
func FuzzSubscriberHandle(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1, 2, 5, 3, 0})
	f.Add([]byte{1, 2, 7, 0, 1, 2, 8, 1, 1, 2, 8, 1, 1, 0, 0, 2})
	f.Fuzz(func(t *testing.T, in []byte) {
		cfg := DefaultConfig()
		cfg.Endpoint = "tcp://127.0.0.1:0"
		cfg.Bind = true
		cfg.MaxSources = 4
		ch := make(chan Message, 1024)
		s, err := New(cfg, ch, quiet, metrics.NewSet())
		if err != nil {
			t.Fatal(err)
		}
		enc := NewEncoder()
		topics := []string{"kv@a:1@m", "kv@b:1@m", "kv@c:1@m"}
		type key struct {
			topic string
			rank  int64
		}
		last := map[key]uint64{} // the last seq delivered since a clean run began
		clean := map[key]bool{}
		for len(in) >= 4 {
			topic, rank, seq, kind := topics[int(in[0])%len(topics)], int64(in[1]%5)-1, uint64(in[2]%16), in[3]%3
			in = in[4:]
			b := marker(1)
			if rank >= 0 {
				b.DPRank = Some(rank)
			}
			payload := must(enc.Append(nil, &b))
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], seq)
			frames := [][]byte{[]byte(topic), sb[:], payload}
			switch kind {
			case 1:
				frames[2] = []byte{0xc1} // not msgpack
			case 2:
				frames = frames[:2] // not three frames
			}
			k := key{topic, max(rank, 0)}
			ok := s.handle(context.Background(), frames)
			if kind != 0 {
				if ok {
					t.Fatal("a bad message was taken")
				}
				for kk := range clean {
					if kk.topic == topic {
						clean[kk] = false // any of its ranks may have missed it
					}
				}
				continue
			}
			if !ok {
				if len(s.sources) < cfg.MaxSources {
					t.Fatal("a good batch of a new source was refused below MaxSources")
				}
				continue
			}
			m := <-ch
			if m.Source != topic || m.Topic != topic {
				t.Fatalf("delivered as %q/%q, sent as %q", m.Source, m.Topic, topic)
			}
			if prev, seen := last[k]; seen && clean[k] && seq == prev+1 && m.Stale {
				t.Fatalf("%v seq %d after %d: stale (%s)", k, seq, prev, m.StaleReason)
			}
			last[k], clean[k] = seq, true
		}
		if len(s.sources) > cfg.MaxSources {
			t.Fatalf("%d sources, bound %d", len(s.sources), cfg.MaxSources)
		}
	})
}
