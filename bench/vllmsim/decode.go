package vllmsim

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// kind is the endpoint a body came to.
type kind uint8

const (
	kindChat       kind = iota + 1 // POST /v1/chat/completions
	kindCompletion                 // POST /v1/completions
	kindTokenize                   // POST /tokenize: messages or prompt
	kindMessages                   // POST /v1/messages: Anthropic's, served as its chat request (messages.go)
)

// request is what the simulator keeps of a body. Every field is a copy,
// never a view into the body or the parser's memory.
type request struct {
	kind kind
	// The prompt: messages (chat; tokenize with "messages"), else text,
	// else ids (a completions prompt given as token ids, or
	// prompt_token_ids).
	msgs   []chat.Message
	opt    chat.Options
	text   string
	ids    []int32
	hasIDs bool
	// addSpecial: a text prompt gets the tokenizer's special tokens
	// (BOS), as vLLM's add_special_tokens (default true). Messages never
	// do: their template writes them.
	addSpecial bool

	// model is the "model" field: a served name, or "" for the primary
	// model (the handler resolves it).
	model string

	stream       bool
	includeUsage bool  // stream_options.include_usage
	maxTokens    int   // max_completion_tokens or max_tokens; 0: not given
	priority     int64 // vLLM's "priority"; 0 when not given
	// salt is vLLM's cache_salt: a salted prompt's blocks are its own
	// (seeded by tree.SaltSeed; the first block's extra_keys carry it).
	salt string
}

// apiError is an answer with an OpenAI-style error body.
type apiError struct {
	status int
	msg    string
	param  string // the offending field; "" for none
	code   string // "" for none
	// vllmType, when set, makes the body vLLM's own ErrorResponse: this
	// type (vLLM's err_type: "NotFoundError", "InvalidUserInput", …) and
	// the status as a numeric code, for the errors the simulator words
	// as vLLM does (an unknown model, LoRA adapter loads and unloads, a
	// refused priority, a full waiting queue).
	vllmType string
}

func (e *apiError) Error() string { return e.msg }

func (e *apiError) body() []byte {
	if e.vllmType != "" {
		return vllmErrorBody(e.status, e.vllmType, e.msg, e.param)
	}
	return reactor.ErrorBody(e.status, "", e.code, e.msg, e.param)
}

// vllmErrorBody is vLLM's ErrorResponse as its handlers send it
// (ErrorResponse.model_dump(): {"error":{"message","type","param",
// "code"}}, param null when "", code the HTTP status as a number).
// Rare paths: encoding/json is fine here.
func vllmErrorBody(status int, typ, msg, param string) []byte {
	type info struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	e := info{Message: msg, Type: typ, Code: status}
	if param != "" {
		e.Param = &param
	}
	b, err := json.Marshal(struct {
		Error info `json:"error"`
	}{e})
	if err != nil {
		panic("BUG: cannot encode an error body: " + err.Error())
	}
	return b
}

// modelNotFound is vLLM's answer to a request naming a model it does not
// serve (OpenAIServing._check_model).
func modelNotFound(model string) *apiError {
	return &apiError{status: 404, msg: fmt.Sprintf("The model `%.256s` does not exist.", model), param: "model", vllmType: "NotFoundError"}
}

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: 400, msg: fmt.Sprintf(format, args...), param: param}
}

// parsers reuse fastjson's value cache across requests; a Parser is taken
// and given back within one decodeRequest call.
var parsers fastjson.ParserPool

// parseObject parses body with p as a JSON object whose "model", if
// given, is a string or null: what every endpoint's decoder starts with.
// It returns the object and the model ("" when absent or null: the
// primary model serves it); whether the model is served is the
// handler's question.
func parseObject(p *fastjson.Parser, body []byte) (*fastjson.Value, string, *apiError) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, "", badRequest("", "request body is not valid JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, "", badRequest("", "request body must be a JSON object, got %s", v.Type())
	}
	mv := chat.Field(v, "model")
	if mv == nil || mv.Type() == fastjson.TypeNull {
		return v, "", nil
	}
	if mv.Type() != fastjson.TypeString {
		return nil, "", badRequest("model", "model: want a string, got %s", mv.Type())
	}
	return v, string(mv.GetStringBytes()), nil
}

