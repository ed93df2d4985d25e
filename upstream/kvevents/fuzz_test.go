package kvevents

import (
	"math"
	"reflect"
	"testing"
)

// FuzzDecode: Decode never panics, and what it accepts (its events of
// known kinds) re-encodes to a payload that decodes to the same batch.
func FuzzDecode(f *testing.F) {
	enc := NewEncoder()
	for _, e := range []Encoding{ArrayEncoding, MapEncoding} {
		for _, hashOf := range []func(byte) Hash{sha, intHash} {
			b := sample(e, hashOf)
			f.Add(must(enc.Append(nil, &b)))
		}
	}
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Fuzz(func(t *testing.T, payload []byte) {
		lim := DefaultLimits()
		lim.MaxPayload = 1 << 16
		dec := NewDecoder(lim)
		b, err := dec.Decode(payload)
		if err != nil {
			if Reason(err) == "" {
				t.Fatal("no reason")
			}
			return
		}
		known := b.Events[:0:0]
		for _, e := range b.Events {
			if e.Kind != Unknown {
				known = append(known, e)
			}
		}
		b.Events = known
		again, err := enc.Append(nil, &b)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b2, err := dec.Decode(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if math.Float64bits(b.TS) != math.Float64bits(b2.TS) {
			t.Fatalf("ts %v → %v", b.TS, b2.TS)
		}
		b.TS, b2.TS = 0, 0
		if len(b.Events) == 0 && len(b2.Events) == 0 {
			b.Events, b2.Events = nil, nil
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", b2, b)
		}
	})
}
