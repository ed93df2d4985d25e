package chat

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchConversation: a 1 KiB system prompt and three user/assistant
// turns, the shape of a typical multi-turn chat request.
func benchConversation() []Message {
	msgs := []Message{{Role: "system", Content: strings.Repeat("You are a careful assistant. ", 36)}}
	for i := range 3 {
		msgs = append(msgs,
			Message{Role: "user", Content: "Question " + string(rune('A'+i)) + ": how do I read a file in Go, line by line?"},
			Message{Role: "assistant", Content: "Use bufio.Scanner over os.Open's file; check sc.Err() after the loop."})
	}
	return append(msgs, Message{Role: "user", Content: "And with a very long line?"})
}

func contentBytes(msgs []Message) int64 {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return int64(n)
}

// BenchmarkRender renders benchConversation with each template, reusing
// dst as the event loop does.
func BenchmarkRender(b *testing.B) {
	tok := loadTokenizer(b, "qwen3")
	mtok := loadTokenizer(b, "mistral7b")
	ltok := loadTokenizer(b, "llama3")
	gtok := loadTokenizer(b, "gptoss")
	for _, c := range []struct {
		name  string
		vocab Vocab
		model string
		msgs  func([]Message) []Message
	}{
		{Llama3, ltok, "llama3", nil},
		{ChatML, tok, "qwen3", nil},
		{Qwen3, tok, "qwen3", nil},
		{Mistral, mtok, "mistral7b", func(m []Message) []Message { return m[1:] }}, // no system role
		{Llama2, mtok, "mistral7b", nil},
		{None, mtok, "mistral7b", nil},
		{Harmony, gtok, "gptoss", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			r, err := New(c.name, c.vocab, loadConfig(b, c.model))
			if err != nil {
				b.Fatal(err)
			}
			msgs := benchConversation()
			if c.msgs != nil {
				msgs = c.msgs(msgs)
			}
			opt := Options{AddGenerationPrompt: true}
			var dst []Segment
			b.SetBytes(contentBytes(msgs))
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = r.Render(dst[:0], msgs, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenderParallel: a Renderer is shared by all loops.
func BenchmarkRenderParallel(b *testing.B) {
	r, err := New(Llama3, loadTokenizer(b, "llama3"), loadConfig(b, "llama3"))
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchConversation()
	b.SetBytes(contentBytes(msgs))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var dst []Segment
		for pb.Next() {
			dst, _ = r.Render(dst[:0], msgs, Options{AddGenerationPrompt: true}) // the conversation renders: checked by TestRender's templates
		}
	})
}

func BenchmarkParseMessages(b *testing.B) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []msg
	for _, m := range benchConversation() {
		ms = append(ms, msg{m.Role, m.Content})
	}
	raw, err := json.Marshal(ms)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMessages(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// bench4K: a 4 KiB chat (a 2 KiB system prompt and four user/assistant
// turns), for the Jinja path's cost.
func bench4K() []Message {
	msgs := []Message{{Role: "system", Content: strings.Repeat("You are a careful assistant. ", 72)}}
	for i := range 4 {
		msgs = append(msgs,
			Message{Role: "user", Content: "Question " + string(rune('A'+i)) + ": how do I read a file in Go, line by line, and what about errors? " + strings.Repeat("More detail. ", 12)},
			Message{Role: "assistant", Content: "Use bufio.Scanner over os.Open's file; check sc.Err() after the loop. " + strings.Repeat("Also this. ", 12)})
	}
	return append(msgs, Message{Role: "user", Content: "And with a very long line?"})
}

// BenchmarkRenderJinja renders bench4K with the Jinja path (render: the
// segments with message ends, the prefixes' renderings cached as for a
// conversation's later requests; render-cold: none cached, so each prefix
// renders too; execute: one rendering of the whole) and with the built-in
// of the same template.
func BenchmarkRenderJinja(b *testing.B) {
	for _, c := range []struct{ name, model, builtin string }{
		{"llama3", "llama3", Llama3},
		{"qwen3", "qwen3", Qwen3},
		{"deepseek_v3", "deepseek_v3", ""},
	} {
		cfg := jinjaConfig(b, c.model, "")
		var vocab Vocab
		if c.builtin != "" {
			vocab = loadTokenizer(b, c.model)
		}
		msgs := bench4K()
		opt := Options{AddGenerationPrompt: true}
		r, err := NewJinja(cfg.Template, vocab, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/render", func(b *testing.B) {
			var dst []Segment
			b.SetBytes(contentBytes(msgs))
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = r.Render(dst[:0], msgs, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
		// cold: no prefix cached, as for the first request of a
		// conversation: every prefix renders too.
		b.Run(c.name+"/render-cold", func(b *testing.B) {
			var dst []Segment
			b.SetBytes(contentBytes(msgs))
			b.ReportAllocs()
			for b.Loop() {
				r.jinja.prefixes.reset()
				if dst, err = r.Render(dst[:0], msgs, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/execute", func(b *testing.B) {
			b.SetBytes(contentBytes(msgs))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.jinja.execute(msgs, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
		if c.builtin == "" {
			continue
		}
		bt, err := New(c.builtin, vocab, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/builtin", func(b *testing.B) {
			var dst []Segment
			b.SetBytes(contentBytes(msgs))
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = bt.Render(dst[:0], msgs, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenderHarmonyTools: harmony with a request's tools (the four
// of openai_harmony's function fixture, 1.6 KiB), which it writes as
// TypeScript on every request.
func BenchmarkRenderHarmonyTools(b *testing.B) {
	r := harmonyRenderer(b, loadTokenizer(b, "gptoss"))
	msgs := benchConversation()
	opt := Options{AddGenerationPrompt: true, Tools: harmonyFixtureTools}
	var dst []Segment
	b.SetBytes(contentBytes(msgs) + int64(len(opt.Tools)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = r.Render(dst[:0], msgs, opt); err != nil {
			b.Fatal(err)
		}
	}
}
