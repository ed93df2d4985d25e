package openai

import (
	"strconv"
	"strings"

	"github.com/saltus-lb/saltus/internal/jsonscan"
	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// Stage 2 for POST /v1/responses: the Responses API request as the chat
// messages vLLM renders for it (vLLM's construct_input_messages in
// entrypoints/openai/responses/utils.py), so that a Responses
// conversation is keyed, routed and learned like the same conversation
// sent to /v1/chat/completions.
//
// What vLLM builds, and so what this builds:
//   - a non-empty "instructions" string: a first system message;
//   - "input" a string: one user message;
//   - "input" an array of items, in order:
//     a message item (a "role"; type "message" or absent) of role
//     assistant: an assistant message with the text of its first content
//     part (or the string content), merged into the assistant message
//     before it when that one has no content yet;
//     a message item of any other role: that message, its content a
//     string or parts joined with "\n" (input_text, output_text and text
//     parts by their "text", refusal by its "refusal", any other part a
//     chat.Placeholder, as vLLM's chat_utils parses them);
//     "function_call": an assistant turn with a tool call (merged into
//     the assistant message before it); no built-in template renders tool
//     calls, so it adds an empty assistant message or nothing;
//     "function_call_output": a tool message with the "output";
//     "reasoning": assistant reasoning (content[0].text, else
//     summary[0].text), merged into the assistant message before it when
//     that one has none yet; a non-empty encrypted_content is a 400, as
//     vLLM refuses it;
//     any other item type (item_reference, built-in tool calls): nothing,
//     the engine decides what it means; the prediction only loses that
//     item.
//
// With "previous_response_id" the engine prepends the stored conversation,
// which saltus does not have: such a request goes to the backend that
// stored it (shard/respids.go), and its keys, which lack that history,
// are learned by nobody.

// respLast is what vLLM's dict keys record of the last message built:
// whether its content or reasoning were set, which decides whether the
// next item merges into it (only the last message is ever merged into).
type respLast struct{ hasContent, hasReasoning bool }

// decodeResponses reads instructions, input and previous_response_id of a
// Responses request into dst (Messages, Options, PreviousResponseID). The
// strings are copies.
func decodeResponses(dst *Request, r *reader, f *[numFields]int) *Error {
	b := r.b
	dst.Options = chat.Options{AddGenerationPrompt: true}
	if pv := f[fPreviousResponseID]; jsonscan.Present(b, pv) {
		if !jsonscan.Is(b, pv, '"') {
			return BadRequest("previous_response_id", "previous_response_id: want a string, got %s", jsonscan.TypeName(b, pv))
		}
		dst.PreviousResponseID = r.str(pv)
	}
	var (
		msgs []chat.Message
		last respLast
		sys  string
	)
	if iv := f[fInstructions]; jsonscan.Present(b, iv) {
		if !jsonscan.Is(b, iv, '"') {
			return BadRequest("instructions", "instructions: want a string, got %s", jsonscan.TypeName(b, iv))
		}
		sys = r.str(iv)
	}
	in := f[fInput]
	if !jsonscan.Present(b, in) {
		return BadRequest("input", "input: missing")
	}
	switch {
	case jsonscan.Is(b, in, '"'):
		if sys != "" {
			msgs = append(msgs, chat.Message{Role: "system", Content: sys})
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: r.str(in)})
	case jsonscan.Is(b, in, '['):
		// Room for every item that may make a message (an object with a
		// role or a type: 12 bytes at least), so that a million items of
		// nothing cost no million messages.
		msgs = make([]chat.Message, 0, 1+respItems(b, in))
		if sys != "" {
			msgs, last = append(msgs, chat.Message{Role: "system", Content: sys}), respLast{hasContent: true}
		}
		i := 0
		for it := jsonscan.Elem(b, in); it >= 0; it = jsonscan.Next(b, it) {
			var e *Error
			if msgs, last, e = responseItem(msgs, last, r, it, i); e != nil {
				return e
			}
			i++
		}
	default:
		return BadRequest("input", "input: want a string or an array of input items, got %s", jsonscan.TypeName(b, in))
	}
	if len(msgs) == 0 {
		// vLLM renders an empty conversation (the template's generation
		// prompt alone); so does the router: it has nothing to key.
		dst.Messages = []chat.Message{}
		return nil
	}
	dst.Messages = msgs
	return nil
}

