// Package openaitest reads the OpenAI error answers saltus writes, for
// the tests of the packages that write them (openai's decoding errors,
// the router's refusals). Tests only.
//
// # Concurrency
//
// Pure functions.
package openaitest

import (
	"encoding/json"
	"testing"
)

// ErrorBody is the OpenAI error answer's "error" object.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// CheckErrorBody parses an OpenAI error body and checks its type, code
// and param ("" wants null); typ "" accepts any non-empty type. It fails
// t when the body is not such an answer.
func CheckErrorBody(t testing.TB, body []byte, typ, code, param string) ErrorBody {
	t.Helper()
	var out struct {
		Error ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	e := out.Error
	if e.Message == "" || e.Type == "" || (typ != "" && e.Type != typ) ||
		(code == "") != (e.Code == nil) || (e.Code != nil && *e.Code != code) ||
		(param == "") != (e.Param == nil) || (e.Param != nil && *e.Param != param) {
		t.Fatalf("error body %s, want type %q code %q param %q", body, typ, code, param)
	}
	return e
}
