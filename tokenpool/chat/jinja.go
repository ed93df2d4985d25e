package chat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Jinja is the name of a Renderer built from a model's own Jinja template
// (NewJinja): the chat_template of its tokenizer_config.json, or a file.
const Jinja = "jinja"

// jinja is a compiled Jinja chat template and what rendering it needs. It
// is immutable after newJinja: gonja's compiled template is only read
// while executing (each Execute makes its own renderer and context).
type jinja struct {
	tmpl *exec.Template
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

// lineSep normalizes the template's line ends as jinja2's lexer does with
// its default newline_sequence "\n" (for the template's own text; a
// variable's value keeps its line ends).
var lineSep = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// NewJinja builds a Renderer for a Jinja chat template source, rendered as
// HuggingFace transformers renders it (jinja2 with trim_blocks and
// lstrip_blocks, raise_exception, tojson, strftime_now, loop controls and
// namespace; cfg's special tokens as variables). The rendered prompt is
// split at the added tokens of cfg (added_tokens_decoder and the special
// token fields) that vocab knows, each a special segment with vocab's id.
// A template that does not parse is an error naming the line. Any
// goroutine.
func NewJinja(source string, vocab Vocab, cfg Config) (*Renderer, error) {
	j, err := newJinja(source, vocab, cfg)
	if err != nil {
		return nil, err
	}
	return &Renderer{name: Jinja, jinja: j}, nil
}

func newJinja(source string, vocab Vocab, cfg Config) (*jinja, error) {
	if strings.TrimSpace(source) == "" {
		return nil, errors.New("chat template: empty")
	}
	if !utf8.ValidString(source) {
		return nil, errors.New("chat template: not valid UTF-8")
	}
	source = lineSep.Replace(source)
	conf := config.New()
	// transformers' _compile_jinja_template: trim_blocks and
	// lstrip_blocks on; keep_trailing_newline stays off.
	conf.TrimBlocks, conf.LeftStripBlocks = true, true
	env := newEnvironment()
	t, err := compile(source, conf, env)
	if err != nil {
		return nil, err
	}
	j := &jinja{tmpl: t, openai: forContent.MatchString(source), vars: map[string]any{}, seed: maphash.MakeSeed(), prefixes: newPrefixCache()}
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

// compile parses source. gonja's own error quotes the whole source: this
// one names the line and column.
func compile(source string, conf *config.Config, env *exec.Environment) (t *exec.Template, err error) {
	defer func() {
		// gonja's parser is not fuzzed upstream: a template it cannot
		// handle must be an error here, not a crash at start.
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat template: cannot parse: %v", r)
		}
	}()
	t, err = exec.NewTemplate("chat_template", conf, sourceLoader(source), env)
	if err != nil {
		var se *parser.SyntaxError
		if errors.As(err, &se) && se.Line > 0 {
			return nil, fmt.Errorf("chat template: line %d, column %d: %s (near %.40q)", se.Line, se.Column, se.Message, se.Raw)
		}
		// A lexer error: its token has the offset, not the line.
		for st := tokens.LexAll(source, conf); !st.EOF(); st.Next() {
			if tk := st.Current(); st.IsError() {
				line := 1 + strings.Count(source[:min(tk.Pos, len(source))], "\n")
				col := tk.Pos - strings.LastIndexByte(source[:min(tk.Pos, len(source))], '\n')
				return nil, fmt.Errorf("chat template: line %d, column %d: %s", line, col, tk.Val)
			}
		}
		msg := err.Error()
		if i := strings.Index(msg, "': "); i >= 0 && strings.HasPrefix(msg, "failed to parse template '") {
			msg = msg[i+3:]
		}
		return nil, fmt.Errorf("chat template: cannot parse: %.300s", msg)
	}
	return t, nil
}

// sourceLoader serves the one template; templates that include or extend
// others are refused (chat templates do not).
type sourceLoader string

func (s sourceLoader) Read(path string) (io.Reader, error) {
	if path != "chat_template" {
		return nil, fmt.Errorf("chat template: cannot load %q: a chat template cannot include other templates", path)
	}
	return strings.NewReader(string(s)), nil
}
func (s sourceLoader) Resolve(path string) (string, error) { return path, nil }
func (s sourceLoader) Inherit(string) (loaders.Loader, error) {
	return s, nil
}

var _ loaders.Loader = sourceLoader("")

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

// raised carries raise_exception's message out of gonja, which turns a
// function's error into text: each execution puts a fresh one into its
// context (raisedKey) for raise_exception to fill.
type raised struct {
	msg string
	hit bool // raise_exception was called
}

func (r *raised) Error() string { return "raise_exception: " + r.msg }

// raisedKey is the context variable holding the execution's *raised; a
// template cannot name it (not an identifier jinja2 would let it set).
const raisedKey = "saltus raised"

// strMethodNames are the Python str methods gonja has by name (a MethodSet
// cannot be copied whole); strip, lstrip, rstrip and split are replaced.
var strMethodNames = []string{"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
	"index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace",
	"istitle", "isupper", "join", "ljust", "lower", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
	"rpartition", "rsplit", "split", "splitlines", "startswith", "swapcase", "title", "upper", "zfill"}

// newEnvironment is gonja's environment with transformers' additions
// (raise_exception, strftime_now, tojson) and Python's str.strip for the
// trim filter and the strip methods. Every template gets its own filter
// and method sets: gonja's are shared package values, never modified here.
func newEnvironment() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	// Replace only fails for a filter gonja does not have: both are its own.
	_ = filters.Replace("tojson", filterToJSON)
	_ = filters.Replace("trim", filterTrim) // gonja has trim: Replace cannot fail
	str := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		if m, ok := builtins.Methods.Str.Get(name); ok {
			str[name] = m
		}
	}
	str["strip"] = strStrip(true, true)
	str["lstrip"] = strStrip(true, false)
	str["rstrip"] = strStrip(false, true)
	str["split"] = strSplit
	methods := builtins.Methods
	methods.Str = exec.NewMethodSet(str)
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", func(e *exec.Evaluator, params *exec.VarArgs) (*exec.Value, error) {
		msg := ""
		if len(params.Args) > 0 {
			msg = params.Args[0].String()
		}
		if v, ok := e.Environment.Context.Get(raisedKey); ok {
			if r, ok := v.(*raised); ok {
				r.msg, r.hit = msg, true
				return nil, r
			}
		}
		return nil, &raised{msg: msg, hit: true}
	})
	ctx.Set("strftime_now", func(_ *exec.Evaluator, params *exec.VarArgs) (*exec.Value, error) {
		if len(params.Args) != 1 || !params.Args[0].IsString() {
			return nil, errors.New("strftime_now: want one format string")
		}
		return exec.AsValue(strftime(time.Now(), params.Args[0].String())), nil
	})
	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           methods,
	}
}