// respItems counts the items of the input array at b[in] that may make a
// message: objects with a "role" or a "type".
func respItems(b []byte, in int) int {
	n := 0
	for it := jsonscan.Elem(b, in); it >= 0; it = jsonscan.Next(b, it) {
		var f [2]int
		if jsonscan.Members(b, it, []string{"role", "type"}, f[:], nil); f[0] >= 0 || f[1] >= 0 {
			n++
		}
	}
	return n
}

// The members of an input item that responseItem reads.
const (
	iType = iota
	iRole
	iOutput
	iEncrypted
	iContent
	iSummary
	iN
)

// responseItem appends (or merges) input item i, at r.b[it]; last is what
// is known of msgs' last message.
func responseItem(msgs []chat.Message, last respLast, r *reader, it, i int) ([]chat.Message, respLast, *Error) {
	b := r.b
	at := func(field string) string { return "input[" + strconv.Itoa(i) + "]" + field }
	if !jsonscan.Is(b, it, '{') {
		return nil, last, BadRequest(at(""), "%s: want an object, got %s", at(""), jsonscan.TypeName(b, it))
	}
	var f [iN]int
	jsonscan.Members(b, it, []string{iType: "type", iRole: "role", iOutput: "output", iEncrypted: "encrypted_content", iContent: "content", iSummary: "summary"}, f[:], nil)
	typ := ""
	if tv := f[iType]; jsonscan.Present(b, tv) {
		if !jsonscan.Is(b, tv, '"') {
			return nil, last, BadRequest(at(".type"), "%s: want a string, got %s", at(".type"), jsonscan.TypeName(b, tv))
		}
		// The types it acts on, as constants: no copy per item.
		switch t := r.text(tv); string(t) {
		case "function_call":
			typ = "function_call"
		case "function_call_output":
			typ = "function_call_output"
		case "reasoning":
			typ = "reasoning"
		case "message":
			typ = "message"
		case "":
		default:
			typ = "other" // item_reference, built-in tool calls: nothing
		}
	}
	var prev *chat.Message // the assistant message an item may merge into
	if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
		prev = &msgs[n-1]
	}
	rv := f[iRole]
	switch {
	case typ == "function_call":
		if prev != nil {
			return msgs, last, nil // its tool call: rendered by no template
		}
		return append(msgs, chat.Message{Role: "assistant"}), respLast{}, nil
	case typ == "function_call_output":
		ov := f[iOutput]
		if ov < 0 {
			return nil, last, BadRequest(at(".output"), "%s: missing", at(".output"))
		}
		text, e := partsText(r, ov, at(".output"))
		if e != nil {
			return nil, last, e
		}
		return append(msgs, chat.Message{Role: "tool", Content: text}), respLast{hasContent: true}, nil
	case typ == "reasoning":
		if ev := f[iEncrypted]; jsonscan.Is(b, ev, '"') && len(r.text(ev)) > 0 {
			return nil, last, BadRequest(at(".encrypted_content"), "%s: encrypted content is not supported", at(".encrypted_content"))
		}
		text := ""
		if cv := f[iContent]; jsonscan.Elem(b, cv) >= 0 {
			text = firstText(r, jsonscan.Elem(b, cv))
		} else if sv := f[iSummary]; jsonscan.Elem(b, sv) >= 0 {
			text = firstText(r, jsonscan.Elem(b, sv))
		}
		if prev != nil && !last.hasReasoning {
			prev.Reasoning, prev.HasReasoning, last.hasReasoning = text, true, true
			return msgs, last, nil
		}
		return append(msgs, chat.Message{Role: "assistant", Reasoning: text, HasReasoning: true}), respLast{hasReasoning: true}, nil
	case rv >= 0 && (typ == "" || typ == "message"):
		if !jsonscan.Is(b, rv, '"') || len(r.text(rv)) == 0 {
			return nil, last, BadRequest(at(".role"), "%s: want a non-empty string", at(".role"))
		}
		role := r.str(rv)
		cv := f[iContent]
		if role == "assistant" {
			text := ""
			switch {
			case jsonscan.Is(b, cv, '"'):
				text = r.str(cv)
			case jsonscan.Elem(b, cv) >= 0:
				text = firstText(r, jsonscan.Elem(b, cv))
			}
			if prev != nil && !last.hasContent {
				prev.Content, last.hasContent = text, true
				return msgs, last, nil
			}
			return append(msgs, chat.Message{Role: role, Content: text}), respLast{hasContent: true}, nil
		}
		m := chat.Message{Role: role}
		if jsonscan.Present(b, cv) {
			var e *Error
			if m.Content, e = partsText(r, cv, at(".content")); e != nil {
				return nil, last, e
			}
		}
		return append(msgs, m), respLast{hasContent: cv >= 0}, nil
	}
	return msgs, last, nil // another item type: see the file comment
}

