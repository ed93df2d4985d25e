package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is an event's type, the tag vLLM writes (its class name).
type Kind uint8

// The event kinds vLLM publishes (vllm/distributed/kv_events.py). Unknown
// is a tag this package does not know: the event is skipped, counted.
const (
	Unknown Kind = iota
	BlockStored
	BlockRemoved
	AllBlocksCleared
)

var kindTags = [...]string{Unknown: "", BlockStored: "BlockStored", BlockRemoved: "BlockRemoved", AllBlocksCleared: "AllBlocksCleared"}

// String is the kind's wire tag ("unknown" for Unknown).
func (k Kind) String() string {
	if k == Unknown || int(k) >= len(kindTags) {
		return "unknown"
	}
	return kindTags[k]
}

func kindOf(tag string) Kind {
	for k, t := range kindTags {
		if k != int(Unknown) && t == tag {
			return Kind(k)
		}
	}
	return Unknown
}

// Encoding is how a batch is laid out: vLLM wrote msgspec's array_like
// structs (a batch [ts, events, dp_rank], an event [tag, fields...]) until
// its PR #42892 made them maps keyed by field name, the tag under "type".
type Encoding uint8

// The two encodings.
const (
	ArrayEncoding Encoding = iota
	MapEncoding
)

// MaxHashBytes is the longest block hash in bytes form: vLLM's are
// sha256 digests (32 bytes); a longer one is refused as malformed.
const MaxHashBytes = 32

// Hash is an engine's block hash as it sent it: an int (vLLM before its
// sha256 hashes, and engines configured so) or up to MaxHashBytes bytes
// (a msgpack bin or str). It is comparable, so it keys a map as is, and
// holds no pointer. An int is kept as its 64 bits: a negative int64 and
// the uint64 of the same bits are the same hash.
type Hash struct {
	b     [MaxHashBytes]byte // bytes form: the bytes; int form: the int, big-endian, in b[:8]
	n     uint8              // bytes form: len
	isInt bool
}

// IntHash is the hash an engine sent as an int.
func IntHash(v uint64) Hash {
	h := Hash{isInt: true}
	for i := range 8 {
		h.b[i] = byte(v >> (56 - 8*i))
	}
	return h
}

// BytesHash is the hash an engine sent as bytes; false if b is longer
// than MaxHashBytes.
func BytesHash(b []byte) (Hash, bool) {
	var h Hash
	if len(b) > MaxHashBytes {
		return h, false
	}
	h.n = uint8(copy(h.b[:], b))
	return h, true
}

// AsInt is the int form vLLM gives a bytes hash when it publishes ints
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, its default: the bytes as a
// big-endian integer, its low 64 bits): its offloading connector sends
// the bytes of the same blocks whose GPU events carried ints. False for
// a hash sent as an int.
func (h Hash) AsInt() (Hash, bool) {
	if h.isInt {
		return h, false
	}
	var v uint64
	for _, c := range h.b[:h.n] {
		v = v<<8 | uint64(c)
	}
	return IntHash(v), true
}

// Int returns the hash's int and true if it was sent as an int.
func (h Hash) Int() (uint64, bool) {
	if !h.isInt {
		return 0, false
	}
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(h.b[i])
	}
	return v, true
}

// Bytes returns the hash's bytes (nil for an int hash), a copy.
func (h Hash) Bytes() []byte {
	if h.isInt {
		return nil
	}
	return bytes.Clone(h.b[:h.n])
}

// String is the hash in hex, an int one in decimal with a # prefix.
func (h Hash) String() string {
	if v, ok := h.Int(); ok {
		return fmt.Sprintf("#%d", v)
	}
	return hex.EncodeToString(h.b[:h.n])
}

// Opt is an optional field: vLLM's `X | None`.
type Opt[T any] struct {
	V  T
	OK bool // false: absent or nil
}

// Some is a present optional value.
func Some[T any](v T) Opt[T] { return Opt[T]{V: v, OK: true} }

