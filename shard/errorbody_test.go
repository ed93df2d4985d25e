package shard

import (
	"encoding/json"
	"testing"
)

// The Router's error answers, as its tests read them (openai's tests have
// the same helper for the errors decoding gives).

// errorBody is the OpenAI error answer's "error" object.
type errorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// checkErrorBody parses an OpenAI error body and checks its type, code and
// param ("" wants null); typ "" accepts any non-empty type.
func checkErrorBody(t *testing.T, body []byte, typ, code, param string) errorBody {
	t.Helper()
	var out struct {
		Error errorBody `json:"error"`
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
