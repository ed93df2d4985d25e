package chat

import (
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fastjson"
)

// The harmony renderer follows what vLLM does with a chat completions
// request for a gpt-oss model (its harmony utilities and the chat
// renderer's harmony path): no Jinja template, but a list of
// openai_harmony messages rendered by that library's
// render_conversation_for_completion. The package doc lists what it
// renders and what it does not; the comments below say which step of
// vLLM or of openai_harmony each part follows.

// NewHarmony builds the harmony Renderer for vocab (the gpt-oss
// tokenizer, whose added tokens <|start|>, <|message|>, <|end|>,
// <|channel|> and <|call|> become special segments). now is the clock the
// system message's "Current date" is read from, in UTC (nil: time.Now):
// vLLM writes the engine's date into every prompt, so the prompt, and
// every key after its first block, changes at midnight.
func NewHarmony(vocab Vocab, now func() time.Time) (*Renderer, error) {
	r, err := New(Harmony, vocab, Config{})
	if err != nil {
		return nil, err
	}
	if now != nil {
		r.now = now
	}
	return r, nil
}

// hasHarmonyTokens reports whether vocab has the formatting tokens of
// harmony (gpt-oss's o200k_harmony vocabulary).
func hasHarmonyTokens(vocab Vocab) bool {
	if vocab == nil {
		return false
	}
	for _, s := range [...]string{"<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"} {
		if _, ok := vocab.LookupAdded(s); !ok {
			return false
		}
	}
	return true
}

// hMsg is one openai_harmony message: author (a role, or a tool's name),
// recipient, channel and content type of its header, and its text.
type hMsg struct {
	author, recipient, channel, ctype string
	text                              string
	assistant, final, analysis        bool
	src                               int // the request message it comes from
}

// harmonySystemHead is the top of openai_harmony's SystemContent as vLLM
// builds it (SystemContent.new(): the default model identity and
// knowledge cutoff; the date follows).
const harmonySystemHead = "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: "

func (r *Renderer) harmony(b *builder, msgs []Message, opt Options) error {
	// vLLM's request model accepts low, medium, high and none; harmony
	// refuses none. No effort given: SystemContent's default, medium.
	effort := "medium"
	switch opt.ReasoningEffort {
	case "":
	case "low", "medium", "high":
		effort = opt.ReasoningEffort
	default:
		return &FieldError{"reasoning_effort", fmt.Sprintf("reasoning_effort: harmony supports low, medium and high, got %.40q", opt.ReasoningEffort)}
	}
	tools, err := r.harmonyToolsCached(opt.Tools)
	if err != nil {
		return err
	}

	// extract_instructions_from_messages: a leading system or developer
	// message becomes the developer message's instructions.
	first, instructions, hasInstructions := 0, "", false
	if len(msgs) > 0 && (msgs[0].Role == "system" || msgs[0].Role == "developer") {
		first = 1
		instructions, hasInstructions = harmonyText(&msgs[0])
	}

	b.special(r.hStart)
	b.text("system")
	b.special(r.hMessage)
	b.text(harmonySystemHead)
	b.text(r.now().UTC().Format("2006-01-02"))
	b.text("\n\nReasoning: ")
	b.text(effort)
	b.text("\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.")
	if tools != "" {
		// RenderOptions.conversation_has_function_tools: a developer
		// message declares functions.
		b.text("\nCalls to these tools must go to the commentary channel: 'functions'.")
	}
	b.special(r.hEnd)
	// build_harmony_preamble: a developer message when there are
	// instructions (non-empty) or tools (a non-empty list).
	if (hasInstructions && instructions != "") || tools != "" {
		b.special(r.hStart)
		b.text("developer")
		b.special(r.hMessage)
		if hasInstructions {
			b.text("# Instructions\n\n")
			b.text(instructions)
			if tools != "" {
				b.text("\n\n")
			}
		}
		b.text(tools)
		b.special(r.hEnd)
	}
	if first == 1 {
		b.endMessage(0)
	}

	hm, err := harmonyMessages(msgs, first)
	if err != nil {
		return err
	}
	// auto_drop_analysis_messages (vLLM) drops every analysis message
	// before the last assistant message on the final channel;
	// openai_harmony's own auto_drop_analysis then finds nothing more to
	// drop (it drops analysis before the first final one).
	last := -1
	for k := len(hm) - 1; k >= 0; k-- {
		if hm[k].assistant && hm[k].final {
			last = k
			break
		}
	}
	// A message's end is a real prefix only if the rendering of the
	// messages up to it drops what the whole rendering drops: no
	// analysis kept after the prefix's last final message, unless no
	// final message follows the prefix; and no tool message in it whose
	// call id a later assistant message declares again (vLLM's map from
	// ids to names keeps the last).
	lastID := harmonyLastDecl(msgs, first)
	keptAnalysis, declLater, k := false, -1, 0
	for i := first; i < len(msgs); i++ {
		for ; k < len(hm) && hm[k].src == i; k++ {
			m := &hm[k]
			switch {
			case m.assistant && m.final:
				keptAnalysis = false
			case m.analysis:
				keptAnalysis = true
			}
			if m.analysis && k < last {
				continue
			}
			r.harmonyMessage(b, m)
		}
		if msgs[i].Role == "tool" {
			if d, ok := lastID[msgs[i].Extra().ToolCallID]; ok && d > declLater {
				declLater = d
			}
		}
		if (!keptAnalysis || last < k) && declLater <= i {
			b.endMessage(i)
		}
	}
	// render_for_completion always appends the assistant's header: vLLM's
	// harmony path ignores add_generation_prompt.
	b.special(r.hStart)
	b.text("assistant")
	return nil
}

