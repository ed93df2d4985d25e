package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/valyala/fastjson"

	chatpkg "github.com/saltus-lb/saltus/tokenpool/chat"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// chatOutput is what `saltus tokenize --chat` prints.
type chatOutput struct {
	Template string       `json:"template"`
	Segments []chatSeg    `json:"segments"`
	IDs      []int32      `json:"ids"`
	Ends     []messageEnd `json:"message_ends"`
}

type chatSeg struct {
	Text    string  `json:"text"`
	Special bool    `json:"special"`
	IDs     []int32 `json:"ids"`
}

// messageEnd: message Message's rendering ends after segment Segment,
// that is after the first Token ids. Messages that end inside a text run
// (mistral, llama2) are absent: their end has no exact token offset.
type messageEnd struct {
	Message int `json:"message"`
	Segment int `json:"segment"`
	Token   int `json:"token"`
}

// chatError is the element `saltus tokenize --chat --json` prints for a
// conversation it cannot render.
type chatError struct {
	Error string `json:"error"`
}

// runTokenizeChat renders and encodes one conversation (a messages array or
// a request object), or with many (--json) a JSON array of them, loading
// the template once: the tokenizer and template are loaded once per run,
// ~0.7 s, however many conversations there are.
func runTokenizeChat(tok *tokenizer.Tokenizer, path, name, file string, genPrompt, many bool, in []byte, stdout, stderr io.Writer) int {
	var p fastjson.Parser
	v, err := p.ParseBytes(in)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: --chat wants %s on stdin: %v\n", chatInput(many), err)
		return 1
	}
	convs := []*fastjson.Value{v}
	if many {
		if convs, err = v.Array(); err != nil {
			fmt.Fprintf(stderr, "saltus tokenize: --chat --json wants %s on stdin: %v\n", chatInput(true), err)
			return 1
		}
	}
	r, name, warn, err := chatpkg.LoadTemplate(tok, path, name, file)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: %v\n", err)
		return 1
	}
	if warn != nil {
		fmt.Fprintf(stderr, "saltus tokenize: warning: %v; rendering with template none (choose one with --chat-template)\n", warn)
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false) // special tokens read as <s>, not \u003cs\u003e
	if !many {
		out, err := tokenizeConversation(tok, r, name, genPrompt, v)
		if err != nil {
			fmt.Fprintf(stderr, "saltus tokenize: %v\n", err)
			return 1
		}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "saltus tokenize: cannot write output: %v\n", err)
			return 1
		}
		return 0
	}
	// One JSON array, one conversation a line; a conversation that fails
	// is an {"error": ...} element, and the exit code is 1.
	code := 0
	io.WriteString(stdout, "[")
	for i, c := range convs {
		var elem any
		out, err := tokenizeConversation(tok, r, name, genPrompt, c)
		if err != nil {
			fmt.Fprintf(stderr, "saltus tokenize: conversation %d: %v\n", i, err)
			elem, code = chatError{Error: err.Error()}, 1
		} else {
			elem = out
		}
		if i > 0 {
			io.WriteString(stdout, ",")
		}
		if err := enc.Encode(elem); err != nil { // Encode ends it with a newline
			fmt.Fprintf(stderr, "saltus tokenize: cannot write output: %v\n", err)
			return 1
		}
	}
	if _, err := io.WriteString(stdout, "]\n"); err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: cannot write output: %v\n", err)
		return 1
	}
	return code
}

func chatInput(many bool) string {
	if many {
		return `a JSON array of conversations (each a messages array or an object with "messages")`
	}
	return `a JSON messages array or an object with "messages"`
}

// tokenizeConversation renders one conversation, a messages array or a
// request object with "messages", and encodes it.
func tokenizeConversation(tok *tokenizer.Tokenizer, r *chatpkg.Renderer, name string, genPrompt bool, v *fastjson.Value) (*chatOutput, error) {
	opt := chatpkg.Options{AddGenerationPrompt: genPrompt}
	if v.Type() == fastjson.TypeObject {
		if g := v.Get("add_generation_prompt"); g != nil {
			b, err := g.Bool()
			if err != nil {
				return nil, errors.New("add_generation_prompt: want true or false")
			}
			opt.AddGenerationPrompt = b
		}
		if e := v.Get("chat_template_kwargs", "enable_thinking"); e != nil && e.Type() == fastjson.TypeFalse {
			opt.DisableThinking = true
		}
		// A model's own template reads the tools and every kwarg, as
		// vLLM hands them over (of the built-ins, harmony reads the
		// tools).
		if kw := v.Get("chat_template_kwargs"); kw != nil && kw.Type() == fastjson.TypeObject {
			opt.Kwargs = string(chatpkg.AppendCanonical(nil, kw))
		}
		if tv := v.Get("tools"); tv != nil && tv.Type() == fastjson.TypeArray {
			opt.Tools = string(chatpkg.AppendCanonical(nil, tv))
		}
		// harmony puts the request's reasoning_effort into its system
		// message, as vLLM does.
		if re := v.Get("reasoning_effort"); re != nil && re.Type() == fastjson.TypeString {
			opt.ReasoningEffort = string(re.GetStringBytes())
		}
		if v = v.Get("messages"); v == nil {
			return nil, errors.New(`--chat: the object on stdin has no "messages"`)
		}
	}
	msgs, err := chatpkg.MessagesFromValue(v)
	if err != nil {
		return nil, err
	}
	segs, err := r.Render(nil, msgs, opt)
	if err != nil {
		return nil, err
	}
	out := &chatOutput{Template: name, Segments: []chatSeg{}, IDs: []int32{}, Ends: []messageEnd{}}
	for i, s := range segs {
		cs := chatSeg{Text: s.Text, Special: s.Special()}
		if s.Special() {
			cs.IDs = []int32{s.ID}
		} else {
			cs.IDs = tok.EncodeSegment([]int32{}, s.Text, i == 0)
		}
		out.IDs = append(out.IDs, cs.IDs...)
		out.Segments = append(out.Segments, cs)
		if s.MsgEnd >= 0 {
			out.Ends = append(out.Ends, messageEnd{Message: int(s.MsgEnd), Segment: i, Token: len(out.IDs)})
		}
	}
	return out, nil
}
