// Package openai is the OpenAI wire format as saltus reads it: request
// bodies decoded into what routing needs, the structural cap checked
// before a body is parsed, Responses API input and Anthropic Messages
// requests (POST /v1/messages) rendered as the chat vLLM builds from
// them, and the response ids and usage objects read from engines'
// answers. It sits at stage 2 of the request path, between the
// reactor's framing and the shard's routing (shard calls it; it knows
// nothing of shards, policies or backends). It owns no state: its
// functions are pure, and any scratch memory (a Scratch) is the
// caller's.
//
// Client input never panics: a body decodes, or yields an *Error (a 400
// naming the offending field, a 413 over BodyLimits) whose Body is the
// OpenAI error object the client gets (AnthropicBody: Anthropic's, on
// /v1/messages). Every field is read at its last
// occurrence, as the Python engines read duplicate keys; every string a
// Request keeps is a copy, except chat messages decoded by Decode with a
// caller's Scratch, which are views into the body and that scratch.
// Requests are read from the body's bytes without a parse tree
// (decode.go): memory bounded by the body, not by its value count.
//
// # Concurrency
//
// Any goroutine. The package's only shared values are fastjson parser
// pools for engines' answers (sync.Pool: safe for concurrent use), from
// which a parser is taken and returned within one call; a Scratch passed
// in is owned by the caller (a shard's event loop, or a decode worker) and
// must not be used by another goroutine during the call.
package openai
