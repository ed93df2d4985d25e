package chat

import (
	"errors"
	"testing"

	"github.com/valyala/fastjson"
)

func TestFromRequest(t *testing.T) {
	for _, tc := range []struct {
		body, field string
		gen, think  bool
	}{
		{`{"messages":[{"role":"user","content":"hi"}]}`, "", true, false},
		{`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false}}`, "", false, true},
		{`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":null}`, "", true, false},
		{`{}`, "messages", false, false},
		{`{"messages":[]}`, "messages", false, false},
		{`{"messages":"x"}`, "messages", false, false},
		{`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":1}`, "add_generation_prompt", false, false},
	} {
		msgs, opt, err := FromRequest(fastjson.MustParse(tc.body))
		var fe *FieldError
		switch {
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%s: err %v, want a FieldError on %s", tc.body, err, tc.field)
		case tc.field == "" && (err != nil || len(msgs) != 1 || opt.AddGenerationPrompt != tc.gen || opt.DisableThinking != tc.think):
			t.Errorf("%s: %v %+v %v", tc.body, msgs, opt, err)
		}
	}
}
