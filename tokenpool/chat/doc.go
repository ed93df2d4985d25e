// Package chat renders an OpenAI `messages` array with a model's chat
// template into segments: special tokens and the maximal text runs between
// them.
//
// # Place in the request path
//
// Stage 3 of DESIGN.md, on the connection's event loop: the reactor
// decodes the body (stage 2; MessagesFromValue reads its already-parsed
// "messages"), a Renderer turns the messages into segments, and stage 4
// tokenizes each text segment on its own (tokenizer.EncodeSegment), through
// the shard's segment cache. Because a text segment is a maximal run
// between added tokens, the segment-wise ids equal the ids of the whole
// rendered prompt (the tests prove it over the golden conversations and
// random ones), so the cache hits on every system prompt and earlier turn,
// and a message boundary is exact in token space wherever it falls on a
// segment edge (Segment.MsgEnd).
//
// # Templates
//
// Built in, each checked id for id against the model's own Jinja template
// rendered by @huggingface/jinja and tokenized by HuggingFace tokenizers
// (testdata/README.md): llama3 (Meta-Llama-3-Instruct: content trimmed
// with Python's whitespace), chatml (the classic ChatML template), qwen3
// (Qwen3's template: system, user, assistant with <think> handling, tool
// responses; no tools list and no tool_calls, which are rendered after the
// content and so do not change the prefix before them; other roles render
// as nothing, as in Qwen3's template), mistral (Mistral-7B-Instruct-v0.1:
// no system role), llama2 (Llama-2-chat: the system message goes inside
// the first user turn), and none (each message's content as its own text
// segment: consistent keys for an unknown template, not the engine's
// tokens).
//
// A template is picked by name, or from the tokenizer_config.json's
// chat_template by Detect, which recognizes only the exact template texts
// the goldens check; anything else is ErrNotRecognized, and the caller
// renders with None and warns once. mistral and llama2 refuse
// non-alternating roles with a *RoleError, as the models' own templates
// raise; the engine answers those requests 400, and so may the caller.
//
// Content given as an array of parts is joined with "\n", as vLLM does
// for string templates; a non-text part becomes a fixed Placeholder.
//
// # Concurrency
//
// A Renderer is immutable after New and safe for concurrent use; Render
// keeps its state on the caller's stack and in dst. ParseMessages and
// Detect are pure functions. Client input (messages, roles, content)
// never panics: it renders, or returns an error naming the field.
package chat
