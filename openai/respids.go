package openai

import (
	"bytes"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// Response ids: vLLM keeps a Responses answer (store, the default) in the
// memory of the engine that produced it, and answers 404 on any other
// engine to a request that names it. These read the id an answer carries
// (its JSON body, or the response.created event of its stream) and the id
// a path names; shard's response-id table (shard/respids.go) remembers
// which backend produced each.

// maxAnswerParse bounds the answer bytes parsed to find a response id:
// the parse runs on an event loop (shard's answer hook) and its parser goes
// back to a pool, so an answer of many tiny values must not be parsed
// whole. vLLM's answers start with the id and are not parsed at all; a
// response.created event is a few KiB.
const maxAnswerParse = 64 << 10

// JSONResponseID is the top-level "id" of a Responses answer body ("" for
// none). vLLM writes it first (`{"id":"resp_…",`), which is read without
// a parse; any other shape is parsed, up to maxAnswerParse bytes. Any
// goroutine.
func JSONResponseID(body []byte) string {
	b := bytes.TrimLeft(body, " \t\r\n")
	if rest, ok := bytes.CutPrefix(b, []byte(`{"id":"`)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	if len(body) > maxAnswerParse {
		// Not vLLM's shape and too large to parse on a loop (a lying or
		// foreign backend): its id is not remembered.
		return ""
	}
	p := answerParsers.Get()
	defer answerParsers.Put(p) // at most maxAnswerParse bytes of values: bounded
	v, err := p.ParseBytes(body)
	if err != nil {
		return "" // not JSON: nothing to remember
	}
	return stringField(chat.Field(v, "id"))
}

// SSEResponseID is the response.id of an SSE event whose data is a
// response.created event; seen: the event had data (so later events need
// not be looked at). Any goroutine.
func SSEResponseID(ev []byte) (id string, seen bool) {
	var data []byte
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(rest, []byte(" "))...)
		}
	}
	if data == nil {
		return "", false
	}
	if len(data) > maxAnswerParse {
		return "", true // see JSONResponseID
	}
	p := answerParsers.Get()
	defer answerParsers.Put(p) // at most maxAnswerParse bytes of values: bounded
	v, err := p.ParseBytes(data)
	if err != nil || stringField(chat.Field(v, "type")) != "response.created" {
		return "", true
	}
	return stringField(chat.Field(v, "response", "id")), true
}

// answerParsers reuse fastjson's value cache for the engines' answers
// read here (bounded by maxAnswerParse); a Parser is taken and returned
// within one call. Requests are decoded without a parser (decode.go).
var answerParsers fastjson.ParserPool

func stringField(v *fastjson.Value) string {
	if v == nil || v.Type() != fastjson.TypeString {
		return ""
	}
	return string(v.GetStringBytes())
}

// ResponsePathID splits /v1/responses/{id}[/cancel|/input_items] into
// the id and the methods allowed there (an Allow header's value); ok
// false for another path.
func ResponsePathID(path string) (id, allow string, ok bool) {
	rest, found := strings.CutPrefix(path, "/v1/responses/")
	if !found || rest == "" {
		return "", "", false
	}
	id, sub, _ := strings.Cut(rest, "/")
	switch {
	case id == "":
		return "", "", false
	case sub == "":
		return id, "GET, DELETE", true
	case sub == "cancel":
		return id, "POST", true
	case sub == "input_items":
		return id, "GET", true
	}
	return "", "", false
}
