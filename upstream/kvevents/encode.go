package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoder writes batches as vLLM does, in the batch's Encoding, each
// hash in the form it holds. Not safe for concurrent use.
type Encoder struct {
	buf bytes.Buffer
	e   *msgpack.Encoder
}

// NewEncoder returns an encoder.
func NewEncoder() *Encoder {
	enc := &Encoder{}
	enc.e = msgpack.NewEncoder(&enc.buf)
	return enc
}

// Append appends b's payload to dst. A BlockStored event is written with
// every field vLLM writes without a default (parent_block_hash, lora_id,
// medium, lora_name: nil when absent); extra_keys and group_idx, which
// have one, only when set (msgspec's omit_defaults): extra_keys as the
// first block's strings (Event.Extra), the other blocks' entries nil.
func (enc *Encoder) Append(dst []byte, b *Batch) ([]byte, error) {
	enc.buf.Reset()
	if err := enc.batch(b); err != nil {
		return dst, fmt.Errorf("cannot encode a KV event batch: %w", err)
	}
	return append(dst, enc.buf.Bytes()...), nil
}

func (enc *Encoder) batch(b *Batch) error {
	e := enc.e
	mapped := b.Encoding == MapEncoding
	n := 2
	if b.DPRank.OK {
		n = 3
	}
	if mapped {
		if err := e.EncodeMapLen(n); err != nil {
			return err
		}
		if err := e.EncodeString("ts"); err != nil {
			return err
		}
	} else if err := e.EncodeArrayLen(n); err != nil {
		return err
	}
	if err := e.EncodeFloat64(b.TS); err != nil {
		return err
	}
	if mapped {
		if err := e.EncodeString("events"); err != nil {
			return err
		}
	}
	if err := e.EncodeArrayLen(len(b.Events)); err != nil {
		return err
	}
	for i := range b.Events {
		if err := enc.event(&b.Events[i], mapped); err != nil {
			return err
		}
	}
	if b.DPRank.OK {
		if mapped {
			if err := e.EncodeString("data_parallel_rank"); err != nil {
				return err
			}
		}
		return e.EncodeInt(b.DPRank.V)
	}
	return nil
}

func (enc *Encoder) event(ev *Event, mapped bool) error {
	var names []string
	switch ev.Kind {
	case BlockStored:
		names = storedFields[:7] // through lora_name
		switch {
		case ev.GroupIdx.OK:
			names = storedFields // extra_keys then group_idx
		case len(ev.Extra) > 0:
			names = storedFields[:8] // through extra_keys
		}
	case BlockRemoved:
		names = removedFields[:2]
		if ev.GroupIdx.OK {
			names = removedFields
		}
	case AllBlocksCleared:
	default:
		return fmt.Errorf("event of unknown kind %d", ev.Kind)
	}
	e := enc.e
	if mapped {
		n := 1 + len(names)
		if ev.Kind == BlockStored && ev.GroupIdx.OK && len(ev.Extra) == 0 {
			n-- // a nil extra_keys is omitted in a map
		}
		if err := e.EncodeMapLen(n); err != nil {
			return err
		}
		if err := e.EncodeString("type"); err != nil {
			return err
		}
	} else if err := e.EncodeArrayLen(1 + len(names)); err != nil {
		return err
	}
	if err := e.EncodeString(ev.Kind.String()); err != nil {
		return err
	}
	for _, name := range names {
		if mapped && name == "extra_keys" && len(ev.Extra) == 0 {
			continue
		}
		if mapped {
			if err := e.EncodeString(name); err != nil {
				return err
			}
		}
		if err := enc.field(ev, name); err != nil {
			return err
		}
	}
	return nil
}

func (enc *Encoder) field(ev *Event, name string) error {
	e := enc.e
	switch name {
	case "block_hashes":
		if err := e.EncodeArrayLen(len(ev.Hashes)); err != nil {
			return err
		}
		for _, h := range ev.Hashes {
			if err := enc.hash(h); err != nil {
				return err
			}
		}
		return nil
	case "parent_block_hash":
		if !ev.Parent.OK {
			return e.EncodeNil()
		}
		return enc.hash(ev.Parent.V)
	case "token_ids":
		if err := e.EncodeArrayLen(len(ev.Tokens)); err != nil {
			return err
		}
		for _, t := range ev.Tokens {
			if err := e.EncodeInt(int64(t)); err != nil {
				return err
			}
		}
		return nil
	case "block_size":
		return e.EncodeInt(int64(ev.BlockSize))
	case "lora_id":
		return optInt(e, ev.LoRAID)
	case "medium":
		return optStr(e, ev.Medium)
	case "lora_name":
		return optStr(e, ev.LoRAName)
	case "extra_keys":
		// The first block's strings; the others' entries nil.
		if len(ev.Extra) == 0 {
			return e.EncodeNil()
		}
		if err := e.EncodeArrayLen(max(len(ev.Hashes), 1)); err != nil {
			return err
		}
		if err := e.EncodeArrayLen(len(ev.Extra)); err != nil {
			return err
		}
		for _, x := range ev.Extra {
			if err := e.EncodeString(x); err != nil {
				return err
			}
		}
		for range len(ev.Hashes) - 1 {
			if err := e.EncodeNil(); err != nil {
				return err
			}
		}
		return nil
	case "group_idx":
		return optInt(e, ev.GroupIdx)
	}
	panic("BUG: kvevents: no encoder for field " + name)
}

func (enc *Encoder) hash(h Hash) error {
	if v, ok := h.Int(); ok {
		return enc.e.EncodeUint(v)
	}
	return enc.e.EncodeBytes(h.b[:h.n])
}

func optInt(e *msgpack.Encoder, v Opt[int64]) error {
	if !v.OK {
		return e.EncodeNil()
	}
	return e.EncodeInt(v.V)
}

func optStr(e *msgpack.Encoder, v Opt[string]) error {
	if !v.OK {
		return e.EncodeNil()
	}
	return e.EncodeString(v.V)
}
