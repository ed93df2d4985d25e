package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/valyala/fasthttp"
)

// Anthropic's Messages API (POST /v1/messages) as vLLM serves it
// (entrypoints/anthropic/serving.py): the request is converted into the
// chat completion request vLLM builds from it (system, messages, tools),
// which is then served as a chat completion, and the answer converted
// back: a message object, or the stream of message_start, ping,
// content_block_start, content_block_delta, content_block_stop,
// message_delta (stop_reason, usage) and message_stop events. The
// usage is vLLM's since its PR 40912: input_tokens the prompt's
// uncached part, cache_read_input_tokens the cached one,
// cache_creation_input_tokens 0. With tools and a tool_choice of "any"
// or "tool", the answer is a tool_use block (its input: each property of
// the tool's input_schema, a placeholder of its type), stop_reason
// tool_use. Errors are Anthropic's error object, typed as vLLM types
// them.
//
// The conversion is written the plain way (encoding/json values, the
// Python followed line by line), apart from saltus's decoder
// (openai/messages.go): the simulator's prompt accounting checks
// saltus's keys, not the other way round. Not reproduced: a tool_use
// block without an id ("call_<time>" in vLLM, "" here); an assistant's
// tool_result given as blocks (Python's repr of them, their JSON here);
// a tool input's floats are written as Go writes them, not as Python's
// repr.

// msgMeta is what the simulator keeps of a Messages request beyond its
// chat request.
type msgMeta struct {
	// tool is the tool the answer calls ("" for a text answer), schema
	// its input_schema.
	tool   string
	schema json.RawMessage
}

// obj is a JSON object's members by exact name (the last occurrence, as
// Python reads them).
type obj map[string]json.RawMessage

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

