package openai

import (
	"bytes"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/internal/jsonscan"
)

// Models: the "model" a body names, for the routes that are not decoded
// (tokenize, audio, other /v1 POSTs, and pooling bodies DecodePooling does
// not read: shard/pools.go), and GET /v1/models/{id}, one object of an
// OpenAI model list.

// BodyModel returns the top-level "model" string of a JSON object body ("" if
// the body is not such an object or has none), its last occurrence as the
// engines read duplicate keys: the pool of an endpoint that is not routed
// by prefix (tokenize, detokenize, other /v1 POSTs). One pass over
// the body, no allocation but the name; a body the pass cannot read
// yields "" (forwarded to any backend, whose own error the client gets).
// Any goroutine; on a loop only for bodies up to shard's
// Config.OffloopBytes.
func BodyModel(body []byte) string {
	open := jsonscan.SkipWS(body, 0)
	if open >= len(body) || body[open] != '{' {
		return ""
	}
	m, ok := jsonscan.LastMember(body, open, "model")
	if !ok || m.Val < 0 || body[m.Val] != '"' {
		return ""
	}
	q := body[m.Val:m.End]
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1])
	}
	var p fastjson.Parser // rare: an escaped model name
	v, err := p.ParseBytes(q)
	if err != nil {
		return ""
	}
	return string(v.GetStringBytes())
}

// ModelPathID is the {id} of /v1/models/{id}, "" for another path. A
// model id may hold slashes (org/name), so it is the whole rest.
func ModelPathID(path string) string {
	id, found := strings.CutPrefix(path, "/v1/models/")
	if !found {
		return ""
	}
	return id
}

// FindModel returns the object of model id in an OpenAI model list, or
// nil. Any goroutine (it parses list whole: off the loops).
func FindModel(list []byte, id string) []byte {
	var p fastjson.Parser // off the loops (shard's models workers), once per retrieve
	v, err := p.ParseBytes(list)
	if err != nil {
		return nil // shard builds the list (upstream Models): valid JSON
	}
	for _, m := range v.GetArray("data") {
		if string(m.GetStringBytes("id")) == id {
			return m.MarshalTo(nil)
		}
	}
	return nil
}

// FilterModels keeps, of an OpenAI model list, the models whose id keep
// accepts (an API key's allowed models: shard/keys.go). A list that does
// not parse is returned as it is. Any goroutine (it parses list whole:
// off the loops).
func FilterModels(list []byte, keep func(id string) bool) []byte {
	var p fastjson.Parser // off the loops (shard's models workers), once per listing
	v, err := p.ParseBytes(list)
	if err != nil {
		return list // built by saltus or the backends' union: valid JSON
	}
	out := []byte(`{"object":"list","data":[`)
	n := 0
	for _, m := range v.GetArray("data") {
		if !keep(string(m.GetStringBytes("id"))) {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = m.MarshalTo(out)
		n++
	}
	return append(out, "]}"...)
}
