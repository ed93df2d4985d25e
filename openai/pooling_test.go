package openai

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/valyala/fastjson"
)

func TestDecodePooling(t *testing.T) {
	for _, tc := range []struct {
		k      Kind
		body   string
		model  string
		prompt string
		ids    []int32
		err    string // the error's param; "" for none
	}{
		{KindPooling, `{"model":"e","input":"hello world"}`, "e", "hello world", nil, ""},
		{KindPooling, `{"input":["first","second"],"model":"m","model":"e2"}`, "e2", "first", nil, ""},
		{KindPooling, `{"input":[1,2,3]}`, "", "", []int32{1, 2, 3}, ""},
		{KindPooling, `{"input":[[4,5],[6]]}`, "", "", []int32{4, 5}, ""},
		{KindPooling, `{"input":"a\nb\u00e9","encoding_format":"float","dimensions":8}`, "", "a\nbé", nil, ""},
		{KindPooling, `{"model":"e","messages":[{"role":"user","content":"x"}]}`, "e", "", nil, "input"},
		{KindPooling, `{"input":["a",1]}`, "", "", nil, "input"},
		{KindPooling, `{"input":[]}`, "", "", nil, "input"},
		{KindPooling, `{"model":3,"input":"x"}`, "", "", nil, "model"},
		{KindPooling, `[1]`, "", "", nil, ""},
		{KindScore, `{"model":"r","query":"what is it?","documents":["a","b"],"top_n":1}`, "r", "what is it?", nil, ""},
		{KindScore, `{"text_1":["q1","q2"],"text_2":["d"]}`, "", "q1", nil, ""},
		{KindScore, `{"queries":"q","documents":"d"}`, "", "q", nil, ""},
		{KindScore, `{"query":{"content":[{"type":"image_url"}]},"documents":["a"]}`, "", "", nil, "query"},
		{KindScore, `{"documents":["a"]}`, "", "", nil, "query"},
	} {
		var d Request
		e := DecodePooling(&d, tc.k, []byte(tc.body), MaxScanDepth)
		switch {
		case tc.err == "" && tc.body[0] == '[':
			if e == nil || e.Status != 400 {
				t.Errorf("%s: want a 400, got %v", tc.body, e)
			}
			continue
		case tc.err != "":
			if e == nil || e.Param != tc.err || e.Status != 400 {
				t.Errorf("%s: want a 400 on %q, got %v (%+v)", tc.body, tc.err, e, d)
			}
			continue
		case e != nil:
			t.Errorf("%s: %v", tc.body, e.Message)
			continue
		}
		if d.Kind != tc.k || d.Model != tc.model || d.Prompt != tc.prompt || !slices.Equal(d.TokenIDs, tc.ids) || d.HasTokenIDs != (tc.ids != nil) {
			t.Errorf("%s: got %+v", tc.body, d)
		}
	}
}

// FuzzDecodePooling: a pooling or score body decodes to what a JSON
// parser reads of it (the model; the input's or query's first string),
// or is refused with a 400 or a too-deep 413, never a panic.
func FuzzDecodePooling(f *testing.F) {
	for _, s := range []string{
		`{"model":"e","input":"hello"}`, `{"input":["a","b"]}`, `{"input":[[1,2],[3]]}`, `{"input":[1e3]}`,
		`{"query":"q","documents":["d"]}`, `{"text_1":["a"],"text_2":"b"}`, `{"queries":"q"}`, `{`, `null`,
		`{"input":"\ud800"}`, `{"model":"a\"b","query":[]}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, pooling bool) {
		k := KindScore
		if pooling {
			k = KindPooling
		}
		var d Request
		e := DecodePooling(&d, k, body, MaxScanDepth)
		if e != nil {
			if (e.Status != 400 && (e.Status != 413 || e.Code != "json_too_deep")) || e.Type != "invalid_request_error" || !json.Valid(e.Body()) {
				t.Fatalf("bad error: %d %q %s", e.Status, e.Type, e.Body())
			}
			return
		}
		var p fastjson.Parser
		v, err := p.ParseBytes(body)
		if err != nil {
			t.Fatalf("decoded a body fastjson refuses (%v): %+v", err, d)
		}
		var model *fastjson.Value // the last occurrence, as the engines read it
		v.GetObject().Visit(func(key []byte, m *fastjson.Value) {
			if string(key) == "model" {
				model = m
			}
		})
		if model != nil && string(model.GetStringBytes()) != d.Model {
			t.Fatalf("model %q, fastjson reads %q", d.Model, model.GetStringBytes())
		}
		if d.HasTokenIDs == (d.Prompt != "") && d.Prompt != "" {
			t.Fatalf("both a prompt and token ids: %+v", d)
		}
	})
}
