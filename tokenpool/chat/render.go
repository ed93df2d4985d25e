package chat

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

// Segment is one piece of a rendered prompt: a special token (ID >= 0:
// one of the tokenizer's added tokens, such as <|eot_id|> or Qwen's
// <think>) or a maximal run of text between them (ID == NoID).
type Segment struct {
	// Text is the text run, or the special token's spelling.
	Text string
	// ID is the special token's id, or NoID for a text run.
	ID int32
	// MsgEnd is the index of the message whose rendering ends exactly at
	// the end of this segment, or -1. Where a message ends inside a text
	// run (mistral and llama2 put a user message and "[/INST]" or the
	// assistant's answer in one run), no segment names it: its end has no
	// exact position in token space. When several messages end at the same
	// edge (one rendered as nothing), the last is named.
	MsgEnd int32
}

// NoID is the ID of a text segment.
const NoID = -1

// Special reports whether s is a special token.
func (s Segment) Special() bool { return s.ID >= 0 }

// Options are the per-request rendering switches.
type Options struct {
	// AddGenerationPrompt appends the assistant header the model answers
	// after (the chat completions API always sets it).
	AddGenerationPrompt bool
	// DisableThinking is chat_template_kwargs {"enable_thinking": false}:
	// the qwen3 template then appends an empty <think></think> block after
	// the generation prompt. Other built-ins ignore it.
	DisableThinking bool
	// Tools is the request's tools (a JSON array as fastjson writes it
	// back, "" for none) and Kwargs its chat_template_kwargs (a JSON
	// object, "" for none), which vLLM hands a model's own template
	// (Renderer.Wants WantExtras); of the built-ins, harmony renders the
	// tools and no built-in reads the kwargs (doc.go).
	Tools, Kwargs string
	// ReasoningEffort is the request's top-level "reasoning_effort" (""
	// when absent, null or not a string), kept with WantExtras: vLLM's
	// harmony path puts it into the system message, and hands it a Jinja
	// template beside chat_template_kwargs; the harmony renderer reads it.
	ReasoningEffort string
}

// Vocab is what a Renderer needs from a tokenizer: its added tokens, so
// the texts a template emits as special tokens get their ids.
// *tokenizer.Tokenizer implements it.
type Vocab interface {
	LookupAdded(content string) (tokenizer.AddedToken, bool)
}

// tok is a piece of template text that the tokenizer may know as an added
// token: then it becomes a special segment, else plain text.
type tok struct {
	text           string
	id             int32 // NoID: not an added token, rendered as text
	lstrip, rstrip bool
}

// Renderer renders messages with one built-in template for one tokenizer.
// It is immutable after New and safe for concurrent use.
type Renderer struct {
	name string
	bos  tok
	eos  tok
	// llama3
	startHeader, endHeader, eot tok
	// chatml, qwen3
	imStart, imEnd, think, endThink, toolResp, endToolResp tok
	// jinja is the compiled template of a Jinja Renderer (NewJinja).
	jinja *jinjaRenderer
	// harmony: its formatting tokens, the clock its system message takes
	// the date from (NewHarmony), and the last tools it wrote
	// (harmonyToolsCached).
	hStart, hMessage, hEnd, hChannel, hCall tok
	now                                     func() time.Time
	hTools                                  atomic.Pointer[harmonyToolsEntry]
	// withTools is the model's own template (a Jinja Renderer) beside a
	// built-in recognized from it (LoadTemplate), when that template
	// renders tools and the built-in does not (Qwen3's lists the tools in
	// its system turn and writes the calls after an assistant's content):
	// a request with tools or tool calls (needsTools) renders with it, so
	// it gets the engine's tokens from its first message, where the
	// built-in's would differ from there on. The other requests keep the
	// built-in's speed.
	withTools *Renderer
}

// ToolsInterpreted reports whether r renders requests with tools or tool
// calls with the model's own Jinja template (see withTools): its callers render those off
// their event loops, as an Interpreted Renderer's (MayNeedTools tells
// them apart by the body).
func (r *Renderer) ToolsInterpreted() bool { return r.withTools != nil }