// harmonyMessage renders one message as openai_harmony's Render of a
// Message does.
func (r *Renderer) harmonyMessage(b *builder, m *hMsg) {
	b.special(r.hStart)
	b.text(m.author)
	if m.recipient != "" {
		b.text(" to=")
		b.text(m.recipient)
	}
	if m.channel != "" {
		b.special(r.hChannel)
		b.text(m.channel)
	}
	if m.ctype != "" {
		b.text(" ")
		b.text(m.ctype)
	}
	b.special(r.hMessage)
	b.text(m.text)
	if m.assistant && m.recipient != "" {
		b.special(r.hCall)
	} else {
		b.special(r.hEnd)
	}
}

// harmonyText is a content as vLLM flattens it for harmony: a string as
// is; of an array of parts, the texts of its text parts joined with
// nothing between them (ok false when there are none, vLLM's None).
func harmonyText(m *Message) (string, bool) {
	parts := m.Parts()
	if parts == nil {
		return m.Content, true
	}
	var sb strings.Builder
	ok := false
	for _, p := range parts {
		if p.Type == "text" {
			sb.WriteString(p.Text)
			ok = true
		}
	}
	return sb.String(), ok
}

// harmonyFirstText is the text of a content's first part ("" for a
// media part), which decides whether vLLM keeps an assistant's content.
func harmonyFirstText(m *Message) string {
	parts := m.Parts()
	if parts == nil {
		return m.Content
	}
	if parts[0].Type == "text" {
		return parts[0].Text
	}
	return ""
}

// harmonyCall is one of an assistant's tool_calls.
type harmonyCall struct{ id, name, args string }

// harmonyCalls reads an assistant's tool_calls (Extra.ToolCalls, a JSON
// array). Members that are not strings read as absent: vLLM's request
// model refuses them, so what renders there does not matter.
func harmonyCalls(raw string) []harmonyCall {
	if raw == "" {
		return nil
	}
	var p fastjson.Parser
	v, err := p.Parse(raw)
	if err != nil {
		return nil // unreachable: the decoders write it back as JSON
	}
	arr, _ := v.Array() // a non-array leaves arr nil: no calls
	out := make([]harmonyCall, 0, len(arr))
	for _, c := range arr {
		out = append(out, harmonyCall{
			id:   string(c.GetStringBytes("id")),
			name: string(c.GetStringBytes("function", "name")),
			args: string(c.GetStringBytes("function", "arguments")),
		})
	}
	return out
}

// harmonyLastDecl maps each tool call id to the index of the last
// message declaring it.
func harmonyLastDecl(msgs []Message, first int) map[string]int {
	var ids map[string]int
	for i := first; i < len(msgs); i++ {
		if msgs[i].Role != "assistant" {
			continue
		}
		for _, c := range harmonyCalls(msgs[i].Extra().ToolCalls) {
			if ids == nil {
				ids = map[string]int{}
			}
			ids[c.id] = i
		}
	}
	return ids
}

