package main

import (
	"encoding/json"
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

func runTokenizeChat(tok *tokenizer.Tokenizer, path, name string, genPrompt bool, in []byte, stdout, stderr io.Writer) int {
	var p fastjson.Parser
	v, err := p.ParseBytes(in)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: --chat wants a JSON messages array or an object with \"messages\" on stdin: %v\n", err)
		return 1
	}
	opt := chatpkg.Options{AddGenerationPrompt: genPrompt}
	if v.Type() == fastjson.TypeObject {
		if g := v.Get("add_generation_prompt"); g != nil {
			b, err := g.Bool()
			if err != nil {
				fmt.Fprintln(stderr, "saltus tokenize: add_generation_prompt: want true or false")
				return 1
			}
			opt.AddGenerationPrompt = b
		}
		if e := v.Get("chat_template_kwargs", "enable_thinking"); e != nil && e.Type() == fastjson.TypeFalse {
			opt.DisableThinking = true
		}
		if v = v.Get("messages"); v == nil {
			fmt.Fprintln(stderr, `saltus tokenize: --chat: the object on stdin has no "messages"`)
			return 1
		}
	}
	msgs, err := chatpkg.MessagesFromValue(v)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: %v\n", err)
		return 1
	}
	r, name, warn, err := chatpkg.Load(tok, path, name)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: %v\n", err)
		return 1
	}
	if warn != nil {
		fmt.Fprintf(stderr, "saltus tokenize: warning: %v; rendering with template none (choose one with --chat-template)\n", warn)
	}
	segs, err := r.Render(nil, msgs, opt)
	if err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: %v\n", err)
		return 1
	}
	out := chatOutput{Template: name, Segments: []chatSeg{}, IDs: []int32{}, Ends: []messageEnd{}}
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
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false) // special tokens read as <s>, not \u003cs\u003e
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "saltus tokenize: cannot write output: %v\n", err)
		return 1
	}
	return 0
}