// Event is one KV-cache event. Which fields mean something depends on
// Kind: BlockStored uses them all; BlockRemoved Hashes, Medium and
// GroupIdx; AllBlocksCleared none.
type Event struct {
	Kind Kind
	// Hashes are the blocks stored or removed, in chain order for
	// BlockStored (each one's parent is the one before it).
	Hashes []Hash
	// Parent is the block the first of Hashes follows (BlockStored); none
	// for a chain's first block.
	Parent Opt[Hash]
	// Tokens are the token ids of the stored blocks, BlockSize a block,
	// len(Hashes)*BlockSize in all (BlockStored; the consumer checks).
	// None when the event records another copy of blocks stored before
	// (vLLM's offloading connector: blocks copied to a CPU tier, no
	// parent, BlockSize its own block, several of the GPU's, or 0).
	// uint32: vLLM's ids are below 2^31, the simulator's byte-block
	// pseudo-ids (4 bytes of text each) use all 32 bits.
	Tokens    []uint32
	BlockSize int
	LoRAID    Opt[int64]  // deprecated by vLLM for LoRAName; kept as sent
	Medium    Opt[string] // "GPU", "CPU", …: where the blocks live
	LoRAName  Opt[string] // the adapter the blocks were computed with
	GroupIdx  Opt[int64]  // the KV-cache group (hybrid models)
	// Extra are the strings of the first stored block's extra_keys entry,
	// in order (vLLM's: the adapter's name, multimodal identifiers, then
	// a chain's first block's cache_salt), at most maxExtra, each at most
	// maxString bytes (a longer one is left out); nil for none.
	// BlockStored only.
	Extra []string
}

// maxExtra bounds Event.Extra.
const maxExtra = 8

// Batch is one published message's payload: vLLM's KVEventBatch.
type Batch struct {
	TS       float64 // the engine's wall clock, seconds since the epoch
	Events   []Event
	DPRank   Opt[int64] // data-parallel rank of the publishing engine
	Encoding Encoding   // as it was received; what Append writes
}

// Limits bound what one payload may hold; Decode refuses a payload
// past any of them (ErrOverLimit, or ErrOversize for the bytes).
type Limits struct {
	// MaxPayload is the most bytes of one batch (default 4 MiB: a step
	// storing 131,072 tokens' blocks is ≈ 0.7 MiB).
	MaxPayload int
	// MaxEvents is the most events of one batch (default 4,096: vLLM
	// batches a scheduler step's events, about one per request).
	MaxEvents int
	// MaxHashes is the most block hashes of one event (default 8,192:
	// a step's blocks of one request, 131,072 tokens of 16-token blocks).
	MaxHashes int
	// MaxTokens is the most token ids of one event (default 131,072).
	MaxTokens int
}

// DefaultLimits are the defaults above.
func DefaultLimits() Limits {
	return Limits{
		MaxPayload: 4 << 20, // 4 MiB
		MaxEvents:  4096,
		MaxHashes:  8192,
		MaxTokens:  131072,
	}
}

// Validate names the first field that is out of range.
func (l Limits) Validate() error {
	switch {
	case l.MaxPayload < 64 || l.MaxPayload > MaxFrame:
		return fmt.Errorf("kvevents: MaxPayload %d out of range [64, %d]", l.MaxPayload, MaxFrame)
	case l.MaxEvents < 1:
		return fmt.Errorf("kvevents: MaxEvents %d < 1", l.MaxEvents)
	case l.MaxHashes < 1:
		return fmt.Errorf("kvevents: MaxHashes %d < 1", l.MaxHashes)
	case l.MaxTokens < 1:
		return fmt.Errorf("kvevents: MaxTokens %d < 1", l.MaxTokens)
	}
	return nil
}

// The reasons Decode refuses a payload; errors.Is finds them in its
// error, and Reason names them for metrics.
var (
	ErrOversize  = errors.New("kvevents: payload over MaxPayload")
	ErrOverLimit = errors.New("kvevents: batch over a limit")
	ErrMalformed = errors.New("kvevents: malformed batch")
)

