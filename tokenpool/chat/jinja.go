package chat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/saltus-lb/saltus/tokenpool/chat/jinja"
)

// Jinja is the name of a Renderer built from a model's own Jinja template
// (NewJinja): the chat_template of its tokenizer_config.json, or a file.
const Jinja = "jinja"

// jinjaRenderer is a compiled Jinja chat template and what rendering it needs. It
// is immutable after newJinja (a jinja.Template keeps each rendering's
// state to itself), but for the prefix cache's atomics.
type jinjaRenderer struct {
	tmpl *jinja.Template
	// openai: the template loops over a message's content, so it gets the
	// content as a list of parts (vLLM's "openai" content format); else a
	// string ("string" format).
	openai bool
	// vars are the special tokens of the tokenizer config (bos_token,
	// eos_token, ...), given to every rendering.
	vars map[string]any
	// specials are the added tokens a rendered prompt is split at.
	specials splitter
	// prefixes caches the renderings of conversation prefixes, for the
	// message ends: see render. seed seeds its hashes.
	prefixes prefixCache
	seed     maphash.Seed
}

// forContent finds a loop over a message's content, the pattern vLLM's
// content-format detection looks for in a template's syntax tree
// (entrypoints/chat_utils.py, _detect_content_format): `{% for x in
// message['content'] %}` or `message.content`, for any name of the loop
// variable over messages. A textual match, not a walk of the tree: it also
// matches such a loop inside a comment or a string, where vLLM would not
// (no template checked here has one).
var forContent = regexp.MustCompile(`for\s+\w+(\s*,\s*\w+)?\s+in\s+\w+\s*(\[\s*['"]content['"]\s*\]|\.content\b)`)

// NewJinja builds a Renderer for a Jinja chat template source, rendered as
// HuggingFace transformers renders it (package jinja: jinja2's semantics
// with trim_blocks and lstrip_blocks, raise_exception, tojson,
// strftime_now, loop controls and namespace; cfg's special tokens as
// variables). The rendered prompt is split at the added tokens of cfg
// (added_tokens_decoder and the special token fields) that vocab knows,
// each a special segment with vocab's id. A template that does not parse
// is an error naming the line and column. Any goroutine.
func NewJinja(source string, vocab Vocab, cfg Config) (*Renderer, error) {
	j, err := newJinja(source, vocab, cfg)
	if err != nil {
		return nil, err
	}
	return &Renderer{name: Jinja, jinja: j}, nil
}

func newJinja(source string, vocab Vocab, cfg Config) (*jinjaRenderer, error) {
	if strings.TrimSpace(source) == "" {
		return nil, errors.New("chat template: empty")
	}
	if !utf8.ValidString(source) {
		return nil, errors.New("chat template: not valid UTF-8")
	}
	t, err := jinja.Parse(source) // which ends its lines with "\n" as jinja2 does
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	j := &jinjaRenderer{tmpl: t, openai: forContent.MatchString(source), vars: map[string]any{}, seed: maphash.MakeSeed(), prefixes: newPrefixCache()}
	for k, v := range cfg.Specials {
		j.vars[k] = v
	}
	j.vars["bos_token"], j.vars["eos_token"] = cfg.BOS, cfg.EOS
	if vocab != nil {
		cands := slices.Clone(cfg.Added)
		for _, v := range cfg.Specials {
			cands = append(cands, v)
		}
		cands = append(cands, cfg.BOS, cfg.EOS)
		j.specials = newSplitter(cands, vocab)
	}
	return j, nil
}

// TemplateError is a conversation the template refuses: it called
// raise_exception (Message is the template's own text), or failed while
// rendering. The engine answers such a request with 400, so the caller
// may as well.
type TemplateError struct {
	Message string
	// Raised: the template called raise_exception.
	Raised bool
}

func (e *TemplateError) Error() string {
	if e.Raised {
		return "chat template refused the conversation: " + e.Message
	}
	return "chat template failed: " + e.Message
}

