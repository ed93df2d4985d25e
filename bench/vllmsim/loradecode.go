package vllmsim

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// loraRequest is a POST /v1/load_lora_adapter or /v1/unload_lora_adapter
// body: vLLM's LoadLoRAAdapterRequest (lora_name, lora_path,
// load_inplace, is_3d_lora_weight) and UnloadLoRAAdapterRequest
// (lora_name, lora_int_id). Every field is a copy, never a view into the
// body.
type loraRequest struct {
	name, path string
	inplace    bool // load_inplace: replace an adapter of the same name
}

// schemaError is vLLM's answer to a body its pydantic model refuses (its
// validation_exception_handler: 400, type "Bad Request").
func schemaError(param, format string, args ...any) *apiError {
	return &apiError{status: 400, msg: fmt.Sprintf(format, args...), param: param, vllmType: "Bad Request"}
}

// decodeLoRARequest parses a load (load true) or unload body. Fields
// vLLM's models require (lora_name; lora_path to load) must be strings,
// the optional ones their type or null; other fields are ignored, as
// pydantic ignores them. Empty names are the handler's (vLLM's own
// checks word them). Client input never panics. Any goroutine.
func decodeLoRARequest(body []byte, load bool) (loraRequest, *apiError) {
	var r loraRequest
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return r, schemaError("", "request body is not valid JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return r, schemaError("", "request body must be a JSON object, got %s", v.Type())
	}
	str := func(name string) (string, *apiError) {
		f := chat.Field(v, name)
		if f == nil || f.Type() != fastjson.TypeString {
			what := "missing"
			if f != nil {
				what = "got " + f.Type().String()
			}
			return "", schemaError(name, "%s: a string is required, %s", name, what)
		}
		return string(f.GetStringBytes()), nil
	}
	var e *apiError
	if r.name, e = str("lora_name"); e != nil {
		return r, e
	}
	if !load {
		if f := chat.Field(v, "lora_int_id"); f != nil && f.Type() != fastjson.TypeNull {
			// Checked, not used: vLLM finds the adapter by name too.
			if _, err := f.Int64(); f.Type() != fastjson.TypeNumber || err != nil {
				return r, schemaError("lora_int_id", "lora_int_id: want an integer or null, got %.40s", f)
			}
		}
		return r, nil
	}
	if r.path, e = str("lora_path"); e != nil {
		return r, e
	}
	for _, b := range []struct {
		dst  *bool
		name string
	}{{&r.inplace, "load_inplace"}, {new(bool), "is_3d_lora_weight"}} { // the latter only checked
		if err := chat.OptBool(v, b.dst, b.name); err != nil {
			fe := err.(*chat.FieldError) // chat's request readers return no other error
			return r, schemaError(fe.Field, "%s", fe.Msg)
		}
	}
	return r, nil
}
