package chat

import (
	"fmt"
	"slices"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/internal/jsonscan"
)

// Decoding messages straight from a request body's bytes (issue 33): the
// router's decoder (openai) reads the body without a parse tree, and hands
// the "messages" value to MessagesFromBody, which reads what
// messagesFromValue reads, with the same errors, and keeps nothing per
// value it skips: one Message per message, and the strings in one arena
// no larger than the array's bytes (or, through a Scratch, views into the
// body where a string has no escape).

// minMessageBytes is the shortest message that decodes, {"role":"x"}: an
// array of n messages spans at least n*(minMessageBytes+1)+1 bytes.
const minMessageBytes = len(`{"role":"x"}`)

// MessagesFromBody is ParseMessages for raw, the "messages" value of a
// request body that passed a grammar check (openai's body scan), exactly
// (no white space around it): the same messages and errors, read from the
// bytes. The strings are copies, in one arena of at most len(raw) bytes,
// made when the first string is copied. Any goroutine.
func MessagesFromBody(raw []byte) ([]Message, error) {
	d := decoder{most: len(raw)}
	return d.bodyMessages(nil, raw)
}

// MessagesFromBodyJoined is MessagesFromBody without the content parts'
// description (Message.Parts is nil) and the messages' Extra: for a
// built-in renderer, which reads neither (Renderer.Wants 0). Any
// goroutine.
func MessagesFromBodyJoined(raw []byte) ([]Message, error) {
	return MessagesFromBodyFor(raw, 0)
}

// MessagesFromBodyFor is MessagesFromBody keeping only what w names
// beyond role, content and reasoning (Renderer.Wants). Any goroutine.
func MessagesFromBodyFor(raw []byte, w Wants) ([]Message, error) {
	d := decoder{most: len(raw), joined: w&WantParts == 0, noExtras: w&WantExtras == 0}
	return d.bodyMessages(nil, raw)
}

// MessagesFromBody is the package's MessagesFromBody without copies: a
// string without escapes is a view into raw, the others (and joined
// content parts) views into the Scratch; valid while raw is and until
// the Scratch is used again. Errors are the same.
func (sc *Scratch) MessagesFromBody(raw []byte) ([]Message, error) {
	d := decoder{arena: sc.arena[:0], view: true, most: len(raw), desc: sc.desc[:0], joined: sc.Joined, noExtras: sc.NoExtras}
	msgs, err := d.bodyMessages(sc.msgs, raw)
	sc.arena, sc.desc = d.arena, d.desc
	if msgs != nil {
		sc.msgs = msgs
	}
	return msgs, err
}

// room makes sure the arena will not grow again during this decode: the
// strings and joined texts of the messages never take more than the
// array's bytes (d.most), so when the arena is first short of room it is
// made that large at once. A message of a million parts then costs one
// arena of at most the body's size, not append's series of ever larger
// ones (measured: 2.65 bytes allocated per body byte with append, for a
// million one-character parts through a Scratch, 1.0 with room), and
// messages that need no arena (views, or an error first) cost none. With
// no most (the fastjson decoder), append grows it.
func (d *decoder) room() {
	if d.most == 0 || cap(d.arena) >= d.most {
		return
	}
	a := make([]byte, len(d.arena), d.most)
	copy(a, d.arena) // a join in progress, from its start
	d.arena = a
}

// bstr is str for the string value at b[at] that ends at end.
func (d *decoder) bstr(b []byte, at, end int) string {
	raw, escaped := jsonscan.StrTo(b, at, end)
	if !escaped {
		return d.str(raw)
	}
	d.room()
	start := len(d.arena)
	d.arena = jsonscan.AppendUnescaped(d.arena, raw)
	return arenaString(d.arena, start)
}