// decodeRequest parses body as a request to endpoint k. Client input
// never panics: it decodes, or returns a 400 naming the field. Any
// goroutine.
func decodeRequest(body []byte, k kind) (request, *apiError) {
	r := request{kind: k}
	p := parsers.Get()
	defer parsers.Put(p)
	v, model, e := parseObject(p, body)
	if e != nil {
		return r, e
	}
	r.model = model
	if k != kindTokenize {
		if e := optBool(v, &r.stream, "stream"); e != nil {
			return r, e
		}
		if so := chat.Field(v, "stream_options"); so != nil && so.Type() != fastjson.TypeNull {
			if so.Type() != fastjson.TypeObject {
				return r, badRequest("stream_options", "stream_options: want an object, got %s", so.Type())
			}
			if e := optBool(so, &r.includeUsage, "include_usage"); e != nil {
				e.param, e.msg = "stream_options.include_usage", "stream_options."+e.msg
				return r, e
			}
		}
		// max_completion_tokens, OpenAI's newer name, wins (as in vLLM).
		for _, name := range []string{"max_completion_tokens", "max_tokens"} {
			if e := optPositive(v, &r.maxTokens, name); e != nil {
				return r, e
			}
			if r.maxTokens > 0 {
				break
			}
		}
		if e := optPriority(v, &r.priority); e != nil {
			return r, e
		}
		if e := optSalt(v, &r.salt); e != nil {
			return r, e
		}
		if nv := chat.Field(v, "n"); nv != nil && nv.Type() != fastjson.TypeNull {
			if n, err := nv.Int(); err != nil || n != 1 {
				return r, badRequest("n", "n: the simulator answers one choice per request, got %.40s", nv)
			}
		}
	}
	if k == kindChat || (k == kindTokenize && v.Exists("messages")) {
		return r, decodeMessages(&r, v)
	}
	return r, decodePrompt(&r, v)
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

// optPositive reads an optional integer field of at least 1 (null =
// absent).
func optPositive(v *fastjson.Value, dst *int, name string) *apiError {
	f := chat.Field(v, name)
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil
	}
	n, err := f.Int64()
	if f.Type() != fastjson.TypeNumber || err != nil || n < 1 || n > math.MaxInt32 {
		return badRequest(name, "%s: want an integer of at least 1, got %.40s", name, f)
	}
	*dst = int(n)
	return nil
}

// optPriority reads vLLM's "priority" (chat, completions and Responses
// requests): an integer, default 0, lower served first under the
// priority policy. vLLM's field is a plain int, so null is refused too.
// Whether a non-zero one is allowed is the handler's question
// (Config.SchedulingPolicy).
func optPriority(v *fastjson.Value, dst *int64) *apiError {
	f := chat.Field(v, "priority")
	if f == nil {
		return nil
	}
	n, err := f.Int64()
	if f.Type() != fastjson.TypeNumber || err != nil {
		return badRequest("priority", "priority: want an integer, got %.40s", f)
	}
	*dst = n
	return nil
}

// optSalt reads vLLM's "cache_salt": absent or null, else a non-empty
// string (vLLM refuses anything else).
func optSalt(v *fastjson.Value, dst *string) *apiError {
	f := chat.Field(v, "cache_salt")
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil
	}
	b, err := f.StringBytes()
	if err != nil || len(b) == 0 {
		return badRequest("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.")
	}
	*dst = string(b)
	return nil
}

func decodeMessages(r *request, v *fastjson.Value) *apiError {
	msgs, opt, err := chat.FromRequest(v)
	if err != nil {
		return fieldError(err)
	}
	r.msgs, r.opt = msgs, opt
	return nil
}

func decodePrompt(r *request, v *fastjson.Value) *apiError {
	r.addSpecial = true
	if e := optBool(v, &r.addSpecial, "add_special_tokens"); e != nil {
		return e
	}
	// prompt_token_ids (vLLM) wins over prompt: the engine tokenizes it
	// no further.
	if pv := chat.Field(v, "prompt_token_ids"); pv != nil && pv.Type() != fastjson.TypeNull {
		if pv.Type() != fastjson.TypeArray {
			return badRequest("prompt_token_ids", "prompt_token_ids: want an array of token ids, got %s", pv.Type())
		}
		return tokenIDs(r, pv, "prompt_token_ids")
	}
	pv := chat.Field(v, "prompt")
	if pv == nil || pv.Type() == fastjson.TypeNull {
		return badRequest("prompt", "prompt: missing")
	}
	switch pv.Type() {
	case fastjson.TypeString:
		r.text = string(pv.GetStringBytes())
		return nil
	case fastjson.TypeArray:
	default:
		return badRequest("prompt", "prompt: want a string, an array of token ids, or a one-element array of either, got %s", pv.Type())
	}
	arr, _ := pv.Array() // the type was checked
	if len(arr) == 0 {
		return badRequest("prompt", "prompt: empty array")
	}
	switch first := arr[0]; first.Type() {
	case fastjson.TypeNumber:
		return tokenIDs(r, pv, "prompt")
	case fastjson.TypeString, fastjson.TypeArray:
		if len(arr) > 1 {
			return badRequest("prompt", "prompt: the simulator takes one prompt per request, got a batch of %d", len(arr))
		}
		if first.Type() == fastjson.TypeString {
			r.text = string(first.GetStringBytes())
			return nil
		}
		return tokenIDs(r, first, "prompt[0]")
	default:
		return badRequest("prompt", "prompt[0]: want a string, a token id or an array of token ids, got %s", first.Type())
	}
}

// tokenIDs reads an array of token ids (integers in [0, 2^31)).
func tokenIDs(r *request, v *fastjson.Value, name string) *apiError {
	arr, _ := v.Array() // callers checked the type
	if len(arr) == 0 {
		return badRequest(name, "%s: empty array", name)
	}
	ids := make([]int32, len(arr))
	for i, e := range arr {
		n, err := e.Int64()
		if e.Type() != fastjson.TypeNumber || err != nil || n < 0 || n > math.MaxInt32 {
			return badRequest(name, "%s[%d]: want an integer token id in [0, 2^31), got %.40s", name, i, e)
		}
		ids[i] = int32(n)
	}
	r.ids, r.hasIDs = ids, true
	return nil
}