// MayNeedTools reports whether a chat body may carry tools or tool calls
// (the text `"tool` in it): a cheap test on the loop before the body is
// decoded. A body it misses (a key spelled with escapes) still renders
// right, on the loop.
func MayNeedTools(body []byte) bool { return bytes.Contains(body, []byte(`"tool`)) }

// needsTools reports whether a request has what a built-in does not
// render (see Renderer.withTools).
func needsTools(msgs []Message, opt Options) bool {
	if opt.Tools != "" {
		return true
	}
	for i := range msgs {
		if msgs[i].parts == "" {
			continue
		}
		if x := msgs[i].Extra(); x.ToolCalls != "" || x.HasToolCallID {
			return true
		}
	}
	return false
}

// New builds a Renderer for the named template (see Names). cfg supplies
// bos_token and eos_token for the templates that emit them (llama3,
// mistral, llama2); an error names the missing field. Every template text
// that is an added token of vocab renders as a special token segment; any
// other renders as text, exactly as the tokenizer would treat it.
func New(name string, vocab Vocab, cfg Config) (*Renderer, error) {
	if !known(name) {
		return nil, fmt.Errorf("unknown chat template %q (built in: %s)", name, strings.Join(Names(), ", "))
	}
	r := &Renderer{name: name}
	lookup := func(s string) tok {
		t := tok{text: s, id: NoID}
		if vocab == nil {
			return t
		}
		if a, ok := vocab.LookupAdded(s); ok {
			t.id, t.lstrip, t.rstrip = a.ID, a.LStrip, a.RStrip
		}
		return t
	}
	switch name {
	case Llama3, Mistral, Llama2:
		if cfg.BOS == "" {
			return nil, fmt.Errorf("chat template %s needs the tokenizer config's bos_token, which is empty or absent", name)
		}
		r.bos = lookup(cfg.BOS)
	}
	switch name {
	case Mistral, Llama2:
		if cfg.EOS == "" {
			return nil, fmt.Errorf("chat template %s needs the tokenizer config's eos_token, which is empty or absent", name)
		}
		r.eos = lookup(cfg.EOS)
	}
	r.startHeader, r.endHeader, r.eot = lookup("<|start_header_id|>"), lookup("<|end_header_id|>"), lookup("<|eot_id|>")
	r.imStart, r.imEnd = lookup("<|im_start|>"), lookup("<|im_end|>")
	r.think, r.endThink = lookup("<think>"), lookup("</think>")
	r.toolResp, r.endToolResp = lookup("<tool_response>"), lookup("</tool_response>")
	r.hStart, r.hMessage, r.hEnd = lookup("<|start|>"), lookup("<|message|>"), lookup("<|end|>")
	r.hChannel, r.hCall = lookup("<|channel|>"), lookup("<|call|>")
	r.now = time.Now
	return r, nil
}

// Name returns the template's name. Any goroutine.
func (r *Renderer) Name() string { return r.name }

// Interpreted reports whether r renders a Jinja template (NewJinja):
// tens of microseconds to a millisecond per request and locks inside the
// engine, so callers render it off their event loops; the built-ins take
// a few microseconds and never lock.
func (r *Renderer) Interpreted() bool { return r.jinja != nil }

// Wants is what a renderer reads of a request beyond the messages' role,
// content and reasoning, so that decoders skip the rest: a million
// content parts then cost their joined text alone, and a built-in
// template's requests never pay for tools they do not render.
type Wants uint8

const (
	// WantParts: a message's content parts (Message.Parts), read by a
	// Jinja template in vLLM's "openai" content format.
	WantParts Wants = 1 << iota
	// WantExtras: a message's Extra and the request's Options.Tools and
	// Options.Kwargs, read by every Jinja template.
	WantExtras
)

// Wants reports what r reads beyond role, content and reasoning: nothing
// for a built-in but harmony.
func (r *Renderer) Wants() Wants {
	if r.withTools != nil {
		return r.withTools.Wants()
	}
	if r.name == Harmony {
		// The parts: harmony joins a content's text parts without a
		// separator, and leaves its media parts out.
		return WantParts | WantExtras
	}
	if r.jinja == nil {
		return 0
	}
	if r.jinja.openai {
		return WantParts | WantExtras
	}
	return WantExtras
}

