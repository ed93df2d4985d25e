package vllmsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/upstream/kvevents"
)

// KVEventsConfig is vLLM's --kv-events-config for the simulator: when
// Enable, the scheduler publishes a batch per step in which its cache
// stored a computed block (BlockStored: the blocks' hashes, the parent's,
// the token ids they hold, block_size), evicted one (BlockRemoved), or
// was reset (AllBlocksCleared, POST /reset_prefix_cache). Block hashes
// are the simulator's own chained block keys (tree.BlockKeys or
// tree.ByteBlockKeys of the served name); token ids are the prompt's
// (byte-block mode: its pseudo-ids, 4 bytes of text each, little-endian,
// as /tokenize shows them).
type KVEventsConfig struct {
	// Enable turns publishing on (vLLM's enable_kv_cache_events).
	Enable bool
	// Endpoint is the PUB socket's: with * or :: it binds (vLLM's
	// default tcp://*:5557), else it connects to a router that binds
	// (llm-d's wiring).
	Endpoint string
	// Bind binds Endpoint whatever it is (tests: tcp://127.0.0.1:0).
	Bind bool
	// Topic is each message's topic (vLLM's default ""; llm-d's wiring
	// names the engine: kv@<ip>:<port>@<model>).
	Topic string
	// HashForm is "bytes" (32 bytes: sha256 of the block key, as vLLM
	// ≥ 0.10 sends its sha256 hashes; the default) or "int" (the 64-bit
	// key itself, as older vLLM sent ints).
	HashForm string
	// Encoding is "map" (vLLM since PR #42892; the default) or "array"
	// (msgspec's array_like, older vLLM).
	Encoding string
	// Queue bounds the batches waiting to be sent (default 1,024): past
	// it one is dropped, counted (vllmsim_kv_events_dropped_total), and
	// its sequence number skipped so subscribers see the gap. The
	// scheduler never waits for a subscriber.
	Queue int
	// ReplayEndpoint, when not "", binds a replay socket there (vLLM's
	// replay_endpoint, e.g. tcp://*:5558; tcp://127.0.0.1:0 in tests):
	// a subscriber that missed batches asks it for them. Default: none.
	ReplayEndpoint string
	// ReplayBuffer bounds the batches kept for replay (default 10,000,
	// vLLM's buffer_steps).
	ReplayBuffer int
	// LoseEvery, when N > 0, does not send one batch in N on the PUB
	// socket (those whose sequence number is N-1 modulo N) but keeps it
	// for replay: fault injection, to see a router's gap handling.
	// Default 0: none lost.
	LoseEvery int
}

// DefaultKVEventsEndpoint is vLLM's default publisher endpoint.
const DefaultKVEventsEndpoint = "tcp://*:5557"

func (k KVEventsConfig) validate() error {
	if !k.Enable {
		return nil
	}
	switch k.HashForm {
	case "", "bytes", "int":
	default:
		return fmt.Errorf("vllmsim: kv-events-hash: must be bytes or int, got %q", k.HashForm)
	}
	switch k.Encoding {
	case "", "map", "array":
	default:
		return fmt.Errorf("vllmsim: kv-events-encoding: must be map or array, got %q", k.Encoding)
	}
	if k.Queue < 0 {
		return fmt.Errorf("vllmsim: kv-events-queue: must be ≥ 0, got %d", k.Queue)
	}
	if k.ReplayBuffer < 0 || k.ReplayBuffer > 100_000 {
		return fmt.Errorf("vllmsim: kv-events-replay-buffer: must be 0 to 100000, got %d", k.ReplayBuffer)
	}
	if k.LoseEvery < 0 {
		return fmt.Errorf("vllmsim: kv-events-lose-every: must be ≥ 0, got %d", k.LoseEvery)
	}
	if k.ReplayEndpoint != "" {
		if err := (kvevents.PublisherConfig{Endpoint: k.ReplayEndpoint}).Validate(); err != nil {
			return fmt.Errorf("vllmsim: kv-events-replay: %w", err)
		}
	}
	if k.Endpoint != "" {
		if err := (kvevents.PublisherConfig{Endpoint: k.Endpoint, Topic: k.Topic}).Validate(); err != nil {
			return fmt.Errorf("vllmsim: kv-events-endpoint: %w", err)
		}
	}
	return nil
}

