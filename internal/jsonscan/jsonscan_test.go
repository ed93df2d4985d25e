package jsonscan

import (
	"encoding/json"
	"testing"
)

func TestLastMember(t *testing.T) {
	t.Parallel()
	f := func(body, key, want string, wantOK bool) {
		t.Helper()
		m, ok := LastMember([]byte(body), SkipWS([]byte(body), 0), key)
		got := ""
		if ok && m.Val >= 0 {
			got = body[m.Val:m.End]
		}
		if ok != wantOK || got != want {
			t.Errorf("LastMember(%q, %q) = %q %v, want %q %v", body, key, got, ok, want, wantOK)
		}
	}
	f(`{}`, "a", "", true)
	f(` {"a":1,"b":[1,{"a":2}],"a" : "x\"y" }`, "a", `"x\"y"`, true)
	f(`{"b":{"a":1}}`, "a", "", true)
	f(`{"\u0061":true}`, "a", "true", true)
	f(`{"a":1`, "a", "", false)
	f(`{"a" 1}`, "a", "", false)
	f(`{a:1}`, "a", "", false)
}

// FuzzLastMember: on any JSON object encoding/json reads, the last member
// found is the value encoding/json keeps for the key.
func FuzzLastMember(f *testing.F) {
	for _, s := range []string{`{"model":"a"}`, `{"x":[1,"]",{"model":2}],"model":{"y":"}"}}`, `{"model":"a","model":null}`, `{"a\"b":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil || obj == nil {
			return // not an object (encoding/json reads null into a nil map)
		}
		m, ok := LastMember(body, SkipWS(body, 0), "model")
		if !ok {
			t.Fatalf("LastMember refused an object encoding/json reads: %q", body)
		}
		want, has := obj["model"]
		if has != (m.Val >= 0) {
			t.Fatalf("%q: found %v, encoding/json %v", body, m.Val >= 0, has)
		}
		if has {
			var a, b any
			if json.Unmarshal(body[m.Val:m.End], &a) != nil || json.Unmarshal(want, &b) != nil {
				t.Fatalf("%q: value %q not JSON", body, body[m.Val:m.End])
			}
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Fatalf("%q: value %s, encoding/json %s", body, ja, jb)
			}
		}
	})
}

// FuzzDeleteMember: on any JSON object encoding/json reads, the result is
// an object encoding/json reads as the same map without the key.
func FuzzDeleteMember(f *testing.F) {
	for _, s := range []string{`{"priority":-10,"model":"m"}`, `{"model":"m","priority":1}`, `{"priority":1}`, `{}`, `{"a":{"priority":1},"priority":2,"priority":3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in map[string]json.RawMessage
		if json.Unmarshal(body, &in) != nil || in == nil {
			return // not an object (encoding/json reads null into a nil map)
		}
		out, ok := DeleteMember(nil, body, "priority")
		if !ok {
			t.Fatalf("DeleteMember refused an object encoding/json reads: %q", body)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q → %q: not JSON: %v", body, out, err)
		}
		var want map[string]any
		_ = json.Unmarshal(body, &want) // read above
		delete(want, "priority")
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if string(wj) != string(gj) {
			t.Fatalf("%q → %s, want %s", body, gj, wj)
		}
	})
}
