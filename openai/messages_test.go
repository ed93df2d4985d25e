package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// refMessages is a reference conversion of an Anthropic Messages body to
// the chat completions body vLLM builds from it (serving.py's
// _convert_anthropic_to_openai_request), written the plain way: a parse
// into Go values, Python's code followed line by line, the chat body
// marshalled back. ok false: the body is not a request it converts.
func refMessages(body []byte) (chatBody []byte, ok bool) {
	var req struct {
		Model    string            `json:"model"`
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []struct {
			Name        *string         `json:"name"`
			Description *string         `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		Kwargs json.RawMessage `json:"chat_template_kwargs"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil, false
	}
	type block struct {
		Type      string          `json:"type"`
		Text      *string         `json:"text"`
		Source    json.RawMessage `json:"source"`
		Thinking  *string         `json:"thinking"`
		ID        *string         `json:"id"`
		Name      *string         `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID *string         `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
	}
	null := func(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	imageURL := func(src json.RawMessage) string {
		var s struct{ Type, URL, MediaType, Data *string }
		var m map[string]*string
		if len(src) == 0 {
			src = json.RawMessage("{}") // Python's item.get("source", {})
		}
		if json.Unmarshal(src, &m) != nil {
			return ""
		}
		s.Type, s.URL, s.MediaType, s.Data = m["type"], m["url"], m["media_type"], m["data"]
		if str(s.Type) == "url" {
			return str(s.URL)
		}
		mt := "image/jpeg"
		if s.MediaType != nil {
			mt = *s.MediaType
		}
		return "data:" + mt + ";base64," + str(s.Data)
	}
	type msg = map[string]any
	var out []msg
	var sys []string
	systemTexts := func(raw json.RawMessage) bool {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			sys = append(sys, s)
			return true
		}
		var bs []block
		if json.Unmarshal(raw, &bs) != nil {
			return false
		}
		for _, b := range bs {
			if b.Type == "text" && str(b.Text) != "" && !strings.HasPrefix(*b.Text, "x-anthropic-billing-header") {
				sys = append(sys, *b.Text)
			}
		}
		return true
	}
	if !null(req.System) && !systemTexts(req.System) {
		return nil, false
	}
	type message struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var ms []message
	for _, raw := range req.Messages {
		var m message
		if json.Unmarshal(raw, &m) != nil {
			return nil, false
		}
		if m.Role == "ctx" || m.Role == "msg" {
			m.Role = "user"
		}
		if m.Role == "system" && !systemTexts(m.Content) {
			return nil, false
		}
		ms = append(ms, m)
	}
	if len(sys) > 0 && strings.Join(sys, "") != "" {
		out = append(out, msg{"role": "system", "content": strings.Join(sys, "")})
	}
	for _, m := range ms {
		if m.Role == "system" {
			continue
		}
		om := msg{"role": m.Role}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			om["content"] = s
			out = append(out, om)
			continue
		}
		var bs []block
		if json.Unmarshal(m.Content, &bs) != nil {
			return nil, false
		}
		var parts []msg
		var calls []msg
		var reasoning []string
		for _, b := range bs {
			switch {
			case b.Type == "text" && str(b.Text) != "":
				parts = append(parts, msg{"type": "text", "text": *b.Text})
			case b.Type == "image" && !null(b.Source):
				parts = append(parts, msg{"type": "image_url", "image_url": msg{"url": imageURL(b.Source)}})
			case b.Type == "thinking" && b.Thinking != nil:
				reasoning = append(reasoning, *b.Thinking)
			case b.Type == "tool_use":
				args := "{}"
				if !null(b.Input) {
					var ok bool
					if args, ok = refPyDumps(b.Input); !ok {
						return nil, false
					}
				}
				calls = append(calls, msg{"id": str(b.ID), "type": "function", "function": msg{"name": str(b.Name), "arguments": args}})
			case b.Type == "tool_result" && m.Role == "user":
				text := ""
				var images, refs []string
				if json.Unmarshal(b.Content, &text) != nil && !null(b.Content) {
					var items []map[string]json.RawMessage
					if json.Unmarshal(b.Content, &items) != nil {
						return nil, false
					}
					var texts []string
					for _, it := range items {
						var typ string
						_ = json.Unmarshal(it["type"], &typ) // not a string: no type
						switch typ {
						case "text":
							var t string
							_ = json.Unmarshal(it["text"], &t) // absent: ""
							texts = append(texts, t)
						case "image":
							images = append(images, imageURL(it["source"]))
						case "tool_reference":
							var n, tn string
							_ = json.Unmarshal(it["tool_name"], &tn) // absent: ""
							_ = json.Unmarshal(it["name"], &n)       // absent: ""
							if tn != "" {
								n = tn
							}
							if n != "" {
								refs = append(refs, n)
							}
						}
					}
					text = strings.Join(texts, "\n")
				}
				out = append(out, msg{"role": "tool", "tool_call_id": str(b.ToolUseID), "content": text})
				if len(images) > 0 {
					var ps []msg
					for _, u := range images {
						ps = append(ps, msg{"type": "image_url", "image_url": msg{"url": u}})
					}
					out = append(out, msg{"role": "user", "content": ps})
				}
				if len(refs) > 0 {
					var ps []msg
					for _, n := range refs {
						ps = append(ps, msg{"type": "tool_reference", "name": n})
					}
					out = append(out, msg{"role": "tool", "tool_call_id": str(b.ToolUseID), "content": ps})
				}
			case b.Type == "tool_result":
				var s string
				if json.Unmarshal(b.Content, &s) != nil {
					return nil, false // the list's repr: not reproduced
				}
				parts = append(parts, msg{"type": "text", "text": "Tool result: " + s})
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
		if m.Role == "user" && om["content"] == nil && len(calls) == 0 && len(reasoning) == 0 {
			continue
		}
		out = append(out, om)
	}
	cr := msg{"model": req.Model, "messages": out}
	if out == nil {
		cr["messages"] = []msg{}
	}
	if req.Tools != nil {
		var tools []json.RawMessage
		for _, t := range req.Tools {
			var schema bytes.Buffer
			if t.Name == nil || json.Compact(&schema, t.InputSchema) != nil {
				return nil, false
			}
			var probe map[string]json.RawMessage
			if json.Unmarshal(schema.Bytes(), &probe) != nil {
				return nil, false
			}
			s := schema.String()
			if _, has := probe["type"]; !has {
				s = strings.TrimSuffix(s, "}")
				if s != "{" {
					s += ","
				}
				s += `"type":"object"}`
			}
			name, _ := json.Marshal(*t.Name)
			fn := `{"name":` + string(name)
			if t.Description != nil {
				d, _ := json.Marshal(*t.Description)
				fn += `,"description":` + string(d)
			}
			tools = append(tools, json.RawMessage(`{"type":"function","function":`+fn+`,"parameters":`+s+`}}`))
		}
		if tools == nil {
			tools = []json.RawMessage{}
		}
		cr["tools"] = tools
	}
	if !null(req.Kwargs) {
		cr["chat_template_kwargs"] = req.Kwargs
	}
	b, err := json.Marshal(cr)
	return b, err == nil
}

// refPyDumps writes the JSON value raw as Python's json.dumps does, from
// encoding/json's tokens (which keep the members' order).
func refPyDumps(raw []byte) (string, bool) {
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
		case f.obj && f.isKey:
			sb.WriteString(": ")
		case f.n > 0:
			sb.WriteString(", ")
		}
	}
	after := func() {
		if len(stack) == 0 {
			return
		}
		f := &stack[len(stack)-1]
		if f.obj {
			if f.isKey {
				f.n++
			}
			f.isKey = !f.isKey
		} else {
			f.n++
		}
	}
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				sep()
				sb.WriteRune(rune(v))
				stack = append(stack, frame{obj: v == '{'})
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
				case r == '\b':
					sb.WriteString(`\b`)
				case r == '\f':
					sb.WriteString(`\f`)
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
			if i, err := v.Int64(); err == nil && !strings.ContainsAny(string(v), ".eE") {
				sb.WriteString(strconv.FormatInt(i, 10))
			} else if !strings.ContainsAny(string(v), ".eE") {
				sb.WriteString(string(v)) // a big int: its digits
			} else {
				f, err := strconv.ParseFloat(string(v), 64)
				switch {
				case math.IsInf(f, 1):
					sb.WriteString("Infinity")
				case math.IsInf(f, -1):
					sb.WriteString("-Infinity")
				case err != nil:
					return "", false
				default:
					// Python's repr: shortest digits, scientific outside
					// 1e-4 <= |f| < 1e16.
					s := strconv.FormatFloat(f, 'e', -1, 64)
					mant, e, _ := strings.Cut(s, "e")
					exp, _ := strconv.Atoi(e)
					if exp < -4 || exp >= 16 {
						sign := "+"
						if exp < 0 {
							sign, exp = "-", -exp
						}
						fmt.Fprintf(&sb, "%se%s%02d", mant, sign, exp)
					} else {
						s := strconv.FormatFloat(f, 'f', -1, 64)
						if !strings.Contains(s, ".") {
							s += ".0"
						}
						sb.WriteString(s)
					}
				}
			}
		case bool:
			sep()
			fmt.Fprint(&sb, v)
		case nil:
			sep()
			sb.WriteString("null")
		}
		after()
	}
	return sb.String(), len(stack) == 0
}