func (k KVEventsConfig) publisherConfig() kvevents.PublisherConfig {
	pc := kvevents.PublisherConfig{Endpoint: k.Endpoint, Bind: k.Bind, Topic: k.Topic, Encoding: kvevents.MapEncoding, Queue: k.Queue,
		ReplayEndpoint: k.ReplayEndpoint, ReplayBuffer: k.ReplayBuffer, LoseEvery: k.LoseEvery}
	if pc.Endpoint == "" {
		pc.Endpoint = DefaultKVEventsEndpoint
	}
	if k.Encoding == "array" {
		pc.Encoding = kvevents.ArrayEncoding
	}
	return pc
}

// kvEvents collects one step's events and publishes them as a batch.
// Owned by the scheduler goroutine; nil when publishing is off (every
// method is then a no-op).
type kvEvents struct {
	pub       *kvevents.Publisher
	dropped   *metrics.Counter // vllmsim_kv_events_dropped_total
	ints      bool
	blockSize int
	pending   []kvevents.Event
}

func (k *kvEvents) hash(key uint64) kvevents.Hash {
	if k.ints {
		return kvevents.IntHash(key)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], key)
	sum := sha256.Sum256(b[:])
	h, _ := kvevents.BytesHash(sum[:]) // 32 bytes: always a hash
	return h
}

// stored records that keys[from:to] of a prompt became computed blocks;
// ids are the prompt's token ids, lora the adapter's name or "", salt the
// request's cache_salt or "". As vLLM, the first block's extra_keys hold
// the adapter's name, then the salt when it begins the chain.
func (k *kvEvents) stored(keys []uint64, from, to int, ids []int32, lora, salt string) {
	if k == nil || from >= to {
		return
	}
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: k.blockSize, Medium: kvevents.Some("GPU"),
		Hashes: make([]kvevents.Hash, 0, to-from), Tokens: make([]uint32, 0, (to-from)*k.blockSize)}
	if from > 0 {
		ev.Parent = kvevents.Some(k.hash(keys[from-1]))
	}
	if lora != "" {
		ev.LoRAName = kvevents.Some(lora)
		ev.Extra = append(ev.Extra, lora)
	}
	if salt != "" && from == 0 {
		ev.Extra = append(ev.Extra, salt)
	}
	for i := from; i < to; i++ {
		ev.Hashes = append(ev.Hashes, k.hash(keys[i]))
	}
	for _, id := range ids[from*k.blockSize : to*k.blockSize] {
		ev.Tokens = append(ev.Tokens, uint32(id)) // a byte-block pseudo-id keeps its 32 bits
	}
	k.pending = append(k.pending, ev)
}

// removed records evicted blocks.
func (k *kvEvents) removed(key uint64) {
	if k == nil {
		return
	}
	if n := len(k.pending); n > 0 && k.pending[n-1].Kind == kvevents.BlockRemoved {
		k.pending[n-1].Hashes = append(k.pending[n-1].Hashes, k.hash(key))
		return
	}
	k.pending = append(k.pending, kvevents.Event{Kind: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
		Hashes: []kvevents.Hash{k.hash(key)}})
}

func (k *kvEvents) cleared() {
	if k == nil {
		return
	}
	k.pending = append(k.pending, kvevents.Event{Kind: kvevents.AllBlocksCleared})
}

// flush publishes the step's events, if any, as one batch.
func (k *kvEvents) flush() {
	if k == nil || len(k.pending) == 0 {
		return
	}
	if !k.pub.Publish(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: k.pending, DPRank: kvevents.Some[int64](0)}) {
		k.dropped.Inc()
	}
	k.pending = nil // the publisher's now
}