// WantsParts reports whether r reads a message's content parts
// (Wants&WantParts).
func (r *Renderer) WantsParts() bool { return r.Wants()&WantParts != 0 }

// RoleError is a conversation the template refuses, as the model's own
// template raises an exception for it (mistral and llama2 require roles to
// alternate user/assistant; mistral has no system role). The engine
// answers such a request with 400, so the caller may as well.
type RoleError struct {
	Template string
	Index    int // the offending message
	Role     string
	Reason   string
}

func (e *RoleError) Error() string {
	return fmt.Sprintf("chat template %s: messages[%d] (role %.40q): %s", e.Template, e.Index, e.Role, e.Reason)
}

// Render appends the segments of msgs, rendered with r's template, to dst.
// Each text segment is a maximal run between special tokens, so
// tokenizing the segments one by one (tokenizer.EncodeSegment, atStart
// only for a text segment at index 0 of the prompt) gives exactly the
// ids of the whole rendered prompt. Text segments share memory with the
// message contents where they are a content alone; the runs that join
// template text and content share one allocation per call. On error dst is
// returned unchanged in length. Any goroutine.
func (r *Renderer) Render(dst []Segment, msgs []Message, opt Options) ([]Segment, error) {
	segs, _, err := r.render(dst, nil, msgs, opt)
	return segs, err
}

// render is Render with the builder's arena given (nil: allocated when
// first needed); it returns the arena, grown, for Scratch to reuse.
func (r *Renderer) render(dst []Segment, arena []byte, msgs []Message, opt Options) ([]Segment, []byte, error) {
	if r.withTools != nil && needsTools(msgs, opt) {
		return r.withTools.render(dst, arena, msgs, opt)
	}
	b := builder{segs: dst, base: len(dst), pendingEnd: -1, est: 64, arena: arena}
	for i := range msgs {
		// Template text per message is under 64 bytes in every template.
		// The estimate only sizes the arena: exceeding it costs a copy.
		b.est += len(msgs[i].Role) + len(msgs[i].Content) + len(msgs[i].Reasoning) + 64
	}
	var err error
	switch r.name {
	case None:
		for i := range msgs {
			b.text(msgs[i].Content)
			b.flush()
			b.endMessage(i)
		}
	case Llama3:
		r.llama3(&b, msgs, opt)
	case ChatML:
		r.chatml(&b, msgs, opt)
	case Qwen3:
		r.qwen3(&b, msgs, opt)
	case Mistral:
		err = r.mistral(&b, msgs)
	case Llama2:
		err = r.llama2(&b, msgs)
	case Harmony:
		err = r.harmony(&b, msgs, opt)
	case Jinja:
		err = r.jinja.render(&b, msgs, opt)
	default:
		panic("BUG: chat.Renderer with unknown template " + r.name)
	}
	if err != nil {
		return dst, b.arena, err
	}
	b.flush()
	return b.segs, b.arena, nil
}

func (r *Renderer) llama3(b *builder, msgs []Message, opt Options) {
	for i := range msgs {
		if i == 0 {
			b.special(r.bos)
		}
		b.special(r.startHeader)
		b.text(msgs[i].Role)
		b.special(r.endHeader)
		b.text("\n\n")
		b.text(pyStrip(msgs[i].Content))
		b.special(r.eot)
		b.endMessage(i)
	}
	if opt.AddGenerationPrompt {
		b.special(r.startHeader)
		b.text("assistant")
		b.special(r.endHeader)
		b.text("\n\n")
	}
}

func (r *Renderer) chatml(b *builder, msgs []Message, opt Options) {
	for i := range msgs {
		r.imTurn(b, &msgs[i])
		b.endMessage(i)
	}
	if opt.AddGenerationPrompt {
		b.special(r.imStart)
		b.text("assistant\n")
	}
}

// imTurn renders one ChatML turn: <|im_start|>role\ncontent<|im_end|>\n.
func (r *Renderer) imTurn(b *builder, m *Message) {
	b.special(r.imStart)
	b.text(m.Role)
	b.text("\n")
	b.text(m.Content)
	b.special(r.imEnd)
	b.text("\n")
}

