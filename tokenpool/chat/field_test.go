package chat

import (
	"testing"

	"github.com/valyala/fastjson"
)

func TestFieldLastWins(t *testing.T) {
	t.Parallel()
	f := func(body string, want string, keys ...string) {
		t.Helper()
		v := fastjson.MustParse(body)
		got := Field(v, keys...)
		if want == "" {
			if got != nil {
				t.Fatalf("Field(%s, %q) = %s, want nil", body, keys, got)
			}
			return
		}
		if got == nil || got.String() != want {
			t.Fatalf("Field(%s, %q) = %v, want %s", body, keys, got, want)
		}
	}
	f(`{"stream":false,"stream":true}`, `true`, "stream")
	f(`{"a":1}`, `1`, "a")
	f(`{"a":1}`, ``, "b")
	f(`{"a":{"b":1},"a":{"c":2}}`, ``, "a", "b") // the last "a" has no "b"
	f(`{"a":{"b":1},"a":{"b":3}}`, `3`, "a", "b")
	f(`{"a":[1]}`, ``, "a", "b")
	f(`[1,2]`, ``, "a")
}

func TestFieldAllocs(t *testing.T) {
	v := fastjson.MustParse(`{"model":"m","stream":false,"stream":true,"x":{"y":1}}`)
	if n := testing.AllocsPerRun(100, func() {
		_ = Field(v, "stream")
		_ = Field(v, "x", "y")
	}); n != 0 {
		t.Fatalf("Field allocates %v times per call", n)
	}
}
