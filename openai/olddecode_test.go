package openai

// The request decoder before issue 33, on a fastjson parse tree: the
// oracle of the differential tests (decode_diff_test.go), which hold the
// streaming decoder (decode.go, responses.go) to the same requests and
// errors.

import (
	"math"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// oldParsers reuse fastjson's value cache across requests; a Parser is taken
// and returned within one decode call, on whatever goroutine decodes.
var oldParsers fastjson.ParserPool

// oldDecode parses body as the given API's request into dst (which it
// resets). Client input never panics: it decodes, or returns a 400 naming
// the field. Any goroutine.
func oldDecode(dst *Request, k Kind, body []byte) *Error {
	if len(body) > 64<<10 {
		return oldDecodeWith(dst, k, body, new(fastjson.Parser)) // dropped: see KeepDecodeBytes
	}
	p := oldParsers.Get()
	defer oldParsers.Put(p)
	return oldDecodeWith(dst, k, body, p)
}

// oldDecodeWith is oldDecode with the parser given; what it keeps is copied
// out of p's buffer.
func oldDecodeWith(dst *Request, k Kind, body []byte, p *fastjson.Parser) *Error {
	v, err := p.ParseBytes(body)
	if err != nil {
		*dst = Request{Kind: k}
		// BodyLimits.Check, which names the byte, found no error: what
		// fastjson refuses beyond the grammar, if anything.
		return BadRequest("", "invalid JSON: %v", err)
	}
	return oldDecodeValue(dst, k, v)
}

// oldDecodeValue is oldDecode for a body already parsed into v: with sc not
// nil, chat messages are views into v's parser and sc (chat.Scratch),
// valid until either is used again. A loop's own parser and Scratch serve
// its requests this way; their views die when the request's keys are
// computed (shard's job.keyed), or are copied when it waits for the
// tokenizer (job.own). Any goroutine that owns p and sc.
func oldDecodeValue(dst *Request, k Kind, v *fastjson.Value) *Error {
	*dst = Request{Kind: k}
	if v.Type() != fastjson.TypeObject {
		return BadRequest("", "request body must be a JSON object, got %s", v.Type())
	}
	mv := chat.Field(v, "model")
	if mv == nil {
		return BadRequest("model", "model: missing")
	}
	if mv.Type() != fastjson.TypeString {
		return BadRequest("model", "model: want a string, got %s", mv.Type())
	}
	dst.Model = string(mv.GetStringBytes())
	if dst.Model == "" {
		return BadRequest("model", "model: empty")
	}
	if e := oldOptBool(v, &dst.Stream, "stream"); e != nil {
		return e
	}
	dst.HasStreamOptions = chat.Field(v, "stream_options") != nil
	if so := chat.Field(v, "stream_options"); so != nil && so.Type() != fastjson.TypeNull {
		if so.Type() != fastjson.TypeObject {
			return BadRequest("stream_options", "stream_options: want an object, got %s", so.Type())
		}
		if e := oldOptBool(so, &dst.IncludeUsage, "include_usage"); e != nil {
			e.Param, e.Message = "stream_options.include_usage", "stream_options."+e.Message
			return e
		}
	}
	if pv := chat.Field(v, "priority"); pv != nil && pv.Type() != fastjson.TypeNull {
		n, err := pv.Int()
		if err != nil {
			return BadRequest("priority", "priority: want an integer, got %s", pv.Type())
		}
		dst.Priority, dst.HasPriority = n, true
	}
	for _, name := range []string{"max_completion_tokens", "max_tokens", "max_output_tokens"} {
		if mv := chat.Field(v, name); mv != nil && mv.Type() == fastjson.TypeNumber {
			if n, err := mv.Int64(); err == nil && n >= 0 {
				dst.MaxTokens = n
				break
			}
		}
	}
	if iv := chat.Field(v, "ignore_eos"); iv != nil && iv.Type() == fastjson.TypeTrue {
		dst.IgnoreEOS = true
	}
	if sv := chat.Field(v, "cache_salt"); sv != nil && sv.Type() == fastjson.TypeString {
		dst.CacheSalt = string(sv.GetStringBytes())
	}
	switch k {
	case KindChat:
		return oldDecodeChat(dst, v)
	case KindResponses:
		return oldDecodeResponses(dst, v)
	}
	return oldDecodeCompletion(dst, v)
}

// oldOptBool reads an optional boolean field (null = absent).
func oldOptBool(v *fastjson.Value, dst *bool, name string) *Error {
	if err := chat.OptBool(v, dst, name); err != nil {
		return oldFieldError(err)
	}
	return nil
}

// oldFieldError is a *chat.FieldError as a 400.
func oldFieldError(err error) *Error {
	fe := err.(*chat.FieldError) // chat's request readers return no other error
	return BadRequest(fe.Field, "%s", fe.Msg)
}

func oldDecodeChat(dst *Request, v *fastjson.Value) *Error {
	msgs, opt, err := chat.FromRequest(v)
	if err != nil {
		return oldFieldError(err)
	}
	dst.Messages, dst.Options = msgs, opt
	return nil
}

func oldDecodeCompletion(dst *Request, v *fastjson.Value) *Error {
	// vLLM's prompt_token_ids wins over prompt when both are given: it is
	// what the engine tokenizes no further.
	if pv := chat.Field(v, "prompt_token_ids"); pv != nil && pv.Type() != fastjson.TypeNull {
		if pv.Type() != fastjson.TypeArray {
			return BadRequest("prompt_token_ids", "prompt_token_ids: want an array of token ids, got %s", pv.Type())
		}
		ids, e := oldTokenIDs(pv, "prompt_token_ids")
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
		return nil
	}
	pv := chat.Field(v, "prompt")
	if pv == nil || pv.Type() == fastjson.TypeNull {
		return BadRequest("prompt", "prompt: missing")
	}
	switch pv.Type() {
	case fastjson.TypeString:
		dst.Prompt = string(pv.GetStringBytes())
		return nil
	case fastjson.TypeArray:
	default:
		return BadRequest("prompt", "prompt: want a string, an array of strings, an array of token ids or an array of arrays of token ids, got %s", pv.Type())
	}
	arr, _ := pv.Array() // the type was checked
	if len(arr) == 0 {
		return BadRequest("prompt", "prompt: empty array")
	}
	// A batch routes by its first prompt; the others must have its type.
	switch first := arr[0]; first.Type() {
	case fastjson.TypeString:
		for i, e := range arr {
			if e.Type() != fastjson.TypeString {
				return BadRequest("prompt", "prompt[%d]: want a string like prompt[0], got %s", i, e.Type())
			}
		}
		dst.Prompt = string(first.GetStringBytes())
	case fastjson.TypeNumber:
		ids, e := oldTokenIDs(pv, "prompt")
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
	case fastjson.TypeArray:
		for i, e := range arr {
			if e.Type() != fastjson.TypeArray {
				return BadRequest("prompt", "prompt[%d]: want an array of token ids like prompt[0], got %s", i, e.Type())
			}
		}
		ids, e := oldTokenIDs(first, "prompt[0]")
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
	default:
		return BadRequest("prompt", "prompt[0]: want a string, a token id or an array of token ids, got %s", first.Type())
	}
	return nil
}

// oldTokenIDs reads an array of token ids (integers in [0, 2^31)).
func oldTokenIDs(v *fastjson.Value, name string) ([]int32, *Error) {
	arr, _ := v.Array() // callers checked the type
	if len(arr) == 0 {
		return nil, BadRequest(name, "%s: empty array", name)
	}
	ids := make([]int32, len(arr))
	for i, e := range arr {
		if e.Type() != fastjson.TypeNumber {
			return nil, BadRequest(name, "%s[%d]: want a token id, got %s", name, i, e.Type())
		}
		n, err := e.Int64()
		if err != nil || n < 0 || n > math.MaxInt32 {
			return nil, BadRequest(name, "%s[%d]: want an integer token id in [0, 2^31), got %s", name, i, e)
		}
		ids[i] = int32(n)
	}
	return ids, nil
}

// oldRespMsg is a message under construction, with what vLLM's dict keys
// record: whether content, reasoning or tool_calls were set, which decides
// whether the next item merges into it.
type oldRespMsg struct {
	m                                   chat.Message
	hasContent, hasReasoning, toolCalls bool
}

// oldDecodeResponses reads instructions, input and previous_response_id of a
// Responses request into dst (Messages, Options, PreviousResponseID). The
// strings are copies.
func oldDecodeResponses(dst *Request, v *fastjson.Value) *Error {
	dst.Options = chat.Options{AddGenerationPrompt: true}
	if pv := chat.Field(v, "previous_response_id"); pv != nil && pv.Type() != fastjson.TypeNull {
		if pv.Type() != fastjson.TypeString {
			return BadRequest("previous_response_id", "previous_response_id: want a string, got %s", pv.Type())
		}
		dst.PreviousResponseID = string(pv.GetStringBytes())
	}
	var msgs []oldRespMsg
	if iv := chat.Field(v, "instructions"); iv != nil && iv.Type() != fastjson.TypeNull {
		if iv.Type() != fastjson.TypeString {
			return BadRequest("instructions", "instructions: want a string, got %s", iv.Type())
		}
		if s := iv.GetStringBytes(); len(s) > 0 {
			msgs = append(msgs, oldRespMsg{m: chat.Message{Role: "system", Content: string(s)}, hasContent: true})
		}
	}
	in := chat.Field(v, "input")
	if in == nil || in.Type() == fastjson.TypeNull {
		return BadRequest("input", "input: missing")
	}
	switch in.Type() {
	case fastjson.TypeString:
		msgs = append(msgs, oldRespMsg{m: chat.Message{Role: "user", Content: string(in.GetStringBytes())}, hasContent: true})
	case fastjson.TypeArray:
		items, _ := in.Array() // the type was checked
		for i, it := range items {
			var e *Error
			if msgs, e = oldResponseItem(msgs, it, i); e != nil {
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

// oldResponseItem appends (or merges) input item i.
func oldResponseItem(msgs []oldRespMsg, it *fastjson.Value, i int) ([]oldRespMsg, *Error) {
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
	var prev *oldRespMsg // the assistant message an item may merge into
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
		return append(msgs, oldRespMsg{m: chat.Message{Role: "assistant"}, toolCalls: true}), nil
	case typ == "function_call_output":
		m := oldRespMsg{m: chat.Message{Role: "tool"}, hasContent: true}
		ov := chat.Field(it, "output")
		if ov == nil {
			return nil, BadRequest(at(".output"), "%s: missing", at(".output"))
		}
		var e *Error
		if m.m.Content, e = oldPartsText(ov, at(".output")); e != nil {
			return nil, e
		}
		return append(msgs, m), nil
	case typ == "reasoning":
		if ev := chat.Field(it, "encrypted_content"); ev != nil && ev.Type() == fastjson.TypeString && len(ev.GetStringBytes()) > 0 {
			return nil, BadRequest(at(".encrypted_content"), "%s: encrypted content is not supported", at(".encrypted_content"))
		}
		text := ""
		if cv := chat.Field(it, "content"); cv != nil && cv.Type() == fastjson.TypeArray && len(cv.GetArray()) > 0 {
			text = oldFirstText(cv.GetArray()[0])
		} else if sv := chat.Field(it, "summary"); sv != nil && sv.Type() == fastjson.TypeArray && len(sv.GetArray()) > 0 {
			text = oldFirstText(sv.GetArray()[0])
		}
		if prev != nil && !prev.hasReasoning {
			prev.m.Reasoning, prev.m.HasReasoning, prev.hasReasoning = text, true, true
			return msgs, nil
		}
		return append(msgs, oldRespMsg{m: chat.Message{Role: "assistant", Reasoning: text, HasReasoning: true}, hasReasoning: true}), nil
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
						text = oldFirstText(parts[0])
					}
				}
			}
			if prev != nil && !prev.hasContent {
				prev.m.Content, prev.hasContent = text, true
				return msgs, nil
			}
			return append(msgs, oldRespMsg{m: chat.Message{Role: role, Content: text}, hasContent: true}), nil
		}
		m := oldRespMsg{m: chat.Message{Role: role}, hasContent: cv != nil}
		if cv != nil && cv.Type() != fastjson.TypeNull {
			var e *Error
			if m.m.Content, e = oldPartsText(cv, at(".content")); e != nil {
				return nil, e
			}
		}
		return append(msgs, m), nil
	}
	return msgs, nil // another item type: see the file comment
}

// oldFirstText is the "text" of a content or summary part (or the part
// itself when it is a string), "" otherwise.
func oldFirstText(v *fastjson.Value) string {
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

// oldPartsText is a content as the chat template sees it: a string, or its
// parts joined with chat.PartSeparator.
func oldPartsText(v *fastjson.Value, name string) (string, *Error) {
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