// optString reads member name of o: a string, or absent (null).
func (o obj) optString(name, path string) (string, bool, *apiError) {
	r := o[name]
	if isNull(r) {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(r, &s) != nil {
		return "", false, badRequest(path, "%s: want a string", path)
	}
	return s, true, nil
}

func asObj(r json.RawMessage, path string) (obj, *apiError) {
	var o obj
	if json.Unmarshal(r, &o) != nil || o == nil {
		return nil, badRequest(path, "%s: want an object", path)
	}
	return o, nil
}

// convertMessages turns a Messages body into its chat request body (with
// max_tokens and stream), or a 400.
func convertMessages(body []byte) ([]byte, msgMeta, *apiError) {
	var meta msgMeta
	req, e := asObj(body, "")
	if e != nil {
		return nil, meta, badRequest("", "request body must be a JSON object")
	}
	var maxTokens int64
	if json.Unmarshal(req["max_tokens"], &maxTokens) != nil || maxTokens <= 0 {
		return nil, meta, badRequest("max_tokens", "max_tokens: want a positive integer")
	}
	var raws []json.RawMessage
	if json.Unmarshal(req["messages"], &raws) != nil || raws == nil {
		return nil, meta, badRequest("messages", "messages: want an array of messages")
	}
	type msg = map[string]any
	var out []msg
	var sys []string
	systemTexts := func(r json.RawMessage, path string) *apiError {
		var s string
		if json.Unmarshal(r, &s) == nil {
			sys = append(sys, s)
			return nil
		}
		var blocks []json.RawMessage
		if json.Unmarshal(r, &blocks) != nil {
			return badRequest(path, "%s: want a string or an array of content blocks", path)
		}
		for i, br := range blocks {
			b, e := asObj(br, path)
			if e != nil {
				return e
			}
			typ, _, _ := b.optString("type", "")
			text, _, e := b.optString("text", fmt.Sprintf("%s[%d].text", path, i))
			if e != nil {
				return e
			}
			if typ == "text" && text != "" && !strings.HasPrefix(text, "x-anthropic-billing-header") {
				sys = append(sys, text)
			}
		}
		return nil
	}
	if !isNull(req["system"]) {
		if e := systemTexts(req["system"], "system"); e != nil {
			return nil, meta, e
		}
	}
	ms := make([]obj, len(raws))
	for i, r := range raws {
		m, e := asObj(r, fmt.Sprintf("messages[%d]", i))
		if e != nil {
			return nil, meta, e
		}
		role, _, _ := m.optString("role", "")
		switch role {
		case "ctx", "msg":
			role = "user"
		case "user", "assistant":
		case "system":
			if e := systemTexts(m["content"], fmt.Sprintf("messages[%d].content", i)); e != nil {
				return nil, meta, e
			}
		default:
			return nil, meta, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: want user, assistant or system", i)
		}
		m["role"] = json.RawMessage(strconv.Quote(role))
		ms[i] = m
	}
	if s := strings.Join(sys, ""); s != "" {
		out = append(out, msg{"role": "system", "content": s})
	}
	for i, m := range ms {
		var role string
		_ = json.Unmarshal(m["role"], &role) // written above
		if role == "system" {
			continue
		}
		om := msg{"role": role}
		var s string
		if json.Unmarshal(m["content"], &s) == nil {
			om["content"] = s
			out = append(out, om)
			continue
		}
		var blocks []json.RawMessage
		if json.Unmarshal(m["content"], &blocks) != nil {
			return nil, meta, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: want a string or an array of content blocks", i)
		}
		var parts, calls []msg
		var reasoning []string
		for j, br := range blocks {
			path := fmt.Sprintf("messages[%d].content[%d]", i, j)
			b, e := asObj(br, path)
			if e != nil {
				return nil, meta, e
			}
			typ, _, _ := b.optString("type", "")
			switch typ {
			case "text":
				if t, _, _ := b.optString("text", ""); t != "" {
					parts = append(parts, msg{"type": "text", "text": t})
				}
			case "image":
				if !isNull(b["source"]) {
					parts = append(parts, msg{"type": "image_url", "image_url": msg{"url": imageURL(b["source"])}})
				}
			case "thinking":
				if t, ok, _ := b.optString("thinking", ""); ok {
					reasoning = append(reasoning, t)
				}
			case "tool_use":
				args := "{}"
				if !isNull(b["input"]) {
					var ok bool
					if args, ok = pyDumps(b["input"]); !ok {
						return nil, meta, badRequest(path+".input", "%s.input: want an object", path)
					}
				}
				id, _, _ := b.optString("id", "")
				name, _, _ := b.optString("name", "")
				calls = append(calls, msg{"id": id, "type": "function", "function": msg{"name": name, "arguments": args}})
			case "tool_result":
				if role != "user" {
					c, _, _ := b.optString("content", "")
					parts = append(parts, msg{"type": "text", "text": "Tool result: " + c})
					continue
				}
				id, _, _ := b.optString("tool_use_id", "")
				text, _, _ := b.optString("content", "")
				var images []msg
				var items []obj
				if json.Unmarshal(b["content"], &items) == nil {
					var texts []string
					for _, it := range items {
						switch t, _, _ := it.optString("type", ""); t {
						case "text":
							s, _, _ := it.optString("text", "")
							texts = append(texts, s)
						case "image":
							images = append(images, msg{"type": "image_url", "image_url": msg{"url": imageURL(it["source"])}})
						}
					}
					text = strings.Join(texts, "\n")
				}
				out = append(out, msg{"role": "tool", "tool_call_id": id, "content": text})
				if len(images) > 0 {
					out = append(out, msg{"role": "user", "content": images})
				}
			case "redacted_thinking", "tool_reference":
			default:
				return nil, meta, badRequest(path+".type", "%s.type: want text, image, tool_use, tool_result, tool_reference, thinking or redacted_thinking", path)
			}
		}
		if len(reasoning) > 0 {
			om["reasoning"] = strings.Join(reasoning, "")
		}
		if len(calls) > 0 {
			om["tool_calls"] = calls
		}
		switch {
		case len(parts) == 1 && parts[0]["type"] == "text":
			om["content"] = parts[0]["text"]
		case len(parts) > 0:
			om["content"] = parts
		}
		if role == "user" && om["content"] == nil && len(calls) == 0 && len(reasoning) == 0 {
			continue
		}
		out = append(out, om)
	}
	cr := msg{"max_tokens": maxTokens}
	if out == nil {
		out = []msg{}
	}
	cr["messages"] = out
	for _, k := range []string{"model", "stream", "chat_template_kwargs"} {
		if r, ok := req[k]; ok {
			cr[k] = r
		}
	}
	if !isNull(req["tools"]) {
		var tools []obj
		if json.Unmarshal(req["tools"], &tools) != nil {
			return nil, meta, badRequest("tools", "tools: want an array of tools")
		}
		var fns []json.RawMessage
		for i, t := range tools {
			name, ok, _ := t.optString("name", "")
			schema, e := asObj(t["input_schema"], fmt.Sprintf("tools[%d].input_schema", i))
			if !ok || e != nil {
				return nil, meta, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: want a name and an input_schema object", i)
			}
			var sb bytes.Buffer
			_ = json.Compact(&sb, t["input_schema"]) // an object: checked
			s := sb.String()
			if _, has := schema["type"]; !has {
				// pydantic's validator adds the type after the members.
				s = strings.TrimSuffix(s, "}")
				if s != "{" {
					s += ","
				}
				s += `"type":"object"}`
			}
			q, _ := json.Marshal(name) // a string: never fails
			fn := `{"name":` + string(q)
			if d, ok, _ := t.optString("description", ""); ok {
				q, _ := json.Marshal(d) // a string: never fails
				fn += `,"description":` + string(q)
			}
			fns = append(fns, json.RawMessage(`{"type":"function","function":`+fn+`,"parameters":`+s+`}}`))
			if i == 0 {
				meta.tool, meta.schema = name, json.RawMessage(s)
			}
		}
		if fns == nil {
			fns = []json.RawMessage{}
		}
		cr["tools"] = fns
		tc, _ := asObj(req["tool_choice"], "tool_choice")
		switch t, _, _ := tc.optString("type", ""); t {
		case "any":
		case "tool":
			name, _, _ := tc.optString("name", "")
			meta.tool = ""
			for i, t := range tools {
				if n, _, _ := t.optString("name", ""); n == name {
					var f struct {
						Function struct {
							Parameters json.RawMessage `json:"parameters"`
						} `json:"function"`
					}
					_ = json.Unmarshal(fns[i], &f) // written above
					meta.tool, meta.schema = n, f.Function.Parameters
				}
			}
			if meta.tool == "" {
				return nil, meta, badRequest("tool_choice.name", "tool_choice.name: no tool %.40q", name)
			}
		default:
			meta.tool = ""
		}
	}
	b, err := json.Marshal(cr)
	if err != nil {
		return nil, meta, badRequest("", "cannot convert the request: %v", err)
	}
	return b, meta, nil
}

// imageURL is the URL vLLM makes of an image source: its url, or a data
// URL of its media_type (image/jpeg by default) and data.
func imageURL(src json.RawMessage) string {
	o, _ := asObj(src, "")
	if t, _, _ := o.optString("type", ""); t == "url" {
		u, _, _ := o.optString("url", "")
		return u
	}
	mt, ok, _ := o.optString("media_type", "")
	if !ok {
		mt = "image/jpeg"
	}
	d, _, _ := o.optString("data", "")
	return "data:" + mt + ";base64," + d
}

// pyDumps writes a JSON value as Python's json.dumps does: ", " and ": "
// between items, non-ASCII escaped; from encoding/json's tokens, which
// keep the members' order.
func pyDumps(raw []byte) (string, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var sb strings.Builder
	type frame struct {
		obj   bool
		n     int
		isKey bool
	}
	var stack []frame
	sep := func() {
		if len(stack) == 0 {
			return
		}
		f := &stack[len(stack)-1]
		switch {
		case f.obj && !f.isKey && f.n > 0:
			sb.WriteString(": ")
		case !f.obj && f.n > 0, f.obj && f.isKey && f.n > 0:
			sb.WriteString(", ")
		}
	}
	after := func() {
		if len(stack) == 0 {
			return
		}
		f := &stack[len(stack)-1]
		f.n++
		if f.obj {
			f.isKey = !f.isKey
		}
	}
	first := true
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if first {
			if dl, ok := tok.(json.Delim); !ok || dl != '{' {
				return "", false
			}
			first = false
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				sep()
				sb.WriteRune(rune(v))
				stack = append(stack, frame{obj: v == '{', isKey: true})
			default:
				stack = stack[:len(stack)-1]
				sb.WriteRune(rune(v))
				after()
			}
			continue
		case string:
			sep()
			sb.WriteByte('"')
			for _, r := range v {
				switch {
				case r == '"' || r == '\\':
					sb.WriteByte('\\')
					sb.WriteRune(r)
				case r == '\n':
					sb.WriteString(`\n`)
				case r == '\r':
					sb.WriteString(`\r`)
				case r == '\t':
					sb.WriteString(`\t`)
				case r < 0x20 || r >= 0x7f:
					for _, u := range utf16.Encode([]rune{r}) {
						fmt.Fprintf(&sb, `\u%04x`, u)
					}
				default:
					sb.WriteRune(r)
				}
			}
			sb.WriteByte('"')
		case json.Number:
			sep()
			if strings.ContainsAny(string(v), ".eE") {
				f, _ := v.Float64()
				if math.IsInf(f, 0) {
					return "", false
				}
				sb.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
			} else {
				sb.WriteString(string(v))
			}
		case bool:
			sep()
			sb.WriteString(strconv.FormatBool(v))
		case nil:
			sep()
			sb.WriteString("null")
		}
		after()
	}
	return sb.String(), !first && len(stack) == 0
}