// bodyMessages decodes the array b into dst's memory. It counts the
// elements only when dst is short of room (a warm Scratch is not), and
// then allocates exactly one Message per element, or none when there are
// too many elements for all to be messages (`[{},{},…]`): one of them
// fails, and is found without a Message for each.
func (d *decoder) bodyMessages(dst []Message, b []byte) ([]Message, error) {
	if !jsonscan.Is(b, 0, '[') {
		return nil, fmt.Errorf("messages: want a JSON array, got %s", jsonscan.TypeName(b, 0))
	}
	msgs := dst[:0]
	for e, i := jsonscan.Elem(b, 0), 0; e >= 0; i++ {
		if len(msgs) == cap(msgs) {
			n := jsonscan.Count(b, 0)
			if n*(minMessageBytes+1)+1 > len(b) {
				for ; e >= 0; i++ {
					var m Message
					end, err := d.bodyMessage(&m, b, e, i)
					if err != nil {
						clear(msgs)
						return nil, err
					}
					e = jsonscan.After(b, end)
				}
				return d.slowMessages(msgs, b) // unreachable for a checked body
			}
			msgs = slices.Grow(msgs, n-len(msgs))
		}
		msgs = append(msgs, Message{})
		end, err := d.bodyMessage(&msgs[i], b, e, i)
		if err != nil {
			clear(msgs)
			return nil, err
		}
		e = jsonscan.After(b, end)
	}
	return msgs, nil
}

// slowMessages decodes b from the start into msgs grown by append: the
// way out of bodyMessages' impossible case, so that no input is decoded
// partly.
func (d *decoder) slowMessages(msgs []Message, b []byte) ([]Message, error) {
	clear(msgs)
	msgs = msgs[:0]
	i := 0
	for e := jsonscan.Elem(b, 0); e >= 0; e = jsonscan.Next(b, e) {
		msgs = append(msgs, Message{})
		if _, err := d.bodyMessage(&msgs[i], b, e, i); err != nil {
			clear(msgs)
			return nil, err
		}
		i++
	}
	return msgs, nil
}

// The members of a message that bodyMessage reads.
const (
	mRole = iota
	mReasoning
	mContent
	mToolCalls
	mToolCallID
	mName
	mN
)

// bodyMessage is message on the bytes: message i at b[at], into m. It
// returns the offset past the message.
func (d *decoder) bodyMessage(m *Message, b []byte, at, i int) (int, error) {
	if !jsonscan.Is(b, at, '{') {
		return -1, fmt.Errorf("messages[%d]: want an object, got %s", i, jsonscan.TypeName(b, at))
	}
	var f, fe [mN]int
	end := jsonscan.Members(b, at, []string{mRole: "role", mReasoning: "reasoning", mContent: "content",
		mToolCalls: "tool_calls", mToolCallID: "tool_call_id", mName: "name"}, f[:], fe[:])
	if f[mRole] < 0 {
		return -1, fmt.Errorf("messages[%d].role: missing", i)
	}
	if !jsonscan.Is(b, f[mRole], '"') {
		return -1, fmt.Errorf("messages[%d].role: want a string, got %s", i, jsonscan.TypeName(b, f[mRole]))
	}
	m.Role = d.bstr(b, f[mRole], fe[mRole])
	if m.Role == "" {
		return -1, fmt.Errorf("messages[%d].role: empty", i)
	}
	if m.Role == "assistant" {
		if rv := f[mReasoning]; jsonscan.Present(b, rv) {
			if !jsonscan.Is(b, rv, '"') {
				return -1, fmt.Errorf("messages[%d].reasoning: want a string or null, got %s", i, jsonscan.TypeName(b, rv))
			}
			m.Reasoning, m.HasReasoning = d.bstr(b, rv, fe[mReasoning]), true
		}
	}
	if err := d.bodyContent(m, b, f[mContent], fe[mContent], i); err != nil {
		return -1, err
	}
	if !d.noExtras {
		x := d.bodyExtra(m, b, &f, &fe)
		d.endExtra(m, &x)
	}
	return end, nil
}

