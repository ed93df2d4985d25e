package openai

import (
	"math"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// Stage 2: decoding an OpenAI request body into what routing needs.

// Kind is the API a routed request came to.
type Kind uint8

const (
	KindChat       Kind = iota + 1 // POST /v1/chat/completions
	KindCompletion                 // POST /v1/completions
	KindResponses                  // POST /v1/responses (responses.go)
)

// Request is what stage 2 keeps of a body. Every field is a copy (chat
// copies messages into an arena of its own), never a view into the
// parser's buffer, which goes back to the pool when Decode returns;
// except Messages from DecodeValue with a chat.Scratch: views.
type Request struct {
	Kind  Kind
	Model string
	// chat
	Messages     []chat.Message
	Options      chat.Options
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	// completion: the prompt routed by (the first one of an array)
	Prompt      string
	TokenIDs    []int32 // token ids: prompt as ids, or prompt_token_ids
	HasTokenIDs bool
	// responses (Messages and Options as chat; responses.go)
	PreviousResponseID string // previous_response_id, "" for none
	// Priority is vLLM's request field (lower first; 0 when absent): the
	// order of the gateway queue (shard/gate.go).
	Priority    int
	HasPriority bool // the body has a "priority" member (stripped for engines without priority scheduling)
}

// parsers reuse fastjson's value cache across requests; a Parser is taken
// and returned within one decode call, on whatever goroutine decodes.
var parsers fastjson.ParserPool

// KeepDecodeBytes is the largest body whose parser goes back to the pool
// (or stays a loop's, with its chat.Scratch; shard's decodeScratch.trim): a
// parser keeps its value cache at its high-water mark, 80 bytes per JSON
// value (plus the append slack), and a body of n bytes holds at most n/2
// values, so a kept parser retains at most ~3 MB. A larger body's parser
// is dropped with it.
const KeepDecodeBytes = 64 << 10

// Decode parses body as the given API's request into dst (which it
// resets). Client input never panics: it decodes, or returns a 400 naming
// the field. Any goroutine.
func Decode(dst *Request, k Kind, body []byte) *Error {
	if len(body) > KeepDecodeBytes {
		return decodeWith(dst, k, body, new(fastjson.Parser)) // dropped: see KeepDecodeBytes
	}
	p := parsers.Get()
	defer parsers.Put(p)
	return decodeWith(dst, k, body, p)
}

// decodeWith is Decode with the parser given; what it keeps is copied
// out of p's buffer.
func decodeWith(dst *Request, k Kind, body []byte, p *fastjson.Parser) *Error {
	v, err := p.ParseBytes(body)
	if err != nil {
		*dst = Request{Kind: k}
		// BodyLimits.Check, which names the byte, found no error: what
		// fastjson refuses beyond the grammar, if anything.
		return BadRequest("", "invalid JSON: %v", err)
	}
	return DecodeValue(dst, k, v, nil)
}

// DecodeValue is Decode for a body already parsed into v: with sc not
// nil, chat messages are views into v's parser and sc (chat.Scratch),
// valid until either is used again. A loop's own parser and Scratch serve
// its requests this way; their views die when the request's keys are
// computed (shard's job.keyed), or are copied when it waits for the
// tokenizer (job.own). Any goroutine that owns p and sc.
func DecodeValue(dst *Request, k Kind, v *fastjson.Value, sc *chat.Scratch) *Error {
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
	if e := optBool(v, &dst.Stream, "stream"); e != nil {
		return e
	}
	if so := chat.Field(v, "stream_options"); so != nil && so.Type() != fastjson.TypeNull {
		if so.Type() != fastjson.TypeObject {
			return BadRequest("stream_options", "stream_options: want an object, got %s", so.Type())
		}
		if e := optBool(so, &dst.IncludeUsage, "include_usage"); e != nil {
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
	switch k {
	case KindChat:
		return decodeChat(dst, v, sc)
	case KindResponses:
		return decodeResponses(dst, v)
	}
	return decodeCompletion(dst, v)
}

// optBool reads an optional boolean field (null = absent).
func optBool(v *fastjson.Value, dst *bool, name string) *Error {
	if err := chat.OptBool(v, dst, name); err != nil {
		return fieldError(err)
	}
	return nil
}

// fieldError is a *chat.FieldError as a 400.
func fieldError(err error) *Error {
	fe := err.(*chat.FieldError) // chat's request readers return no other error
	return BadRequest(fe.Field, "%s", fe.Msg)
}

func decodeChat(dst *Request, v *fastjson.Value, sc *chat.Scratch) *Error {
	var (
		msgs []chat.Message
		opt  chat.Options
		err  error
	)
	if sc != nil {
		msgs, opt, err = sc.FromRequest(v)
	} else {
		msgs, opt, err = chat.FromRequest(v)
	}
	if err != nil {
		return fieldError(err)
	}
	dst.Messages, dst.Options = msgs, opt
	return nil
}

func decodeCompletion(dst *Request, v *fastjson.Value) *Error {
	// vLLM's prompt_token_ids wins over prompt when both are given: it is
	// what the engine tokenizes no further.
	if pv := chat.Field(v, "prompt_token_ids"); pv != nil && pv.Type() != fastjson.TypeNull {
		if pv.Type() != fastjson.TypeArray {
			return BadRequest("prompt_token_ids", "prompt_token_ids: want an array of token ids, got %s", pv.Type())
		}
		ids, e := tokenIDs(pv, "prompt_token_ids")
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
		ids, e := tokenIDs(pv, "prompt")
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
		ids, e := tokenIDs(first, "prompt[0]")
		if e != nil {
			return e
		}
		dst.TokenIDs, dst.HasTokenIDs = ids, true
	default:
		return BadRequest("prompt", "prompt[0]: want a string, a token id or an array of token ids, got %s", first.Type())
	}
	return nil
}

// tokenIDs reads an array of token ids (integers in [0, 2^31)).
func tokenIDs(v *fastjson.Value, name string) ([]int32, *Error) {
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