// strSplit is Python's str.split(sep=None, maxsplit=-1); gonja's splits
// "" into no parts, where Python gives [""] (Qwen3's template takes [-1]
// of an empty content's split).
func strSplit(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	sep, max := exec.AsValue(nil), -1
	if len(args.Args) > 0 {
		sep = args.Args[0]
	}
	if v, ok := args.KwArgs["sep"]; ok {
		sep = v
	}
	if len(args.Args) > 1 {
		max = args.Args[1].Integer()
	}
	if v, ok := args.KwArgs["maxsplit"]; ok {
		max = v.Integer()
	}
	var parts []string
	switch {
	case sep.IsNil():
		parts = strings.FieldsFunc(self, pySpace)
		if max >= 0 && len(parts) > max+1 {
			// Python keeps the rest after max splits, from the next
			// non-space character, as one part.
			rest := self
			parts = parts[:0]
			for i := 0; i < max; i++ {
				rest = strings.TrimLeftFunc(rest, pySpace)
				k := strings.IndexFunc(rest, pySpace)
				parts = append(parts, rest[:k])
				rest = rest[k:]
			}
			parts = append(parts, strings.TrimLeftFunc(rest, pySpace))
		}
	case !sep.IsString() || sep.String() == "":
		return nil, errors.New("split: empty separator")
	default:
		parts = strings.SplitN(self, sep.String(), max+1)
		if max < 0 {
			parts = strings.Split(self, sep.String())
		}
	}
	out := make(pyList, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// pyList is a list a template indexes as Python does: gonja 2.9.1's
// GetItem refuses xs[-n] for a list of n (it tests len > -i, not >=),
// so messages[-1] of one message, or a split's [-1] of one part, would be
// undefined. gonja asks a value's own GetItem first (exec.ItemGetter).
type pyList []any

func (l pyList) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.ToValue(l[i]), true
}

// strStrip is Python's str.strip, lstrip or rstrip: of Python's
// whitespace (pySpace), or of the characters given.
func strStrip(left, right bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) > 1 || len(args.KwArgs) > 0 {
			return nil, errors.New("strip: want at most one argument")
		}
		cut := pySpace
		if len(args.Args) == 1 && !args.Args[0].IsNil() {
			if !args.Args[0].IsString() {
				return nil, errors.New("strip arg must be None or str")
			}
			chars := args.Args[0].String()
			cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
		}
		if left {
			self = strings.TrimLeftFunc(self, cut)
		}
		if right {
			self = strings.TrimRightFunc(self, cut)
		}
		return self, nil
	}
}

