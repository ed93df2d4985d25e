package openai

import (
	"math"

	"github.com/saltus-lb/saltus/internal/jsonscan"
	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// Stage 2: decoding an OpenAI request body into what routing needs.
//
// The body is read where it lies, without a parse tree (issue 33): one
// pass over the top-level object checks the whole body's grammar and
// depth (scanValue: the body scan's grammar) and notes where the last
// occurrence of each member routing reads starts; those members are then
// read from the bytes (internal/jsonscan), their parts found the same way.
// What is skipped costs nothing but the scan; what is kept is a copy of
// what is read (the strings: no more than the body), a chat.Message per
// message and 4 bytes per token id. A tree of fastjson Values cost ~400-
// 450 bytes per JSON value at its peak: 770 MB of RSS for a 1.9 MB body
// whose unknown member held a million `1`s; this decoder allocates at
// most 5.3 bytes per body byte on the hostile bodies of TestDecodeMemory
// (the most for a million smallest messages, {"role":"x"}: a 56-byte
// chat.Message per 13 bytes), nothing for a skipped member.

// Kind is the API a routed request came to.
type Kind uint8

const (
	KindChat       Kind = iota + 1 // POST /v1/chat/completions
	KindCompletion                 // POST /v1/completions
	KindResponses                  // POST /v1/responses (responses.go)
	KindPooling                    // POST /v1/embeddings, /pooling, /classify: input (pooling.go)
	KindScore                      // POST /score, /v1/score, /rerank, /v1/rerank, /v2/rerank: the query (pooling.go)
	KindMessages                   // POST /v1/messages, Anthropic's (messages.go)
)

// Request is what stage 2 keeps of a body. Every field is a copy, except
// Messages decoded through a Scratch: views into the body and the
// Scratch.
type Request struct {
	Kind  Kind
	Model string
	// chat
	Messages     []chat.Message
	Options      chat.Options
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	// HasStreamOptions: the body has a stream_options member (null
	// included).
	HasStreamOptions bool
	// completion: the prompt routed by (the first one of an array)
	Prompt      string
	TokenIDs    []int32 // token ids: prompt as ids, or prompt_token_ids
	HasTokenIDs bool
	// responses and Anthropic's messages (Messages and Options as chat;
	// responses.go, messages.go)
	PreviousResponseID string // previous_response_id, "" for none
	// Priority is vLLM's request field (lower first; 0 when absent): the
	// order of the gateway queue (shard/gate.go).
	Priority    int
	HasPriority bool // the body has a "priority" member (stripped for engines without priority scheduling)
	// MaxTokens is the most it may generate: max_completion_tokens, else
	// max_tokens, else max_output_tokens (responses) when a non-negative
	// integer; 0 when none is (the engine answers a bad one). IgnoreEOS:
	// vLLM's ignore_eos is true (the answer is then MaxTokens long). The
	// prefix policy's expected answer length (backend/decoding.go).
	MaxTokens int64
	IgnoreEOS bool
	// CacheSalt is vLLM's cache_salt when a non-empty string ("" else):
	// vLLM keeps the prefix cache of salted prompts apart (a tenant's),
	// and so do their route keys (shard's job.seed). The engine answers a
	// bad one.
	CacheSalt string
}

// KeepDecodeBytes is the largest body whose decoding memory a loop keeps
// for the next request (its Scratch; shard's decodeScratch.trim): the
// Scratch's arena grows to at most the body's size and its messages to
// one (56 bytes) per 13 bytes of body, so a kept Scratch retains at most
// ~350 KB, and an Anthropic body's chat JSON (messages.go) ~4 times the
// body at most (tool_use blocks), ~256 KB more. A larger body's is
// dropped with it.
const KeepDecodeBytes = 64 << 10

// Scratch is the reused memory of one decoding goroutine (a shard's event
// loop): chat's Scratch, which holds the messages decoded through it (and
// renders them), and the last model name decoded, which the next request
// naming the same model reuses instead of a copy of its own. The zero
// value is ready. Owned by one goroutine.
type Scratch struct {
	Chat  chat.Scratch
	model string
	conv  []byte // an Anthropic request's chat JSON (messages.go), which Chat's messages view
}

// The top-level members decode reads, by their index in its field table.
const (
	fModel = iota
	fStream
	fStreamOptions
	fPriority
	fMessages
	fAddGenerationPrompt
	fChatTemplateKwargs
	fTools
	fReasoningEffort
	fPromptTokenIDs
	fPrompt
	fPreviousResponseID
	fInstructions
	fInput
	fSystem
	fMaxTokens
	fToolChoice
	fOutputConfig
	fMaxCompletionTokens
	fMaxOutputTokens
	fIgnoreEOS
	fCacheSalt
	numFields
)

// reader reads the members of a checked body.
type reader struct {
	b   []byte
	tmp []byte // unescaped text; valid until the next call of text
}

// text is the string at r.b[at], unescaped: a view into the body, or
// into r.tmp when it has escapes.
func (r *reader) text(at int) []byte {
	raw, escaped, _ := jsonscan.Str(r.b, at)
	if !escaped {
		return raw
	}
	r.tmp = jsonscan.AppendUnescaped(r.tmp[:0], raw)
	return r.tmp
}

// str is text as a string of its own.
func (r *reader) str(at int) string { return string(r.text(at)) }

// Decode reads body, as the given API's request, into dst (which it
// resets). It checks the body's grammar as BodyLimits.Check does, and its
// nesting to maxDepth (at most MaxScanDepth), before it reads a member:
// a body that is not JSON, or too deep, gets BodyLimits.Check's answer
// (without its value count); otherwise it decodes, or returns a 400
// naming the field. Client input never panics. With sc, chat messages are
// views into body and sc (chat.Scratch.MessagesFromBody), valid while
// body is and until sc decodes again; a loop serves its requests this
// way, and their views die when the request's keys are computed (shard's
// job.keyed) or are copied when it waits for the tokenizer (job.own).
// Any goroutine that owns sc.
func Decode(dst *Request, k Kind, body []byte, maxDepth int, sc *Scratch) *Error {
	return DecodeWith(dst, k, body, maxDepth, sc, chat.WantParts|chat.WantExtras)
}

// DecodeWith is Decode keeping of a chat only what the renderer wants
// (chat.Renderer.Wants): without chat.WantParts, messages' content parts
// are not described (chat.Message.Parts nil), so a million parts cost
// their joined text alone; without chat.WantExtras, tool calls, names,
// tools, chat_template_kwargs and reasoning_effort are not kept (but
// enable_thinking).
// Any goroutine that owns sc.
func DecodeWith(dst *Request, k Kind, body []byte, maxDepth int, sc *Scratch, want chat.Wants) *Error {
	*dst = Request{Kind: k}
	maxDepth = min(maxDepth, MaxScanDepth)
	var f, fe [numFields]int // the members' values: their offsets, and the offsets past them
	keys := [numFields]string{fModel: "model", fStream: "stream", fStreamOptions: "stream_options", fPriority: "priority",
		fMessages: "messages", fAddGenerationPrompt: "add_generation_prompt", fChatTemplateKwargs: "chat_template_kwargs", fTools: "tools",
		fReasoningEffort: "reasoning_effort", fPromptTokenIDs: "prompt_token_ids", fPrompt: "prompt",
		fPreviousResponseID: "previous_response_id", fInstructions: "instructions", fInput: "input",
		fSystem: "system", fMaxTokens: "max_tokens", fToolChoice: "tool_choice", fOutputConfig: "output_config",
		fMaxCompletionTokens: "max_completion_tokens", fMaxOutputTokens: "max_output_tokens", fIgnoreEOS: "ignore_eos", fCacheSalt: "cache_salt"}
	open := jsonscan.SkipWS(body, 0)
	if !jsonscan.Is(body, open, '{') {
		if _, _, se := scanJSON(body, math.MaxInt, max(maxDepth, 0)); se.kind != ScanOK {
			return invalid(body, maxDepth)
		}
		return BadRequest("", "request body must be a JSON object, got %s", jsonscan.TypeName(body, open))
	}
	if !members(body, open, maxDepth, keys[:], f[:], fe[:]) {
		return invalid(body, maxDepth)
	}
	r := reader{b: body}
	b := body
	mv := f[fModel]
	if mv < 0 {
		return BadRequest("model", "model: missing")
	}
	if !jsonscan.Is(b, mv, '"') {
		return BadRequest("model", "model: want a string, got %s", jsonscan.TypeName(b, mv))
	}
	if t := r.text(mv); sc != nil && string(t) == sc.model {
		dst.Model = sc.model // the loop's last model: no copy per request
	} else {
		dst.Model = string(t)
	}
	if dst.Model == "" {
		return BadRequest("model", "model: empty")
	}
	if sc != nil {
		sc.model = dst.Model
	}
	if e := optBool(b, f[fStream], &dst.Stream, "stream"); e != nil {
		return e
	}
	dst.HasStreamOptions = f[fStreamOptions] >= 0
	if so := f[fStreamOptions]; jsonscan.Present(b, so) {
		if !jsonscan.Is(b, so, '{') {
			return BadRequest("stream_options", "stream_options: want an object, got %s", jsonscan.TypeName(b, so))
		}
		var iu [1]int
		jsonscan.Members(b, so, []string{"include_usage"}, iu[:], nil)
		if e := optBool(b, iu[0], &dst.IncludeUsage, "include_usage"); e != nil {
			e.Param, e.Message = "stream_options.include_usage", "stream_options."+e.Message
			return e
		}
	}
	if pv := f[fPriority]; jsonscan.Present(b, pv) {
		n, ok := jsonscan.Int64(b, pv)
		if !jsonscan.IsNumber(b, pv) || !ok || int64(int(n)) != n {
			return BadRequest("priority", "priority: want an integer, got %s", jsonscan.TypeName(b, pv))
		}
		dst.Priority, dst.HasPriority = int(n), true
	}
	for _, at := range [...]int{f[fMaxCompletionTokens], f[fMaxTokens], f[fMaxOutputTokens]} {
		if !jsonscan.IsNumber(b, at) {
			continue
		}
		if n, ok := jsonscan.Int64(b, at); ok && n >= 0 {
			dst.MaxTokens = n
			break
		}
	}
	dst.IgnoreEOS = jsonscan.Is(b, f[fIgnoreEOS], 't')
	if cs := f[fCacheSalt]; jsonscan.Is(b, cs, '"') {
		dst.CacheSalt = r.str(cs)
	}
	if sc != nil {
		sc.Chat.Joined, sc.Chat.NoExtras = want&chat.WantParts == 0, want&chat.WantExtras == 0
	}
	switch k {
	case KindChat:
		var csc *chat.Scratch
		if sc != nil {
			csc = &sc.Chat
		}
		return decodeChat(dst, b, &f, &fe, csc, want)
	case KindMessages:
		mr := r // its own: the conversion's writer makes it escape, which r must not (a chat decode allocates nothing)
		return decodeMessages(dst, &mr, &f, &fe, sc, want)
	case KindResponses:
		return decodeResponses(dst, &r, &f)
	}
	return decodeCompletion(dst, &r, &f)
}

// members is jsonscan.Members for the top-level object at b[open] that
// also checks the whole body: the grammar and depth of every member
// (scanValue, which allocates nothing and keeps nothing), and nothing but
// white space after the object. False: the body is not JSON, or too deep.
func members(b []byte, open, maxDepth int, keys []string, at, ends []int) bool {
	for k := range at {
		at[k] = -1
	}
	if maxDepth < 1 {
		return false
	}
	i := jsonscan.SkipWS(b, open+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return false
			}
			ke := skipString(b, i)
			if ke < 0 {
				var se scanError
				if ke, se = scanString(b, i); se.kind != ScanOK {
					return false
				}
			}
			raw := b[i+1 : ke-1]
			i = jsonscan.SkipWS(b, ke)
			if i >= len(b) || b[i] != ':' {
				return false
			}
			vs := jsonscan.SkipWS(b, i+1)
			ve, _, _, se := scanValue(b, vs, math.MaxInt, maxDepth-1)
			if se.kind != ScanOK {
				return false
			}
			if k := jsonscan.KeyIndex(raw, keys); k >= 0 {
				at[k], ends[k] = vs, ve
			}
			i = jsonscan.SkipWS(b, ve)
			if i >= len(b) {
				return false
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return false
			}
			i = jsonscan.SkipWS(b, i+1)
		}
	}
	return jsonscan.SkipWS(b, i) == len(b)
}

