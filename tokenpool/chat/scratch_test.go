package chat

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/valyala/fastjson"
)

// scratchAgrees decodes body (a request object) with s and p, and with
// the copying FromRequest, and renders with every renderer both ways; the
// messages and segments must be equal. p and s are reused across calls,
// as a loop reuses them.
func scratchAgrees(t *testing.T, s *Scratch, p *fastjson.Parser, renderers []*Renderer, body string) {
	t.Helper()
	v, err := p.Parse(body)
	if err != nil {
		return
	}
	if v.Type() != fastjson.TypeObject {
		return
	}
	want, wopt, werr := FromRequest(fastjson.MustParse(body))
	got, gopt, gerr := s.FromRequest(v)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("%s: errors %v and %v", body, werr, gerr)
	}
	if werr != nil {
		return
	}
	if !slices.Equal(got, want) || gopt != wopt {
		t.Fatalf("%s: scratch %+v %+v, copying %+v %+v", body, got, gopt, want, wopt)
	}
	for _, r := range renderers {
		wsegs, werr := r.Render(nil, want, wopt)
		gsegs, gerr := s.Render(r, got, gopt)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s %s: errors %v and %v", r.Name(), body, werr, gerr)
		}
		if werr == nil && !slices.Equal(gsegs, wsegs) {
			t.Fatalf("%s %s: scratch %+v, copying %+v", r.Name(), body, gsegs, wsegs)
		}
	}
}

func allRenderers(t testing.TB) []*Renderer {
	tok, cfg := loadTokenizer(t, "mistral7b"), loadConfig(t, "mistral7b")
	var rs []*Renderer
	for _, name := range Names() {
		r, err := New(name, tok, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// A Scratch and a parser reused for many different requests (random
// conversations, content parts, escapes, errors) give what the copying
// decoder and Render give, every time: nothing of an earlier request
// shows through.
func TestScratchMatchesCopying(t *testing.T) {
	rs := allRenderers(t)
	var s Scratch
	var p fastjson.Parser
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		msgs := randomMessages(rng)
		body := `{"messages":[`
		for k, m := range msgs {
			if k > 0 {
				body += ","
			}
			content := fmt.Sprintf("%q", m.Content)
			if rng.IntN(4) == 0 {
				content = fmt.Sprintf(`[{"type":"text","text":%q},{"type":"image_url"},{"type":"text","text":"\n\u00e9"}]`, m.Content)
			}
			body += fmt.Sprintf(`{"role":%q,"content":%s`, m.Role, content)
			if m.HasReasoning {
				body += fmt.Sprintf(`,"reasoning":%q`, m.Reasoning)
			}
			body += "}"
		}
		body += `]`
		if i%7 == 0 {
			body += `,"add_generation_prompt":false`
		}
		if i%11 == 0 {
			body += `,"add_generation_prompt":"yes"` // a FieldError
		}
		body += "}"
		scratchAgrees(t, &s, &p, rs, body)
	}
}

func FuzzScratch(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
		`{"messages":[{"role":"assistant","content":"<think>x</think>y","reasoning":"r"}]}`,
		`{"messages":[{"role":"user","content":["a",{"type":"text","text":""},{"image_url":{"url":"u"}}]},{"role":"assistant","content":"y","reasoning_content":"dropped"}]}`,
		`{"messages":[{"role":"tool","content":"\u0000\ud800 \n\t"}],"add_generation_prompt":false}`,
		`{"messages":[{"role":"user","content":5}]}`,
		`{"messages":[]}`, `{}`, `[`,
	} {
		f.Add(s, `{"messages":[{"role":"user","content":"x"}]}`)
	}
	rs := allRenderers(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		// Fresh per input pair, so a failure reproduces from its input;
		// b runs on what a left.
		var s Scratch
		var p fastjson.Parser
		scratchAgrees(t, &s, &p, rs, a)
		scratchAgrees(t, &s, &p, rs, b)
	})
}

// Errors from a Scratch are the copying decoder's FieldErrors.
func TestScratchErrors(t *testing.T) {
	var s Scratch
	msgs, _, err := s.FromRequest(fastjson.MustParse(`{"messages":[{"role":"user","content":5}]}`))
	var fe *FieldError
	if msgs != nil || !errors.As(err, &fe) || fe.Field != "messages" {
		t.Errorf("got %v %v", msgs, err)
	}
}
