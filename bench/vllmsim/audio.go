package vllmsim

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// maxAudioBytes bounds an upload the simulator reads (vLLM's default
// limit is 25 MB too).
const maxAudioBytes = 25 << 20

// audio serves POST /v1/audio/transcriptions and /translations: a
// multipart form with a file and the model; the answer is made-up text,
// by the file's size, after no modelled work (the simulator models no
// encoder). Enough for a router's model routing to be tested end to end.
func (s *Sim) audio(ctx *fasthttp.RequestCtx) {
	if _, done := s.inject(ctx); done {
		return
	}
	if len(ctx.PostBody()) > maxAudioBytes {
		s.answerError(ctx, &apiError{status: fasthttp.StatusRequestEntityTooLarge, msg: "the upload is over 25 MB"})
		return
	}
	form, err := ctx.MultipartForm()
	if err != nil {
		s.answerError(ctx, badRequest("file", "want a multipart/form-data upload: %v", err))
		return
	}
	defer ctx.Request.RemoveMultipartFormFiles()
	model := ""
	if v := form.Value["model"]; len(v) > 0 {
		model = v[len(v)-1]
	}
	m, e := s.served.resolve(model)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	files := form.File["file"]
	if len(files) != 1 {
		s.answerError(ctx, badRequest("file", "file: want one audio file, got %d", len(files)))
		return
	}
	b := append(make([]byte, 0, 96), `{"text":"simulated speech of `...)
	b = strconv.AppendInt(b, files[0].Size, 10)
	b = append(b, ` bytes for `...)
	b = append(b, m.name...) // validModel: no escapes needed
	b = append(b, `","usage":{"type":"duration","seconds":1}}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