// qwen3 follows Qwen3's chat_template without tools: see the package doc.
func (r *Renderer) qwen3(b *builder, msgs []Message, opt Options) {
	// The last user message that is not a bare tool response: assistant
	// turns after it keep their reasoning.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role == "user" && !(strings.HasPrefix(m.Content, "<tool_response>") && strings.HasSuffix(m.Content, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Role == "user" || m.Role == "system":
			r.imTurn(b, m)
		case m.Role == "assistant":
			content, reasoning := m.Content, ""
			if m.HasReasoning {
				reasoning = m.Reasoning
			} else if k := strings.LastIndex(content, "</think>"); k >= 0 {
				before := content[:strings.Index(content, "</think>")]
				content = strings.TrimLeft(content[k+len("</think>"):], "\n")
				before = strings.TrimRight(before, "\n")
				if j := strings.LastIndex(before, "<think>"); j >= 0 {
					before = before[j+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
			}
			b.special(r.imStart)
			b.text("assistant\n")
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				b.special(r.think)
				b.text("\n")
				b.text(strings.Trim(reasoning, "\n"))
				b.text("\n")
				b.special(r.endThink)
				b.text("\n\n")
				b.text(strings.TrimLeft(content, "\n"))
			} else {
				b.text(content)
			}
			b.special(r.imEnd)
			b.text("\n")
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.special(r.imStart)
				b.text("user")
			}
			b.text("\n")
			b.special(r.toolResp)
			b.text("\n")
			b.text(m.Content)
			b.text("\n")
			b.special(r.endToolResp)
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				b.special(r.imEnd)
				b.text("\n")
			}
		}
		// Other roles render as nothing in Qwen3's template.
		b.endMessage(i)
	}
	if opt.AddGenerationPrompt {
		b.special(r.imStart)
		b.text("assistant\n")
		if opt.DisableThinking {
			b.special(r.think)
			b.text("\n\n")
			b.special(r.endThink)
			b.text("\n\n")
		}
	}
}

func alternates(msgs []Message, i, base int) bool {
	return (msgs[i].Role == "user") == ((i-base)%2 == 0)
}

const alternateReason = "roles must alternate user/assistant/user/assistant/..."

func (r *Renderer) mistral(b *builder, msgs []Message) error {
	b.special(r.bos)
	for i := range msgs {
		if !alternates(msgs, i, 0) {
			return &RoleError{Template: r.name, Index: i, Role: msgs[i].Role, Reason: alternateReason}
		}
		switch msgs[i].Role {
		case "user":
			b.text("[INST] ")
			b.text(msgs[i].Content)
			b.text(" [/INST]")
		case "assistant":
			b.text(msgs[i].Content)
			b.special(r.eos)
		default:
			return &RoleError{Template: r.name, Index: i, Role: msgs[i].Role, Reason: "only user and assistant roles are supported"}
		}
		b.endMessage(i)
	}
	return nil
}

func (r *Renderer) llama2(b *builder, msgs []Message) error {
	start := 0
	var sys *Message
	if len(msgs) > 0 && msgs[0].Role == "system" {
		sys, start = &msgs[0], 1
		b.endMessage(0) // renders nothing by itself: it goes into the first user turn
	}
	for i := start; i < len(msgs); i++ {
		m := &msgs[i]
		if !alternates(msgs, i, start) {
			return &RoleError{Template: r.name, Index: i, Role: m.Role, Reason: alternateReason}
		}
		var p [5]string
		parts := p[:0]
		if i == start && sys != nil {
			parts = append(parts, "<<SYS>>\n", sys.Content, "\n<</SYS>>\n\n")
		}
		parts = pyStripPieces(append(parts, m.Content))
		switch m.Role {
		case "user":
			b.special(r.bos)
			b.text("[INST] ")
			for _, s := range parts {
				b.text(s)
			}
			b.text(" [/INST]")
		case "assistant":
			b.text(" ")
			for _, s := range parts {
				b.text(s)
			}
			b.text(" ")
			b.special(r.eos)
		}
		// Other roles (only at odd positions, else the alternation check
		// fails) render as nothing, as in the original template.
		b.endMessage(i)
	}
	return nil
}

