package reactor

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/saltus-lb/saltus/internal/httplex"
)

// ErrorBody is the one OpenAI-style error body the data plane answers
// with: {"error":{"message","type","param","code"}} as OpenAI's API
// documents it: param and code are strings, or null when "". typ ""
// picks invalid_request_error below 500 and server_error from 500. Rare
// paths: encoding/json is fine here. Any goroutine.
func ErrorBody(status int, typ, code, msg, param string) []byte {
	if typ == "" {
		typ = "invalid_request_error"
		if status >= 500 {
			typ = "server_error"
		}
	}
	type detail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	d := detail{Message: msg, Type: typ}
	if param != "" {
		d.Param = &param
	}
	if code != "" {
		d.Code = &code
	}
	b, err := json.Marshal(struct {
		Error detail `json:"error"`
	}{d})
	if err != nil {
		panic("BUG: cannot encode an error body: " + err.Error())
	}
	return b
}

// errorBody is ErrorBody for the reactor's own answers, with a code
// naming the status.
func errorBody(status int, msg string) []byte {
	code := "bad_request"
	switch status {
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusMethodNotAllowed:
		code = "method_not_allowed"
	case http.StatusLengthRequired:
		code = "length_required"
	case http.StatusRequestEntityTooLarge:
		code = "request_too_large"
	case http.StatusRequestHeaderFieldsTooLarge:
		code = "header_too_large"
	case http.StatusNotImplemented:
		code = "not_implemented"
	case http.StatusServiceUnavailable:
		code = "too_many_connections"
	case http.StatusHTTPVersionNotSupported:
		code = "http_version_not_supported"
	case http.StatusExpectationFailed:
		code = "expectation_failed"
	}
	return ErrorBody(status, "", code, msg, "")
}

// appendStatusLine appends "HTTP/1.1 <status> <reason>\r\n".
func appendStatusLine(b []byte, status int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	reason := http.StatusText(status)
	if reason == "" {
		reason = "Status"
	}
	b = append(b, reason...)
	return append(b, "\r\n"...)
}

// appendHeaders appends hdr minus the framing headers the reactor owns
// (Content-Length, Transfer-Encoding, Connection, Keep-Alive); it reports
// a Content-Length in hdr (-1 if none) for WriteHeader.
func appendHeaders(b []byte, hdr []Header) ([]byte, int64) {
	cl := int64(-1)
	for _, h := range hdr {
		switch {
		case equalFold(h.Name, "Content-Length"):
			if n, ok := httplex.ParseDecimal(h.Value); ok {
				cl = n
			}
			continue
		case equalFold(h.Name, "Transfer-Encoding"), equalFold(h.Name, "Connection"), equalFold(h.Name, "Keep-Alive"):
			continue
		}
		if !httplex.IsToken(h.Name) || !httplex.ValidValue(h.Value) {
			continue // a handler bug must not split the response; dropped, never sent
		}
		b = append(b, h.Name...)
		b = append(b, ": "...)
		b = append(b, h.Value...)
		b = append(b, "\r\n"...)
	}
	return b, cl
}

// continue100 is written before reading the body of a request that asked
// for it.
var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// body503 is the answer to a connection over MaxConns.
var body503 = errorBody(http.StatusServiceUnavailable,
	"too many open connections (--max-conns); retry after a second")

// response503 answers a connection over MaxConns before it is closed:
// Retry-After, since nothing can serve it now, and a generated
// X-Request-ID (no request was read).
func response503() []byte {
	b := appendStatusLine(make([]byte, 0, 256+len(body503)), http.StatusServiceUnavailable)
	b = append(b, "Content-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n"...)
	b = append(b, RequestIDHeader+": "...)
	b = append(b, NewRequestID()...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body503)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body503...)
}
