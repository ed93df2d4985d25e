package chat

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/valyala/fastjson"
)

// Message is one entry of an OpenAI `messages` array, reduced to what the
// templates read.
type Message struct {
	Role string
	// Content is the message text. ParseMessages joins an array of content
	// parts into it as vLLM does for a template that expects a string
	// (see ParseMessages); null or absent content is "".
	Content string
	// Reasoning is an assistant message's "reasoning", which vLLM hands
	// the template as reasoning_content (the qwen3 template renders it
	// inside <think>); HasReasoning says it was given (a JSON string, not
	// null). A request's own "reasoning_content" is dropped, as vLLM drops
	// it (entrypoints/chat_utils.py, _parse_chat_message_content, which
	// copies only "reasoning", into both keys, and only for role
	// assistant).
	Reasoning    string
	HasReasoning bool
	// parts encodes the content's parts when it was a non-empty array
	// (else ""), for Parts: a kind byte each (partText, then the text's
	// length as a uvarint; or a media kind), the texts being those joined
	// at the end of Content. A string, not a []Part: a body of a million
	// one-character parts then costs a few bytes a part, not 32
	// (openai's TestDecodeMemory bounds it), and Message stays comparable.
	parts string
}

// Part is one content part of a Message as vLLM hands it to a template
// that loops over a message's content (its "openai" content format,
// NewJinja): Type "text" with its Text, "tool_reference" with the name as
// Text, or a modality ("image", "audio", "video", "part" for a type vLLM
// does not know) without text.
type Part struct {
	Type, Text string
}

// The kinds of an encoded part.
const (
	partText  = 't'
	partTool  = 'r' // a tool_reference: its name is the text
	partImage = 'i'
	partAudio = 'a'
	partVideo = 'v'
	partOther = 'p'
)

func partKind(modality string) byte {
	switch modality {
	case "image":
		return partImage
	case "audio":
		return partAudio
	case "video":
		return partVideo
	}
	return partOther
}

// Parts returns the content's parts when it was a non-empty array (nil
// for a string, null or empty content), in order: a text part for each
// text-bearing part whose text is a string, empty ones kept (vLLM's
// "openai" format keeps them, its string join drops them), a media part
// for each media part. A null text is dropped; a tool_reference part has
// Type "tool_reference" and its name as Text, a prompt_embeds part is the
// text "<prompt_embeds>". The texts are views into Content. Any
// goroutine.
func (m *Message) Parts() []Part {
	if m.parts == "" {
		return nil
	}
	// The texts are joined at the end of Content: find where they start.
	var n, sum, texts int
	for i := 0; i < len(m.parts); {
		k, l, next := nextPart(m.parts, i)
		i = next
		n++
		if k != partText && k != partTool {
			continue
		}
		if l > 0 {
			sum += l
			texts++
		}
	}
	pos := len(m.Content) - sum - max(texts-1, 0)
	out := make([]Part, 0, n)
	for i := 0; i < len(m.parts); {
		k, l, next := nextPart(m.parts, i)
		i = next
		switch k {
		case partText, partTool:
			p := Part{Type: "text"}
			if k == partTool {
				p.Type = "tool_reference"
			}
			if l > 0 && pos >= 0 && pos+l <= len(m.Content) {
				p.Text = m.Content[pos : pos+l]
				pos += l + 1
			}
			out = append(out, p)
		case partImage:
			out = append(out, Part{Type: "image"})
		case partAudio:
			out = append(out, Part{Type: "audio"})
		case partVideo:
			out = append(out, Part{Type: "video"})
		default:
			out = append(out, Part{Type: "part"})
		}
	}
	return out
}

// A text part shorter than shortPart bytes is encoded in one byte:
// shortText or shortTool with its length in the low 6 bits (the other
// kinds are ASCII letters); a longer one is its kind, then its length as
// a uvarint. A million one-character parts so take a megabyte, not two
// (openai's TestDecodeMemory).
const (
	shortPart = 64
	shortText = 0x80
	shortTool = 0xC0
)

// nextPart decodes the part at parts[i]: its kind, its text's length
// (texts), and where the next part starts.
func nextPart(parts string, i int) (kind byte, n, next int) {
	k := parts[i]
	i++
	switch {
	case k >= shortTool:
		return partTool, int(k &^ shortTool), i
	case k >= shortText:
		return partText, int(k &^ shortText), i
	case k == partText || k == partTool:
		l, w := binary.Uvarint([]byte(parts[i:min(i+binary.MaxVarintLen64, len(parts))]))
		return k, int(l), i + w
	}
	return k, 0, i
}

