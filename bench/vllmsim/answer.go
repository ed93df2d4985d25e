package vllmsim

import (
	"net"
	"strconv"
)

// answer is one completion's response, written by hand: a chunk is a
// few appends, and every string in it (the model name, the output words)
// needs no JSON escaping.
type answer struct {
	kind      kind
	id        []byte // chatcmpl-N or cmpl-N
	model     []byte // a JSON string
	created   int64
	include   bool // stream_options.include_usage
	prompt    int  // prompt tokens
	maxTokens int
	out       output
	reset     net.Conn   // X-Sim-Fail: reset on a stream: the connection to reset
	msg       *msgAnswer // an Anthropic Messages answer (messages.go); nil: OpenAI's
}

func answerID(dst []byte, k kind, n uint64) []byte {
	if k == kindChat {
		dst = append(dst, "chatcmpl-"...)
	} else {
		dst = append(dst, "cmpl-"...)
	}
	return strconv.AppendUint(dst, n, 10)
}

// appendHead appends {"id":…,"object":…,"created":…,"model":…,"choices":[
func (a *answer) appendHead(dst []byte, object string) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, a.id...)
	dst = append(dst, `","object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, a.created, 10)
	dst = append(dst, `,"model":`...)
	dst = append(dst, a.model...)
	return append(dst, `,"choices":[`...)
}

func (a *answer) chunkObject() string {
	if a.kind == kindChat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// appendRoleChunk appends the chat stream's first event: the assistant
// role, sent with the first token as vLLM does.
func (a *answer) appendRoleChunk(dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = a.appendHead(dst, a.chunkObject())
	return append(dst, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// appendTokenChunk appends the event of output token i; the last one
// carries finish_reason "length".
func (a *answer) appendTokenChunk(dst []byte, i int) []byte {
	dst = append(dst, "data: "...)
	dst = a.appendHead(dst, a.chunkObject())
	if a.kind == kindChat {
		dst = append(dst, `{"index":0,"delta":{"content":"`...)
	} else {
		dst = append(dst, `{"index":0,"text":"`...)
	}
	dst = a.out.appendNext(dst, i == 0)
	if a.kind == kindChat {
		dst = append(dst, `"}`...) // closes delta
	} else {
		dst = append(dst, `"`...)
	}
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = a.appendFinish(dst, i == a.maxTokens-1)
	return append(dst, "}]}\n\n"...)
}

func (a *answer) appendFinish(dst []byte, last bool) []byte {
	if last {
		return append(dst, `"length"`...)
	}
	return append(dst, `null`...)
}

// appendUsageChunk appends the last event before [DONE] when
// stream_options.include_usage is set: no choices, the usage.
func (a *answer) appendUsageChunk(dst []byte, cached int) []byte {
	dst = append(dst, "data: "...)
	dst = a.appendHead(dst, a.chunkObject())
	dst = append(dst, "]"...)
	dst = a.appendUsage(dst, cached)
	return append(dst, "}\n\n"...)
}

// appendUsage appends ,"usage":{…} for maxTokens output tokens.
func (a *answer) appendUsage(dst []byte, cached int) []byte {
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.prompt+a.maxTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(a.maxTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(cached), 10)
	return append(dst, "}}"...)
}

// appendWhole appends a non-streamed answer.
func (a *answer) appendWhole(dst []byte, cached int) []byte {
	if a.kind == kindChat {
		dst = a.appendHead(dst, "chat.completion")
		dst = append(dst, `{"index":0,"message":{"role":"assistant","content":"`...)
	} else {
		dst = a.appendHead(dst, "text_completion")
		dst = append(dst, `{"index":0,"text":"`...)
	}
	for i := range a.maxTokens {
		dst = a.out.appendNext(dst, i == 0)
	}
	if a.kind == kindChat {
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, `"`...)
	}
	dst = append(dst, `,"logprobs":null,"finish_reason":"length"}]`...)
	dst = a.appendUsage(dst, cached)
	return append(dst, "}"...)
}
