package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/saltus-lb/saltus/reactor"
)

// Error is an OpenAI-style error answer: the status, the "error" object's
// fields (Body renders them) and, for a 429 or 503, the Retry-After.
type Error struct {
	Status  int    // the HTTP status: 400, 404, 413, 429, 503, ...
	Message string // for the client, naming the field or the limit
	Type    string // "invalid_request_error", "server_error", ...; "" picks one from Status
	Param   string // the offending field, "" for none
	Code    string // "" for none
	// RetryAfter is the Retry-After of a 429, in seconds (0: none; the
	// shard's answers give every 503 one).
	RetryAfter int
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// BadRequest is a 400 invalid_request_error naming the field param ("" for
// none), its message formatted as fmt.Sprintf does.
func BadRequest(param, format string, args ...any) *Error {
	return &Error{Status: 400, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: param}
}

// Body renders the error as reactor.ErrorBody does.
func (e *Error) Body() []byte { return reactor.ErrorBody(e.Status, e.Type, e.Code, e.Message, e.Param) }

// AnthropicBody renders the error as Anthropic's Messages API does
// ({"type":"error","error":{"type":...,"message":...}}), its type named
// by the status as Anthropic names them, for the SDKs that read that
// shape; the status stays.
func (e *Error) AnthropicBody() []byte {
	typ := "invalid_request_error"
	switch {
	case e.Status == 401:
		typ = "authentication_error"
	case e.Status == 403:
		typ = "permission_error"
	case e.Status == 404:
		typ = "not_found_error"
	case e.Status == 413:
		typ = "request_too_large"
	case e.Status == 429:
		typ = "rate_limit_error"
	case e.Status == 503 || e.Status == 529:
		typ = "overloaded_error"
	case e.Status >= 500:
		typ = "api_error"
	}
	b, err := json.Marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}{Type: "error", Error: struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{typ, e.Message}})
	if err != nil {
		panic("BUG: cannot encode an error body: " + err.Error())
	}
	return b
}

// ErrorMessage is an engine's answer in a line: vLLM answers a success
// as plain text and a failure as an OpenAI error object (or its older
// flat shape); a long answer is cut at 500 bytes. Any goroutine.
func ErrorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"` // vLLM's older flat error shape
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