// PartSeparator joins the parts of an array content. vLLM joins text parts
// with "\n" for templates that expect a string (its "string" content
// format), and the templates here all expect a string.
const PartSeparator = "\n"

// Placeholder returns the text that stands in for a media content part of
// the given modality (image, audio, video; for a part type vLLM does not
// know, the type, or "part" if longer than 32 bytes): "<" + modality + ">".
// vLLM puts the model's own placeholder for each media part before the
// message's text, joined by "\n" (a text-only model refuses media); saltus
// cannot know a multimodal model's placeholder, so it puts this fixed one
// there: the same parts give the same text, so the messages before keep
// their tokens and cache keys, and two different images look alike to the
// router (the prediction is then too optimistic, never inconsistent).
func Placeholder(modality string) string {
	if len(modality) > 32 {
		return "<part>"
	}
	return "<" + modality + ">"
}

// mediaModality maps vLLM's media part types to their modality
// (MM_PARSER_MAP in entrypoints/chat_utils.py).
func mediaModality(typ []byte) string {
	switch string(typ) {
	case "image_url", "input_image", "image_pil", "image_embeds":
		return "image"
	case "audio_url", "input_audio", "audio_embeds":
		return "audio"
	case "video_url":
		return "video"
	}
	return ""
}

// promptEmbedsText is what vLLM puts in the text, in place, for a
// prompt_embeds part (PROMPT_EMBEDS_PLACEHOLDER_TOKEN).
var promptEmbeds = []byte("<prompt_embeds>")

// ParseMessages decodes an OpenAI `messages` JSON array. It accepts what
// the chat completions API accepts for rendering: role (a string,
// required), content (a string, null, absent, or an array of parts), and
// for an assistant reasoning (a string or null). Content parts are joined
// as vLLM's string content format joins them (_parse_chat_message_content_parts):
// the text of each text part (a string part, or type text, input_text,
// output_text: "text"; refusal: "refusal"; thinking: "thinking";
// tool_reference: "name"; prompt_embeds: "<prompt_embeds>"), empty and
// null ones dropped, joined by "\n"; a Placeholder for each media part
// (by type, or without a type by its image_url, audio_url, ... field)
// before them, also joined by "\n". Other fields (name, tool_calls,
// tool_call_id, reasoning_content) are ignored: no built-in template
// renders them yet, or vLLM drops them. Errors name the index and field, e.g. "messages[2].content[1].text:
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
	most  int // the most a Scratch's arena needs (body.go's room)
	// desc is a content's encoded parts while it is joined (reused
	// through a Scratch); they go to the arena after its text.
	desc []byte
	// joined: the parts are not described (MessagesFromBodyJoined,
	// Scratch.Joined).
	joined bool
}

// addText and addMedia encode a content part into d.desc: a text part
// (kind partText or partTool) whose text has n bytes, or a media part.
func (d *decoder) addText(kind byte, n int) {
	if d.joined {
		return
	}
	if n < shortPart {
		b := byte(shortText)
		if kind == partTool {
			b = shortTool
		}
		d.desc = append(d.desc, b|byte(n))
		return
	}
	d.desc = binary.AppendUvarint(append(d.desc, kind), uint64(n))
}

func (d *decoder) addMedia(modality string) {
	if !d.joined {
		d.desc = append(d.desc, partKind(modality))
	}
}

// endParts puts d.desc into the arena, as a Message's parts.
func (d *decoder) endParts() string {
	if len(d.desc) == 0 {
		return ""
	}
	start := len(d.arena)
	d.arena = append(d.arena, d.desc...)
	return arenaString(d.arena, start)
}

