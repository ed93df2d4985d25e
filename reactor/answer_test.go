package reactor

import "testing"

func TestErrorBodyShape(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{string(ErrorBody(400, "", "", "bad", "")), `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`},
		{string(ErrorBody(502, "", "bad_gateway", "no backend", "")), `{"error":{"message":"no backend","type":"server_error","param":null,"code":"bad_gateway"}}`},
		{string(ErrorBody(400, "invalid_request_error", "", "messages: want an array", "messages")), `{"error":{"message":"messages: want an array","type":"invalid_request_error","param":"messages","code":null}}`},
		{string(errorBody(413, "body too large")), `{"error":{"message":"body too large","type":"invalid_request_error","param":null,"code":"request_too_large"}}`},
		{string(errorBody(503, "too many connections")), `{"error":{"message":"too many connections","type":"server_error","param":null,"code":"too_many_connections"}}`},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("got  %s\nwant %s", tc.got, tc.want)
		}
	}
}
