package chat

import (
	"fmt"
	"slices"

	"github.com/valyala/fastjson"
)

// Message is one entry of an OpenAI `messages` array, reduced to what the
// templates read.
type Message struct {
	Role string
	// Content is the message text. ParseMessages joins an array of content
	// parts into it (PartSeparator between parts, a Placeholder for each
	// non-text part); null or absent content is "".
	Content string
	// Reasoning is the assistant's reasoning_content, which the qwen3
	// template renders inside <think>; HasReasoning says it was given (a
	// JSON string, not null).
	Reasoning    string
	HasReasoning bool
}

// PartSeparator joins the parts of an array content. vLLM joins text parts
// with "\n" for templates that expect a string (its "string" content
// format), and the templates here all expect a string.
const PartSeparator = "\n"

// Placeholder returns the text that stands in for a non-text content part
// of the given type (image_url, input_audio, file, ...): "<" + type + ">",
// or "<part>" for a type longer than 32 bytes. The same part type always
// gives the same text, so the text before it, and the messages before it,
// keep their tokens and cache keys. The engine sees the real image instead;
// saltus only predicts where caches hold prefixes, and for that a stable
// stand-in is what matters (two different images in the same place look
// alike to the router: the prediction is then too optimistic, never
// inconsistent).
func Placeholder(partType string) string {
	if len(partType) > 32 {
		return "<part>"
	}
	return "<" + partType + ">"
}

// ParseMessages decodes an OpenAI `messages` JSON array. It accepts what
// the chat completions API accepts for rendering: role (a string,
// required), content (a string, null, absent, or an array of parts: text
// parts with a string "text", and any other part type as a Placeholder),
// and reasoning_content (a string or null). Other fields (name,
// tool_calls, tool_call_id) are ignored: no built-in template renders them
// yet. Errors name the index and field, e.g. "messages[2].content[1].text:
// not a string", so the caller can answer 400 with them. The strings are
// copies: raw may be reused after the call. Any goroutine.
func ParseMessages(raw []byte) ([]Message, error) {
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("messages: invalid JSON: %w", err)
	}
	// The strings decoded are never longer than their JSON, so one arena
	// of len(raw) bytes holds them all.
	return messagesFromValue(v, len(raw))
}

// parsers reuse fastjson's value cache across calls (BenchmarkParseMessages).
var parsers fastjson.ParserPool

// MessagesFromValue is ParseMessages for a value already parsed, such as
// the "messages" field of a request body decoded by the reactor: the body
// is parsed once. Any goroutine (the value must not be shared while it is
// read).
func MessagesFromValue(v *fastjson.Value) ([]Message, error) {
	return messagesFromValue(v, 0)
}

// decoder copies the decoded strings into one arena (unsafe.go), or with
// view set (Scratch) hands out views of the parser's bytes.
type decoder struct {
	arena []byte
	view  bool
}

func (d *decoder) str(b []byte) string {
	if d.view {
		return viewString(b)
	}
	start := len(d.arena)
	d.arena = append(d.arena, b...)
	return arenaString(d.arena, start)
}

func messagesFromValue(v *fastjson.Value, hint int) ([]Message, error) {
	d := decoder{arena: make([]byte, 0, hint)}
	return d.messages(nil, v)
}

func (d *decoder) messages(dst []Message, v *fastjson.Value) ([]Message, error) {
	if v.Type() != fastjson.TypeArray {
		return nil, fmt.Errorf("messages: want a JSON array, got %s", v.Type())
	}
	arr, _ := v.Array() // the type was checked above
	msgs := slices.Grow(dst[:0], len(arr))[:len(arr)]
	clear(msgs) // a reused dst holds an earlier request's messages
	for i, mv := range arr {
		if err := d.message(&msgs[i], mv, i); err != nil {
			clear(msgs)
			return nil, err
		}
	}
	return msgs, nil
}

// Scratch is reusable memory for decoding and rendering one request at a
// time, for a caller that needs the messages and segments only briefly (a
// router that hashes them into keys and is done). What its methods return
// are views: into the parsed value's parser buffer and into the Scratch,
// valid until the Scratch is used again or that parser parses again, and
// never to be kept beyond (copy what must outlive them). A Scratch belongs
// to one goroutine; the zero value is ready.
type Scratch struct {
	arena  []byte    // joined content parts
	render []byte    // Render's arena
	msgs   []Message // FromRequest's result
	segs   []Segment // Render's result
}

// FromRequest is the package's FromRequest without copies: the message
// strings are views (see Scratch). Errors are the same.
func (sc *Scratch) FromRequest(v *fastjson.Value) ([]Message, Options, error) {
	d := decoder{arena: sc.arena[:0], view: true}
	msgs, opt, err := fromRequest(v, &d, sc.msgs)
	sc.arena = d.arena
	if msgs != nil {
		sc.msgs = msgs
	}
	return msgs, opt, err
}

