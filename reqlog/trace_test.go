package reqlog

import (
	"encoding/hex"
	"strings"
	"testing"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	f := func(s string, ok bool) {
		t.Helper()
		tr, got := ParseTraceparent(s)
		if got != ok {
			t.Fatalf("ParseTraceparent(%q) ok = %v, want %v", s, got, ok)
		}
		if !ok && tr != (Trace{}) {
			t.Fatalf("ParseTraceparent(%q) = %+v on failure, want zero", s, tr)
		}
	}
	f(validTP, true)
	f("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true)
	f("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true)      // a later version: its first 55 characters
	f("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", true) // ... and more after a dash
	f("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01what", false) // ... but not glued on
	f("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", false)    // version 00: exactly 55
	f("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false)     // version ff is invalid
	f("00-00000000000000000000000000000000-00f067aa0ba902b7-01", false)     // zero trace id
	f("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false)     // zero parent
	f("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false)     // uppercase
	f("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false)     // not hex
	f("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false)     // separator
	f("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false)     // misplaced dash
	f(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false)    // whitespace is not ours to trim
	f("", false)
	f("00", false)

	tr, _ := ParseTraceparent(validTP)
	if got := string(tr.AppendID(nil)); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace id %q", got)
	}
	if got := string(tr.AppendParent(nil)); got != "00f067aa0ba902b7" {
		t.Fatalf("parent %q", got)
	}
	if !tr.Sampled() || tr.Flags != 1 {
		t.Fatalf("flags %x", tr.Flags)
	}
	if got := (Trace{}).AppendID([]byte("x")); string(got) != "x" {
		t.Fatalf("no trace appended %q", got)
	}
}

func TestParseTraceparentAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseTraceparent(validTP) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FuzzParseTraceparent checks ParseTraceparent against the spec's grammar
// written another way: whatever it accepts re-encodes to the input's
// first 55 characters, with lowercase hex and non-zero ids.
func FuzzParseTraceparent(f *testing.F) {
	for _, s := range []string{validTP, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", "00-", strings.Repeat("0", 55)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tr, ok := ParseTraceparent(s)
		if !ok {
			if tr != (Trace{}) {
				t.Fatalf("non-zero trace on failure")
			}
			return
		}
		if len(s) < 55 || (s[:2] == "00" && len(s) != 55) || s[:2] == "ff" || (len(s) > 55 && s[55] != '-') {
			t.Fatalf("accepted %q", s)
		}
		if s[0] < '0' || s[0] > 'f' || s[1] < '0' || s[1] > 'f' {
			t.Fatalf("accepted version %q", s[:2])
		}
		want := s[:55]
		got := s[:3] + hex.EncodeToString(tr.ID[:]) + "-" + hex.EncodeToString(tr.Parent[:]) + "-" + hex.EncodeToString([]byte{tr.Flags})
		if got != want {
			t.Fatalf("%q re-encodes as %q", want, got)
		}
		if !tr.Valid() || !tr.HasParent() {
			t.Fatalf("accepted a zero id: %q", s)
		}
		if _, err := hex.DecodeString(s[:2]); err != nil || strings.ToLower(s[:2]) != s[:2] {
			t.Fatalf("accepted version %q", s[:2])
		}
	})
}