// firstText is the "text" of the content or summary part at r.b[v] (or
// the part itself when it is a string), "" otherwise.
func firstText(r *reader, v int) string {
	b := r.b
	switch {
	case jsonscan.Is(b, v, '"'):
		return r.str(v)
	case jsonscan.Is(b, v, '{'):
		var t [1]int
		if jsonscan.Members(b, v, []string{"text"}, t[:], nil); jsonscan.Is(b, t[0], '"') {
			return r.str(t[0])
		}
	}
	return ""
}

// partsText is the content at r.b[v] as the chat template sees it: a
// string, or its parts joined with chat.PartSeparator.
func partsText(r *reader, v int, name string) (string, *Error) {
	b := r.b
	switch {
	case jsonscan.Is(b, v, '"'):
		return r.str(v), nil
	case jsonscan.Is(b, v, 'n'):
		return "", nil
	case jsonscan.Is(b, v, '['):
	default:
		return "", BadRequest(name, "%s: want a string or an array of content parts, got %s", name, jsonscan.TypeName(b, v))
	}
	var sb strings.Builder
	j := 0
	for pv := jsonscan.Elem(b, v); pv >= 0; pv = jsonscan.Next(b, pv) {
		if !jsonscan.Is(b, pv, '{') {
			p := name + "[" + strconv.Itoa(j) + "]"
			return "", BadRequest(p, "%s: want an object, got %s", p, jsonscan.TypeName(b, pv))
		}
		const (
			pType = iota
			pText
			pRefusal
		)
		var f [3]int
		jsonscan.Members(b, pv, []string{pType: "type", pText: "text", pRefusal: "refusal"}, f[:], nil)
		if !jsonscan.Is(b, f[pType], '"') {
			p := name + "[" + strconv.Itoa(j) + "].type"
			return "", BadRequest(p, "%s: missing or not a string", p)
		}
		if j > 0 {
			sb.WriteString(chat.PartSeparator)
		}
		field, key := "", 0
		switch typ := r.text(f[pType]); string(typ) {
		case "input_text", "output_text", "text":
			field, key = "text", pText
		case "refusal":
			field, key = "refusal", pRefusal
		default:
			sb.WriteString(chat.Placeholder(string(typ)))
			j++
			continue
		}
		if !jsonscan.Is(b, f[key], '"') {
			p := name + "[" + strconv.Itoa(j) + "]." + field
			return "", BadRequest(p, "%s: missing or not a string", p)
		}
		sb.Write(r.text(f[key]))
		j++
	}
	return sb.String(), nil
}
