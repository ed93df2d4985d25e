package jsonscan

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/valyala/fastjson"
)

func TestAppendUnescaped(t *testing.T) {
	t.Parallel()
	f := func(raw, want string) {
		t.Helper()
		if got := string(AppendUnescaped(nil, []byte(raw))); got != want {
			t.Errorf("AppendUnescaped(%q) = %q, want %q", raw, got, want)
		}
	}
	f(`plain`, "plain")
	f(`a\nb\t\"\\\/\b\f\r`, "a\nb\t\"\\/\b\f\r")
	f(`\u00e9\u20AC`, "é€")
	f(`\ud83d\ude00`, "😀")
	f(`\ud800\u0041`, "\uFFFD")       // a bad pair: both consumed, as utf16.DecodeRune
	f(`\ud800x`, `\ud800x`)           // a lone surrogate stays as written
	f(`\u12`, `\u12`)                 // short
	f(`\x`, `\x`)                     // unknown escape
	f(`end\`, "end")                  // a final lone backslash dropped
	f(`\ud800\uzzzz`, `\ud800\uzzzz`) // a bad second escape
}

func TestInt64(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"0", "-0", "7", "-12", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "1.0", "1e2", "-", ""} {
		b := []byte("[" + s + "]")
		n, ok := Int64(b, 1)
		w, err := strconv.ParseInt(s, 10, 64)
		if ok != (err == nil) || ok && n != w {
			t.Errorf("Int64(%q) = %d %v, strconv %d %v", s, n, ok, w, err)
		}
	}
}

// FuzzRead: on any bytes the readers never panic and their loops end;
// on an object fastjson parses, Members finds what LastMember finds for
// each key, Count is fastjson's element count, and the strings unescape
// as fastjson unescapes them.
func FuzzRead(f *testing.F) {
	for _, s := range []string{`{"model":"a","model":"b","x":[1,"]",{"y":2}]}`, `{"a\u0062":"\ud83d\ude00\n"}`,
		`[1,[2,3],{"a":[]},"s\"",null]`, `{"a":`, `["\`, `"\u00"`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := range min(len(b), 20) {
			want := bytes.IndexAny(b[i:], "\"\\")
			if want >= 0 {
				want += i
			}
			if got := Special(b, i); got != want {
				t.Fatalf("%q: Special from %d = %d, want %d", b, i, got, want)
			}
		}
		keys := []string{"a", "ab", "model", "x"}
		at := make([]int, len(keys))
		open := SkipWS(b, 0)
		Members(b, open, keys, at, nil)
		n := Count(b, open)
		for i := Elem(b, open); i >= 0; i = Next(b, i) {
			_, _ = Int64(b, i)
			_ = TypeName(b, i)
			raw, _, _ := Str(b, i)
			_ = AppendUnescaped(nil, raw)
		}
		var p fastjson.Parser
		v, err := p.ParseBytes(b)
		if err != nil {
			return
		}
		switch v.Type() {
		case fastjson.TypeObject:
			for k, key := range keys {
				m, ok := LastMember(b, open, key)
				if !ok || m.Val != at[k] {
					t.Fatalf("%q: Members %s at %d, LastMember %+v %v", b, key, at[k], m, ok)
				}
			}
		case fastjson.TypeArray:
			if a := v.GetArray(); n != len(a) {
				t.Fatalf("%q: Count %d, fastjson %d", b, n, len(a))
			}
		case fastjson.TypeString:
			raw, _, _ := Str(b, open)
			if got := AppendUnescaped(nil, raw); string(got) != string(v.GetStringBytes()) {
				t.Fatalf("%q: unescaped %q, fastjson %q", b, got, v.GetStringBytes())
			}
		}
	})
}

// KeyIs undoes a key's escapes: "stream_options" written with \u
// escapes and an escaped solidus is still that key.
func TestKeyIsEscaped(t *testing.T) {
	for _, c := range []struct {
		q    string
		key  string
		want bool
	}{
		{`"stream_options"`, "stream_options", true},
		{`"stream\u005foptions"`, "stream_options", true},
		{`"\u0073tream_options"`, "stream_options", true},
		{`"a\/b"`, "a/b", true},
		{`"stream\u005fOptions"`, "stream_options", false},
		{`"stream\noptions"`, "stream_options", false},
		{`""`, "", true},
	} {
		if got := KeyIs([]byte(c.q), c.key); got != c.want {
			t.Errorf("KeyIs(%s, %q) = %v, want %v", c.q, c.key, got, c.want)
		}
	}
}