// bodyExtra reads a message's Extra from its members (f, fe), as vLLM
// keeps them: tool_calls of an assistant when a non-empty array (vLLM
// drops an empty one, so the template takes its plain assistant path),
// tool_call_id of a tool message and name when strings. Other types are
// the engine's to refuse. The strings are views into b, d.tmp or
// copies, valid until the next message: endExtra copies them.
func (d *decoder) bodyExtra(m *Message, b []byte, f, fe *[mN]int) Extra {
	var x Extra
	if tc := f[mToolCalls]; m.Role == "assistant" && jsonscan.Is(b, tc, '[') && jsonscan.Elem(b, tc) >= 0 {
		if n := fe[mToolCalls] - tc; cap(d.tmp) < n {
			d.tmp = make([]byte, 0, n) // the canonical form is never longer: no regrowth
		}
		d.tmp = appendCanonicalAt(d.tmp[:0], b, tc)
		x.ToolCalls = viewString(d.tmp)
	}
	if id := f[mToolCallID]; m.Role == "tool" && jsonscan.Is(b, id, '"') {
		x.ToolCallID, x.HasToolCallID = unescaped(b, id, fe[mToolCallID]), true
	}
	if n := f[mName]; jsonscan.Is(b, n, '"') {
		x.Name, x.HasName = unescaped(b, n, fe[mName]), true
	}
	return x
}

// CanonicalJSON is raw, a checked body's JSON value, in one written form
// (AppendCanonical): Options.Tools and Options.Kwargs. It reads raw's
// bytes (appendCanonicalAt), so it costs no parse tree.
func CanonicalJSON(raw []byte) string {
	return string(appendCanonicalAt(nil, raw, jsonscan.SkipWS(raw, 0)))
}

// appendCanonicalAt appends the JSON value at b[i] of a checked body as
// AppendCanonical writes it, read from the bytes: strings unescaped as
// fastjson unescapes them (jsonscan.AppendUnescaped), every member kept
// in order. A fastjson tree of a message's tool calls cost ~3.6 KB per
// call of 20 body bytes (openai's TestDecodeMemory, Anthropic tool_use
// blocks); this costs the output.
func appendCanonicalAt(dst, b []byte, i int) []byte {
	switch {
	case jsonscan.Is(b, i, '{'):
		dst = append(dst, '{')
		j := jsonscan.SkipWS(b, i+1)
		for first := true; j < len(b) && b[j] == '"'; first = false {
			if !first {
				dst = append(dst, ',')
			}
			raw, escaped, end := jsonscan.Str(b, j)
			dst = appendQuotedRaw(dst, raw, escaped)
			dst = append(dst, ':')
			v := jsonscan.SkipWS(b, jsonscan.SkipWS(b, end)+1) // past the colon
			dst = appendCanonicalAt(dst, b, v)
			j = jsonscan.After(b, jsonscan.SkipValue(b, v))
			if j < 0 {
				break
			}
		}
		return append(dst, '}')
	case jsonscan.Is(b, i, '['):
		dst = append(dst, '[')
		for e, k := jsonscan.Elem(b, i), 0; e >= 0; e, k = jsonscan.Next(b, e), k+1 {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonicalAt(dst, b, e)
		}
		return append(dst, ']')
	case jsonscan.Is(b, i, '"'):
		raw, escaped, _ := jsonscan.Str(b, i)
		return appendQuotedRaw(dst, raw, escaped)
	}
	return append(dst, jsonscan.Num(b, i)...) // a number as written, true, false, null
}

// appendQuotedRaw is appendQuoted of the text of a string's raw bytes:
// unescaped into dst, then its quotes and backslashes escaped in place
// (from the end), so no copy of the text is made.
func appendQuotedRaw(dst, raw []byte, escaped bool) []byte {
	if !escaped {
		return appendQuoted(dst, raw)
	}
	dst = append(dst, '"')
	start := len(dst)
	dst = jsonscan.AppendUnescaped(dst, raw)
	n := 0
	for _, c := range dst[start:] {
		if c == '"' || c == '\\' {
			n++
		}
	}
	if n > 0 {
		end := len(dst)
		dst = append(dst, make([]byte, n)...)
		for i, j := end-1, len(dst)-1; i >= start; i-- {
			c := dst[i]
			dst[j] = c
			j--
			if c == '"' || c == '\\' {
				dst[j] = '\\'
				j--
			}
		}
	}
	return append(dst, '"')
}