// harmonyMessages maps the request's messages from msgs[first] on to
// openai_harmony messages as vLLM's parse_chat_input_to_harmony_message
// does.
func harmonyMessages(msgs []Message, first int) ([]hMsg, error) {
	// The names of the tool calls by id, the last declaration winning.
	var names map[string]string
	for i := first; i < len(msgs); i++ {
		if msgs[i].Role != "assistant" {
			continue
		}
		for _, c := range harmonyCalls(msgs[i].Extra().ToolCalls) {
			if names == nil {
				names = map[string]string{}
			}
			names[c.id] = c.name
		}
	}
	out := make([]hMsg, 0, len(msgs)+1)
	for i := first; i < len(msgs); i++ {
		m := &msgs[i]
		switch m.Role {
		case "assistant":
			calls := harmonyCalls(m.Extra().ToolCalls)
			if len(calls) > 0 {
				// Content before the calls, as a preamble on the
				// commentary channel, then the reasoning, then each call.
				if t, _ := harmonyText(m); t != "" {
					out = append(out, hMsg{author: "assistant", channel: "commentary", text: t, assistant: true, src: i})
				}
				if m.Reasoning != "" {
					out = append(out, hMsg{author: "assistant", channel: "analysis", text: m.Reasoning, assistant: true, analysis: true, src: i})
				}
				for _, c := range calls {
					// vLLM sets the content type "json", not
					// "<|constrain|>json" (a comment there says why).
					out = append(out, hMsg{author: "assistant", recipient: "functions." + c.name, channel: "commentary",
						ctype: "json", text: c.args, assistant: true, src: i})
				}
				continue
			}
			if m.Reasoning != "" {
				out = append(out, hMsg{author: "assistant", channel: "analysis", text: m.Reasoning, assistant: true, analysis: true, src: i})
			}
			if harmonyFirstText(m) != "" {
				t, _ := harmonyText(m)
				out = append(out, hMsg{author: "assistant", channel: "final", text: t, assistant: true, final: true, src: i})
			}
		case "tool":
			t, _ := harmonyText(m)
			out = append(out, hMsg{author: "functions." + names[m.Extra().ToolCallID], recipient: "assistant",
				channel: "commentary", text: t, src: i})
		case "user", "system", "developer":
			t, _ := harmonyText(m)
			out = append(out, hMsg{author: m.Role, text: t, src: i})
		default:
			return nil, &RoleError{Template: Harmony, Index: i, Role: m.Role, Reason: "harmony knows the roles system, developer, user, assistant and tool"}
		}
	}
	return out, nil
}

// harmonyToolsEntry is a request's tools and their rendering.
type harmonyToolsEntry struct{ raw, section string }

// maxCachedTools bounds the tools harmonyToolsCached keeps: a larger list
// is written again on every request rather than held.
const maxCachedTools = 256 << 10

// harmonyToolsCached is harmonyTools remembering its last answer: an
// agent sends the same tools on every turn, and writing 1.6 KiB of them
// as TypeScript takes 37 µs and 159 allocations
// (BenchmarkRenderHarmonyTools) where the rest of a 4 KiB chat takes
// 1.3 µs; comparing the list with the last one takes well under one.
// One entry shared by all goroutines: clients with different tools only
// replace each other's. Any goroutine.
func (r *Renderer) harmonyToolsCached(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	if e := r.hTools.Load(); e != nil && e.raw == raw {
		return e.section, nil
	}
	section, err := harmonyTools(raw)
	if err == nil && len(raw) <= maxCachedTools {
		// raw may be a view of a request's buffer (Scratch): keep a copy.
		r.hTools.Store(&harmonyToolsEntry{raw: strings.Clone(raw), section: section})
	}
	return section, err
}

// harmonyTools renders the request's tools (Options.Tools) as
// openai_harmony renders a developer message's function tools: the
// "# Tools" section with the namespace functions, "" when there are no
// tools. Tools vLLM's request model refuses (a type other than
// function, no function name) are an error naming the field.
func harmonyTools(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	var p fastjson.Parser
	v, perr := p.Parse(raw)
	if perr != nil {
		return "", &FieldError{"tools", "tools: invalid JSON"} // unreachable: the decoders write it back as JSON
	}
	arr, aerr := v.Array()
	if aerr != nil {
		return "", &FieldError{"tools", "tools: want an array"}
	}
	if len(arr) == 0 {
		return "", nil
	}
	var sb strings.Builder
	sb.WriteString("# Tools\n\n## functions\n\nnamespace functions {\n\n")
	for i, t := range arr {
		if typ := t.Get("type"); typ == nil || typ.Type() != fastjson.TypeString || string(typ.GetStringBytes()) != "function" {
			return "", &FieldError{"tools", fmt.Sprintf("tools[%d].type: harmony's chat completions take function tools only", i)}
		}
		fn := t.Get("function")
		if fn == nil || fn.Type() != fastjson.TypeObject {
			return "", &FieldError{"tools", fmt.Sprintf("tools[%d].function: want an object", i)}
		}
		name := fn.Get("name")
		if name == nil || name.Type() != fastjson.TypeString {
			return "", &FieldError{"tools", fmt.Sprintf("tools[%d].function.name: want a string", i)}
		}
		// A missing or null description is "" (vLLM passes
		// description or ""); its lines become comments.
		for _, line := range rustLines(string(fn.GetStringBytes("description"))) {
			sb.WriteString("// ")
			sb.WriteString(line)
			sb.WriteString("\n")
		}
		sb.WriteString("type ")
		sb.Write(name.GetStringBytes())
		if params := fn.Get("parameters"); params != nil && params.Type() != fastjson.TypeNull {
			sb.WriteString(" = (_: ")
			sb.WriteString(tsType(params, ""))
			sb.WriteString(") => any;\n\n")
		} else {
			sb.WriteString(" = () => any;\n\n")
		}
	}
	sb.WriteString("} // namespace functions")
	return sb.String(), nil
}