// filterTrim is jinja2's trim: Python's str.strip (pySpace), or of chars.
func filterTrim(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	s := in.String()
	if len(params.Args) > 0 && !params.Args[0].IsNil() {
		chars := params.Args[0].String()
		return exec.AsValue(strings.Trim(s, chars))
	}
	return exec.AsValue(pyStrip(s))
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys), so ", " and
// ": " between items unless indented, keys in insertion order (maps from
// Go in sorted order), no HTML escaping.
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := -1
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		indent = v.Integer()
	} else if len(params.Args) > 0 && !params.Args[0].IsNil() {
		indent = params.Args[0].Integer()
	}
	sortKeys := false
	if v, ok := params.KwArgs["sort_keys"]; ok {
		sortKeys = v.IsTrue()
	}
	var b strings.Builder
	if err := pyJSON(&b, in, indent, 0, sortKeys); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(b.String())
}

func pyJSON(b *strings.Builder, v *exec.Value, indent, depth int, sortKeys bool) error {
	if depth > 64 {
		return errors.New("tojson: nesting deeper than 64")
	}
	nl := func(d int) {
		if indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	sep := ", "
	if indent >= 0 {
		sep = ","
	}
	switch {
	case v.IsNil():
		b.WriteString("null")
	case v.IsBool():
		if v.Bool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInteger():
		b.WriteString(strconv.Itoa(v.Integer()))
	case v.IsFloat():
		b.WriteString(pyFloat(v.Float()))
	case v.IsString():
		pyQuote(b, v.String())
	case v.IsList():
		n := v.Len()
		if n == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(sep)
			}
			nl(depth + 1)
			if err := pyJSON(b, v.Index(i), indent, depth+1, sortKeys); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte(']')
	case v.IsDict():
		items := v.Items()
		if d, ok := v.Interface().(exec.Dict); ok {
			items = d.Pairs
		} else {
			// Go maps have no order: sorted, as Items gives them.
			slices.SortStableFunc(items, func(x, y *exec.Pair) int { return strings.Compare(x.Key.String(), y.Key.String()) })
		}
		if sortKeys {
			slices.SortStableFunc(items, func(x, y *exec.Pair) int { return strings.Compare(x.Key.String(), y.Key.String()) })
		}
		if len(items) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, p := range items {
			if i > 0 {
				b.WriteString(sep)
			}
			nl(depth + 1)
			pyQuote(b, p.Key.String())
			b.WriteString(": ")
			if err := pyJSON(b, p.Value, indent, depth+1, sortKeys); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot serialize %s", v.String())
	}
	return nil
}

// pyFloat is Python's repr of a float as json.dumps writes it.
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eIN") {
		s += ".0"
	}
	return s
}