// invalid is the answer to a body that is not JSON or nests deeper than
// maxDepth: BodyLimits.Check's, which names the byte.
func invalid(body []byte, maxDepth int) *Error {
	if _, e, _ := (BodyLimits{MaxValues: math.MaxInt, MaxDepth: max(maxDepth, 0)}).Check(body); e != nil {
		return e
	}
	// members refused what the scan passes: a bug, but the body is
	// refused rather than read unchecked.
	return BadRequest("", "invalid JSON")
}

// optBool reads the optional boolean member at b[at] (-1: absent; null:
// absent) into dst, as chat.OptBool.
func optBool(b []byte, at int, dst *bool, name string) *Error {
	switch {
	case !jsonscan.Present(b, at):
	case jsonscan.Is(b, at, 't'):
		*dst = true
	case jsonscan.Is(b, at, 'f'):
		*dst = false
	default:
		return BadRequest(name, "%s: want true or false, got %s", name, jsonscan.TypeName(b, at))
	}
	return nil
}

// templateKwargs reads vLLM's chat_template_kwargs, the object at
// b[kw:end] (kw -1: absent) of a chat or Messages request, into opt:
// enable_thinking, and the whole object for a renderer that reads extras.
func templateKwargs(b []byte, kw, end int, want chat.Wants, opt *chat.Options) {
	if !jsonscan.Is(b, kw, '{') {
		return
	}
	var et [1]int
	jsonscan.Members(b, kw, []string{"enable_thinking"}, et[:], nil)
	opt.DisableThinking = jsonscan.Is(b, et[0], 'f')
	if want&chat.WantExtras != 0 {
		opt.Kwargs = chat.CanonicalJSON(b[kw:end])
	}
}