// rustLines splits s as Rust's str::lines: at "\n", a "\r" before it
// dropped, no last empty line.
func rustLines(s string) []string {
	var out []string
	for s != "" {
		line, rest, found := strings.Cut(s, "\n")
		if found {
			line = strings.TrimSuffix(line, "\r")
		}
		out = append(out, line)
		s = rest
	}
	return out
}

// tsType is openai_harmony's json_schema_to_typescript: the TypeScript-like
// type of a JSON schema, lines indented by indent.
func tsType(s *fastjson.Value, indent string) string {
	if oneOf := s.Get("oneOf"); oneOf != nil && oneOf.Type() == fastjson.TypeArray {
		var sb strings.Builder
		for _, variant := range oneOf.GetArray() {
			sb.WriteString("\n")
			sb.WriteString(indent)
			sb.WriteString(" | ")
			sb.WriteString(tsNullable(variant, tsType(variant, indent+"   ")))
			var comments []string
			if d := jsonStr(variant.Get("description")); d != nil {
				comments = append(comments, *d)
			}
			if def := variant.Get("default"); def != nil {
				comments = append(comments, "default: "+tsDefault(variant, def, false))
			}
			if len(comments) > 0 {
				sb.WriteString(" // ")
				sb.WriteString(strings.Join(comments, " "))
			}
		}
		return sb.String()
	}
	typ := s.Get("type")
	if typ != nil && typ.Type() == fastjson.TypeArray {
		var types []string
		for _, t := range typ.GetArray() {
			if t.Type() != fastjson.TypeString {
				continue
			}
			ts := string(t.GetStringBytes())
			if ts == "integer" {
				ts = "number"
			}
			types = append(types, ts)
		}
		if len(types) > 0 {
			return strings.Join(types, " | ")
		}
	}
	if typ == nil || typ.Type() != fastjson.TypeString {
		return "any"
	}
	switch string(typ.GetStringBytes()) {
	case "object":
		return tsObject(s, indent)
	case "string":
		if e := s.Get("enum"); e != nil && e.Type() == fastjson.TypeArray {
			var vals []string
			for _, v := range e.GetArray() {
				if v.Type() == fastjson.TypeString {
					vals = append(vals, `"`+string(v.GetStringBytes())+`"`)
				}
			}
			if len(vals) > 0 {
				return strings.Join(vals, " | ")
			}
		}
		return "string"
	case "number", "integer":
		return "number"
	case "boolean":
		return "boolean"
	case "array":
		if items := s.Get("items"); items != nil {
			return tsType(items, indent) + "[]"
		}
		return "Array<any>"
	}
	return "any"
}