// anthropicError is e as vLLM's Messages endpoint answers it
// (translate_error_response): Anthropic's error object, typed as vLLM
// types its errors.
func anthropicError(e *apiError) []byte {
	typ := e.vllmType
	if typ == "" {
		typ = "BadRequestError"
		if e.status >= 500 {
			typ = "InternalServerError"
		}
	}
	b, err := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": e.msg}})
	if err != nil {
		panic("BUG: cannot encode an error body: " + err.Error())
	}
	return b
}

// isMessages reports whether ctx came to the Messages endpoint, whose
// errors are Anthropic's.
func isMessages(ctx *fasthttp.RequestCtx) bool { return string(ctx.Path()) == "/v1/messages" }

// msgAnswer is the Anthropic side of an answer (answer.msg).
type msgAnswer struct {
	meta msgMeta
}

// appendMsgUsage appends Anthropic's usage object for a's prompt, cached
// tokens and output.
func (a *answer) appendMsgUsage(dst []byte, cached, output int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.prompt-cached), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(output), 10)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(cached), 10)
	return append(dst, '}')
}

// appendToolInput appends the tool call's input: each property of its
// schema, a placeholder of the property's type.
func (a *answer) appendToolInput(dst []byte) []byte {
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(a.msg.meta.schema, &s) // an object: no properties at worst
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	in := map[string]any{}
	for _, n := range names {
		switch s.Properties[n].Type {
		case "string":
			in[n] = "sim"
		case "number", "integer":
			in[n] = 1
		case "boolean":
			in[n] = true
		case "array":
			in[n] = []any{}
		case "object":
			in[n] = map[string]any{}
		default:
			in[n] = nil
		}
	}
	b, _ := json.Marshal(in) // plain values: never fails
	return append(dst, b...)
}