// Render is Renderer.Render into the Scratch: the segments and their
// texts are views (see Scratch). On error it returns nil.
func (sc *Scratch) Render(r *Renderer, msgs []Message, opt Options) ([]Segment, error) {
	segs, arena, err := r.render(sc.segs[:0], sc.render[:0], msgs, opt)
	sc.render = arena
	if err != nil {
		clear(segs)
		return nil, err
	}
	sc.segs = segs
	return segs, nil
}

func (d *decoder) message(m *Message, v *fastjson.Value, i int) error {
	if v.Type() != fastjson.TypeObject {
		return fmt.Errorf("messages[%d]: want an object, got %s", i, v.Type())
	}
	role := Field(v, "role")
	if role == nil {
		return fmt.Errorf("messages[%d].role: missing", i)
	}
	if role.Type() != fastjson.TypeString {
		return fmt.Errorf("messages[%d].role: want a string, got %s", i, role.Type())
	}
	m.Role = d.str(role.GetStringBytes())
	if m.Role == "" {
		return fmt.Errorf("messages[%d].role: empty", i)
	}
	if rc := Field(v, "reasoning_content"); rc != nil && rc.Type() != fastjson.TypeNull {
		if rc.Type() != fastjson.TypeString {
			return fmt.Errorf("messages[%d].reasoning_content: want a string or null, got %s", i, rc.Type())
		}
		m.Reasoning, m.HasReasoning = d.str(rc.GetStringBytes()), true
	}
	c := Field(v, "content")
	if c == nil {
		return nil
	}
	switch c.Type() {
	case fastjson.TypeNull:
	case fastjson.TypeString:
		m.Content = d.str(c.GetStringBytes())
	case fastjson.TypeArray:
		parts, _ := c.Array() // the type was checked
		start := len(d.arena)
		for j, pv := range parts {
			if pv.Type() != fastjson.TypeObject {
				return fmt.Errorf("messages[%d].content[%d]: want an object, got %s", i, j, pv.Type())
			}
			tv := Field(pv, "type")
			if tv == nil || tv.Type() != fastjson.TypeString {
				return fmt.Errorf("messages[%d].content[%d].type: missing or not a string", i, j)
			}
			if j > 0 {
				d.arena = append(d.arena, PartSeparator...)
			}
			typ := tv.GetStringBytes()
			if string(typ) != "text" {
				if len(typ) > 32 { // as Placeholder, without its allocation
					d.arena = append(d.arena, "<part>"...)
				} else {
					d.arena = append(append(append(d.arena, '<'), typ...), '>')
				}
				continue
			}
			text := Field(pv, "text")
			if text == nil || text.Type() != fastjson.TypeString {
				return fmt.Errorf("messages[%d].content[%d].text: missing or not a string", i, j)
			}
			d.arena = append(d.arena, text.GetStringBytes()...)
		}
		m.Content = arenaString(d.arena, start)
	default:
		return fmt.Errorf("messages[%d].content: want a string, an array of parts or null, got %s", i, c.Type())
	}
	return nil
}

// FieldError is a request field that does not decode; Field names it
// (OpenAI's error "param").
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Msg }

// OptBool reads the optional boolean field name of object v into dst
// (absent or null: dst unchanged); anything else is a *FieldError.
func OptBool(v *fastjson.Value, dst *bool, name string) error {
	f := Field(v, name)
	if f == nil {
		return nil
	}
	switch f.Type() {
	case fastjson.TypeNull:
	case fastjson.TypeTrue:
		*dst = true
	case fastjson.TypeFalse:
		*dst = false
	default:
		return &FieldError{name, fmt.Sprintf("%s: want true or false, got %s", name, f.Type())}
	}
	return nil
}

// FromRequest reads what rendering needs from a chat completions request
// body (a JSON object): its non-empty "messages", and the options vLLM
// takes from it: add_generation_prompt (default true) and
// chat_template_kwargs.enable_thinking. A bad field is a *FieldError.
// The router and the simulator decode chat requests through it.
func FromRequest(v *fastjson.Value) ([]Message, Options, error) {
	var d decoder
	return fromRequest(v, &d, nil)
}

func fromRequest(v *fastjson.Value, d *decoder, dst []Message) ([]Message, Options, error) {
	opt := Options{AddGenerationPrompt: true}
	mv := Field(v, "messages")
	if mv == nil {
		return nil, opt, &FieldError{"messages", "messages: missing"}
	}
	msgs, err := d.messages(dst, mv)
	if err != nil {
		return nil, opt, &FieldError{"messages", err.Error()}
	}
	if len(msgs) == 0 {
		return nil, opt, &FieldError{"messages", "messages: empty"}
	}
	if err := OptBool(v, &opt.AddGenerationPrompt, "add_generation_prompt"); err != nil {
		return nil, opt, err
	}
	if t := Field(v, "chat_template_kwargs", "enable_thinking"); t != nil && t.Type() == fastjson.TypeFalse {
		opt.DisableThinking = true
	}
	return msgs, opt, nil
}