// decodeChat reads what chat.FromRequest reads: the messages, then
// add_generation_prompt and chat_template_kwargs.enable_thinking, with
// its errors.
func decodeChat(dst *Request, b []byte, f, fe *[numFields]int, sc *chat.Scratch, want chat.Wants) *Error {
	mv := f[fMessages]
	if mv < 0 {
		return BadRequest("messages", "messages: missing")
	}
	var (
		msgs []chat.Message
		err  error
	)
	switch {
	case sc != nil:
		msgs, err = sc.MessagesFromBody(b[mv:fe[fMessages]])
	default:
		msgs, err = chat.MessagesFromBodyFor(b[mv:fe[fMessages]], want)
	}
	if err != nil {
		return BadRequest("messages", "%s", err.Error())
	}
	if len(msgs) == 0 {
		return BadRequest("messages", "messages: empty")
	}
	opt := chat.Options{AddGenerationPrompt: true}
	if e := optBool(b, f[fAddGenerationPrompt], &opt.AddGenerationPrompt, "add_generation_prompt"); e != nil {
		return e
	}
	templateKwargs(b, f[fChatTemplateKwargs], fe[fChatTemplateKwargs], want, &opt)
	if tv := f[fTools]; want&chat.WantExtras != 0 && jsonscan.Is(b, tv, '[') {
		opt.Tools = chat.CanonicalJSON(b[tv:fe[fTools]])
	}
	if re := f[fReasoningEffort]; want&chat.WantExtras != 0 && jsonscan.Is(b, re, '"') {
		raw, escaped, _ := jsonscan.Str(b, re)
		if escaped {
			raw = jsonscan.AppendUnescaped(nil, raw)
		}
		opt.ReasoningEffort = string(raw)
	}
	dst.Messages, dst.Options = msgs, opt
	return nil
}