// tsObject renders an object schema's properties, one a line.
func tsObject(s *fastjson.Value, indent string) string {
	var sb strings.Builder
	if d := jsonStr(s.Get("description")); d != nil {
		sb.WriteString(indent + "// " + *d + "\n")
	}
	sb.WriteString("{\n")
	if props := s.Get("properties"); props != nil && props.Type() == fastjson.TypeObject {
		required := map[string]bool{}
		if req := s.Get("required"); req != nil && req.Type() == fastjson.TypeArray {
			for _, r := range req.GetArray() {
				if r.Type() == fastjson.TypeString {
					required[string(r.GetStringBytes())] = true
				}
			}
		}
		o, _ := props.Object() // the type was checked
		o.Visit(func(k []byte, val *fastjson.Value) {
			key := string(k)
			opt := "?"
			if required[key] {
				opt = ""
			}
			if t := jsonStr(val.Get("title")); t != nil {
				sb.WriteString(indent + "// " + *t + "\n" + indent + "//\n")
			}
			oneOf := val.Get("oneOf")
			if oneOf == nil {
				if d := jsonStr(val.Get("description")); d != nil {
					sb.WriteString(indent + "// " + *d + "\n")
				}
			}
			if ex := val.Get("examples"); ex != nil && ex.Type() == fastjson.TypeArray && len(ex.GetArray()) > 0 {
				sb.WriteString(indent + "// Examples:\n")
				for _, e := range ex.GetArray() {
					if e.Type() == fastjson.TypeString {
						sb.WriteString(indent + "// - \"" + string(e.GetStringBytes()) + "\"\n")
					}
				}
			}
			if oneOf != nil && oneOf.Type() == fastjson.TypeArray {
				tsOneOfProperty(&sb, val, oneOf.GetArray(), key+opt, indent)
				return
			}
			sb.WriteString(indent + key + opt + ": ")
			sb.WriteString(tsNullable(val, tsType(val, indent+"    ")))
			sb.WriteString(",")
			if oneOf == nil {
				if def := val.Get("default"); def != nil {
					sb.WriteString(" // default: " + tsDefault(val, def, true))
				}
			}
			sb.WriteString("\n")
		})
	}
	sb.WriteString(indent + "}")
	return sb.String()
}

// tsOneOfProperty renders a property whose schema is a oneOf: its
// description and default above it, a variant a line.
func tsOneOfProperty(sb *strings.Builder, val *fastjson.Value, variants []*fastjson.Value, name, indent string) {
	propDesc := jsonStr(val.Get("description"))
	skip := false
	if propDesc != nil && len(variants) > 0 {
		if vd := jsonStr(variants[0].Get("description")); vd != nil && *vd == *propDesc {
			skip = true
		}
	}
	above := false
	if !skip && propDesc != nil {
		sb.WriteString(indent + "// " + *propDesc + "\n")
		above = true
	}
	if def := val.Get("default"); def != nil {
		sb.WriteString(indent + "// default: " + tsDefault(val, def, true) + "\n")
	}
	sb.WriteString(indent + name + ":\n")
	for i, variant := range variants {
		sb.WriteString(indent + " | ")
		sb.WriteString(tsNullable(variant, tsType(variant, indent+"   ")))
		var comments []string
		if !(i == 0 && above) {
			if d := jsonStr(variant.Get("description")); d != nil && (propDesc == nil || *d != *propDesc) {
				comments = append(comments, *d)
			}
		}
		if def := variant.Get("default"); def != nil {
			comments = append(comments, "default: "+tsDefault(variant, def, true))
		}
		if len(comments) > 0 {
			sb.WriteString(" // " + strings.Join(comments, " "))
		}
		sb.WriteString("\n")
	}
	sb.WriteString(indent + ",\n")
}

// tsNullable appends " | null" to t when the schema says nullable and t
// has no null yet.
func tsNullable(s *fastjson.Value, t string) string {
	if n := s.Get("nullable"); n != nil && n.Type() == fastjson.TypeTrue && !strings.Contains(t, "null") {
		return t + " | null"
	}
	return t
}

// tsDefault writes a schema's default as openai_harmony does: a string
// in quotes as it is; of an enum, bare where bareEnum (a property's
// default) or as serde_json writes it (a variant of a top-level oneOf);
// anything else as serde_json writes it.
func tsDefault(schema, def *fastjson.Value, bareEnum bool) string {
	if def.Type() == fastjson.TypeString {
		e := schema.Get("enum")
		switch {
		case e == nil || e.Type() != fastjson.TypeArray || len(e.GetArray()) == 0:
			return `"` + string(def.GetStringBytes()) + `"`
		case bareEnum:
			return string(def.GetStringBytes())
		}
	}
	return string(appendSerde(nil, def))
}

// jsonStr is a JSON string's value, nil for anything else.
func jsonStr(v *fastjson.Value) *string {
	if v == nil || v.Type() != fastjson.TypeString {
		return nil
	}
	s := string(v.GetStringBytes())
	return &s
}

// appendSerde appends v as serde_json's Display writes a Value: compact,
// strings escaped as JSON requires (control characters as \n, \t, ...
// or \u00XX), members in their order (openai_harmony builds serde_json
// with preserve_order). A number is written as the request wrote it,
// where serde_json writes its shortest form: the two agree on integers
// and on floats written the short way (0.5, 1.25), not on 1e2 or 1.50.
func appendSerde(dst []byte, v *fastjson.Value) []byte { return appendJSON(dst, v, appendSerdeString) }

func appendSerdeString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
