package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/internal/jsonscan"
)

// scratchAgrees decodes the messages of body (a request object) from its
// bytes with s (views) and with the copying MessagesFromBody, and from its
// fastjson parse (messagesFromValue, the simulator's decoder), and renders
// with every renderer both ways; the messages, errors and segments must be
// equal. s is reused across calls, as a loop reuses it.
func scratchAgrees(t *testing.T, s *Scratch, renderers []*Renderer, body string) {
	t.Helper()
	b := []byte(body)
	if !json.Valid(b) {
		return // MessagesFromBody reads checked bodies (openai's scan; its own fuzz test covers the rest)
	}
	v, err := fastjson.ParseBytes(b)
	if err != nil || v.Type() != fastjson.TypeObject {
		return
	}
	mv := Field(v, "messages")
	if mv == nil {
		return
	}
	m, ok := jsonscan.LastMember(b, jsonscan.SkipWS(b, 0), "messages")
	if !ok || m.Val < 0 {
		t.Fatalf("%s: jsonscan finds no messages", body)
	}
	want, werr := messagesFromValue(mv, 0)
	got, gerr := s.MessagesFromBody(b[m.Val:m.End])
	cp, cerr := MessagesFromBody(b[m.Val:m.End])
	for _, e := range []error{gerr, cerr} {
		if (werr == nil) != (e == nil) || (werr != nil && werr.Error() != e.Error()) {
			t.Fatalf("%s: errors %v (tree) and %v (bytes)", body, werr, e)
		}
	}
	if werr != nil {
		if got != nil || cp != nil {
			t.Fatalf("%s: messages %v %v with the error %v", body, got, cp, werr)
		}
		return
	}
	if !slices.Equal(got, want) || !slices.Equal(cp, want) {
		t.Fatalf("%s: scratch %+v, copying %+v, tree %+v", body, got, cp, want)
	}
	opt := Options{AddGenerationPrompt: true}
	for _, r := range renderers {
		wsegs, werr := r.Render(nil, want, opt)
		gsegs, gerr := s.Render(r, got, opt)
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
		scratchAgrees(t, &s, rs, body)
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
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[ {"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}} ],"name":"bot"},{"role":"tool","tool_call_id":"c\u0031","content":[{"type":"text","text":"r"}],"name":""}]}`,
		`{"messages":[{"role":"user","tool_calls":[1],"tool_call_id":"x","name":5},{"role":"assistant","tool_calls":{},"name":"\u00e9"}]}`,
		`{"messages":[]}`, `{}`, `[`,
	} {
		f.Add(s, `{"messages":[{"role":"user","content":"x"}]}`)
	}
	rs := allRenderers(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		// Fresh per input pair, so a failure reproduces from its input;
		// b runs on what a left.
		var s Scratch
		scratchAgrees(t, &s, rs, a)
		scratchAgrees(t, &s, rs, b)
	})
}

// Errors from a Scratch are the copying decoder's, and leave no messages.
func TestScratchErrors(t *testing.T) {
	var s Scratch
	body := []byte(`{"messages":[{"role":"user","content":5}]}`)
	msgs, err := s.MessagesFromBody(body[bytes.IndexByte(body, '[') : len(body)-1])
	if want := "messages[0].content: want a string, an array of parts or null, got number"; msgs != nil || err == nil || err.Error() != want {
		t.Errorf("got %v %v, want the error %q", msgs, err, want)
	}
}
