package openai

import (
	"strconv"
	"strings"

	"github.com/valyala/fastjson"

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

// respMsg is a message under construction, with what vLLM's dict keys
// record: whether content, reasoning or tool_calls were set, which decides
// whether the next item merges into it.
type respMsg struct {
	m                                   chat.Message
	hasContent, hasReasoning, toolCalls bool
}

// decodeResponses reads instructions, input and previous_response_id of a
// Responses request into dst (Messages, Options, PreviousResponseID). The
// strings are copies.
func decodeResponses(dst *Request, v *fastjson.Value) *Error {
	dst.Options = chat.Options{AddGenerationPrompt: true}
	if pv := chat.Field(v, "previous_response_id"); pv != nil && pv.Type() != fastjson.TypeNull {
		if pv.Type() != fastjson.TypeString {
			return BadRequest("previous_response_id", "previous_response_id: want a string, got %s", pv.Type())
		}
		dst.PreviousResponseID = string(pv.GetStringBytes())
	}
	var msgs []respMsg
	if iv := chat.Field(v, "instructions"); iv != nil && iv.Type() != fastjson.TypeNull {
		if iv.Type() != fastjson.TypeString {
			return BadRequest("instructions", "instructions: want a string, got %s", iv.Type())
		}
		if s := iv.GetStringBytes(); len(s) > 0 {
			msgs = append(msgs, respMsg{m: chat.Message{Role: "system", Content: string(s)}, hasContent: true})
		}
	}
	in := chat.Field(v, "input")
	if in == nil || in.Type() == fastjson.TypeNull {
		return BadRequest("input", "input: missing")
	}
	switch in.Type() {
	case fastjson.TypeString:
		msgs = append(msgs, respMsg{m: chat.Message{Role: "user", Content: string(in.GetStringBytes())}, hasContent: true})
	case fastjson.TypeArray:
		items, _ := in.Array() // the type was checked
		for i, it := range items {
			var e *Error
			if msgs, e = responseItem(msgs, it, i); e != nil {
				return e
			}
		}
	default:
		return BadRequest("input", "input: want a string or an array of input items, got %s", in.Type())
	}
	if len(msgs) == 0 {
		// vLLM renders an empty conversation (the template's generation
		// prompt alone); so does the router: it has nothing to key.
		dst.Messages = []chat.Message{}
		return nil
	}
	dst.Messages = make([]chat.Message, len(msgs))
	for i := range msgs {
		dst.Messages[i] = msgs[i].m
	}
	return nil
}

// responseItem appends (or merges) input item i.
func responseItem(msgs []respMsg, it *fastjson.Value, i int) ([]respMsg, *Error) {
	at := func(field string) string { return "input[" + strconv.Itoa(i) + "]" + field }
	if it.Type() != fastjson.TypeObject {
		return nil, BadRequest(at(""), "%s: want an object, got %s", at(""), it.Type())
	}
	typ := ""
	if tv := chat.Field(it, "type"); tv != nil && tv.Type() != fastjson.TypeNull {
		if tv.Type() != fastjson.TypeString {
			return nil, BadRequest(at(".type"), "%s: want a string, got %s", at(".type"), tv.Type())
		}
		typ = string(tv.GetStringBytes())
	}
	var prev *respMsg // the assistant message an item may merge into
	if n := len(msgs); n > 0 && msgs[n-1].m.Role == "assistant" {
		prev = &msgs[n-1]
	}
	rv := chat.Field(it, "role")
	switch {
	case typ == "function_call":
		if prev != nil {
			prev.toolCalls = true
			return msgs, nil
		}
		return append(msgs, respMsg{m: chat.Message{Role: "assistant"}, toolCalls: true}), nil
	case typ == "function_call_output":
		m := respMsg{m: chat.Message{Role: "tool"}, hasContent: true}
		ov := chat.Field(it, "output")
		if ov == nil {
			return nil, BadRequest(at(".output"), "%s: missing", at(".output"))
		}
		var e *Error
		if m.m.Content, e = partsText(ov, at(".output")); e != nil {
			return nil, e
		}
		return append(msgs, m), nil
	case typ == "reasoning":
		if ev := chat.Field(it, "encrypted_content"); ev != nil && ev.Type() == fastjson.TypeString && len(ev.GetStringBytes()) > 0 {
			return nil, BadRequest(at(".encrypted_content"), "%s: encrypted content is not supported", at(".encrypted_content"))
		}
		text := ""
		if cv := chat.Field(it, "content"); cv != nil && cv.Type() == fastjson.TypeArray && len(cv.GetArray()) > 0 {
			text = firstText(cv.GetArray()[0])
		} else if sv := chat.Field(it, "summary"); sv != nil && sv.Type() == fastjson.TypeArray && len(sv.GetArray()) > 0 {
			text = firstText(sv.GetArray()[0])
		}
		if prev != nil && !prev.hasReasoning {
			prev.m.Reasoning, prev.m.HasReasoning, prev.hasReasoning = text, true, true
			return msgs, nil
		}
		return append(msgs, respMsg{m: chat.Message{Role: "assistant", Reasoning: text, HasReasoning: true}, hasReasoning: true}), nil
	case rv != nil && (typ == "" || typ == "message"):
		if rv.Type() != fastjson.TypeString || len(rv.GetStringBytes()) == 0 {
			return nil, BadRequest(at(".role"), "%s: want a non-empty string", at(".role"))
		}
		role := string(rv.GetStringBytes())
		cv := chat.Field(it, "content")
		if role == "assistant" {
			text := ""
			if cv != nil {
				switch cv.Type() {
				case fastjson.TypeString:
					text = string(cv.GetStringBytes())
				case fastjson.TypeArray:
					if parts := cv.GetArray(); len(parts) > 0 {
						text = firstText(parts[0])
					}
				}
			}
			if prev != nil && !prev.hasContent {
				prev.m.Content, prev.hasContent = text, true
				return msgs, nil
			}
			return append(msgs, respMsg{m: chat.Message{Role: role, Content: text}, hasContent: true}), nil
		}
		m := respMsg{m: chat.Message{Role: role}, hasContent: cv != nil}
		if cv != nil && cv.Type() != fastjson.TypeNull {
			var e *Error
			if m.m.Content, e = partsText(cv, at(".content")); e != nil {
				return nil, e
			}
		}
		return append(msgs, m), nil
	}
	return msgs, nil // another item type: see the file comment
}

// firstText is the "text" of a content or summary part (or the part
// itself when it is a string), "" otherwise.
func firstText(v *fastjson.Value) string {
	switch v.Type() {
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeObject:
		if t := chat.Field(v, "text"); t != nil && t.Type() == fastjson.TypeString {
			return string(t.GetStringBytes())
		}
	}
	return ""
}

// partsText is a content as the chat template sees it: a string, or its
// parts joined with chat.PartSeparator.
func partsText(v *fastjson.Value, name string) (string, *Error) {
	switch v.Type() {
	case fastjson.TypeString:
		return string(v.GetStringBytes()), nil
	case fastjson.TypeNull:
		return "", nil
	case fastjson.TypeArray:
	default:
		return "", BadRequest(name, "%s: want a string or an array of content parts, got %s", name, v.Type())
	}
	var b strings.Builder
	for j, pv := range v.GetArray() {
		if pv.Type() != fastjson.TypeObject {
			p := name + "[" + strconv.Itoa(j) + "]"
			return "", BadRequest(p, "%s: want an object, got %s", p, pv.Type())
		}
		tv := chat.Field(pv, "type")
		if tv == nil || tv.Type() != fastjson.TypeString {
			p := name + "[" + strconv.Itoa(j) + "].type"
			return "", BadRequest(p, "%s: missing or not a string", p)
		}
		if j > 0 {
			b.WriteString(chat.PartSeparator)
		}
		field := ""
		switch typ := string(tv.GetStringBytes()); typ {
		case "input_text", "output_text", "text":
			field = "text"
		case "refusal":
			field = "refusal"
		default:
			b.WriteString(chat.Placeholder(typ))
			continue
		}
		t := chat.Field(pv, field)
		if t == nil || t.Type() != fastjson.TypeString {
			p := name + "[" + strconv.Itoa(j) + "]." + field
			return "", BadRequest(p, "%s: missing or not a string", p)
		}
		b.Write(t.GetStringBytes())
	}
	return b.String(), nil
}
