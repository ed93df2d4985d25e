package vllmsim

import (
	"encoding/json"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// respRequest is what the simulator keeps of a POST /v1/responses body
// (vLLM's ResponsesRequest, the fields the simulator acts on or echoes).
// Every field is a copy, never a view into the body.
type respRequest struct {
	input        []chat.Message // the new input, as chat messages (vLLM's construct_input_messages)
	instructions string         // "" for none: no system message
	prevID       string         // previous_response_id; "" for none
	model        string         // "" for the primary model
	store        bool           // default true
	stream       bool
	background   bool
	maxOutput    int   // max_output_tokens; 0: not given
	priority     int64 // vLLM's "priority"; 0 when not given

	// Echoed in the response object as given (raw JSON), else their
	// defaults.
	tools, toolChoice, metadata []byte
	temperature, topP           float64
}

// decodeResponsesRequest parses a POST /v1/responses body. Client input
// never panics: it decodes, or returns a 400 naming the field. Any
// goroutine.
func decodeResponsesRequest(body []byte) (respRequest, *apiError) {
	r := respRequest{store: true, temperature: 1, topP: 1}
	p := parsers.Get()
	defer parsers.Put(p)
	v, model, e := parseObject(p, body)
	if e != nil {
		return r, e
	}
	r.model = model
	for _, b := range []struct {
		dst  *bool
		name string
	}{{&r.stream, "stream"}, {&r.store, "store"}, {&r.background, "background"}} {
		if e := optBool(v, b.dst, b.name); e != nil {
			return r, e
		}
	}
	if e := optPositive(v, &r.maxOutput, "max_output_tokens"); e != nil {
		return r, e
	}
	if e := optPriority(v, &r.priority); e != nil {
		return r, e
	}
	for _, s := range []struct {
		dst  *string
		name string
	}{{&r.instructions, "instructions"}, {&r.prevID, "previous_response_id"}} {
		f := chat.Field(v, s.name)
		if f == nil || f.Type() == fastjson.TypeNull {
			continue
		}
		if f.Type() != fastjson.TypeString {
			return r, badRequest(s.name, "%s: want a string, got %s", s.name, f.Type())
		}
		*s.dst = string(f.GetStringBytes())
	}
	for _, n := range []struct {
		dst  *float64
		name string
	}{{&r.temperature, "temperature"}, {&r.topP, "top_p"}} {
		f := chat.Field(v, n.name)
		if f == nil || f.Type() == fastjson.TypeNull {
			continue
		}
		x, err := f.Float64()
		if f.Type() != fastjson.TypeNumber || err != nil {
			return r, badRequest(n.name, "%s: want a number, got %.40s", n.name, f)
		}
		*n.dst = x
	}
	// Echoed, never interpreted (doc.go, Limits: tools are ignored).
	for _, f := range []struct {
		dst       *[]byte
		name, def string
		want      fastjson.Type
	}{{&r.tools, "tools", "[]", fastjson.TypeArray}, {&r.toolChoice, "tool_choice", `"auto"`, 0}, {&r.metadata, "metadata", "null", fastjson.TypeObject}} {
		var e *apiError
		if *f.dst, e = raw(v, f.name, f.want, f.def); e != nil {
			return r, e
		}
	}
	iv := chat.Field(v, "input")
	if iv == nil || iv.Type() == fastjson.TypeNull {
		return r, badRequest("input", "input: missing")
	}
	switch iv.Type() {
	case fastjson.TypeString:
		r.input = []chat.Message{{Role: "user", Content: string(iv.GetStringBytes())}}
		return r, nil
	case fastjson.TypeArray:
	default:
		return r, badRequest("input", "input: want a string or an array of input items, got %s", iv.Type())
	}
	items, _ := iv.Array() // the type was checked
	msgs := make([]chat.Message, 0, len(items))
	for i, it := range items {
		var e *apiError
		if msgs, e = inputItem(msgs, it, i); e != nil {
			return r, e
		}
	}
	r.input = msgs
	return r, nil
}

// raw returns field name of v as JSON (a copy), or def when absent or
// null; want != 0 asks for a value of that type.
func raw(v *fastjson.Value, name string, want fastjson.Type, def string) ([]byte, *apiError) {
	f := chat.Field(v, name)
	if f == nil || f.Type() == fastjson.TypeNull {
		return []byte(def), nil
	}
	if want != 0 && f.Type() != want {
		return nil, badRequest(name, "%s: want %s, got %s", name, want, f.Type())
	}
	b := f.MarshalTo(nil)
	// fastjson takes control characters inside strings, which JSON (and
	// so the echo) must not carry.
	if !json.Valid(b) {
		return nil, badRequest(name, "%s: not valid JSON", name)
	}
	return b, nil
}

// inputItem appends input item i as chat messages, as vLLM's
// construct_chat_messages_with_tool_call does: a message item is a
// message (its text parts joined, as chat completions content parts); a
// function_call an assistant turn (its arguments as the text: the
// templates here render no tool calls); a function_call_output a "tool"
// message; a reasoning item the reasoning of the assistant turn it
// belongs to.
func inputItem(dst []chat.Message, it *fastjson.Value, i int) ([]chat.Message, *apiError) {
	param := "input"
	if it.Type() != fastjson.TypeObject {
		return dst, badRequest(param, "input[%d]: want an object, got %s", i, it.Type())
	}
	typ := "message"
	if tv := chat.Field(it, "type"); tv != nil && tv.Type() != fastjson.TypeNull {
		if tv.Type() != fastjson.TypeString {
			return dst, badRequest(param, "input[%d].type: want a string, got %s", i, tv.Type())
		}
		typ = string(tv.GetStringBytes())
	}
	str := func(name string) (string, *apiError) {
		f := chat.Field(it, name)
		if f == nil || f.Type() == fastjson.TypeNull {
			return "", nil
		}
		if f.Type() != fastjson.TypeString {
			return "", badRequest(param, "input[%d].%s: want a string, got %s", i, name, f.Type())
		}
		return string(f.GetStringBytes()), nil
	}
	switch typ {
	case "message":
		role, e := str("role")
		if e != nil {
			return dst, e
		}
		if role == "" {
			return dst, badRequest(param, "input[%d].role: missing", i)
		}
		text, e := itemText(it, "content", i)
		if e != nil {
			return dst, e
		}
		return append(dst, chat.Message{Role: role, Content: text}), nil
	case "function_call":
		args, e := str("arguments")
		if e != nil {
			return dst, e
		}
		return append(dst, chat.Message{Role: "assistant", Content: args}), nil
	case "function_call_output":
		text, e := itemText(it, "output", i)
		if e != nil {
			return dst, e
		}
		return append(dst, chat.Message{Role: "tool", Content: text}), nil
	case "reasoning":
		var text string
		for _, name := range []string{"content", "summary"} {
			if parts := chat.Field(it, name); parts != nil && parts.Type() == fastjson.TypeArray {
				if arr, _ := parts.Array(); len(arr) > 0 {
					text = string(arr[0].GetStringBytes("text"))
					break
				}
			}
		}
		if n := len(dst); n > 0 && dst[n-1].Role == "assistant" && !dst[n-1].HasReasoning {
			dst[n-1].Reasoning, dst[n-1].HasReasoning = text, true
			return dst, nil
		}
		return append(dst, chat.Message{Role: "assistant", Reasoning: text, HasReasoning: true}), nil
	default:
		return dst, badRequest(param, "input[%d].type: the simulator takes message, function_call, function_call_output and reasoning items, got %.40q", i, typ)
	}
}

// itemText reads an item's content (or output): a string, or an array of
// parts whose texts (input_text, output_text, text; a refusal's text) are
// joined with chat.PartSeparator, other parts standing as
// chat.Placeholder, as chat completions content parts are.
func itemText(it *fastjson.Value, name string, i int) (string, *apiError) {
	f := chat.Field(it, name)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", nil
	}
	switch f.Type() {
	case fastjson.TypeString:
		return string(f.GetStringBytes()), nil
	case fastjson.TypeArray:
	default:
		return "", badRequest("input", "input[%d].%s: want a string or an array of content parts, got %s", i, name, f.Type())
	}
	parts, _ := f.Array()
	var b strings.Builder
	for j, p := range parts {
		if p.Type() != fastjson.TypeObject {
			return "", badRequest("input", "input[%d].%s[%d]: want an object, got %s", i, name, j, p.Type())
		}
		if j > 0 {
			b.WriteString(chat.PartSeparator)
		}
		switch typ := string(p.GetStringBytes("type")); typ {
		case "input_text", "output_text", "text":
			tv := chat.Field(p, "text")
			if tv == nil || tv.Type() != fastjson.TypeString {
				return "", badRequest("input", "input[%d].%s[%d].text: want a string", i, name, j)
			}
			b.Write(tv.GetStringBytes())
		case "refusal":
			b.Write(p.GetStringBytes("refusal"))
		default:
			b.WriteString(chat.Placeholder(typ))
		}
	}
	return b.String(), nil
}
