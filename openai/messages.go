package openai

import (
	"bytes"
	"strconv"

	"github.com/saltus-lb/saltus/internal/jsonscan"
	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// Stage 2 for POST /v1/messages: Anthropic's Messages API request as the
// chat completion request vLLM converts it into (vLLM's
// entrypoints/anthropic/serving.py, _convert_anthropic_to_openai_request),
// so that the conversation is keyed, routed and learned like the same
// conversation sent to /v1/chat/completions.
//
// The body's system, messages and tools are written out as the chat
// request's "messages" and "tools" JSON (conv, at most a few times the
// body's bytes: escapes of tool inputs, a chat message's members per
// block), which the chat decoder then reads as it reads a chat body's:
// the same Messages and Options, by construction. What vLLM builds:
//   - system: a string, or the non-empty texts of its text blocks but
//     those starting with "x-anthropic-billing-header" (a per-request
//     hash), then those of the messages of role system, concatenated
//     (no separator) into one first system message;
//   - a message of role user or assistant ("ctx" and "msg" are user)
//     whose content is a string: that message;
//   - a message whose content is blocks: its text blocks (non-empty) and
//     image blocks (as image_url parts) its content, a string for a lone
//     text block; its thinking blocks its reasoning, concatenated; its
//     tool_use blocks its tool_calls (the input as the arguments); in a
//     user message, each tool_result block a tool message before it (its
//     content a string or its text items joined with "\n"; its images
//     then a user message of image_url parts; its tool_reference items a
//     second tool message), in an assistant message a text part
//     "Tool result: " and its content. A user message left with no
//     content, reasoning or tool call is dropped (one that carried only
//     tool results);
//   - tools: function tools {name, description, parameters:
//     input_schema}, "type":"object" added to a schema without a type;
//   - output_config.effort: reasoning_effort; chat_template_kwargs as
//     chat's.
//
// Not reproduced: a tool_use block without an id gets vLLM's
// "call_<unix time>", here ""; an assistant's tool_result of content
// blocks is Python's repr of them there, their JSON here. The chat
// templates saltus knows render neither.
//
// max_tokens is required (a positive integer), as vLLM requires it.
// vLLM streams a Messages answer with its usage in message_delta
// whatever the request says, so IncludeUsage is Stream: saltus never
// asks for it.

// The members of a block (system's, a message's content, a tool
// result's content) that messages read.
const (
	bType = iota
	bText
	bSource
	bThinking
	bID
	bName
	bInput
	bToolUseID
	bContent
	bToolName
	bN
)

var blockKeys = []string{bType: "type", bText: "text", bSource: "source", bThinking: "thinking", bID: "id",
	bName: "name", bInput: "input", bToolUseID: "tool_use_id", bContent: "content", bToolName: "tool_name"}

// billingHeader starts Claude Code's attribution text, which vLLM strips
// from the system prompt: its hash changes per request.
const billingHeader = "x-anthropic-billing-header"

// convWriter writes the chat request's JSON from the Anthropic body's
// bytes. Strings are copied as they are written in the body (escapes
// kept): valid JSON string contents, concatenated freely.
type convWriter struct {
	r *reader
	// calls: the tool calls are written (chat.WantExtras); without, no
	// template reads them.
	calls bool
	out   []byte
}

// rawStr is the string at r.b[at] between its quotes, escapes kept.
func (w *convWriter) rawStr(at int) []byte {
	raw, _, _ := jsonscan.Str(w.r.b, at)
	return raw
}

// escapeTail escapes b[start:], JSON text as appendPyJSON writes it (no
// control characters: its strings escape them), into the contents of a
// JSON string, in place: its quotes and backslashes get a backslash each,
// moved from the end, so no second buffer holds the text.
func escapeTail(b []byte, start int) []byte {
	n := 0
	for _, c := range b[start:] {
		if c == '"' || c == '\\' {
			n++
		}
	}
	if n == 0 {
		return b
	}
	end := len(b)
	b = append(b, make([]byte, n)...)
	for i, j := end-1, len(b)-1; i >= start; i-- {
		c := b[i]
		b[j] = c
		j--
		if c == '"' || c == '\\' {
			b[j] = '\\'
			j--
		}
	}
	return b
}

// appendEscapedJSON appends v (JSON text) as the contents of a JSON
// string.
func appendEscapedJSON(dst, v []byte) []byte {
	for _, c := range v {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// loc is where a value is: message i's content block j (i < 0: the
// system's; j < 0: the content itself), item k of that block's content
// (k < 0: the block). Its path is made only for an error.
type loc struct{ i, j, k int }

func (l loc) path(field string) string {
	p := "system"
	if l.i >= 0 {
		p = "messages[" + strconv.Itoa(l.i) + "].content"
	}
	if l.j >= 0 {
		p += "[" + strconv.Itoa(l.j) + "]"
	}
	if l.k >= 0 {
		p += ".content[" + strconv.Itoa(l.k) + "]"
	}
	return p + field
}

// bad is a 400 naming l's field: the path, then the message.
func (l loc) bad(field, format string, args ...any) *Error {
	p := l.path(field)
	return BadRequest(p, "%s"+format, append([]any{p}, args...)...)
}

// blockType reads the type of the block at b[v] (an object, checked) into
// a constant: vLLM's block types, "" for another (refused).
func blockType(r *reader, f *[bN]int, l loc) (string, *Error) {
	b := r.b
	if !jsonscan.Is(b, f[bType], '"') {
		return "", l.bad(".type", ": missing or not a string")
	}
	switch t := r.text(f[bType]); string(t) {
	case "text":
		return "text", nil
	case "image":
		return "image", nil
	case "tool_use":
		return "tool_use", nil
	case "tool_result":
		return "tool_result", nil
	case "tool_reference":
		return "tool_reference", nil
	case "thinking":
		return "thinking", nil
	case "redacted_thinking":
		return "redacted_thinking", nil
	default:
		return "", l.bad(".type", ": want text, image, tool_use, tool_result, tool_reference, thinking or redacted_thinking, got %.40q", t)
	}
}

// block reads the members of the block at b[v]; an error unless it is an
// object with a known type.
func block(r *reader, v int, l loc) (f [bN]int, typ string, e *Error) {
	if !jsonscan.Is(r.b, v, '{') {
		return f, "", l.bad("", ": want a content block object, got %s", jsonscan.TypeName(r.b, v))
	}
	jsonscan.Members(r.b, v, blockKeys, f[:], nil)
	typ, e = blockType(r, &f, l)
	return f, typ, e
}

// optStr checks that the member at b[at] (l's field) is a string or null
// (absent).
func optStr(b []byte, at int, l loc, field string) *Error {
	if jsonscan.Present(b, at) && !jsonscan.Is(b, at, '"') {
		return l.bad(field, ": want a string, got %s", jsonscan.TypeName(b, at))
	}
	return nil
}

// systemParts appends the system texts of the value at b[v] (a string or
// text blocks; i < 0: the top-level system, else message i's content).
func (w *convWriter) systemParts(v, i int) *Error {
	b := w.r.b
	switch {
	case jsonscan.Is(b, v, '"'):
		w.out = append(w.out, w.rawStr(v)...)
		return nil
	case jsonscan.Is(b, v, '['):
	default:
		return loc{i, -1, -1}.bad("", ": want a string or an array of content blocks, got %s", jsonscan.TypeName(b, v))
	}
	j := 0
	for e := jsonscan.Elem(b, v); e >= 0; e = jsonscan.Next(b, e) {
		l := loc{i, j, -1}
		f, typ, err := block(w.r, e, l)
		if err != nil {
			return err
		}
		if err := optStr(b, f[bText], l, ".text"); err != nil {
			return err
		}
		if typ == "text" && jsonscan.Is(b, f[bText], '"') && !bytes.HasPrefix(w.r.text(f[bText]), []byte(billingHeader)) {
			w.out = append(w.out, w.rawStr(f[bText])...)
		}
		j++
	}
	return nil
}

// imageURL appends the URL vLLM makes of an image source at b[s]: its
// url, or a data URL of its media_type (image/jpeg by default) and data.
func (w *convWriter) imageURL(s int, l loc) *Error {
	b := w.r.b
	if !jsonscan.Is(b, s, '{') {
		return l.bad(".source", ": want an object, got %s", jsonscan.TypeName(b, s))
	}
	var f [4]int
	names := [...]string{"type", "url", "media_type", "data"}
	jsonscan.Members(b, s, names[:], f[:], nil)
	for k, name := range names {
		if err := optStr(b, f[k], l, ".source."+name); err != nil {
			return err
		}
	}
	w.out = append(w.out, '"')
	if jsonscan.Is(b, f[0], '"') && string(w.r.text(f[0])) == "url" {
		if jsonscan.Is(b, f[1], '"') {
			w.out = append(w.out, w.rawStr(f[1])...)
		}
	} else {
		w.out = append(w.out, "data:"...)
		if jsonscan.Is(b, f[2], '"') {
			w.out = append(w.out, w.rawStr(f[2])...)
		} else {
			w.out = append(w.out, "image/jpeg"...)
		}
		w.out = append(w.out, ";base64,"...)
		if jsonscan.Is(b, f[3], '"') {
			w.out = append(w.out, w.rawStr(f[3])...)
		}
	}
	w.out = append(w.out, '"')
	return nil
}

// imagePart appends an image_url content part for the source at b[s].
func (w *convWriter) imagePart(s int, l loc) *Error {
	w.out = append(w.out, `{"type":"image_url","image_url":{"url":`...)
	if e := w.imageURL(s, l); e != nil {
		return e
	}
	w.out = append(w.out, "}}"...)
	return nil
}

// sep appends a comma unless the output ends an array or object opening.
func (w *convWriter) sep() {
	if n := len(w.out); n > 0 && w.out[n-1] != '[' && w.out[n-1] != '{' {
		w.out = append(w.out, ',')
	}
}

// toolResult appends the messages a user's tool_result block (members f,
// at path) makes: a tool message, then a user message of its images and
// a tool message of its tool references when it has any.
func (w *convWriter) toolResult(f *[bN]int, l loc) *Error {
	b := w.r.b
	if err := optStr(b, f[bToolUseID], l, ".tool_use_id"); err != nil {
		return err
	}
	w.sep()
	w.out = append(w.out, `{"role":"tool","tool_call_id":"`...)
	if jsonscan.Is(b, f[bToolUseID], '"') {
		w.out = append(w.out, w.rawStr(f[bToolUseID])...)
	}
	w.out = append(w.out, `","content":"`...)
	cv := f[bContent]
	images, refs := 0, 0
	switch {
	case !jsonscan.Present(b, cv):
	case jsonscan.Is(b, cv, '"'):
		w.out = append(w.out, w.rawStr(cv)...)
	case jsonscan.Is(b, cv, '['):
		k, texts := 0, 0
		for it := jsonscan.Elem(b, cv); it >= 0; it = jsonscan.Next(b, it) {
			il := loc{l.i, l.j, k}
			k++
			if !jsonscan.Is(b, it, '{') {
				return il.bad("", ": want an object, got %s", jsonscan.TypeName(b, it))
			}
			var g [bN]int
			jsonscan.Members(b, it, blockKeys, g[:], nil)
			if !jsonscan.Is(b, g[bType], '"') {
				continue // vLLM skips an item of no known type
			}
			switch string(w.r.text(g[bType])) {
			case "text":
				if err := optStr(b, g[bText], il, ".text"); err != nil {
					return err
				}
				if texts > 0 {
					w.out = append(w.out, `\n`...)
				}
				texts++
				if jsonscan.Is(b, g[bText], '"') {
					w.out = append(w.out, w.rawStr(g[bText])...)
				}
			case "image":
				images++
			case "tool_reference":
				if err := optStr(b, g[bToolName], il, ".tool_name"); err != nil {
					return err
				}
				if err := optStr(b, g[bName], il, ".name"); err != nil {
					return err
				}
				if refName(b, &g) >= 0 {
					refs++
				}
			}
		}
	default:
		return l.bad(".content", ": want a string or an array of content blocks, got %s", jsonscan.TypeName(b, cv))
	}
	w.out = append(w.out, `"}`...)
	if images > 0 {
		w.out = append(w.out, `,{"role":"user","content":[`...)
		k := 0
		for it := jsonscan.Elem(b, cv); it >= 0; it = jsonscan.Next(b, it) {
			var g [bN]int
			jsonscan.Members(b, it, blockKeys, g[:], nil)
			if jsonscan.Is(b, g[bType], '"') && string(w.r.text(g[bType])) == "image" {
				w.sep()
				s := g[bSource]
				if !jsonscan.Present(b, s) {
					s = -1
				}
				if s < 0 {
					w.out = append(w.out, `{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,"}}`...)
				} else if e := w.imagePart(s, loc{l.i, l.j, k}); e != nil {
					return e
				}
			}
			k++
		}
		w.out = append(w.out, "]}"...)
	}
	if refs > 0 {
		w.out = append(w.out, `,{"role":"tool","tool_call_id":"`...)
		if jsonscan.Is(b, f[bToolUseID], '"') {
			w.out = append(w.out, w.rawStr(f[bToolUseID])...)
		}
		w.out = append(w.out, `","content":[`...)
		for it := jsonscan.Elem(b, cv); it >= 0; it = jsonscan.Next(b, it) {
			var g [bN]int
			jsonscan.Members(b, it, blockKeys, g[:], nil)
			if jsonscan.Is(b, g[bType], '"') && string(w.r.text(g[bType])) == "tool_reference" {
				if n := refName(b, &g); n >= 0 {
					w.sep()
					w.out = append(w.out, `{"type":"tool_reference","name":"`...)
					w.out = append(append(w.out, w.rawStr(n)...), `"}`...)
				}
			}
		}
		w.out = append(w.out, "]}"...)
	}
	return nil
}

// refName is the offset of a tool_reference item's name (tool_name, else
// name; non-empty), -1 for none.
func refName(b []byte, g *[bN]int) int {
	for _, at := range []int{g[bToolName], g[bName]} {
		if raw, _, _ := jsonscan.Str(b, at); len(raw) > 0 {
			return at
		}
	}
	return -1
}

// message appends what message i (at b[v]) makes.
func (w *convWriter) message(v, i int) *Error {
	b := w.r.b
	if !jsonscan.Is(b, v, '{') {
		p := "messages[" + strconv.Itoa(i) + "]"
		return BadRequest(p, "%s: want an object, got %s", p, jsonscan.TypeName(b, v))
	}
	var f [2]int
	jsonscan.Members(b, v, []string{"role", "content"}, f[:], nil)
	if !jsonscan.Is(b, f[0], '"') {
		p := "messages[" + strconv.Itoa(i) + "].role"
		return BadRequest(p, "%s: missing or not a string", p)
	}
	role := ""
	switch t := w.r.text(f[0]); string(t) {
	case "user", "ctx", "msg":
		role = "user"
	case "assistant":
		role = "assistant"
	case "system":
		role = "system"
	default:
		p := "messages[" + strconv.Itoa(i) + "].role"
		return BadRequest(p, "%s: want user, assistant or system, got %.40q", p, t)
	}
	cv := f[1]
	switch {
	case jsonscan.Is(b, cv, '"'):
		if role != "system" {
			w.sep()
			w.out = append(w.out, `{"role":"`...)
			w.out = append(w.out, role...)
			w.out = append(w.out, `","content":"`...)
			w.out = append(append(w.out, w.rawStr(cv)...), `"}`...)
		}
		return nil
	case jsonscan.Is(b, cv, '['):
	default:
		return loc{i, -1, -1}.bad("", ": want a string or an array of content blocks, got %s", jsonscan.TypeName(b, cv))
	}
	// Every block checked, and the tool messages of a user's tool
	// results written (vLLM appends them as it meets them, before the
	// message itself).
	var parts, texts, reasoning, calls int
	j := 0
	for e := jsonscan.Elem(b, cv); e >= 0; e = jsonscan.Next(b, e) {
		l := loc{i, j, -1}
		j++
		g, typ, err := block(w.r, e, l)
		if err != nil {
			return err
		}
		for _, m := range [...]struct {
			k    int
			name string
		}{{bText, ".text"}, {bThinking, ".thinking"}, {bID, ".id"}, {bName, ".name"}} {
			if err := optStr(b, g[m.k], l, m.name); err != nil {
				return err
			}
		}
		if role == "system" {
			continue // its texts are in the system message
		}
		switch typ {
		case "text":
			if raw, _, _ := jsonscan.Str(b, g[bText]); len(raw) > 0 {
				parts++
				texts++
			}
		case "image":
			if jsonscan.Present(b, g[bSource]) {
				parts++
			}
		case "thinking":
			if jsonscan.Is(b, g[bThinking], '"') {
				reasoning++
			}
		case "tool_use":
			if iv := g[bInput]; jsonscan.Present(b, iv) && !jsonscan.Is(b, iv, '{') {
				return l.bad(".input", ": want an object, got %s", jsonscan.TypeName(b, iv))
			}
			calls++
		case "tool_result":
			if role == "user" {
				if err := w.toolResult(&g, l); err != nil {
					return err
				}
			} else {
				parts++
				texts++
			}
		}
	}
	if role == "system" || role == "user" && parts == 0 && calls == 0 && reasoning == 0 {
		return nil
	}
	w.sep()
	w.out = append(w.out, `{"role":"`...)
	w.out = append(append(w.out, role...), '"')
	if reasoning > 0 {
		w.out = append(w.out, `,"reasoning":"`...)
		for e := jsonscan.Elem(b, cv); e >= 0; e = jsonscan.Next(b, e) {
			var g [bN]int
			jsonscan.Members(b, e, blockKeys, g[:], nil)
			if string(w.r.text(g[bType])) == "thinking" && jsonscan.Is(b, g[bThinking], '"') {
				w.out = append(w.out, w.rawStr(g[bThinking])...)
			}
		}
		w.out = append(w.out, '"')
	}
	if calls > 0 && w.calls {
		w.out = append(w.out, `,"tool_calls":[`...)
		for e := jsonscan.Elem(b, cv); e >= 0; e = jsonscan.Next(b, e) {
			var g [bN]int
			jsonscan.Members(b, e, blockKeys, g[:], nil)
			if string(w.r.text(g[bType])) != "tool_use" {
				continue
			}
			w.sep()
			w.out = append(w.out, `{"id":"`...)
			if jsonscan.Is(b, g[bID], '"') {
				w.out = append(w.out, w.rawStr(g[bID])...)
			}
			w.out = append(w.out, `","type":"function","function":{"name":"`...)
			if jsonscan.Is(b, g[bName], '"') {
				w.out = append(w.out, w.rawStr(g[bName])...)
			}
			w.out = append(w.out, `","arguments":"`...)
			if iv := g[bInput]; jsonscan.Is(b, iv, '{') {
				start := len(w.out)
				w.out = appendPyJSON(w.out, b, iv)
				w.out = escapeTail(w.out, start)
			} else {
				w.out = append(w.out, "{}"...)
			}
			w.out = append(w.out, `"}}`...)
		}
		w.out = append(w.out, ']')
	}
	if parts > 0 {
		w.out = append(w.out, `,"content":`...)
		lone := parts == 1 && texts == 1
		if !lone {
			w.out = append(w.out, '[')
		}
		j := 0
		for e := jsonscan.Elem(b, cv); e >= 0; e = jsonscan.Next(b, e) {
			var g [bN]int
			jsonscan.Members(b, e, blockKeys, g[:], nil)
			l := loc{i, j, -1}
			j++
			text := -1 // a text part: its string, or a tool result's content
			switch string(w.r.text(g[bType])) {
			case "text":
				if raw, _, _ := jsonscan.Str(b, g[bText]); len(raw) == 0 {
					continue
				}
				text = g[bText]
			case "image":
				if !jsonscan.Present(b, g[bSource]) {
					continue
				}
				w.sep()
				if err := w.imagePart(g[bSource], l); err != nil {
					return err
				}
				continue
			case "tool_result":
				if role == "user" {
					continue
				}
				text = -2
			default:
				continue
			}
			if !lone {
				w.sep()
				w.out = append(w.out, `{"type":"text","text":`...)
			}
			w.out = append(w.out, '"')
			if text >= 0 {
				w.out = append(w.out, w.rawStr(text)...)
			} else {
				w.out = append(w.out, "Tool result: "...)
				switch cv := g[bContent]; {
				case jsonscan.Is(b, cv, '"'):
					w.out = append(w.out, w.rawStr(cv)...)
				case jsonscan.Is(b, cv, '[') && jsonscan.Elem(b, cv) >= 0, jsonscan.Is(b, cv, '{'):
					w.out = appendEscapedJSON(w.out, b[cv:jsonscan.SkipValue(b, cv)])
				}
			}
			w.out = append(w.out, '"')
			if !lone {
				w.out = append(w.out, '}')
			}
		}
		if !lone {
			w.out = append(w.out, ']')
		}
	}
	w.out = append(w.out, '}')
	return nil
}

// tools appends the function tools of the Anthropic tools at b[v].
func (w *convWriter) tools(v int) *Error {
	b := w.r.b
	if !jsonscan.Is(b, v, '[') {
		return BadRequest("tools", "tools: want an array of tools, got %s", jsonscan.TypeName(b, v))
	}
	w.out = append(w.out, '[')
	k := 0
	for t := jsonscan.Elem(b, v); t >= 0; t = jsonscan.Next(b, t) {
		p := func() string { return "tools[" + strconv.Itoa(k-1) + "]" } // for an error only
		k++
		if !jsonscan.Is(b, t, '{') {
			return BadRequest(p(), "%s: want an object, got %s", p(), jsonscan.TypeName(b, t))
		}
		var f [3]int
		jsonscan.Members(b, t, []string{"name", "description", "input_schema"}, f[:], nil)
		if !jsonscan.Is(b, f[0], '"') {
			return BadRequest(p()+".name", "%s.name: missing or not a string", p())
		}
		if d := f[1]; jsonscan.Present(b, d) && !jsonscan.Is(b, d, '"') {
			return BadRequest(p()+".description", "%s.description: want a string, got %s", p(), jsonscan.TypeName(b, d))
		}
		sv := f[2]
		if !jsonscan.Is(b, sv, '{') {
			return BadRequest(p()+".input_schema", "%s.input_schema: want an object, got %s", p(), jsonscan.TypeName(b, sv))
		}
		w.sep()
		w.out = append(w.out, `{"type":"function","function":{"name":"`...)
		w.out = append(append(w.out, w.rawStr(f[0])...), '"')
		if jsonscan.Is(b, f[1], '"') {
			w.out = append(w.out, `,"description":"`...)
			w.out = append(append(w.out, w.rawStr(f[1])...), '"')
		}
		w.out = append(w.out, `,"parameters":`...)
		end := jsonscan.SkipValue(b, sv)
		var ty [1]int
		if jsonscan.Members(b, sv, []string{"type"}, ty[:], nil); ty[0] >= 0 {
			w.out = append(w.out, b[sv:end]...)
		} else {
			// pydantic's validator adds the type after the members.
			w.out = append(w.out, b[sv:end-1]...)
			if jsonscan.EmptyObject(b, sv) {
				w.out = append(w.out[:len(w.out)-(end-1-sv)], '{')
			} else {
				w.out = append(w.out, ',')
			}
			w.out = append(w.out, `"type":"object"}`...)
		}
		w.out = append(w.out, "}}"...)
	}
	w.out = append(w.out, ']')
	return nil
}

// toolChoice checks the tool_choice at b[v]: vLLM's four types, a name
// for "tool". It changes nothing the template sees.
func toolChoice(r *reader, v int) *Error {
	b := r.b
	if !jsonscan.Present(b, v) {
		return nil
	}
	if !jsonscan.Is(b, v, '{') {
		return BadRequest("tool_choice", "tool_choice: want an object, got %s", jsonscan.TypeName(b, v))
	}
	var f [2]int
	jsonscan.Members(b, v, []string{"type", "name"}, f[:], nil)
	if !jsonscan.Is(b, f[0], '"') {
		return BadRequest("tool_choice.type", "tool_choice.type: missing or not a string")
	}
	switch t := r.text(f[0]); string(t) {
	case "auto", "any", "none":
	case "tool":
		if raw, _, _ := jsonscan.Str(b, f[1]); len(raw) == 0 {
			return BadRequest("tool_choice.name", "tool_choice.name: required when tool_choice.type is \"tool\"")
		}
	default:
		return BadRequest("tool_choice.type", "tool_choice.type: want auto, any, tool or none, got %.40q", t)
	}
	return nil
}

// decodeMessages reads an Anthropic Messages request into dst (Messages,
// Options, Stream), through the chat decoder as decodeChat does. With
// sc, the converted JSON is sc.conv and the messages are views into it
// and sc.Chat.
func decodeMessages(dst *Request, r *reader, f, fe *[numFields]int, sc *Scratch, want chat.Wants) *Error {
	b := r.b
	dst.IncludeUsage = dst.Stream
	mt := f[fMaxTokens]
	if !jsonscan.Present(b, mt) {
		return BadRequest("max_tokens", "max_tokens: missing")
	}
	if n, ok := jsonscan.Int64(b, mt); !jsonscan.IsNumber(b, mt) || !ok {
		return BadRequest("max_tokens", "max_tokens: want an integer, got %s", jsonscan.TypeName(b, mt))
	} else if n <= 0 {
		return BadRequest("max_tokens", "max_tokens: must be positive, got %d", n)
	}
	mv := f[fMessages]
	if !jsonscan.Present(b, mv) {
		return BadRequest("messages", "messages: missing")
	}
	if !jsonscan.Is(b, mv, '[') {
		return BadRequest("messages", "messages: want an array of messages, got %s", jsonscan.TypeName(b, mv))
	}
	if jsonscan.Elem(b, mv) < 0 {
		return BadRequest("messages", "messages: empty")
	}
	if e := toolChoice(r, f[fToolChoice]); e != nil {
		return e
	}
	w := convWriter{r: r, calls: want&chat.WantExtras != 0}
	if sc != nil {
		w.out = sc.conv[:0]
	}
	if cap(w.out) < len(b) {
		// Room for the usual conversion (about the body's size, up to
		// twice for tool inputs and results) at once, rather than
		// append's series of ever larger buffers.
		w.out = make([]byte, 0, 2*len(b))
	}
	w.out = append(w.out, `[{"role":"system","content":"`...)
	start := len(w.out)
	if sv := f[fSystem]; jsonscan.Present(b, sv) {
		if e := w.systemParts(sv, -1); e != nil {
			return e
		}
	}
	// The texts of the messages of role system.
	i := 0
	for e := jsonscan.Elem(b, mv); e >= 0; e = jsonscan.Next(b, e) {
		var m [2]int
		if jsonscan.Members(b, e, []string{"role", "content"}, m[:], nil); jsonscan.Is(b, m[0], '"') && string(r.text(m[0])) == "system" {
			if err := w.systemParts(m[1], i); err != nil {
				return err
			}
		}
		i++
	}
	if len(w.out) == start {
		w.out = append(w.out[:0], '[') // no system message
	} else {
		w.out = append(w.out, `"}`...)
	}
	i = 0
	for e := jsonscan.Elem(b, mv); e >= 0; e = jsonscan.Next(b, e) {
		if err := w.message(e, i); err != nil {
			return err
		}
		i++
	}
	w.out = append(w.out, ']')
	msgsEnd := len(w.out)
	opt := chat.Options{AddGenerationPrompt: true}
	if tv := f[fTools]; jsonscan.Present(b, tv) {
		if e := w.tools(tv); e != nil {
			return e
		}
		if want&chat.WantExtras != 0 && len(w.out)-msgsEnd > 2 {
			opt.Tools = chat.CanonicalJSON(w.out[msgsEnd:])
		}
	}
	conv := w.out[:msgsEnd]
	if sc != nil {
		sc.conv = w.out
	}
	var (
		msgs []chat.Message
		err  error
	)
	if sc != nil {
		msgs, err = sc.Chat.MessagesFromBody(conv)
	} else {
		msgs, err = chat.MessagesFromBodyFor(conv, want)
	}
	if err != nil {
		// The conversion writes what the chat decoder reads: a bug, but
		// the body is refused rather than routed half read.
		return BadRequest("messages", "%s", err.Error())
	}
	templateKwargs(b, f[fChatTemplateKwargs], fe[fChatTemplateKwargs], want, &opt)
	if oc := f[fOutputConfig]; want&chat.WantExtras != 0 && jsonscan.Is(b, oc, '{') {
		var ef [1]int
		if jsonscan.Members(b, oc, []string{"effort"}, ef[:], nil); jsonscan.Is(b, ef[0], '"') {
			opt.ReasoningEffort = r.str(ef[0])
		}
	}
	if msgs == nil {
		msgs = []chat.Message{} // only user messages of nothing: the generation prompt alone
	}
	dst.Messages, dst.Options = msgs, opt
	return nil
}