// foldedKeys reports whether body has a string that equals a field name
// the reference reads only under Unicode case folding.
func foldedKeys(body []byte) bool {
	d := json.NewDecoder(bytes.NewReader(body))
	names := []string{"model", "system", "messages", "tools", "name", "description", "input_schema", "chat_template_kwargs",
		"type", "text", "source", "thinking", "id", "input", "tool_use_id", "content", "role", "url", "media_type", "data", "tool_name"}
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok {
			for _, n := range names {
				if s != n && strings.EqualFold(s, n) {
					return true
				}
			}
		}
	}
}

// renderers are the templates the equivalence is checked under: the
// built-ins, and qwen3's own Jinja template (tools, tool calls,
// reasoning).
func renderers(t testing.TB) map[string]*chat.Renderer {
	t.Helper()
	rs := map[string]*chat.Renderer{}
	for _, n := range chat.Names() {
		r, err := chat.New(n, nil, chat.Config{BOS: "<s>", EOS: "</s>"})
		if err != nil {
			t.Fatal(err)
		}
		rs[n] = r
	}
	cfg, err := chat.LoadConfig("../tokenpool/testdata/models/qwen3/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	j, err := chat.NewJinja(cfg.Template, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs["jinja-qwen3"] = j
	return rs
}

// rendered is the prompt r renders for d, or its error.
func rendered(r *chat.Renderer, d *Request) string {
	segs, err := r.Render(nil, d.Messages, d.Options)
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String()
}

// sameAsChat checks that body, as a Messages request, renders under every
// renderer as chatBody does as a chat request, copying and through sc.
func sameAsChat(t *testing.T, rs map[string]*chat.Renderer, sc *Scratch, body, chatBody []byte) {
	t.Helper()
	for name, r := range rs {
		var want Request
		if e := DecodeWith(&want, KindChat, chatBody, MaxScanDepth, nil, r.Wants()); e != nil {
			if e.Message == "messages: empty" {
				continue // the conversation of nothing: the chat API refuses it
			}
			t.Fatalf("%s: the chat request %s: %v", name, chatBody, e)
		}
		w := rendered(r, &want)
		for _, s := range []*Scratch{nil, sc} {
			var got Request
			if e := DecodeWith(&got, KindMessages, body, MaxScanDepth, s, r.Wants()); e != nil {
				t.Fatalf("%s: %s: %v", name, body, e)
			}
			if g := rendered(r, &got); g != w {
				t.Fatalf("%s (scratch %v): %s\nrenders\n%q\nits chat request %s\n%q", name, s != nil, body, g, chatBody, w)
			}
		}
	}
}

func TestDecodeMessagesAsChat(t *testing.T) {
	t.Parallel()
	rs := renderers(t)
	var sc Scratch
	tools := `"tools":[{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},{"name":"now","input_schema":{}}]`
	for _, body := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"x-anthropic-billing-header: 123"},{"type":"text","text":"b\n\u00e9"}],"messages":[{"role":"system","content":"c"},{"role":"user","content":[{"type":"text","text":"q"},{"type":"text","text":""},{"type":"text","text":"r"}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"what is it?"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"a cat"}]}]}`,
		// A tool round, with tools: a call, its result (a tool message,
		// the user message of only results dropped), the answer.
		`{"model":"m","max_tokens":5,` + tools + `,"tool_choice":{"type":"tool","name":"get_weather"},"messages":[{"role":"user","content":"weather in Paris?"},
			{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"now","input":{}},{"type":"tool_use","id":"toolu_3","name":"get_weather","input":{"city":"Oslo"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"noon"},{"type":"text","text":"UTC"}]},{"type":"tool_result","tool_use_id":"toolu_3","content":[{"type":"image","source":{"type":"url","url":"http://x/y.png"}}]},{"type":"text","text":"thanks"}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"ctx","content":"c"},{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]},{"role":"user","content":[]}]}`,
		`{"model":"m","max_tokens":5,"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`,
	} {
		chatBody, ok := refMessages([]byte(body))
		if !ok {
			t.Fatalf("the reference does not convert %s", body)
		}
		sameAsChat(t, rs, &sc, []byte(body), chatBody)
	}
}