func (a *answer) stopReason() string {
	if a.msg.meta.tool != "" {
		return "tool_use"
	}
	return "max_tokens"
}

// appendToolUse appends the tool_use block, with the input when whole.
func (a *answer) appendToolUse(dst []byte, whole bool) []byte {
	dst = append(dst, `{"type":"tool_use","id":"call_`...)
	dst = append(dst, a.id...)
	dst = append(dst, `","name":`...)
	q, _ := json.Marshal(a.msg.meta.tool) // a string: never fails
	dst = append(dst, q...)
	dst = append(dst, `,"input":`...)
	if whole {
		dst = a.appendToolInput(dst)
	} else {
		dst = append(dst, "{}"...)
	}
	return append(dst, '}')
}

// appendMessage appends the non-streamed message (vLLM's
// model_dump(exclude_none=True): no stop_sequence).
func (a *answer) appendMessage(dst []byte, cached int) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, a.id...)
	dst = append(dst, `","type":"message","role":"assistant","content":[`...)
	if a.msg.meta.tool != "" {
		dst = a.appendToolUse(dst, true)
	} else {
		dst = append(dst, `{"type":"text","text":"`...)
		for i := range a.maxTokens {
			dst = a.out.appendNext(dst, i == 0)
		}
		dst = append(dst, `"}`...)
	}
	dst = append(dst, `],"model":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"stop_reason":"`...)
	dst = append(dst, a.stopReason()...)
	dst = append(dst, `","usage":`...)
	dst = a.appendMsgUsage(dst, cached, a.maxTokens)
	return append(dst, '}')
}