func decodeCompletion(dst *Request, r *reader, f *[numFields]int) *Error {
	b := r.b
	// vLLM's prompt_token_ids wins over prompt when both are given: it is
	// what the engine tokenizes no further.
	if pv := f[fPromptTokenIDs]; jsonscan.Present(b, pv) {
		if !jsonscan.Is(b, pv, '[') {
			return BadRequest("prompt_token_ids", "prompt_token_ids: want an array of token ids, got %s", jsonscan.TypeName(b, pv))
		}
		ids, e := tokenIDs(b, pv, "prompt_token_ids")
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
		return nil
	}
	pv := f[fPrompt]
	if !jsonscan.Present(b, pv) {
		return BadRequest("prompt", "prompt: missing")
	}
	return decodePrompt(dst, r, pv, "prompt")
}

// decodePrompt reads the prompt at r.b[pv], a completion's prompt or an
// embedding's input (name): a string, an array of strings, an array of
// token ids or an array of arrays of token ids. A batch routes by its
// first prompt; the others must have its type.
func decodePrompt(dst *Request, r *reader, pv int, name string) *Error {
	b := r.b
	switch {
	case jsonscan.Is(b, pv, '"'):
		dst.Prompt = r.str(pv)
		return nil
	case jsonscan.Is(b, pv, '['):
	default:
		return BadRequest(name, "%s: want a string, an array of strings, an array of token ids or an array of arrays of token ids, got %s", name, jsonscan.TypeName(b, pv))
	}
	first := jsonscan.Elem(b, pv)
	if first < 0 {
		return BadRequest(name, "%s: empty array", name)
	}
	switch {
	case jsonscan.Is(b, first, '"'):
		if e := sameType(b, first, '"', "a string", name); e != nil {
			return e
		}
		dst.Prompt = r.str(first)
	case jsonscan.IsNumber(b, first):
		ids, e := tokenIDs(b, pv, name)
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
	case jsonscan.Is(b, first, '['):
		if e := sameType(b, first, '[', "an array of token ids", name); e != nil {
			return e
		}
		ids, e := tokenIDs(b, first, name+"[0]")
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
	default:
		return BadRequest(name, "%s[0]: want a string, a token id or an array of token ids, got %s", name, jsonscan.TypeName(b, first))
	}
	return nil
}

