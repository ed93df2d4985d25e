// Package chat renders an OpenAI `messages` array with a model's chat
// template into segments: special tokens and the maximal text runs between
// them.
//
// # Place in the request path
//
// DESIGN.md § Stage 3, on the connection's event loop: openai decodes the
// body (stage 2; MessagesFromBody reads its "messages" from the body's
// bytes, a Scratch keeping views), a Renderer turns the messages into segments, and stage 4
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
// Built in (harmony aside, below), each checked id for id against the
// model's own Jinja template rendered by @huggingface/jinja and
// tokenized by HuggingFace tokenizers
// (testdata/README.md): llama3 (Meta-Llama-3-Instruct: content trimmed
// with Python's whitespace), chatml (the classic ChatML template), qwen3
// (Qwen3's template in full for system, user, assistant and tool
// messages: reasoning kept inside <think> for assistant turns after the
// last user query, taken from the message's "reasoning" (which vLLM hands
// the template as reasoning_content, dropping a request's own
// reasoning_content) or from the content before '</think>', and dropped
// from earlier turns; consecutive tool responses in
// one user turn; enable_thinking=false. Not rendered by the built-in: a
// request's tools list, which Qwen3 puts into the system turn, and an
// assistant's tool_calls, which follow its content; when the built-in
// was recognized from Qwen3's own template (LoadTemplate), a request
// with tools or tool calls renders with that template instead
// (Renderer.ToolsInterpreted, off the caller's event loop), so it gets
// the engine's tokens too. Other roles render as nothing, as in Qwen3's
// template),
// mistral (Mistral-7B-Instruct-v0.1:
// no system role), llama2 (Llama-2-chat: the system message goes inside
// the first user turn), and none (each message's content as its own text
// segment: consistent keys for an unknown template, not the engine's
// tokens).
//
// harmony is gpt-oss's format. vLLM renders a chat request for gpt-oss
// with no Jinja template: it builds openai_harmony messages (its harmony
// utilities) and renders them with openai_harmony's
// render_conversation_for_completion. harmony.go follows the recent vLLM
// releases' steps (the older ones kept a leading system message as a
// system message) and the library's rendering; it is checked against
// the library's own expected renderings (its test-data fixtures, as
// harmony_test.go says case by case), not against a running engine.
// Rendered exactly: the system message as vLLM builds it (the library's
// default model identity and knowledge cutoff, the date from the
// Renderer's clock in UTC, reasoning_effort from the request's own field
// or medium, the valid channels, and the line sending function calls to
// the commentary channel when there are function tools); a leading
// system or developer message as the developer message's "# Instructions";
// the request's function tools in the developer message's "# Tools" as
// the library writes a JSON schema in TypeScript (descriptions, titles,
// examples, required and optional properties, string enums, defaults,
// nullable, arrays, type lists, oneOf, nested objects); user, later
// system and developer messages as text; an assistant's reasoning on the
// analysis channel and its content on the final channel, or, with
// tool_calls, its content on the commentary channel, its reasoning, and
// each call to functions.NAME with the content type json, ending in
// <|call|>; a tool message as functions.NAME (the name of the call its
// tool_call_id names) to the assistant on the commentary channel; every
// analysis message before the last final one dropped, as vLLM drops
// them; and <|start|>assistant at the end whatever add_generation_prompt
// says, as vLLM appends it. chat_template_kwargs do not reach harmony, as
// they do not in vLLM. A message end (Segment.MsgEnd) is named only
// where the messages up to it render as the whole does (an earlier turn's
// reasoning that a later final answer drops leaves no boundary). Not
// exact: the date, where the engine's local date is not UTC's (around
// midnight) or is pinned (VLLM_SYSTEM_START_DATE); text that spells one
// of the tokenizer's special tokens, which openai_harmony encodes as
// ordinary text and this tokenizer as the token; a content of several
// parts, which the library encodes part by part (the text is the same,
// the tokens at the parts' edges may differ), and refusal or thinking
// parts, which count as text here and not in vLLM; a first system
// message with null content and tools, rendered with empty
// instructions (vLLM renders none); a schema's default written as a
// float other than the short way (1.50, 1e2: serde_json writes 1.5,
// 100.0); a request whose tools vLLM drops (tool_choice none with its
// --exclude-tools-when-tool-choice-none); vLLM's
// VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS, which moves the instructions
// into the system message; and the vLLM releases that list only analysis
// and final as valid channels for a request without tools (the recent
// ones list commentary always, as here). Roles other than system,
// developer, user, assistant and tool, reasoning_effort none, and tools
// other than functions are errors (*RoleError, *FieldError), as vLLM
// refuses them.
//
// A template is picked by name, or from the tokenizer_config.json's
// chat_template by Detect, which recognizes only the exact template texts
// the goldens check; anything else is ErrNotRecognized, and the caller
// renders with None and warns once; Load picks harmony for a tokenizer
// with harmony's tokens and no chat template (gpt-oss's tokenizer config
// has none, and vLLM renders it with harmony). mistral and llama2 refuse
// non-alternating roles with a *RoleError, as the models' own templates
// raise; the engine rejects those requests too, so the caller may answer
// 400 (or render them with None).
//
// # Jinja templates
//
// A model's own template renders too (NewJinja, LoadTemplate): the
// chat_template of its tokenizer_config.json when no built-in renders it
// exactly, or a Jinja file. It is compiled once by package jinja
// (tokenpool/chat/jinja, our own engine: jinja2's semantics, Python's
// values and methods) in the environment transformers gives templates:
// trim_blocks and lstrip_blocks, raise_exception (the
// request's error is a *TemplateError carrying the template's message),
// tojson as json.dumps, strftime_now, loop controls, namespace, the
// tokenizer config's special tokens as variables (bos_token, eos_token,
// ...), add_generation_prompt, and enable_thinking when a request turns
// thinking off. The engine replaced gonja, which could not parse a
// conditional expression inside parentheses or arguments (Gemma 3's
// `(first_user_prefix if loop.first else "")`) and needed Python's
// semantics patched in; its unit cases are Python jinja2's own outputs
// (jinja/testdata). A template that does not compile (a syntax error, a
// construct no chat template uses: see package jinja) renders with None
// and the caller warns. The goldens: every corpus conversation renders to
// the string @huggingface/jinja renders for Llama 3, Qwen3, ChatML,
// Mistral, Llama 2, Gemma 3 (its "openai" content path, parts included)
// and DeepSeek V3, and each built-in's segments tokenize to the ids of its
// template's Jinja rendering (testdata/README.md).
//
// The rendered prompt is split at the added tokens of the tokenizer
// config (added_tokens_decoder, or the tokenizer.json's added_tokens)
// that the tokenizer knows, contents included (the tokenizer splits there
// anyway, so the ids are the whole prompt's). A message ends where the
// rendering of the messages up to it, without a generation prompt, is a
// prefix of the whole rendering and falls on a segment edge; those
// prefix renderings are cached by the prefix's hash (1 MiB per template),
// since a Jinja rendering of a 4 KiB chat takes tens of microseconds,
// where the built-ins take a few (BenchmarkRenderJinja): the built-ins
// stay the fast path. Messages reach the template as vLLM prepares them
// (entrypoints/chat_utils.py): role, content, then an assistant's
// tool_calls (a non-empty list; each call's function.arguments, a JSON
// string, parsed into a dict, "" or absent becoming {}), reasoning and
// reasoning_content, a tool message's tool_call_id, and any message's
// name (Message.Extra, which the decoders keep only for a renderer that
// wants it: Renderer.Wants). The request's tools become the variable
// tools as vLLM's request model dumps them (type, then function with
// name, description and parameters, None when absent, then any other
// member), None without; documents is None; every member of
// chat_template_kwargs is a variable. TestJinjaTools checks 26 such
// requests against Python jinja2's rendering for Qwen3, Llama 3, Gemma 3
// and DeepSeek V3 (testdata/gen/chat_tools.py). A template that loops
// over a message's
// content (vLLM's "openai" content format, detected by the
// loop in its text) gets the list of parts (Message.Parts: text parts,
// empty ones kept, and media parts by modality), a string content as one
// text part; the others get the parts joined, as the built-ins do.
//
// Content given as an array of parts is joined as vLLM joins it for
// string templates: the parts' texts, empty ones dropped, joined with
// "\n", after a fixed Placeholder for each media part (ParseMessages).
//
// # Concurrency
//
// A Renderer is immutable after New and safe for concurrent use; Render
// keeps its state in locals, dst and one fresh arena per call (a Jinja
// Renderer's prefix cache is a table of atomics, a hint checked on use;
// harmony's last tools and their rendering sit behind an atomic pointer).
// ParseMessages, MessagesFromValue (on a value no one else reads),
// MessagesFromBody, Detect
// and ParseConfig are safe for concurrent use. Client input (messages,
// roles, content) never panics: it renders, or returns an error naming
// the field.
package chat
