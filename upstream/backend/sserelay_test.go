package backend

import (
	"bytes"
	"strings"
	"testing"
)

// relayAll feeds body to a relay in pieces cut at cuts and returns what
// it emitted, event by event.
func relayAll(h *Hooks, body []byte, cuts []int) ([][]byte, []byte) {
	r := newSSERelay(h, nil, 200)
	var out [][]byte
	emit := func(ev []byte) error { out = append(out, append([]byte(nil), ev...)); return nil }
	prev := 0
	for _, c := range cuts {
		if c > prev && c <= len(body) {
			_ = r.feed(body[prev:c], emit)
			prev = c
		}
	}
	_ = r.feed(body[prev:], emit)
	_ = r.flush(emit)
	return out, r.usage()
}

// TestSSERelay: events come out whole and in order however the reads cut
// them; an event over relayBufSize goes out in pieces; the usage chunk
// is dropped when asked, and its usage still seen.
func TestSSERelay(t *testing.T) {
	t.Parallel()
	usage := `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}` + "\n\n"
	body := "data: a\n\ndata: b\r\n\r\n" + usage + "data: [DONE]\n\n"
	for _, cuts := range [][]int{nil, {1}, {3, 9, 10, 11}, {len(body) - 1}} {
		out, u := relayAll(&Hooks{Usage: true}, []byte(body), cuts)
		if len(out) != 4 || string(out[0]) != "data: a\n\n" || string(out[1]) != "data: b\r\n\r\n" || string(out[3]) != "data: [DONE]\n\n" {
			t.Errorf("cuts %v: %q", cuts, out)
		}
		if !strings.Contains(string(u), `"cached_tokens":1`) {
			t.Errorf("cuts %v: usage %q", cuts, u)
		}
		out, u = relayAll(&Hooks{Usage: true, DropUsage: true}, []byte(body), cuts)
		if len(out) != 3 || bytes.Contains(bytes.Join(out, nil), []byte("usage")) || u == nil {
			t.Errorf("cuts %v, DropUsage: %q, usage %q", cuts, out, u)
		}
	}
	long := "data: " + strings.Repeat("x", 3*relayBufSize) + "\n\ndata: end\n\n"
	out, _ := relayAll(&Hooks{}, []byte(long), []int{100, 40000, 70000})
	if got := string(bytes.Join(out, nil)); got != long {
		t.Errorf("a long event: %d bytes out, want %d the same", len(got), len(long))
	}
	for _, ev := range out {
		if len(ev) > relayBufSize+100000 {
			t.Errorf("one emit of %d bytes", len(ev))
		}
	}
	if last := out[len(out)-1]; string(last) != "data: end\n\n" {
		t.Errorf("last event %q", last)
	}
}

// FuzzSSERelay: without DropUsage the relay emits exactly the bytes fed,
// however they are cut, and only whole events unless one is longer than
// relayBufSize or the body ends in the middle of one.
func FuzzSSERelay(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\ndata: [DONE]\n\n"), uint16(3), uint16(7))
	f.Add([]byte("data: a\r\rdata: b\n"), uint16(1), uint16(2))
	f.Fuzz(func(t *testing.T, body []byte, c1, c2 uint16) {
		cuts := []int{int(c1) % (len(body) + 1), int(c2) % (len(body) + 1)}
		if cuts[1] < cuts[0] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		out, _ := relayAll(&Hooks{}, body, cuts)
		whole, _ := relayAll(&Hooks{}, body, nil)
		if got := bytes.Join(out, nil); !bytes.Equal(got, body) {
			t.Fatalf("emitted %q, fed %q", got, body)
		}
		if len(body) < relayBufSize && len(out) != len(whole) {
			t.Fatalf("cut %v: %d emits, whole: %d", cuts, len(out), len(whole))
		}
	})
}
