//go:build !race

package chat

import (
	"bytes"
	"testing"
)

// TestRenderAllocs: with a reused dst, Render allocates at most once (the
// arena of joined runs, unsafe.go), and not at all for None.
func TestRenderAllocs(t *testing.T) {
	for _, c := range []struct{ name, model string }{
		{Llama3, "llama3"}, {ChatML, "qwen3"}, {Qwen3, "qwen3"}, {Mistral, "mistral7b"}, {Llama2, "mistral7b"}, {None, "mistral7b"},
	} {
		r, err := New(c.name, loadTokenizer(t, c.model), loadConfig(t, c.model))
		if err != nil {
			t.Fatal(err)
		}
		msgs := benchConversation()
		if c.name == Mistral {
			msgs = msgs[1:]
		}
		dst := make([]Segment, 0, 64)
		want := 1.0
		if c.name == None {
			want = 0
		}
		if n := testing.AllocsPerRun(100, func() { dst, _ = r.Render(dst[:0], msgs, Options{AddGenerationPrompt: true}) }); n > want {
			t.Errorf("%s: %.1f allocations per Render, want at most %.0f", c.name, n, want)
		}
	}
}

// TestScratchAllocs: decoding (from the body's bytes) and rendering
// through a warm Scratch allocates nothing.
func TestScratchAllocs(t *testing.T) {
	r, err := New(Llama3, loadTokenizer(t, "llama3"), loadConfig(t, "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":[{"type":"text","text":"a\nb"},{"type":"image_url"}]},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}`)
	raw := body[bytes.IndexByte(body, '[') : len(body)-1]
	var s Scratch
	run := func() {
		msgs, err := s.MessagesFromBody(raw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Render(r, msgs, Options{AddGenerationPrompt: true}); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if n := testing.AllocsPerRun(100, run); n > 0 {
		t.Errorf("%.1f allocations per decode and render, want 0", n)
	}
}
