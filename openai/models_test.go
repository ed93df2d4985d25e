package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func FuzzBodyModel(f *testing.F) {
	for _, s := range []string{`{"model":"a"}`, `{"input":[1,2,{"model":"x"}],"model":"b\u0041"}`, ` { "model" : "m" , "x":null}`,
		`{"model":1}`, `{"a":"\"model\":\"x\""}`, `[]`, `{"model":"a"`, `{"model":"a","model":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := BodyModel(body)
		// Against a real parser: when the body is a JSON object whose
		// "model" (last occurrence) is a string, BodyModel finds it.
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return
		}
		var want string
		if raw, ok := m["model"]; ok {
			if json.Unmarshal(raw, &want) != nil {
				want = ""
			}
		}
		if got != want && !strings.ContainsRune(want, '\uFFFD') {
			t.Fatalf("BodyModel(%q) = %q, want %q", body, got, want)
		}
	})
}

func TestModelPathID(t *testing.T) {
	t.Parallel()
	f := func(path, want string) {
		t.Helper()
		if got := ModelPathID(path); got != want {
			t.Fatalf("%s: got %q, want %q", path, got, want)
		}
	}
	f("/v1/models/org/m", "org/m")
	f("/v1/models/m", "m")
	f("/v1/models", "")
	f("/v1/chat/completions", "")
}

func TestFindModel(t *testing.T) {
	t.Parallel()
	list := []byte(`{"object":"list","data":[{"id":"a","object":"model"},{"id":"org/b","object":"model","owned_by":"vllm"}]}`)
	if got := string(FindModel(list, "org/b")); got != `{"id":"org/b","object":"model","owned_by":"vllm"}` {
		t.Fatalf("org/b: %s", got)
	}
	if got := FindModel(list, "c"); got != nil {
		t.Fatalf("c: %s", got)
	}
	if got := FindModel([]byte(`not json`), "a"); got != nil {
		t.Fatalf("not json: %s", got)
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	f := func(body, want string) {
		t.Helper()
		if got := ErrorMessage([]byte(body)); got != want {
			t.Fatalf("%s: got %q, want %q", body, got, want)
		}
	}
	f(`{"error":{"message":"The lora adapter 'x' has already been loaded.","type":"BadRequestError","code":400}}`, "The lora adapter 'x' has already been loaded.")
	f(`{"message":"flat"}`, "flat")
	f("  Success: LoRA adapter 'x' added successfully.\n", "Success: LoRA adapter 'x' added successfully.")
	f(strings.Repeat("y", 600), strings.Repeat("y", 500)+"…")
}

func TestFilterModels(t *testing.T) {
	t.Parallel()
	list := []byte(`{"object":"list","data":[{"id":"m1","object":"model"},{"id":"m2"},{"id":"org/m3","parent":null}]}`)
	got := string(FilterModels(list, func(id string) bool { return id != "m2" }))
	if want := `{"object":"list","data":[{"id":"m1","object":"model"},{"id":"org/m3","parent":null}]}`; got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if got := string(FilterModels(list, func(string) bool { return false })); got != `{"object":"list","data":[]}` {
		t.Fatalf("none kept: %s", got)
	}
	if got := string(FilterModels([]byte(`nope`), func(string) bool { return false })); got != "nope" {
		t.Fatalf("not JSON: %s", got)
	}
}
