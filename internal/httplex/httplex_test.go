package httplex

import (
	"strings"
	"testing"
)

func TestLex(t *testing.T) {
	for s, want := range map[string]bool{"Content-Type": true, "x_y.z~": true, "": false, "a b": false, "a:b": false, "é": false} {
		if IsToken(s) != want {
			t.Errorf("IsToken(%q) != %v", s, want)
		}
	}
	for s, want := range map[string]bool{"text/plain; a=b": true, "tab\there": true, "": true, "nul\x00": false, "del\x7f": false, "lf\n": false} {
		if ValidValue(s) != want {
			t.Errorf("ValidValue(%q) != %v", s, want)
		}
	}
	for s, want := range map[string]int64{"0": 0, "4096": 4096, "999999999999999999": 999999999999999999} {
		if n, ok := ParseDecimal(s); !ok || n != want {
			t.Errorf("ParseDecimal(%q) = %d, %v", s, n, ok)
		}
	}
	for _, s := range []string{"", "-1", "+1", " 1", "1 ", "0x1", "1234567890123456789"} {
		if _, ok := ParseDecimal(s); ok {
			t.Errorf("ParseDecimal(%q) accepted", s)
		}
	}
}

func TestTrimOWS(t *testing.T) {
	for _, s := range []string{"", " ", "\t \t", "a", " a ", "\ta b\t ", " \r\n x\r", "é \t"} {
		if got, want := TrimOWS(s), strings.Trim(s, " \t"); got != want {
			t.Errorf("TrimOWS(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"Content-Length", "content-length", true}, {"", "", true}, {"TE", "te", true},
		{"a", "b", false}, {"ab", "a", false}, {"k", "\u212a", false}, {"[", "{", false}, {"@", "`", false},
	} {
		if got := EqualFold(tc.a, tc.b); got != tc.want {
			t.Errorf("EqualFold(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
