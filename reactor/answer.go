package reactor

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// errorBody is the OpenAI-style error JSON the reactor answers framing
// errors with. Rare path: encoding/json is fine here.
func errorBody(status int, msg string) []byte {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	type detail struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	}
	b, err := json.Marshal(struct {
		Error detail `json:"error"`
	}{detail{msg, typ, status}})
	if err != nil {
		panic("BUG: cannot encode an error body: " + err.Error())
	}
	return b
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
			if n, ok := parseContentLength(h.Value); ok {
				cl = n
			}
			continue
		case equalFold(h.Name, "Transfer-Encoding"), equalFold(h.Name, "Connection"), equalFold(h.Name, "Keep-Alive"):
			continue
		}
		if !isToken(h.Name) || !validValue(h.Value) {
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

// response503 answers a connection over MaxConns before it is closed.
var response503 = func() []byte {
	body := errorBody(http.StatusServiceUnavailable, "too many connections")
	b := appendStatusLine(nil, http.StatusServiceUnavailable)
	b = append(b, "Content-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}()