// execute renders the template for msgs into a string.
func (j *jinjaRenderer) execute(msgs []Message, opt Options) (string, error) {
	data := make(map[string]any, len(j.vars)+4)
	for k, v := range j.vars {
		data[k] = v
	}
	list := make([]any, len(msgs))
	for i := range msgs {
		list[i] = j.message(&msgs[i])
	}
	data["messages"] = list
	// transformers passes tools and documents always: None when the
	// request has none (a template's `tools is defined` is true).
	data["tools"], data["documents"] = vllmTools(opt.Tools), nil
	data["add_generation_prompt"] = opt.AddGenerationPrompt
	if opt.DisableThinking {
		data["enable_thinking"] = false
	}
	templateKwargs(data, opt.Kwargs)
	// The prompt is about the messages' text and a few dozen bytes of
	// markup a message: sized so, its buffer rarely grows.
	size := 256 + len(opt.Tools)
	for i := range msgs {
		size += len(msgs[i].Content) + len(msgs[i].Reasoning) + len(msgs[i].parts) + 64
	}
	return j.executeData(data, size)
}

// reservedKwarg reports whether a chat_template_kwargs member is one the
// template does not get as a variable: the arguments vLLM and
// transformers give the template themselves (a request naming one is
// refused by the engine or overridden there).
func reservedKwarg(name string) bool {
	switch name {
	case "messages", "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message", "chat_template", "tokenize":
		return true
	}
	return false
}

// templateKwargs sets each member of the request's chat_template_kwargs
// (a JSON object, "" for none) as a template variable, as vLLM passes
// them to apply_chat_template (enable_thinking, reasoning_effort, a
// template's own switches). An unreadable object sets nothing.
func templateKwargs(data map[string]any, kwargs string) {
	if kwargs == "" {
		return
	}
	m, ok := templateJSON(kwargs).(*jinja.Map)
	if !ok {
		return
	}
	for i, k := range m.Keys() {
		if name, ok := k.(string); ok && !reservedKwarg(name) {
			data[name] = m.Value(i)
		}
	}
}

// vllmTools is the request's tools (a JSON array, "" for none) as vLLM
// hands them to the template: each tool as its pydantic request model
// dumps it, type (default "function"), then function {name, description
// and parameters (None when absent), then its other members}, then the
// tool's other members (tokenpool/testdata/gen/chat_tools.py does the
// same for the references). nil (None) for none, or when unreadable.
func vllmTools(tools string) any {
	if tools == "" {
		return nil
	}
	list, ok := templateJSON(tools).([]any)
	if !ok {
		return nil
	}
	out := make([]any, 0, len(list))
	for _, t := range list {
		tm, ok := t.(*jinja.Map)
		if !ok {
			out = append(out, t) // the engine refuses it; keep what was sent
			continue
		}
		d := jinja.NewMap(tm.Len() + 1)
		typ, ok := tm.Get("type")
		if !ok {
			typ = "function"
		}
		d.Set("type", typ)
		if f, ok := tm.Get("function"); ok {
			if fm, ok := f.(*jinja.Map); ok {
				fd := jinja.NewMap(fm.Len() + 2)
				for _, k := range []string{"name", "description", "parameters"} {
					v, _ := fm.Get(k) // absent: nil, None
					fd.Set(k, v)
				}
				copyOthers(fd, fm)
				f = fd
			}
			d.Set("function", f)
		}
		copyOthers(d, tm)
		out = append(out, d)
	}
	return out
}

// copyOthers sets in dst the string keys of src that dst lacks, in src's
// order.
func copyOthers(dst, src *jinja.Map) {
	for i, k := range src.Keys() {
		if name, ok := k.(string); ok {
			if _, have := dst.Get(name); !have {
				dst.Set(name, src.Value(i))
			}
		}
	}
}

// templateJSON is the JSON text s as json.loads hands it to a template
// (jinja.DecodeJSON, which takes a string's raw control characters as
// chat.AppendCanonical writes them back), nil when s is not JSON.
func templateJSON(s string) any {
	v, err := jinja.DecodeJSON([]byte(s))
	if err != nil {
		return nil
	}
	return v
}

