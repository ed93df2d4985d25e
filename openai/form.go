package openai

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"strings"
)

// Bounds of FormModel's reading: the parts it looks at before it gives
// up, and the longest model name it reads.
const (
	formMaxParts = 64
	formMaxModel = 1 << 10
)

// FormModel returns the "model" field of a multipart/form-data body (the
// audio APIs' uploads: a file, the model, options), "" if the body is not
// such a form, has no such field or an unreadable one. contentType is the
// request's Content-Type, which names the boundary. As engines read a
// form (Starlette), a repeated field's last value wins. The parts before
// and after are skipped, never kept: a pass over the body, bounded to
// formMaxParts parts. Any goroutine; on a loop only for bodies up to
// shard's Config.OffloopBytes.
func FormModel(body []byte, contentType string) string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return ""
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	model := ""
	for range formMaxParts {
		p, err := mr.NextRawPart() // as sent: no Content-Transfer-Encoding decoding
		if err != nil {
			break
		}
		if p.FormName() != "model" || p.FileName() != "" {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p, formMaxModel+1))
		if err != nil || len(b) > formMaxModel {
			return ""
		}
		model = strings.TrimSpace(string(b))
	}
	return model
}