// Reason is the metric label of a Decode error: oversize, over_limit or
// malformed.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrOversize):
		return "oversize"
	case errors.Is(err, ErrOverLimit):
		return "over_limit"
	default:
		return "malformed"
	}
}

// maxSkipDepth bounds the nesting of values Decode skips (fields it does
// not use, such as extra_keys): msgpack's own Skip recurses without a
// bound, and a payload of nested one-byte arrays would recurse a million
// deep.
const maxSkipDepth = 8

// Decoder decodes payloads, reusing its reader. Not safe for concurrent
// use: one per subscription goroutine.
type Decoder struct {
	lim Limits
	r   bytes.Reader
	d   *msgpack.Decoder
}

// NewDecoder returns a decoder that enforces lim (validated by the caller).
func NewDecoder(lim Limits) *Decoder {
	return &Decoder{lim: lim, d: msgpack.NewDecoder(nil)}
}

// Decode decodes payload into a new Batch, in either encoding, with
// block hashes in either form. A payload past a limit, malformed, or
// with trailing bytes is refused whole: a consumer that applied part of
// a batch would hold a view no engine had. Events of an unknown kind are
// kept with Kind Unknown and no fields (a newer vLLM's). Nothing of
// payload is retained.
func (dec *Decoder) Decode(payload []byte) (Batch, error) {
	var b Batch
	if len(payload) > dec.lim.MaxPayload {
		return b, fmt.Errorf("%w: %d bytes", ErrOversize, len(payload))
	}
	dec.r.Reset(payload)
	dec.d.Reset(&dec.r)
	if err := dec.batch(&b); err != nil {
		if errors.Is(err, ErrOverLimit) {
			return Batch{}, err
		}
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if dec.r.Len() != 0 {
		return Batch{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, dec.r.Len())
	}
	return b, nil
}

func (dec *Decoder) peek() (byte, error) { return dec.d.PeekCode() }

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

func (dec *Decoder) batch(b *Batch) error {
	c, err := dec.peek()
	if err != nil {
		return err
	}
	switch {
	case isArray(c):
		b.Encoding = ArrayEncoding
		n, err := dec.d.DecodeArrayLen()
		if err != nil {
			return err
		}
		if n < 2 {
			return fmt.Errorf("batch array of %d fields, want ≥ 2", n)
		}
		if b.TS, err = dec.float(); err != nil {
			return fmt.Errorf("ts: %w", err)
		}
		if b.Events, err = dec.events(); err != nil {
			return err
		}
		if n >= 3 {
			if b.DPRank, err = dec.optInt(); err != nil {
				return fmt.Errorf("data_parallel_rank: %w", err)
			}
		}
		return dec.skipN(n-3, 0)
	case isMap(c):
		b.Encoding = MapEncoding
		n, err := dec.d.DecodeMapLen()
		if err != nil {
			return err
		}
		var ts, events bool
		for range n {
			k, err := dec.key()
			if err != nil {
				return err
			}
			switch k {
			case "ts":
				ts = true
				if b.TS, err = dec.float(); err != nil {
					return fmt.Errorf("ts: %w", err)
				}
			case "events":
				events = true
				if b.Events, err = dec.events(); err != nil {
					return err
				}
			case "data_parallel_rank":
				if b.DPRank, err = dec.optInt(); err != nil {
					return fmt.Errorf("data_parallel_rank: %w", err)
				}
			default:
				err = dec.skip(0)
			}
			if err != nil {
				return err
			}
		}
		if !ts || !events {
			return errors.New("batch map without ts or events")
		}
		return nil
	}
	return fmt.Errorf("batch is neither an array nor a map (code %#x)", c)
}

func (dec *Decoder) events() ([]Event, error) {
	n, err := dec.d.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if n < 0 {
		return nil, errors.New("events: nil")
	}
	if n > dec.lim.MaxEvents {
		return nil, fmt.Errorf("%w: %d events, MaxEvents %d", ErrOverLimit, n, dec.lim.MaxEvents)
	}
	evs := make([]Event, 0, min(n, 64)) // grows with what is really there
	for i := range n {
		var e Event
		if err := dec.event(&e); err != nil {
			if errors.Is(err, ErrOverLimit) {
				return nil, err
			}
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

func (dec *Decoder) event(e *Event) error {
	c, err := dec.peek()
	if err != nil {
		return err
	}
	if isArray(c) {
		n, err := dec.d.DecodeArrayLen()
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("event array without a tag")
		}
		tag, err := dec.str()
		if err != nil {
			return fmt.Errorf("tag: %w", err)
		}
		e.Kind = kindOf(tag)
		var names []string
		switch e.Kind {
		case BlockStored:
			names = storedFields
			if n < 5 {
				return fmt.Errorf("BlockStored array of %d fields, want ≥ 5", n)
			}
		case BlockRemoved:
			names = removedFields
			if n < 2 {
				return fmt.Errorf("BlockRemoved array of %d fields, want ≥ 2", n)
			}
		}
		i := 1
		for ; i < n && i-1 < len(names); i++ {
			if err := dec.field(e, names[i-1]); err != nil {
				return err
			}
		}
		if e.Kind == BlockStored && e.BlockSize == 0 && len(e.Tokens) > 0 {
			return errors.New("BlockStored of token ids with block_size 0")
		}
		return dec.skipN(n-i, 0)
	}
	if !isMap(c) {
		return fmt.Errorf("event is neither an array nor a map (code %#x)", c)
	}
	n, err := dec.d.DecodeMapLen()
	if err != nil {
		return err
	}
	var ev Event // fields first, kept if the tag is known
	tagged := false
	for range n {
		k, err := dec.key()
		if err != nil {
			return err
		}
		if k == "type" {
			tag, err := dec.str()
			if err != nil {
				return fmt.Errorf("type: %w", err)
			}
			ev.Kind, tagged = kindOf(tag), true
			continue
		}
		if err := dec.field(&ev, k); err != nil {
			return err
		}
	}
	if !tagged {
		return errors.New("event map without a type")
	}
	switch ev.Kind {
	case BlockStored:
		if ev.Hashes == nil || ev.Tokens == nil || (ev.BlockSize == 0 && len(ev.Tokens) > 0) {
			return errors.New("BlockStored without block_hashes, token_ids or block_size")
		}
	case BlockRemoved:
		if ev.Hashes == nil {
			return errors.New("BlockRemoved without block_hashes")
		}
		ev = Event{Kind: BlockRemoved, Hashes: ev.Hashes, Medium: ev.Medium, GroupIdx: ev.GroupIdx}
	default:
		ev = Event{Kind: ev.Kind}
	}
	*e = ev
	return nil
}

// The fields of each kind in vLLM's order (its array form); a field past
// them is skipped. Of BlockStored's extra_keys only the first block's
// strings are decoded (Event.Extra).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

// field decodes the value of the field named name into e; a name it does
// not know, or a field of an unknown kind's array, is skipped.
func (dec *Decoder) field(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		e.Hashes, err = dec.hashes()
	case "parent_block_hash":
		e.Parent, err = dec.parentHash()
	case "token_ids":
		e.Tokens, err = dec.tokens()
	case "block_size":
		var v int64
		v, err = dec.int()
		if err == nil && (v < 0 || v > maxBlockSize) {
			err = fmt.Errorf("block_size %d out of range [0, %d]", v, maxBlockSize)
		}
		e.BlockSize = int(v)
	case "lora_id":
		e.LoRAID, err = dec.optInt()
	case "medium":
		e.Medium, err = dec.optStr()
	case "lora_name":
		e.LoRAName, err = dec.optStr()
	case "group_idx":
		e.GroupIdx, err = dec.optInt()
	case "extra_keys":
		e.Extra, err = dec.extra()
	default:
		return dec.skip(0)
	}
	if err != nil && !errors.Is(err, ErrOverLimit) {
		err = fmt.Errorf("%s: %w", name, err)
	}
	return err
}

// extra reads extra_keys (nil, or a list with, per block, a tuple or
// nil) into Event.Extra: the strings of the first block's tuple; the
// rest is skipped.
func (dec *Decoder) extra() ([]string, error) {
	if isnil, err := dec.isNil(); isnil || err != nil {
		return nil, err
	}
	n, err := dec.d.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	var out []string
	for i := range n {
		c, err := dec.peekMore()
		if err != nil {
			return nil, err
		}
		if i > 0 || !isArray(c) {
			if err := dec.skip(1); err != nil {
				return nil, err
			}
			continue
		}
		m, err := dec.d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		for range m {
			c, err := dec.peekMore()
			if err != nil {
				return nil, err
			}
			if !msgpcode.IsString(c) {
				if err := dec.skip(2); err != nil {
					return nil, err
				}
				continue
			}
			l, err := dec.d.DecodeBytesLen()
			if err != nil {
				return nil, err
			}
			if l < 0 || l > dec.r.Len() {
				return nil, fmt.Errorf("extra key string of %d bytes", l)
			}
			if l > maxString || len(out) == maxExtra {
				if _, err := dec.r.Seek(int64(l), io.SeekCurrent); err != nil {
					return nil, err
				}
				continue
			}
			buf := make([]byte, l)
			if _, err := io.ReadFull(&dec.r, buf); err != nil {
				return nil, err
			}
			out = append(out, string(buf))
		}
	}
	return out, nil
}

// peekMore is peek for the next of a container's declared values: a
// declared length past the payload ends in io.ErrUnexpectedEOF.
func (dec *Decoder) peekMore() (byte, error) {
	if dec.r.Len() == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	return dec.peek()
}

// maxBlockSize bounds block_size: vLLM's largest is a few hundred tokens.
const maxBlockSize = 1 << 16

func (dec *Decoder) hashes() ([]Hash, error) {
	n, err := dec.d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errors.New("nil")
	}
	if n > dec.lim.MaxHashes {
		return nil, fmt.Errorf("%w: %d block hashes, MaxHashes %d", ErrOverLimit, n, dec.lim.MaxHashes)
	}
	hs := make([]Hash, 0, min(n, dec.r.Len())) // each takes ≥ 1 byte
	for range n {
		h, err := dec.hash()
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func (dec *Decoder) hash() (Hash, error) {
	c, err := dec.peek()
	if err != nil {
		return Hash{}, err
	}
	switch {
	case c == msgpcode.Uint64:
		v, err := dec.d.DecodeUint64()
		return IntHash(v), err
	case isInt(c):
		v, err := dec.d.DecodeInt64()
		return IntHash(uint64(v)), err
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		n, err := dec.d.DecodeBytesLen()
		if err != nil {
			return Hash{}, err
		}
		if n < 0 || n > MaxHashBytes {
			return Hash{}, fmt.Errorf("block hash of %d bytes, at most %d", n, MaxHashBytes)
		}
		var h Hash
		h.n = uint8(n)
		_, err = io.ReadFull(&dec.r, h.b[:n])
		return h, err
	}
	return Hash{}, fmt.Errorf("block hash is neither an int nor bytes (code %#x)", c)
}

// parentHash is a BlockStored's parent_block_hash: nil for a chain's
// first block, as vLLM sends it; the int 0 too, as llm-d-inference-sim
// sends it in the positional layout (its EmptyBlockHash, "no parent"; a
// real block's 64-bit hash is never 0 but by a 2^-64 chance, which then
// costs one block's chain).
func (dec *Decoder) parentHash() (Opt[Hash], error) {
	h, err := dec.optHash()
	if h.OK && h.V == IntHash(0) {
		return Opt[Hash]{}, err
	}
	return h, err
}

func (dec *Decoder) optHash() (Opt[Hash], error) {
	if isnil, err := dec.isNil(); isnil || err != nil {
		return Opt[Hash]{}, err
	}
	h, err := dec.hash()
	return Some(h), err
}

func (dec *Decoder) tokens() ([]uint32, error) {
	n, err := dec.d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errors.New("nil")
	}
	if n > dec.lim.MaxTokens {
		return nil, fmt.Errorf("%w: %d token ids, MaxTokens %d", ErrOverLimit, n, dec.lim.MaxTokens)
	}
	ts := make([]uint32, 0, min(n, dec.r.Len())) // each takes ≥ 1 byte
	for range n {
		v, err := dec.int()
		if err != nil {
			return nil, err
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("token id %d out of range", v)
		}
		ts = append(ts, uint32(v))
	}
	return ts, nil
}

func (dec *Decoder) isNil() (bool, error) {
	c, err := dec.peek()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, dec.d.DecodeNil()
}

func (dec *Decoder) int() (int64, error) {
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if !isInt(c) {
		return 0, fmt.Errorf("not an int (code %#x)", c)
	}
	if c == msgpcode.Uint64 {
		v, err := dec.d.DecodeUint64()
		if err == nil && v > math.MaxInt64 {
			err = fmt.Errorf("int %d out of range", v)
		}
		return int64(v), err
	}
	return dec.d.DecodeInt64()
}

func (dec *Decoder) optInt() (Opt[int64], error) {
	if isnil, err := dec.isNil(); isnil || err != nil {
		return Opt[int64]{}, err
	}
	v, err := dec.int()
	return Some(v), err
}

func (dec *Decoder) float() (float64, error) {
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("not a number (code %#x)", c)
	}
	return dec.d.DecodeFloat64()
}

// maxString bounds a string field (a tag, a key, a medium, an adapter
// name): none of vLLM's is longer than a model name.
const maxString = 1024

func (dec *Decoder) str() (string, error) {
	c, err := dec.peek()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("not a string (code %#x)", c)
	}
	n, err := dec.d.DecodeBytesLen()
	if err != nil {
		return "", err
	}
	if n > maxString || n > dec.r.Len() {
		return "", fmt.Errorf("string of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(&dec.r, buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

func (dec *Decoder) key() (string, error) {
	k, err := dec.str()
	if err != nil {
		return "", fmt.Errorf("map key: %w", err)
	}
	return k, nil
}

func (dec *Decoder) optStr() (Opt[string], error) {
	if isnil, err := dec.isNil(); isnil || err != nil {
		return Opt[string]{}, err
	}
	s, err := dec.str()
	return Some(s), err
}

// skip skips one value of any type, nesting at most maxSkipDepth deep.
func (dec *Decoder) skip(depth int) error {
	c, err := dec.peek()
	if err != nil {
		return err
	}
	switch {
	case isArray(c):
		n, err := dec.d.DecodeArrayLen()
		if err != nil {
			return err
		}
		return dec.skipN(n, depth+1)
	case isMap(c):
		n, err := dec.d.DecodeMapLen()
		if err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return errors.New("map too long")
		}
		return dec.skipN(2*n, depth+1)
	}
	return dec.d.Skip() // a scalar: Skip does not recurse
}

func (dec *Decoder) skipN(n, depth int) error {
	if depth > maxSkipDepth {
		return fmt.Errorf("values nested over %d deep", maxSkipDepth)
	}
	for range n {
		if dec.r.Len() == 0 {
			return io.ErrUnexpectedEOF // a length past the payload
		}
		if err := dec.skip(depth); err != nil {
			return err
		}
	}
	return nil
}

// MaxFrame is the largest ZMQ frame a connection accepts (16 MiB): the
// ZMQ library allocates a frame's declared size before reading it, so the
// transport (frame.go) refuses a larger declaration and drops the
// connection. Limits.MaxPayload is at most this.
const MaxFrame = 16 << 20
