package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestScanJSON(t *testing.T) {
	t.Parallel()
	ok := func(body string, wantValues, wantDepth int) {
		t.Helper()
		v, d, e := scanJSON([]byte(body), 100, 8)
		if e.kind != ScanOK || v != wantValues || d != wantDepth {
			t.Fatalf("%q: %d values depth %d (%+v), want %d, %d", body, v, d, e, wantValues, wantDepth)
		}
	}
	ok(`1`, 1, 0)
	ok(` "a" `, 1, 0)
	ok(`[]`, 1, 1)
	ok(`{}`, 1, 1)
	ok(`[1,2,3]`, 4, 1)
	ok(`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, 8, 2)
	ok(`{"model":"m","messages":[{"role":"user","content":"hi \"there\" \\ \u00e9 \/"}]}`, 6, 3)
	ok(`[-0, 0.5, 1e9, -1.25E-3, 12e+2]`, 6, 1)
	ok("[\"tab\there\"]", 2, 1)   // raw control characters pass, as they passed fastjson
	ok(`{"{":"[","]":"}"}`, 3, 1) // brackets inside strings do not count
	ok(`[[[[[[[[1]]]]]]]]`, 9, 8)

	bad := func(body string, kind ScanKind, off int, msg string) {
		t.Helper()
		_, _, e := scanJSON([]byte(body), 100, 8)
		if e.kind != kind || e.off != off || !strings.Contains(e.msg, msg) {
			t.Fatalf("%q: %+v, want kind %d at %d with %q", body, e, kind, off, msg)
		}
	}
	bad(``, ScanSyntax, 0, "empty body")
	bad(`  `, ScanSyntax, 2, "unexpected end")
	bad(`{"model":`, ScanSyntax, 9, "unexpected end")
	bad(`{"model":"m"`, ScanSyntax, 12, "unexpected end")
	bad(`{"model":"m}`, ScanSyntax, 12, "unterminated string (it opens at byte 9)")
	bad(`{"model" "m"}`, ScanSyntax, 9, "want ':'")
	bad(`{model:1}`, ScanSyntax, 1, "unexpected 'm', want an object key")
	bad(`{"a":1,}`, ScanSyntax, 7, "want an object key")
	bad(`[1,]`, ScanSyntax, 3, "unexpected ']', want a value")
	bad(`[1 2]`, ScanSyntax, 3, "want ',' or ']' in an array")
	bad(`{"a":1]`, ScanSyntax, 6, "want ',' or '}' in an object")
	bad(`[1]]`, ScanSyntax, 3, "after the top-level value")
	bad(`{} {}`, ScanSyntax, 3, "after the top-level value")
	bad(`[tru]`, ScanSyntax, 1, "(true?)")
	bad(`[nan]`, ScanSyntax, 1, "(null?)")
	bad(`[01]`, ScanSyntax, 2, `invalid number "01"`)
	bad(`[1.]`, ScanSyntax, 3, `invalid number "1.]"`)
	bad(`[-]`, ScanSyntax, 2, `invalid number`)
	bad(`[1e]`, ScanSyntax, 3, `invalid number`)
	bad(`[1x]`, ScanSyntax, 2, `invalid number "1x"`)
	bad(`["\x"]`, ScanSyntax, 2, `invalid escape \x`)
	bad(`["\u12g4"]`, ScanSyntax, 2, `invalid \u escape`)
	bad(`["\`, ScanSyntax, 3, "unterminated string")
	bad("[\x00]", ScanSyntax, 1, "unexpected byte 0x00")
	bad(`[[[[[[[[[1]]]]]]]]]`, ScanTooDeep, 8, "")
	bad(`[`+strings.Repeat(`1,`, 99)+`1]`, ScanTooMany, 199, "")
	bad(`{"a":{"b":`+strings.Repeat(`{"c":`, 7), ScanTooDeep, 40, "")
}

func TestBodyLimitsCheck(t *testing.T) {
	t.Parallel()
	l := BodyLimits{MaxValues: 5, MaxDepth: 2}
	f := func(body string, status int, code, msg string) {
		t.Helper()
		_, e, _ := l.Check([]byte(body))
		if e == nil || e.Status != status || e.Code != code || !strings.Contains(e.Message, msg) {
			t.Fatalf("%s: %+v, want %d %s %q", body, e, status, code, msg)
		}
	}
	f(`[1,2,3,4,5]`, 413, "too_many_json_values", "more than 5 JSON values (max-body-values 5; counting stopped at byte 9)")
	f(`[[[1]]]`, 413, "json_too_deep", "deeper than 2 levels (max-body-depth 2; at byte 2)")
	f(`{"model":"m",}`, 400, "", "invalid JSON at byte 13: unexpected '}', want an object key")
	if n, e, _ := l.Check([]byte(`[1,2,[3]]`)); e != nil || n != 5 {
		t.Fatal(e)
	}
}

// countValues is the oracle of FuzzScanJSON: the values and depth fastjson
// parsed.
func countValues(v *fastjson.Value, depth int) (values, deepest int) {
	values, deepest = 1, depth
	switch v.Type() {
	case fastjson.TypeObject:
		deepest = depth + 1
		o, _ := v.Object()
		o.Visit(func(_ []byte, c *fastjson.Value) {
			n, d := countValues(c, depth+1)
			values, deepest = values+n, max(deepest, d)
		})
	case fastjson.TypeArray:
		deepest = depth + 1
		a, _ := v.Array()
		for _, c := range a {
			n, d := countValues(c, depth+1)
			values, deepest = values+n, max(deepest, d)
		}
	}
	return values, deepest
}

// FuzzScanJSON: the scan never panics; when it accepts a body fastjson
// parses, its counts are at least fastjson's (so the limits hold for what
// is parsed); it never calls valid JSON (encoding/json) a syntax error;
// and a refusal's offset is inside the body.
func FuzzScanJSON(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`[1,2,[3,{"a":null}]]`, `"\u00e9\n"`, `-1.5e3`, `{"a":}`, `[[[[`, `{"a":"b" "c"}`, `tru`, `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		values, depth, e := scanJSON(b, 1<<30, MaxScanDepth)
		if e.kind != ScanOK {
			if e.off < 0 || e.off > len(b) {
				t.Fatalf("%q: offset %d outside the body", b, e.off)
			}
			if e.kind == ScanSyntax && json.Valid(b) {
				t.Fatalf("%q: valid JSON refused: %+v", b, e)
			}
			return
		}
		var p fastjson.Parser
		v, err := p.ParseBytes(b)
		if err != nil {
			return // fastjson refuses it: either way is fine
		}
		n, d := countValues(v, 0)
		if n > values || d > depth {
			t.Fatalf("%q: scan counted %d values depth %d, fastjson parsed %d depth %d", b, values, depth, n, d)
		}
	})
}
