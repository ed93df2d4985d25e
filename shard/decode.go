package shard

import (
	"fmt"
	"math"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// Stage 2: decoding an OpenAI request body into what routing needs.

// kind is the API a routed request came to.
type kind uint8

const (
	kindChat       kind = iota + 1 // POST /v1/chat/completions
	kindCompletion                 // POST /v1/completions
)

// request is what stage 2 keeps of a body. Every field is a copy (chat
// copies messages into an arena of its own), never a view into the
// parser's buffer, which goes back to the pool when decode returns;
// except msgs from decodeWith with a chat.Scratch: views.
type request struct {
	kind  kind
	model string
	// chat
	msgs         []chat.Message
	opt          chat.Options
	stream       bool
	includeUsage bool // stream_options.include_usage
	// completion: the prompt routed by (the first one of an array)
	prompt string
	ids    []int32 // token ids: prompt as ids, or prompt_token_ids
	hasIDs bool
	// responses (msgs and opt as chat; responses.go)
	prevID string // previous_response_id, "" for none
	// priority is vLLM's request field (lower first; 0 when absent): the
	// order of the gateway queue (gate.go).
	priority    int
	hasPriority bool // the body has a "priority" member (stripped for engines without priority scheduling)
}

// apiError is an OpenAI-style error answer.
type apiError struct {
	status int
	msg    string
	typ    string // "invalid_request_error", ...
	param  string // the offending field, "" for none
	code   string // "" for none
	// retryAfter is the Retry-After of a 429, in seconds (0: none; a
	// 503 always has one).
	retryAfter int
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: 400, msg: fmt.Sprintf(format, args...), typ: "invalid_request_error", param: param}
}

// body renders the error as reactor.ErrorBody does.
func (e *apiError) body() []byte { return reactor.ErrorBody(e.status, e.typ, e.code, e.msg, e.param) }

// parsers reuse fastjson's value cache across requests; a Parser is taken
// and returned within one decode call, on whatever goroutine decodes.
var parsers fastjson.ParserPool

// keepDecodeBytes is the largest body whose parser goes back to the pool
// (or stays a loop's, with its chat.Scratch; decodeScratch.trim): a
// parser keeps its value cache at its high-water mark, 80 bytes per JSON
// value (plus the append slack), and a body of n bytes holds at most n/2
// values, so a kept parser retains at most ~3 MB. A larger body's parser
// is dropped with it.
const keepDecodeBytes = 64 << 10

// decode parses body as the given API's request into dst (which it
// resets). Client input never panics: it decodes, or returns a 400 naming
// the field. Any goroutine.
func decode(dst *request, k kind, body []byte) *apiError {
	if len(body) > keepDecodeBytes {
		return decodeWith(dst, k, body, new(fastjson.Parser), nil) // dropped: see keepDecodeBytes
	}
	p := parsers.Get()
	defer parsers.Put(p)
	return decodeWith(dst, k, body, p, nil)
}

// decodeWith is decode with the parser given and, when sc is not nil,
// chat messages as views into p's buffer and sc (chat.Scratch): valid
// until p or sc is used again. The loop's own parser and Scratch serve
// its requests this way; their views die when the request's keys are
// computed (job.keyed), or are copied when it waits for the tokenizer
// (job.own).
func decodeWith(dst *request, k kind, body []byte, p *fastjson.Parser, sc *chat.Scratch) *apiError {
	v, err := p.ParseBytes(body)
	if err != nil {
		*dst = request{kind: k}
		// BodyLimits.check, which names the byte, found no error: what
		// fastjson refuses beyond the grammar, if anything.
		return badRequest("", "invalid JSON: %v", err)
	}
	return decodeValue(dst, k, v, sc)
}

// decodeValue is decodeWith for a body already parsed into v.
func decodeValue(dst *request, k kind, v *fastjson.Value, sc *chat.Scratch) *apiError {
	*dst = request{kind: k}
	if v.Type() != fastjson.TypeObject {
		return badRequest("", "request body must be a JSON object, got %s", v.Type())
	}
	mv := chat.Field(v, "model")
	if mv == nil {
		return badRequest("model", "model: missing")
	}
	if mv.Type() != fastjson.TypeString {
		return badRequest("model", "model: want a string, got %s", mv.Type())
	}
	dst.model = string(mv.GetStringBytes())
	if dst.model == "" {
		return badRequest("model", "model: empty")
	}
	if e := optBool(v, &dst.stream, "stream"); e != nil {
		return e
	}
	if so := chat.Field(v, "stream_options"); so != nil && so.Type() != fastjson.TypeNull {
		if so.Type() != fastjson.TypeObject {
			return badRequest("stream_options", "stream_options: want an object, got %s", so.Type())
		}
		if e := optBool(so, &dst.includeUsage, "include_usage"); e != nil {
			e.param, e.msg = "stream_options.include_usage", "stream_options."+e.msg
			return e
		}
	}
	if pv := chat.Field(v, "priority"); pv != nil && pv.Type() != fastjson.TypeNull {
		n, err := pv.Int()
		if err != nil {
			return badRequest("priority", "priority: want an integer, got %s", pv.Type())
		}
		dst.priority, dst.hasPriority = n, true
	}
	switch k {
	case kindChat:
		return decodeChat(dst, v, sc)
	case kindResponses:
		return decodeResponses(dst, v)
	}
	return decodeCompletion(dst, v)
}