func appendEvent(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	return append(dst, "\ndata: "...)
}

// appendMsgStart appends the stream's first events: message_start, ping,
// and the text block's start (a tool call's block starts at the end).
func (a *answer) appendMsgStart(dst []byte, cached int) []byte {
	dst = appendEvent(dst, "message_start")
	dst = append(dst, `{"type":"message_start","message":{"id":"`...)
	dst = append(dst, a.id...)
	dst = append(dst, `","type":"message","role":"assistant","content":[],"model":`...)
	dst = append(dst, a.model...)
	dst = append(dst, `,"stop_reason":null,"stop_sequence":null,"usage":`...)
	dst = a.appendMsgUsage(dst, cached, 0)
	dst = append(dst, "}}\n\n"...)
	dst = appendEvent(dst, "ping")
	dst = append(dst, `{"type":"ping"}`+"\n\n"...)
	if a.msg.meta.tool == "" {
		dst = appendEvent(dst, "content_block_start")
		dst = append(dst, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`+"\n\n"...)
	}
	return dst
}

// appendMsgToken appends output token i's text_delta (nothing for a tool
// call).
func (a *answer) appendMsgToken(dst []byte, i int) []byte {
	if a.msg.meta.tool != "" {
		a.out.appendNext(nil, i == 0) // the same draws as a text answer
		return dst
	}
	dst = appendEvent(dst, "content_block_delta")
	dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`...)
	dst = a.out.appendNext(dst, i == 0)
	return append(dst, `"}}`+"\n\n"...)
}

// appendMsgEnd appends the stream's last events.
func (a *answer) appendMsgEnd(dst []byte, cached int) []byte {
	if a.msg.meta.tool != "" {
		dst = appendEvent(dst, "content_block_start")
		dst = append(dst, `{"type":"content_block_start","index":0,"content_block":`...)
		dst = a.appendToolUse(dst, false)
		dst = append(dst, "}\n\n"...)
		dst = appendEvent(dst, "content_block_delta")
		dst = append(dst, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`...)
		q, _ := json.Marshal(string(a.appendToolInput(nil))) // a string: never fails
		dst = append(dst, q...)
		dst = append(dst, "}}\n\n"...)
	}
	dst = appendEvent(dst, "content_block_stop")
	dst = append(dst, `{"type":"content_block_stop","index":0}`+"\n\n"...)
	dst = appendEvent(dst, "message_delta")
	dst = append(dst, `{"type":"message_delta","delta":{"stop_reason":"`...)
	dst = append(dst, a.stopReason()...)
	dst = append(dst, `","stop_sequence":null},"usage":`...)
	dst = a.appendMsgUsage(dst, cached, a.maxTokens)
	dst = append(dst, "}\n\n"...)
	dst = appendEvent(dst, "message_stop")
	return append(dst, `{"type":"message_stop"}`+"\n\n"...)
}