// vllmToolCalls is an assistant's tool_calls (Extra.ToolCalls, a
// non-empty JSON array) as vLLM hands them to the template: each call's
// function.arguments, a JSON string, parsed (entrypoints/chat_utils.py,
// _postprocess_messages: "" or absent becomes {}; arguments already an
// object or a list stay). Arguments that are not JSON stay the string
// (vLLM refuses such a request; the engine will). nil when unreadable.
func vllmToolCalls(raw string) any {
	list, ok := templateJSON(raw).([]any)
	if !ok {
		return nil
	}
	for _, c := range list {
		cm, ok := c.(*jinja.Map)
		if !ok {
			continue
		}
		f, _ := cm.Get("function")
		fm, ok := f.(*jinja.Map)
		if !ok {
			continue
		}
		switch a, _ := fm.Get("arguments"); a := a.(type) {
		case string:
			if a == "" {
				fm.Set("arguments", jinja.NewMap(0))
			} else if parsed := templateJSON(a); parsed != nil {
				fm.Set("arguments", parsed)
			}
		case nil:
			fm.Set("arguments", jinja.NewMap(0))
		}
	}
	return list
}

// executeData renders the template with the variables data into a
// buffer of size bytes to start with.
func (j *jinjaRenderer) executeData(data map[string]any, size int) (string, error) {
	out, err := j.tmpl.Append(make([]byte, 0, min(size, 1<<20)), data, time.Now())
	if err != nil {
		var r *jinja.RaisedError
		if errors.As(err, &r) {
			return "", &TemplateError{Message: r.Message, Raised: true}
		}
		return "", &TemplateError{Message: err.Error()}
	}
	return string(out), nil
}

// message is the dict a template sees for m, as vLLM prepares it
// (entrypoints/chat_utils.py, _parse_chat_message_content): role and
// content (a string, or for an "openai" template the list of parts,
// Message.Parts, a string content becoming one text part), and for an
// assistant with reasoning, reasoning and reasoning_content.
func (j *jinjaRenderer) message(m *Message) *jinja.Map {
	d := jinja.NewMap(4)
	d.Set("role", m.Role)
	if j.openai {
		ps := m.Parts()
		if ps == nil {
			d.Set("content", []any{textPart("text", "text", m.Content)})
		} else {
			l := make([]any, len(ps))
			for i, p := range ps {
				switch p.Type {
				case "text":
					l[i] = textPart("text", "text", p.Text)
				case "tool_reference":
					l[i] = textPart("tool_reference", "name", p.Text)
				default:
					part := jinja.NewMap(1)
					part.Set("type", p.Type)
					l[i] = part
				}
			}
			d.Set("content", l)
		}
	} else {
		d.Set("content", m.Content)
	}
	x := m.Extra()
	if x.ToolCalls != "" && m.Role == "assistant" {
		if tc := vllmToolCalls(x.ToolCalls); tc != nil {
			d.Set("tool_calls", tc)
		}
	}
	if m.HasReasoning {
		d.Set("reasoning", m.Reasoning)
		d.Set("reasoning_content", m.Reasoning)
	}
	if x.HasToolCallID {
		d.Set("tool_call_id", x.ToolCallID)
	}
	if x.HasName {
		d.Set("name", x.Name)
	}
	return d
}

// textPart is a content part {type: typ, key: text}.
func textPart(typ, key, text string) *jinja.Map {
	p := jinja.NewMap(2)
	p.Set("type", typ)
	p.Set(key, text)
	return p
}