// sameType checks that every prompt of a batch, from its first at
// b[first], opens with c as the first does (what names it in the error).
func sameType(b []byte, first int, c byte, what, name string) *Error {
	i := 0
	for e := first; e >= 0; e = jsonscan.Next(b, e) {
		if !jsonscan.Is(b, e, c) {
			return BadRequest(name, "%s[%d]: want %s like %s[0], got %s", name, i, what, name, jsonscan.TypeName(b, e))
		}
		i++
	}
	return nil
}

// tokenIDs reads the array at b[at] of token ids (integers in [0, 2^31))
// into a slice of exactly its length: 4 bytes per id, for at least 2
// bytes of body.
func tokenIDs(b []byte, at int, name string) ([]int32, *Error) {
	n := jsonscan.Count(b, at)
	if n == 0 {
		return nil, BadRequest(name, "%s: empty array", name)
	}
	ids := make([]int32, n)
	i := 0
	for e := jsonscan.Elem(b, at); e >= 0 && i < n; e = jsonscan.Next(b, e) {
		if !jsonscan.IsNumber(b, e) {
			return nil, BadRequest(name, "%s[%d]: want a token id, got %s", name, i, jsonscan.TypeName(b, e))
		}
		v, ok := jsonscan.Int64(b, e)
		if !ok || v < 0 || v > math.MaxInt32 {
			return nil, BadRequest(name, "%s[%d]: want an integer token id in [0, 2^31), got %s", name, i, jsonscan.Num(b, e))
		}
		ids[i] = int32(v)
		i++
	}
	return ids, nil
}
