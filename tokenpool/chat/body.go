package chat

import (
	"fmt"
	"slices"

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

// MessagesFromBody is ParseMessages for the "messages" value at body[at]
// of a request body that passed a grammar check (openai's body scan): the
// same messages and errors, read from the bytes. The strings are copies,
// in one arena of at most the array's size. Any goroutine.
func MessagesFromBody(body []byte, at int) ([]Message, error) {
	d := decoder{}
	if jsonscan.Is(body, at, '[') {
		d.most = jsonscan.SkipValue(body, at) - at // the arena, made when first needed (room)
	}
	return d.bodyMessages(nil, body, at)
}

// MessagesFromBody is the package's MessagesFromBody without copies: a
// string without escapes is a view into body, the others (and joined
// content parts) views into the Scratch; valid while body is and until
// the Scratch is used again. Errors are the same.
func (sc *Scratch) MessagesFromBody(body []byte, at int) ([]Message, error) {
	d := decoder{arena: sc.arena[:0], view: true}
	if jsonscan.Is(body, at, '[') {
		d.most = jsonscan.SkipValue(body, at) - at
	}
	msgs, err := d.bodyMessages(sc.msgs, body, at)
	sc.arena = d.arena
	if msgs != nil {
		sc.msgs = msgs
	}
	return msgs, err
}

// bstr is str for the string value at b[at].
func (d *decoder) bstr(b []byte, at int) string {
	raw, escaped, _ := jsonscan.Str(b, at)
	if !escaped {
		return d.str(raw)
	}
	d.room(len(raw))
	start := len(d.arena)
	d.arena = jsonscan.AppendUnescaped(d.arena, raw)
	return arenaString(d.arena, start)
}

// room makes room in the arena for n more bytes: when it must grow, it
// grows at once to the most the messages can need (d.most, the array's
// size), so that a message of a million parts costs one arena of at most
// the body's size, not append's series of ever larger ones (measured:
// 2.65 bytes allocated per body byte with append, for a million
// one-character parts through a Scratch, 1.0 with room), and messages
// that need no arena (views, or an error first) cost none. With no most
// (the fastjson decoder), append grows it.
func (d *decoder) room(n int) {
	if d.most == 0 || len(d.arena)+n <= cap(d.arena) {
		return
	}
	a := make([]byte, len(d.arena), max(d.most, len(d.arena)+n))
	copy(a, d.arena) // the join in progress, from its start
	d.arena = a
}

func (d *decoder) bodyMessages(dst []Message, b []byte, at int) ([]Message, error) {
	if !jsonscan.Is(b, at, '[') {
		return nil, fmt.Errorf("messages: want a JSON array, got %s", jsonscan.TypeName(b, at))
	}
	n := jsonscan.Count(b, at)
	if n*(minMessageBytes+1)+1 > jsonscan.SkipValue(b, at)-at {
		// Too many elements to be messages (`[{},{},…]`): one of them
		// fails. Find it without a Message for each.
		var m Message
		i := 0
		for e := jsonscan.Elem(b, at); e >= 0; e = jsonscan.Next(b, e) {
			m = Message{}
			if err := d.bodyMessage(&m, b, e, i); err != nil {
				return nil, err
			}
			i++
		}
		// Unreachable for a checked body; decode it anyway.
	}
	msgs := slices.Grow(dst[:0], n)[:n]
	clear(msgs) // a reused dst holds an earlier request's messages
	i := 0
	for e := jsonscan.Elem(b, at); e >= 0 && i < n; e = jsonscan.Next(b, e) {
		if err := d.bodyMessage(&msgs[i], b, e, i); err != nil {
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
	mN
)

func (d *decoder) bodyMessage(m *Message, b []byte, at, i int) error {
	if !jsonscan.Is(b, at, '{') {
		return fmt.Errorf("messages[%d]: want an object, got %s", i, jsonscan.TypeName(b, at))
	}
	var f [mN]int
	jsonscan.Members(b, at, []string{mRole: "role", mReasoning: "reasoning", mContent: "content"}, f[:])
	if f[mRole] < 0 {
		return fmt.Errorf("messages[%d].role: missing", i)
	}
	if !jsonscan.Is(b, f[mRole], '"') {
		return fmt.Errorf("messages[%d].role: want a string, got %s", i, jsonscan.TypeName(b, f[mRole]))
	}
	m.Role = d.bstr(b, f[mRole])
	if m.Role == "" {
		return fmt.Errorf("messages[%d].role: empty", i)
	}
	if m.Role == "assistant" {
		if rv := f[mReasoning]; jsonscan.Present(b, rv) {
			if !jsonscan.Is(b, rv, '"') {
				return fmt.Errorf("messages[%d].reasoning: want a string or null, got %s", i, jsonscan.TypeName(b, rv))
			}
			m.Reasoning, m.HasReasoning = d.bstr(b, rv), true
		}
	}
	c := f[mContent]
	if c < 0 {
		return nil
	}
	switch {
	case jsonscan.Is(b, c, 'n'):
	case jsonscan.Is(b, c, '"'):
		m.Content = d.bstr(b, c)
	case jsonscan.Is(b, c, '['):
		d.room(jsonscan.SkipValue(b, c) - c) // the joined text is never longer than the parts
		start := len(d.arena)
		// As message: the media placeholders, then the texts; every
		// part is checked in the first pass.
		for _, media := range [2]bool{true, false} {
			j := 0
			for pv := jsonscan.Elem(b, c); pv >= 0; pv = jsonscan.Next(b, pv) {
				text, escaped, modality, err := bodyPart(b, pv, i, j)
				j++
				if err != nil {
					return err
				}
				if media {
					if modality == "" {
						continue
					}
				} else if modality != "" || len(text) == 0 {
					continue // vLLM drops empty and null texts
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
				if escaped {
					d.arena = jsonscan.AppendUnescaped(d.arena, text)
				} else {
					d.arena = append(d.arena, text...)
				}
			}
		}
		m.Content = arenaString(d.arena, start)
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
func bodyPart(b []byte, pv, i, j int) (text []byte, escaped bool, modality string, err error) {
	switch {
	case jsonscan.Is(b, pv, '"'):
		text, escaped, _ = jsonscan.Str(b, pv)
		return text, escaped, "", nil
	case jsonscan.Is(b, pv, '{'):
	default:
		return nil, false, "", fmt.Errorf("messages[%d].content[%d]: want an object or a string, got %s", i, j, jsonscan.TypeName(b, pv))
	}
	// A local array, not a package variable (rules R12): on the stack.
	keys := [...]string{pType: "type", pText: "text", pRefusal: "refusal", pThinking: "thinking", pName: "name",
		pTypeless: "image_url", "image_pil", "image_embeds", "audio_embeds", "prompt_embeds", "audio_url", "input_audio", "video_url", "tool_reference"}
	var f [len(keys)]int
	jsonscan.Members(b, pv, keys[:], f[:])
	var (
		typ     []byte
		typEsc  bool
		typeBuf [32]byte // an escaped type long enough to matter is rare
	)
	switch tv := f[pType]; {
	case !jsonscan.Present(b, tv):
		for k := pTypeless; k < len(f); k++ {
			if f[k] >= 0 && (keys[k] != "input_audio" || !jsonscan.Is(b, f[k], 'n')) {
				typ = []byte(keys[k])
				break
			}
		}
		if typ == nil {
			return nil, false, "", fmt.Errorf("messages[%d].content[%d].type: missing", i, j)
		}
	case jsonscan.Is(b, tv, '"'):
		typ, typEsc, _ = jsonscan.Str(b, tv)
		if typEsc {
			typ = jsonscan.AppendUnescaped(typeBuf[:0], typ)
		}
	default:
		return nil, false, "", fmt.Errorf("messages[%d].content[%d].type: want a string, got %s", i, j, jsonscan.TypeName(b, tv))
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
		return promptEmbeds, false, "", nil
	default:
		if m := mediaModality(typ); m != "" {
			return nil, false, m, nil
		}
		return nil, false, string(typ), nil // "" (an empty type): nothing, as contentPart
	}
	fv := f[key]
	if !jsonscan.Present(b, fv) {
		return nil, false, "", nil
	}
	if !jsonscan.Is(b, fv, '"') {
		return nil, false, "", fmt.Errorf("messages[%d].content[%d].%s: want a string or null, got %s", i, j, keys[key], jsonscan.TypeName(b, fv))
	}
	text, escaped, _ = jsonscan.Str(b, fv)
	return text, escaped, "", nil
}
