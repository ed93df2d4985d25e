package chat

import "github.com/valyala/fastjson"

// Field returns the value at the path keys of v, taking at every step the
// last occurrence of a key that an object repeats, as Python's json (and so
// vLLM and SGLang) reads `{"stream":false,"stream":true}`: fastjson's Get
// returns the first. Nil when v is nil, a step is not an object or the key
// is absent. It allocates nothing; the walk is linear in each object's key
// count. Every field a router or simulator acts on is read through it, so
// that saltus and the engine never disagree about a request. Any goroutine
// (v must not be shared while it is read).
func Field(v *fastjson.Value, keys ...string) *fastjson.Value {
	for _, k := range keys {
		if v == nil || v.Type() != fastjson.TypeObject {
			return nil
		}
		o, _ := v.Object() // the type was checked
		var found *fastjson.Value
		o.Visit(func(key []byte, fv *fastjson.Value) {
			if string(key) == k {
				found = fv
			}
		})
		v = found
	}
	return v
}