func (d *decoder) str(b []byte) string {
	if d.view {
		return viewString(b)
	}
	d.room()
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
// are views: into the body decoded and into the Scratch, valid until the
// Scratch is used again or the body's buffer is, and never to be kept
// beyond (copy what must outlive them). A Scratch belongs to one
// goroutine; the zero value is ready.
type Scratch struct {
	// Joined: MessagesFromBody does not describe content parts
	// (Message.Parts nil), as MessagesFromBodyJoined: set it for a
	// renderer that joins them (Renderer.WantsParts false).
	Joined bool

	arena  []byte    // joined content parts, unescaped strings
	desc   []byte    // decoder.desc
	render []byte    // Render's arena
	msgs   []Message // MessagesFromBody's result
	segs   []Segment // Render's result
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
	if m.Role == "assistant" {
		if rv := Field(v, "reasoning"); rv != nil && rv.Type() != fastjson.TypeNull {
			if rv.Type() != fastjson.TypeString {
				return fmt.Errorf("messages[%d].reasoning: want a string or null, got %s", i, rv.Type())
			}
			m.Reasoning, m.HasReasoning = d.str(rv.GetStringBytes()), true
		}
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
		d.desc = d.desc[:0]
		// Two passes, as vLLM builds the text: the media placeholders,
		// then the texts; every part is checked in the first.
		for _, media := range [2]bool{true, false} {
			for j, pv := range parts {
				text, modality, kind, err := contentPart(pv, i, j)
				if err != nil {
					return err
				}
				if media {
					if modality == "" {
						continue
					}
					text = nil
				} else {
					if modality != "" {
						d.addMedia(modality)
					} else if kind != 0 {
						d.addText(kind, len(text))
					}
					if len(text) == 0 {
						continue // vLLM drops empty and null texts from the join
					}
				}
				if len(d.arena) > start {
					d.arena = append(d.arena, PartSeparator...)
				}
				if media {
					if len(modality) > 32 { // as Placeholder, without its allocation
						d.arena = append(d.arena, "<part>"...)
					} else {
						d.arena = append(append(append(d.arena, '<'), modality...), '>')
					}
					continue
				}
				d.arena = append(d.arena, text...)
			}
		}
		m.Content = arenaString(d.arena, start)
		m.parts = d.endParts()
	default:
		return fmt.Errorf("messages[%d].content: want a string, an array of parts or null, got %s", i, c.Type())
	}
	return nil
}

// contentPart classifies content part j of message i as vLLM's string
// content format does: its text (nil for none: a media part, or a text
// part whose text is null or absent), or the modality of a media part
// (for a type vLLM does not know, the type itself: vLLM refuses the
// request, so what stands there does not matter, but it is stable).
func contentPart(pv *fastjson.Value, i, j int) (text []byte, modality string, kind byte, err error) {
	switch pv.Type() {
	case fastjson.TypeString:
		return pv.GetStringBytes(), "", partText, nil
	case fastjson.TypeObject:
	default:
		return nil, "", 0, fmt.Errorf("messages[%d].content[%d]: want an object or a string, got %s", i, j, pv.Type())
	}
	tv := Field(pv, "type")
	var typ []byte
	switch {
	case tv == nil || tv.Type() == fastjson.TypeNull:
		// vLLM: a part without a type by the field it has
		// (_parse_chat_message_content_mm_part).
		for _, k := range [...]string{"image_url", "image_pil", "image_embeds", "audio_embeds", "prompt_embeds", "audio_url", "input_audio", "video_url", "tool_reference"} {
			if f := Field(pv, k); f != nil && (k != "input_audio" || f.Type() != fastjson.TypeNull) {
				typ = []byte(k) // rare: a part without a type
				break
			}
		}
		if typ == nil {
			return nil, "", 0, fmt.Errorf("messages[%d].content[%d].type: missing", i, j)
		}
	case tv.Type() == fastjson.TypeString:
		typ = tv.GetStringBytes()
	default:
		return nil, "", 0, fmt.Errorf("messages[%d].content[%d].type: want a string, got %s", i, j, tv.Type())
	}
	var key string
	switch string(typ) {
	case "text", "input_text", "output_text":
		key = "text"
	case "refusal":
		key = "refusal"
	case "thinking":
		key = "thinking"
	case "tool_reference":
		key = "name"
	case "prompt_embeds":
		return promptEmbeds, "", partText, nil
	default:
		if m := mediaModality(typ); m != "" {
			return nil, m, 0, nil
		}
		return nil, string(typ), 0, nil
	}
	f := Field(pv, key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil, "", 0, nil
	}
	if f.Type() != fastjson.TypeString {
		return nil, "", 0, fmt.Errorf("messages[%d].content[%d].%s: want a string or null, got %s", i, j, key, f.Type())
	}
	if key == "name" {
		return f.GetStringBytes(), "", partTool, nil
	}
	return f.GetStringBytes(), "", partText, nil
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
// The simulator decodes chat requests through it; the router reads the
// body's bytes instead (openai.Decode, MessagesFromBody).
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
