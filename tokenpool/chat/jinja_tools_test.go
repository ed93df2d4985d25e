package chat

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// TestJinjaTools renders the tool conversations (corpus/chat_tools.json.gz:
// requests with tools, tool calls, tool results and names) with each
// model's own template, from the request's bytes as the router decodes
// them (FromRequest; the body decoder must give the same messages), and
// compares the prompt with what Python's jinja2 renders from the request
// prepared as vLLM prepares it (gen/chat_tools.py): zero differences,
// and the template's own refusals refused with its message.
func TestJinjaTools(t *testing.T) {
	t.Parallel()
	var reqs []json.RawMessage
	if err := json.Unmarshal(readGzip(t, testdata+"corpus/chat_tools.json.gz"), &reqs); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qwen3", "llama3", "gemma3", "deepseek_v3"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := jinjaConfig(t, name, "")
			r, err := NewJinja(cfg.Template, nil, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var rows []jinjaRow
			if err := json.Unmarshal(readGzip(t, testdata+"golden/chat.tools."+name+".json.gz"), &rows); err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(reqs) {
				t.Fatalf("%d golden rows for %d requests", len(rows), len(reqs))
			}
			bad := 0
			for i, raw := range reqs {
				v, err := fastjson.ParseBytes(raw)
				if err != nil {
					t.Fatal(err)
				}
				msgs, opt, err := FromRequest(v)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				m, ok := v.Get("messages"), true
				body, err := MessagesFromBodyFor(m.MarshalTo(nil), r.Wants())
				if !ok || err != nil || !slices.Equal(body, msgs) {
					t.Fatalf("request %d: the body decoder gives %+v, %v; the tree %+v", i, body, err, msgs)
				}
				segs, err := r.Render(nil, msgs, opt)
				var got strings.Builder
				for _, s := range segs {
					got.WriteString(s.Text)
				}
				if rows[i].Error != nil {
					var te *TemplateError
					if !errors.As(err, &te) || !te.Raised || te.Message != *rows[i].Error {
						t.Errorf("request %d: the template raises %q, got %q, %v", i, *rows[i].Error, got.String(), err)
						bad++
					}
					continue
				}
				if err != nil || got.String() != *rows[i].Prompt {
					if bad < 3 {
						t.Errorf("request %d %.300s:\n got %q, %v\nwant %q", i, raw, got.String(), err, *rows[i].Prompt)
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d requests differ from jinja2's rendering", bad, len(reqs))
			}
		})
	}
}