// render renders msgs into b's segments, with message ends where the
// rendering of msgs[:i+1] without a generation prompt is a prefix of the
// whole rendering and ends on a segment edge: there a cached prefix of
// the conversation is a prefix of its continuation in token space.
//
// Each prefix is a rendering of its own: a Jinja rendering of a 4 KiB
// chat takes tens of µs (BenchmarkRenderJinja), so rendering every
// prefix of every request would cost that times half the message count. The prefixes'
// renderings are cached (prefixCache: length and hash, keyed by the
// messages' hash), so a multi-turn conversation renders each prefix once
// while the cache holds it.
func (j *jinjaRenderer) render(b *builder, msgs []Message, opt Options) error {
	full, err := j.execute(msgs, opt)
	if err != nil {
		return err
	}
	ends := make([]int, len(msgs))
	popt := opt
	popt.AddGenerationPrompt = false
	key := j.prefixSeed(popt)
	for i := range msgs {
		ends[i] = -1
		key = j.prefixKey(key, &msgs[i])
		if i == len(msgs)-1 && !opt.AddGenerationPrompt {
			ends[i] = len(full)
			break
		}
		n, sum, ok := j.prefixes.get(key)
		if !ok {
			p, err := j.execute(msgs[:i+1], popt)
			if err != nil {
				n = -1 // the template refuses the prefix: no exact end
			} else {
				n, sum = len(p), uint32(maphash.String(j.seed, p))
			}
			j.prefixes.put(key, n, sum)
		}
		if n >= 0 && n <= len(full) && uint32(maphash.String(j.seed, full[:n])) == sum {
			ends[i] = n
		}
	}
	j.specials.segments(b, full, ends)
	return nil
}

