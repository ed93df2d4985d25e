package openai

import (
	"github.com/saltus-lb/saltus/internal/jsonscan"
)

// The members DecodePooling reads.
const (
	pModel = iota
	pInput
	pQuery
	pText1
	pQueries
	numPoolingFields
)

// DecodePooling reads body as a request to vLLM's pooling and scoring
// APIs into dst (which it resets), for routing only: its model (optional:
// vLLM serves a request without one with its one model) and the text that
// leads every sequence the engine builds from it, as dst.Prompt or
// dst.TokenIDs.
//
//   - KindPooling (embeddings, /pooling, /classify): "input", read as a
//     completion's prompt (a string, strings, token ids or arrays of
//     them); a batch routes by its first input.
//   - KindScore (/score, /rerank): the query each document is scored
//     against, which a cross-encoder's or an LLM reranker's every pair
//     starts with: "query" (rerank), else "text_1" or "queries" (score;
//     a string, or the first of an array of strings).
//
// An error means only that saltus cannot key the body (a request in a
// shape it does not read, such as embeddings of chat messages or
// multimodal inputs): the caller forwards it unkeyed and the engine
// answers it. Any goroutine.
func DecodePooling(dst *Request, k Kind, body []byte, maxDepth int) *Error {
	*dst = Request{Kind: k}
	maxDepth = min(maxDepth, MaxScanDepth)
	var f, fe [numPoolingFields]int
	keys := [numPoolingFields]string{pModel: "model", pInput: "input", pQuery: "query", pText1: "text_1", pQueries: "queries"}
	open := jsonscan.SkipWS(body, 0)
	if !jsonscan.Is(body, open, '{') {
		return BadRequest("", "request body must be a JSON object, got %s", jsonscan.TypeName(body, open))
	}
	if !members(body, open, maxDepth, keys[:], f[:], fe[:]) {
		return invalid(body, maxDepth)
	}
	r := reader{b: body}
	if mv := f[pModel]; jsonscan.Present(body, mv) {
		if !jsonscan.Is(body, mv, '"') {
			return BadRequest("model", "model: want a string, got %s", jsonscan.TypeName(body, mv))
		}
		dst.Model = r.str(mv)
	}
	if k == KindPooling {
		if !jsonscan.Present(body, f[pInput]) {
			return BadRequest("input", "input: missing")
		}
		return decodePrompt(dst, &r, f[pInput], "input")
	}
	for _, q := range [...]struct {
		field int
		name  string
	}{{pQuery, "query"}, {pText1, "text_1"}, {pQueries, "queries"}} {
		v := f[q.field]
		if !jsonscan.Present(body, v) {
			continue
		}
		if jsonscan.Is(body, v, '[') {
			v = jsonscan.Elem(body, v)
		}
		if v < 0 || !jsonscan.Is(body, v, '"') {
			return BadRequest(q.name, "%s: want a string or an array of strings", q.name)
		}
		dst.Prompt = r.str(v)
		return nil
	}
	return BadRequest("query", "query: missing")
}
