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