// AppendCanonical appends v in one written form, whether it was parsed
// from a body's bytes or is part of a whole request's parse tree, so
// that both decoders give equal Messages and Options: no white space,
// strings (keys too) unescaped and written back with only '"' and '\\'
// escaped. That form is never longer than the value's bytes (an escape
// shrinks or stays; control characters, which the body scan lets
// through as fastjson does, stay raw), so it keeps body.go's arena
// bound; it is JSON for fastjson, which reads it back (NewJinja).
// fastjson's own MarshalTo is not one form: it writes a string raw or
// Go-quoted depending on whether it was read before.
func AppendCanonical(dst []byte, v *fastjson.Value) []byte { return appendJSON(dst, v, appendQuoted) }

// appendJSON appends v compact, members in their order, each string
// (keys too) written by quote from its unescaped bytes, a number as
// written.
func appendJSON(dst []byte, v *fastjson.Value, quote func(dst, s []byte) []byte) []byte {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object() // the type was checked
		dst = append(dst, '{')
		first := true
		o.Visit(func(k []byte, fv *fastjson.Value) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(quote(dst, k), ':')
			dst = appendJSON(dst, fv, quote)
		})
		return append(dst, '}')
	case fastjson.TypeArray:
		dst = append(dst, '[')
		for i, e := range v.GetArray() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSON(dst, e, quote)
		}
		return append(dst, ']')
	case fastjson.TypeString:
		return quote(dst, v.GetStringBytes())
	}
	return v.MarshalTo(dst) // a number as written, true, false, null
}

func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}

// unescaped is the string value at b[at] that ends at end: a view when
// it has no escapes, else a copy.
func unescaped(b []byte, at, end int) string {
	raw, escaped := jsonscan.StrTo(b, at, end)
	if !escaped {
		return viewString(raw)
	}
	return string(jsonscan.AppendUnescaped(nil, raw))
}

// bodyContent reads message i's content (at b[c], ending at ce; c < 0
// when absent) into m.
func (d *decoder) bodyContent(m *Message, b []byte, c, ce, i int) error {
	if c < 0 {
		return nil
	}
	switch {
	case jsonscan.Is(b, c, 'n'):
	case jsonscan.Is(b, c, '"'):
		m.Content = d.bstr(b, c, ce)
	case jsonscan.Is(b, c, '['):
		d.room()
		start := len(d.arena)
		// As message builds it: the media placeholders, then the texts.
		// The first pass checks every part and joins the texts, the
		// second (only with media parts) joins the placeholders after
		// them, and a rotation puts them first: a text-only content is
		// read once.
		media := 0
		j := 0
		// One byte a part at least (its kind): sized at once, so a long
		// array's parts do not grow it by doubling (openai's
		// TestDecodeMemory: a million parts).
		d.desc = d.desc[:0]
		if n := jsonscan.Count(b, c); n > cap(d.desc) && !d.joined {
			d.desc = make([]byte, 0, n)
		}
		for pv := jsonscan.Elem(b, c); pv >= 0; j++ {
			text, escaped, modality, kind, pend, err := bodyPart(b, pv, i, j)
			if err != nil {
				return err
			}
			pv = jsonscan.After(b, pend)
			if modality != "" {
				d.addMedia(modality)
				media++
				continue
			}
			if len(text) == 0 {
				if kind != 0 {
					d.addText(kind, 0)
				}
				continue // vLLM drops empty and null texts from the join
			}
			if len(d.arena) > start {
				d.arena = append(d.arena, PartSeparator...)
			}
			n := len(d.arena)
			if escaped {
				d.arena = jsonscan.AppendUnescaped(d.arena, text)
			} else {
				d.arena = append(d.arena, text...)
			}
			d.addText(kind, len(d.arena)-n)
		}
		if media > 0 {
			texts := len(d.arena) - start
			if texts > 0 {
				d.arena = append(d.arena, PartSeparator...)
			}
			ph := len(d.arena)
			for pv := jsonscan.Elem(b, c); pv >= 0; {
				_, _, modality, _, pend, _ := bodyPart(b, pv, i, 0) // checked in the first pass
				if pend < 0 {
					break // unreachable: the first pass read every part
				}
				pv = jsonscan.After(b, pend)
				if modality == "" {
					continue
				}
				if len(d.arena) > ph {
					d.arena = append(d.arena, PartSeparator...)
				}
				if len(modality) > 32 { // as Placeholder, without its allocation
					d.arena = append(d.arena, "<part>"...)
				} else {
					d.arena = append(append(append(d.arena, '<'), modality...), '>')
				}
			}
			if texts > 0 {
				// texts, separator, placeholders → placeholders,
				// separator, texts: reverse the whole, then each side.
				r := d.arena[start:]
				slices.Reverse(r)
				slices.Reverse(r[:len(d.arena)-ph])
				slices.Reverse(r[len(r)-texts:])
			}
		}
		m.Content = arenaString(d.arena, start)
		m.parts = d.endParts()
	default:
		return fmt.Errorf("messages[%d].content: want a string, an array of parts or null, got %s", i, jsonscan.TypeName(b, c))
	}
	return nil
}