// pyQuote is json.dumps of a string with ensure_ascii=False: only '"',
// '\\' and control characters are escaped.
func pyQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// strftime formats t with the C/Python directives chat templates use
// (Llama 3.1's "%d %b %Y"); others are written as they are.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// execute renders the template for msgs into a string.
func (j *jinja) execute(msgs []Message, opt Options) (string, error) {
	data := make(map[string]any, len(j.vars)+4)
	for k, v := range j.vars {
		data[k] = v
	}
	list := make(pyList, len(msgs))
	for i := range msgs {
		list[i] = j.message(&msgs[i])
	}
	data["messages"] = list
	data["add_generation_prompt"] = opt.AddGenerationPrompt
	if opt.DisableThinking {
		data["enable_thinking"] = false
	}
	return j.executeData(data)
}

// executeData renders the template with the variables data (which it
// extends with the raised box).
func (j *jinja) executeData(data map[string]any) (string, error) {
	box := &raised{}
	data[raisedKey] = box
	var b strings.Builder
	if err := j.run(&b, exec.NewContext(data)); err != nil {
		return "", templateError(err, box)
	}
	return b.String(), nil
}

// templateError is err of an execution whose raised box is box.
func templateError(err error, box *raised) *TemplateError {
	var r *raised
	if errors.As(err, &r) {
		return &TemplateError{Message: r.msg, Raised: true}
	}
	if box.hit {
		return &TemplateError{Message: box.msg, Raised: true}
	}
	msg := err.Error()
	// gonja prefixes every level of the template it unwinds through.
	if i := strings.LastIndex(msg, ": "); i >= 0 && len(msg) > 300 {
		msg = msg[i+2:]
	}
	return &TemplateError{Message: msg}
}

// run executes the template; a panic inside gonja on client input becomes
// an error, as client input never panics.
func (j *jinja) run(w io.Writer, ctx *exec.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return j.tmpl.Execute(w, ctx)
}

// message is the dict a template sees for m, as vLLM prepares it
// (entrypoints/chat_utils.py, _parse_chat_message_content): role and
// content (a string, or for an "openai" template the list of parts,
// Message.Parts, a string content becoming one text part), and for an
// assistant with reasoning, reasoning and reasoning_content.
func (j *jinja) message(m *Message) map[string]any {
	d := make(map[string]any, 4)
	d["role"] = m.Role
	if j.openai {
		ps := m.Parts()
		if ps == nil {
			d["content"] = pyList{map[string]any{"type": "text", "text": m.Content}}
		} else {
			l := make(pyList, len(ps))
			for i, p := range ps {
				switch p.Type {
				case "text":
					l[i] = map[string]any{"type": "text", "text": p.Text}
				case "tool_reference":
					l[i] = map[string]any{"type": "tool_reference", "name": p.Text}
				default:
					l[i] = map[string]any{"type": p.Type}
				}
			}
			d["content"] = l
		}
	} else {
		d["content"] = m.Content
	}
	if m.HasReasoning {
		d["reasoning"], d["reasoning_content"] = m.Reasoning, m.Reasoning
	}
	return d
}

// render renders msgs into b's segments, with message ends where the
// rendering of msgs[:i+1] without a generation prompt is a prefix of the
// whole rendering and ends on a segment edge: there a cached prefix of
// the conversation is a prefix of its continuation in token space.
//
// Each prefix is a rendering of its own: gonja takes 40 to 240 µs for a
// 4 KiB chat (BenchmarkRenderJinja), so rendering every prefix of every
// request would cost that times half the message count. The prefixes'
// renderings are cached (prefixCache: length and hash, keyed by the
// messages' hash), so a multi-turn conversation renders each prefix once
// while the cache holds it.
func (j *jinja) render(b *builder, msgs []Message, opt Options) error {
	full, err := j.execute(msgs, opt)
	if err != nil {
		return err
	}
	ends := make([]int, len(msgs))
	popt := opt
	popt.AddGenerationPrompt = false
	key := prefixSeed(popt)
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
func prefixSeed(opt Options) uint64 {
	if opt.DisableThinking {
		return 0x9e3779b97f4a7c15
	}
	return 0x6a09e667f3bcc908
}

func (j *jinja) prefixKey(h uint64, m *Message) uint64 {
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