// optBool reads an optional boolean field (null = absent).
func optBool(v *fastjson.Value, dst *bool, name string) *apiError {
	if err := chat.OptBool(v, dst, name); err != nil {
		return fieldError(err)
	}
	return nil
}

// fieldError is a *chat.FieldError as a 400.
func fieldError(err error) *apiError {
	fe := err.(*chat.FieldError) // chat's request readers return no other error
	return badRequest(fe.Field, "%s", fe.Msg)
}

func decodeChat(dst *request, v *fastjson.Value, sc *chat.Scratch) *apiError {
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
	dst.msgs, dst.opt = msgs, opt
	return nil
}

func decodeCompletion(dst *request, v *fastjson.Value) *apiError {
	// vLLM's prompt_token_ids wins over prompt when both are given: it is
	// what the engine tokenizes no further.
	if pv := chat.Field(v, "prompt_token_ids"); pv != nil && pv.Type() != fastjson.TypeNull {
		if pv.Type() != fastjson.TypeArray {
			return badRequest("prompt_token_ids", "prompt_token_ids: want an array of token ids, got %s", pv.Type())
		}
		ids, e := tokenIDs(pv, "prompt_token_ids")
		if e != nil {
			return e
		}
		dst.ids, dst.hasIDs = ids, true
		return nil
	}
	pv := chat.Field(v, "prompt")
	if pv == nil || pv.Type() == fastjson.TypeNull {
		return badRequest("prompt", "prompt: missing")
	}
	switch pv.Type() {
	case fastjson.TypeString:
		dst.prompt = string(pv.GetStringBytes())
		return nil
	case fastjson.TypeArray:
	default:
		return badRequest("prompt", "prompt: want a string, an array of strings, an array of token ids or an array of arrays of token ids, got %s", pv.Type())
	}
	arr, _ := pv.Array() // the type was checked
	if len(arr) == 0 {
		return badRequest("prompt", "prompt: empty array")
	}
	// A batch routes by its first prompt; the others must have its type.
	switch first := arr[0]; first.Type() {
	case fastjson.TypeString:
		for i, e := range arr {
			if e.Type() != fastjson.TypeString {
				return badRequest("prompt", "prompt[%d]: want a string like prompt[0], got %s", i, e.Type())
			}
		}
		dst.prompt = string(first.GetStringBytes())
	case fastjson.TypeNumber:
		ids, e := tokenIDs(pv, "prompt")
		if e != nil {
			return e
		}
		dst.ids, dst.hasIDs = ids, true
	case fastjson.TypeArray:
		for i, e := range arr {
			if e.Type() != fastjson.TypeArray {
				return badRequest("prompt", "prompt[%d]: want an array of token ids like prompt[0], got %s", i, e.Type())
			}
		}
		ids, e := tokenIDs(first, "prompt[0]")
		if e != nil {
			return e
		}
		dst.ids, dst.hasIDs = ids, true
	default:
		return badRequest("prompt", "prompt[0]: want a string, a token id or an array of token ids, got %s", first.Type())
	}
	return nil
}

// tokenIDs reads an array of token ids (integers in [0, 2^31)).
func tokenIDs(v *fastjson.Value, name string) ([]int32, *apiError) {
	arr, _ := v.Array() // callers checked the type
	if len(arr) == 0 {
		return nil, badRequest(name, "%s: empty array", name)
	}
	ids := make([]int32, len(arr))
	for i, e := range arr {
		if e.Type() != fastjson.TypeNumber {
			return nil, badRequest(name, "%s[%d]: want a token id, got %s", name, i, e.Type())
		}
		n, err := e.Int64()
		if err != nil || n < 0 || n > math.MaxInt32 {
			return nil, badRequest(name, "%s[%d]: want an integer token id in [0, 2^31), got %s", name, i, e)
		}
		ids[i] = int32(n)
	}
	return ids, nil
}
