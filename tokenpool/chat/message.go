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
	// After the parts, the message's extras (see Extra), when it has
	// any: the byte partExtra, then appendExtra's encoding. Kept here and
	// not in fields of their own for the same reason: three more strings
	// would take a million smallest messages past 8 bytes a body byte.
	parts string
}

// Extra is what a message carries besides its role, content and
// reasoning that only a model's own template reads, as vLLM hands it to
// the template (entrypoints/chat_utils.py, _parse_chat_message_content):
// an assistant's tool_calls (the JSON array, compacted; vLLM then parses
// each call's arguments, see NewJinja), a tool message's tool_call_id,
// and any message's name. The built-in templates render none of them
// (doc.go).
type Extra struct {
	ToolCalls     string // a JSON array, "" for none
	ToolCallID    string
	HasToolCallID bool
	Name          string
	HasName       bool
}

// Extra returns the message's extras (the zero Extra for none). Any
// goroutine.
func (m *Message) Extra() Extra {
	i := 0
	for i < len(m.parts) {
		k, _, next := nextPart(m.parts, i)
		if k == partExtra {
			return decodeExtra(m.parts[i+1:])
		}
		i = next
	}
	return Extra{}
}

// partExtra starts the extras after a message's parts (an ASCII letter,
// as the other long kinds, so never a short part's byte).
const partExtra = 'x'

// The flags byte of an encoded Extra.
const (
	extraToolCallID = 1 << iota
	extraName
)

// appendExtra encodes x after dst: partExtra, a flags byte, then the
// three strings each as a uvarint length and the bytes.
func appendExtra(dst []byte, x *Extra) []byte {
	var flags byte
	if x.HasToolCallID {
		flags |= extraToolCallID
	}
	if x.HasName {
		flags |= extraName
	}
	dst = append(dst, partExtra, flags)
	for _, s := range [...]string{x.ToolCalls, x.ToolCallID, x.Name} {
		dst = append(binary.AppendUvarint(dst, uint64(len(s))), s...)
	}
	return dst
}

// decodeExtra reads appendExtra's encoding (without its partExtra byte).
func decodeExtra(s string) Extra {
	if len(s) < 1 {
		return Extra{}
	}
	x := Extra{HasToolCallID: s[0]&extraToolCallID != 0, HasName: s[0]&extraName != 0}
	s = s[1:]
	var f [3]string
	for k := range f {
		n, w := binary.Uvarint([]byte(s[:min(binary.MaxVarintLen64, len(s))]))
		if w <= 0 || n > uint64(len(s)-w) {
			return Extra{} // unreachable: appendExtra wrote it
		}
		f[k], s = s[w:w+int(n)], s[w+int(n):]
	}
	x.ToolCalls, x.ToolCallID, x.Name = f[0], f[1], f[2]
	return x
}

// endExtra appends x's encoding after m's parts in the arena (where
// endParts put them last, or alone), for Message.Extra. The encoding
// never takes more bytes than the members it encodes took in the body
// (canonicalJSON never lengthens a value, and each member's key and
// quotes outweigh a length prefix; the 5 fixed bytes of an Extra with
// one short member fit in that member's key), so body.go's arena bound
// holds.
func (d *decoder) endExtra(m *Message, x *Extra) {
	if d.noExtras || *x == (Extra{}) {
		return
	}
	d.room()
	start := len(d.arena) - len(m.parts) // endParts appended the parts last
	d.arena = appendExtra(d.arena, x)
	m.parts = arenaString(d.arena, start)
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
	if m.parts == "" || m.parts[0] == partExtra {
		return nil
	}
	// The texts are joined at the end of Content: find where they start.
	var n, sum, texts int
	for i := 0; i < len(m.parts); {
		k, l, next := nextPart(m.parts, i)
		if k == partExtra {
			break
		}
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
		if k == partExtra {
			break
		}
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
	// Scratch.Joined); noExtras: nor the messages' Extra.
	joined, noExtras bool
	// tmp holds a message's tool_calls written back in one form
	// (bodyExtra).
	tmp []byte
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
	// renderer that joins them (Renderer.Wants without WantParts).
	// NoExtras: nor keeps the messages' Extra (without WantExtras).
	Joined, NoExtras bool

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
	if err := d.content(m, Field(v, "content"), i); err != nil {
		return err
	}
	if !d.noExtras {
		x := d.valueExtra(m, v)
		d.endExtra(m, &x)
	}
	return nil
}

// valueExtra is bodyExtra on a parse tree.
func (d *decoder) valueExtra(m *Message, v *fastjson.Value) Extra {
	var x Extra
	if tc := Field(v, "tool_calls"); m.Role == "assistant" && tc != nil && tc.Type() == fastjson.TypeArray && len(tc.GetArray()) > 0 {
		d.tmp = AppendCanonical(d.tmp[:0], tc)
		x.ToolCalls = viewString(d.tmp)
	}
	if id := Field(v, "tool_call_id"); m.Role == "tool" && id != nil && id.Type() == fastjson.TypeString {
		x.ToolCallID, x.HasToolCallID = string(id.GetStringBytes()), true
	}
	if n := Field(v, "name"); n != nil && n.Type() == fastjson.TypeString {
		x.Name, x.HasName = string(n.GetStringBytes()), true
	}
	return x
}

// content reads message i's content (c, nil when absent) into m.
func (d *decoder) content(m *Message, c *fastjson.Value, i int) error {
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
// chat_template_kwargs.enable_thinking; and tools, chat_template_kwargs
// and reasoning_effort as they are. A bad field is a *FieldError.
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
	if !d.noExtras {
		if kw := Field(v, "chat_template_kwargs"); kw != nil && kw.Type() == fastjson.TypeObject {
			opt.Kwargs = string(AppendCanonical(nil, kw))
		}
		if tv := Field(v, "tools"); tv != nil && tv.Type() == fastjson.TypeArray {
			opt.Tools = string(AppendCanonical(nil, tv))
		}
		if re := Field(v, "reasoning_effort"); re != nil && re.Type() == fastjson.TypeString {
			opt.ReasoningEffort = string(re.GetStringBytes())
		}
	}
	return msgs, opt, nil
}