// pySpace is Python's str.isspace, which jinja2's trim filter and
// str.strip() use in the engines' templates: Go's unicode.IsSpace plus the
// separators U+001C..U+001F.
func pySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

func pyStrip(s string) string { return strings.TrimFunc(s, pySpace) }

// pyStripPieces strips Python whitespace from both ends of the
// concatenation of pieces, in place.
func pyStripPieces(pieces []string) []string {
	for len(pieces) > 0 {
		pieces[0] = strings.TrimLeftFunc(pieces[0], pySpace)
		if pieces[0] != "" {
			break
		}
		pieces = pieces[1:]
	}
	for len(pieces) > 0 {
		n := len(pieces) - 1
		pieces[n] = strings.TrimRightFunc(pieces[n], pySpace)
		if pieces[n] != "" {
			break
		}
		pieces = pieces[:n]
	}
	return pieces
}

// builder collects text pieces into maximal runs between special tokens.
type builder struct {
	segs []Segment
	base int // len(dst) on entry
	// The pending text run: up to len(arr) pieces; a run rarely has more
	// than a handful, and more are joined early (collapse). A fixed array,
	// not a slice of it, so the builder stays on the stack.
	arr [8]string
	np  int // pieces in arr
	// collapsed: arr[0] was joined by collapse and ends the arena.
	collapsed bool
	n         int  // bytes pending
	rs        bool // the last special token absorbs whitespace after it (rstrip)
	// arena holds every run joined from several pieces (unsafe.go); est is
	// its first capacity, an upper bound of the rendered text's length.
	arena []byte
	est   int
	// pendingEnd is a message that ended while endAt bytes were pending;
	// -1 if none.
	pendingEnd int32
	endAt      int
}

func (b *builder) text(s string) {
	if s == "" {
		return
	}
	if b.np == len(b.arr) {
		b.collapse()
	}
	b.arr[b.np] = s
	b.np++
	b.n += len(s)
}

// collapse joins the pending pieces into one, in the arena.
func (b *builder) collapse() {
	if b.arena == nil {
		b.arena = make([]byte, 0, b.est)
	}
	start, from := len(b.arena), 0
	if b.collapsed {
		// arr[0] is already the arena's tail: extend it in place.
		start, from = len(b.arena)-len(b.arr[0]), 1
	}
	for _, p := range b.arr[from:b.np] {
		b.arena = append(b.arena, p...)
	}
	clear(b.arr[:b.np])
	b.arr[0], b.np, b.collapsed = arenaString(b.arena, start), 1, true
}

func (b *builder) special(t tok) {
	if t.id == NoID {
		b.text(t.text)
		return
	}
	b.flushStrip(t.lstrip)
	b.segs = append(b.segs, Segment{Text: t.text, ID: t.id, MsgEnd: -1})
	b.rs = t.rstrip
}

// endMessage records that message i's rendering ends here.
func (b *builder) endMessage(i int) {
	if b.n == 0 {
		// At a segment edge: the last segment, if this render made one.
		if len(b.segs) > b.base {
			b.segs[len(b.segs)-1].MsgEnd = int32(i)
		}
		b.pendingEnd = -1
		return
	}
	b.pendingEnd, b.endAt = int32(i), b.n
}

func (b *builder) flush() { b.flushStrip(false) }

// flushStrip emits the pending text run; lstrip: the special token that
// follows absorbs the run's trailing whitespace.
func (b *builder) flushStrip(lstrip bool) {
	end := int32(-1)
	if b.pendingEnd >= 0 && b.endAt == b.n {
		end = b.pendingEnd // the message ended at the end of this run
	}
	b.pendingEnd = -1
	if b.n == 0 {
		b.rs = false
		return
	}
	if b.np > 1 {
		b.collapse()
	}
	s := b.arr[0]
	b.arr[0], b.np, b.n, b.collapsed = "", 0, 0, false
	// The tokenizer's own whitespace rule for lstrip/rstrip (Encode).
	if b.rs {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if lstrip {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	b.rs = false
	if s == "" {
		if end >= 0 && len(b.segs) > b.base {
			b.segs[len(b.segs)-1].MsgEnd = end
		}
		return
	}
	b.segs = append(b.segs, Segment{Text: s, ID: NoID, MsgEnd: end})
}
