package backend

// AnswerHook is Hooks.Answer: it is shown an answer's data before the
// client gets it, a whole non-SSE body (sse false) or one SSE event (sse
// true), and returns whether it wants the next SSE event. data is valid
// only during the call: copy what is kept.
type AnswerHook func(b *Backend, status int, sse bool, data []byte) (more bool)

// showWhole shows a body read whole to h: as one call, or, for an SSE
// body (the loop path buffers those too), event by event while h wants
// more. A nil h or an empty body shows nothing.
func showWhole(h AnswerHook, b *Backend, status int, sse bool, body []byte) {
	if h == nil || len(body) == 0 {
		return
	}
	if !sse {
		h(b, status, false, body)
		return
	}
	for len(body) > 0 {
		e := sseEventEnd(body)
		if e < 0 {
			e = len(body)
		}
		if !h(b, status, true, body[:e]) {
			return
		}
		body = body[e:]
	}
}