// prefixSeed and prefixKey hash a conversation prefix and the options it
// renders with, message by message.
func (j *jinjaRenderer) prefixSeed(opt Options) uint64 {
	h := uint64(0x6a09e667f3bcc908)
	if opt.DisableThinking {
		h = 0x9e3779b97f4a7c15
	}
	if opt.Tools == "" && opt.Kwargs == "" {
		return h
	}
	// The tools and kwargs render into the prefixes too (Qwen3's system
	// turn lists the tools).
	var d maphash.Hash
	d.SetSeed(j.seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	_, _ = d.Write(b[:])             // a hash's Write never fails
	_, _ = d.WriteString(opt.Tools)  // never fails
	_, _ = d.WriteString("\x00")     // never fails
	_, _ = d.WriteString(opt.Kwargs) // never fails
	return d.Sum64()
}

func (j *jinjaRenderer) prefixKey(h uint64, m *Message) uint64 {
	var buf [8 * 6]byte
	k := buf[:0]
	for _, n := range [...]uint64{h, uint64(len(m.Role)), uint64(len(m.Content)), uint64(len(m.Reasoning)), uint64(len(m.parts))} {
		k = binary.LittleEndian.AppendUint64(k, n)
	}
	if m.HasReasoning {
		k = append(k, 1)
	}
	var d maphash.Hash
	d.SetSeed(j.seed)
	_, _ = d.Write(k)                 // a hash's Write never fails
	_, _ = d.WriteString(m.Role)      // never fails, as Write
	_, _ = d.WriteString(m.Content)   // never fails
	_, _ = d.WriteString(m.Reasoning) // never fails
	_, _ = d.WriteString(m.parts)     // an "openai" template renders the parts
	return d.Sum64()
}

// prefixSlots is the prefix cache's size: 16 bytes a slot, 1 MiB.
const prefixSlots = 1 << 16

// prefixCache maps a prefix's key to its rendering's length and a 32-bit
// hash of it, direct-mapped (a new entry overwrites the slot's). It is a
// hint, not a source of truth: render checks every length it gets against
// the hash of the whole rendering's first bytes, so a torn or stale slot
// costs an end, never a wrong one (but for a 2^-32 chance). Atomics, not
// a mutex: renders run on the shards' event loops, which never wait on a
// lock (rules R2).
type prefixCache struct {
	slots []prefixSlot
}

type prefixSlot struct {
	key atomic.Uint64 // 0: empty or being written
	// val is the length plus one (0: the template refused the prefix) in
	// the high 32 bits, the rendering's hash in the low 32.
	val atomic.Uint64
}

func newPrefixCache() prefixCache { return prefixCache{slots: make([]prefixSlot, prefixSlots)} }

func (c *prefixCache) get(key uint64) (n int, sum uint32, ok bool) {
	key |= 1 // 0 marks a slot being written
	e := &c.slots[key>>1&(prefixSlots-1)]
	if e.key.Load() != key {
		return 0, 0, false
	}
	v := e.val.Load()
	if e.key.Load() != key {
		return 0, 0, false
	}
	return int(v>>32) - 1, uint32(v), true
}

func (c *prefixCache) put(key uint64, n int, sum uint32) {
	key |= 1
	e := &c.slots[key>>1&(prefixSlots-1)]
	e.key.Store(0)
	e.val.Store(uint64(n+1)<<32 | uint64(sum))
	e.key.Store(key)
}

// reset empties the cache (benchmarks of a conversation's first request).
// Not while rendering.
func (c *prefixCache) reset() { clear(c.slots) }

// splitter finds the added tokens in a rendered prompt: only a byte that
// starts some token is looked at, then, for the tokens sharing its next
// byte, one map lookup per length they come in, longest first (Llama 3's
// 256 added tokens all start "<|", in 7 lengths).
type splitter struct {
	starts [256]bool
	// lens maps a token's first two bytes to the lengths of the tokens
	// starting so, longest first; one holds the one-byte tokens.
	lens   map[uint16][]int
	tokens map[string]tok
	one    [256]*tok
}

func newSplitter(cands []string, vocab Vocab) splitter {
	s := splitter{lens: map[uint16][]int{}, tokens: map[string]tok{}}
	for _, c := range cands {
		if _, dup := s.tokens[c]; c == "" || dup {
			continue
		}
		a, ok := vocab.LookupAdded(c)
		if !ok {
			continue
		}
		t := tok{text: c, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip}
		s.tokens[c] = t
		s.starts[c[0]] = true
		if len(c) == 1 {
			s.one[c[0]] = &t
			continue
		}
		k := uint16(c[0])<<8 | uint16(c[1])
		if !slices.Contains(s.lens[k], len(c)) {
			s.lens[k] = append(s.lens[k], len(c))
		}
	}
	for _, ls := range s.lens {
		slices.SortFunc(ls, func(x, y int) int { return y - x })
	}
	return s
}

// find returns the leftmost, then longest, token in s[from:] and its
// offset, or len(s) and false.
func (s *splitter) find(str string, from int) (int, tok, bool) {
	for i := from; i < len(str); i++ {
		if !s.starts[str[i]] {
			continue
		}
		if i+1 < len(str) {
			for _, n := range s.lens[uint16(str[i])<<8|uint16(str[i+1])] {
				if i+n <= len(str) {
					if t, ok := s.tokens[str[i:i+n]]; ok {
						return i, t, true
					}
				}
			}
		}
		if t := s.one[str[i]]; t != nil {
			return i, *t, true
		}
	}
	return len(str), tok{}, false
}

// segments splits full at its added tokens into b, ends[i] being the byte
// offset where message i ends, or -1.
func (s *splitter) segments(b *builder, full string, ends []int) {
	k := 0 // next message end to place
	pos := 0
	emitEnds := func(upto int) {
		for k < len(ends) {
			if ends[k] < 0 {
				k++
				continue
			}
			if ends[k] > upto {
				return
			}
			if ends[k] == upto {
				b.endMessage(k)
			}
			k++
		}
	}
	for pos <= len(full) {
		at, t, ok := s.find(full, pos)
		// Text up to at, with message ends inside it recorded only where
		// they fall at its end (endMessage keeps the last pending one).
		for k < len(ends) && (ends[k] < 0 || ends[k] < at) {
			if ends[k] > pos {
				b.text(full[pos:ends[k]])
				pos = ends[k]
				b.endMessage(k)
			}
			k++
		}
		b.text(full[pos:at])
		if !ok {
			emitEnds(len(full))
			return
		}
		emitEnds(at)
		b.special(t)
		pos = at + len(t.text)
		emitEnds(pos)
	}
}