func TestDecodeMessagesErrors(t *testing.T) {
	t.Parallel()
	f := func(body, param, msg string) {
		t.Helper()
		var d Request
		e := Decode(&d, KindMessages, []byte(body), MaxScanDepth, nil)
		if e == nil || e.Status != 400 || e.Param != param || !strings.Contains(e.Message, msg) {
			t.Fatalf("%s: got %+v, want a 400 for %s: %s", body, e, param, msg)
		}
	}
	m := `"messages":[{"role":"user","content":"x"}]`
	f(`{"model":"m",`+m+`}`, "max_tokens", "missing")
	f(`{"model":"m","max_tokens":0,`+m+`}`, "max_tokens", "must be positive")
	f(`{"model":"m","max_tokens":"5",`+m+`}`, "max_tokens", "want an integer")
	f(`{"model":"m","max_tokens":1}`, "messages", "missing")
	f(`{"model":"m","max_tokens":1,"messages":[]}`, "messages", "empty")
	f(`{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"x"}]}`, "messages[0].role", "want user, assistant or system")
	f(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document"}]}]}`, "messages[0].content[0].type", "want text")
	f(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, "messages[0].content[0].text", "want a string")
	f(`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","input":[]}]}]}`, "messages[0].content[0].input", "want an object")
	f(`{"model":"m","max_tokens":1,"system":5,`+m+`}`, "system", "want a string or an array")
	f(`{"model":"m","max_tokens":1,"tools":[{"name":"n"}],`+m+`}`, "tools[0].input_schema", "want an object")
	f(`{"model":"m","max_tokens":1,"tool_choice":{"type":"tool"},`+m+`}`, "tool_choice.name", "required")
	f(`{"model":"m","max_tokens":1,"tool_choice":{"type":"some"},`+m+`}`, "tool_choice.type", "want auto")

	var d Request
	if e := Decode(&d, KindMessages, []byte(`{"model":"m","max_tokens":1,"stream":true,`+m+`}`), MaxScanDepth, nil); e != nil || !d.Stream || !d.IncludeUsage || d.Kind != KindMessages {
		t.Fatalf("stream: %+v %v", d, e)
	}
}

// FuzzDecodeMessages: a body decodes or is refused with a 400 (a 413 past
// the depth), never a panic; one the reference converts too renders as
// its chat request does under every template.
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"data":"x"}}]}]}`,
		`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"properties":{}}}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"f","input":{"a":[1, "b"]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"i","content":[{"type":"text","text":"r"},{"type":"image"},{"type":"tool_reference","tool_name":"f"}]}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"redacted_thinking","data":"d"}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[]}]}`,
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"\ud800"}]}`, `{`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	rs := renderers(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var d Request
		var sc Scratch
		e := Decode(&d, KindMessages, body, MaxScanDepth, &sc)
		if e != nil {
			if (e.Status != 400 && (e.Status != 413 || e.Code != "json_too_deep")) || e.Type != "invalid_request_error" || !json.Valid(e.Body()) {
				t.Fatalf("bad error: %d %q %s", e.Status, e.Type, e.Body())
			}
			return
		}
		if d.Model == "" {
			t.Fatalf("accepted without a model: %+v", d)
		}
		// The reference reads strings through Go's decoder, which
		// replaces bad UTF-8 and lone surrogates: compared only without.
		if !utf8.Valid(body) || bytes.Contains(body, []byte(`\u`)) || bytes.Contains(body, []byte(`\/`)) {
			return
		}
		if foldedKeys(body) {
			return // the reference's encoding/json matches keys case-insensitively
		}
		if chatBody, ok := refMessages(body); ok {
			sameAsChat(t, rs, &sc, body, chatBody)
		}
	})
}