// The members of a content part that bodyPart reads: its type, the text
// keys, and the keys that give a part without a type its type, in the
// order contentPart tries them (pTypeless on).
const (
	pType = iota
	pText
	pRefusal
	pThinking
	pName
	pTypeless
)

// bodyPart is contentPart on a body's bytes: the raw text of part j of
// message i (escaped: it has escapes to undo), or its modality. A text of
// nil is no text.
func bodyPart(b []byte, pv, i, j int) (text []byte, escaped bool, modality string, kind byte, end int, err error) {
	switch {
	case jsonscan.Is(b, pv, '"'):
		text, escaped, end = jsonscan.Str(b, pv)
		return text, escaped, "", partText, end, nil
	case jsonscan.Is(b, pv, '{'):
	default:
		return nil, false, "", 0, -1, fmt.Errorf("messages[%d].content[%d]: want an object or a string, got %s", i, j, jsonscan.TypeName(b, pv))
	}
	// A local array, not a package variable (rules R12): on the stack.
	keys := [...]string{pType: "type", pText: "text", pRefusal: "refusal", pThinking: "thinking", pName: "name",
		pTypeless: "image_url", "image_pil", "image_embeds", "audio_embeds", "prompt_embeds", "audio_url", "input_audio", "video_url", "tool_reference"}
	var f, fe [len(keys)]int
	end = jsonscan.Members(b, pv, keys[:], f[:], fe[:])
	var (
		typ     []byte
		typEsc  bool
		typeBuf [32]byte // an escaped type long enough to matter is rare
	)
	switch tv := f[pType]; {
	case !jsonscan.Present(b, tv):
		for k := pTypeless; k < len(f); k++ {
			if f[k] >= 0 && (keys[k] != "input_audio" || !jsonscan.Is(b, f[k], 'n')) {
				typ = append(typeBuf[:0], keys[k]...) // on the stack, unlike []byte(keys[k])
				break
			}
		}
		if typ == nil {
			return nil, false, "", 0, -1, fmt.Errorf("messages[%d].content[%d].type: missing", i, j)
		}
	case jsonscan.Is(b, tv, '"'):
		typ, typEsc = jsonscan.StrTo(b, tv, fe[pType])
		if typEsc {
			typ = jsonscan.AppendUnescaped(typeBuf[:0], typ)
		}
	default:
		return nil, false, "", 0, -1, fmt.Errorf("messages[%d].content[%d].type: want a string, got %s", i, j, jsonscan.TypeName(b, tv))
	}
	var key int
	switch string(typ) {
	case "text", "input_text", "output_text":
		key = pText
	case "refusal":
		key = pRefusal
	case "thinking":
		key = pThinking
	case "tool_reference":
		key = pName
	case "prompt_embeds":
		return promptEmbeds, false, "", partText, end, nil
	default:
		if m := mediaModality(typ); m != "" {
			return nil, false, m, 0, end, nil
		}
		return nil, false, string(typ), 0, end, nil // "" (an empty type): nothing, as contentPart
	}
	fv := f[key]
	if !jsonscan.Present(b, fv) {
		return nil, false, "", 0, end, nil
	}
	if !jsonscan.Is(b, fv, '"') {
		return nil, false, "", 0, -1, fmt.Errorf("messages[%d].content[%d].%s: want a string or null, got %s", i, j, keys[key], jsonscan.TypeName(b, fv))
	}
	text, escaped = jsonscan.StrTo(b, fv, fe[key])
	if key == pName {
		return text, escaped, "", partTool, end, nil
	}
	return text, escaped, "", partText, end, nil
}
