package openai

import (
	"strings"
	"testing"
)

func TestResponseIDFromAnswers(t *testing.T) {
	t.Parallel()
	f := func(body, want string) {
		t.Helper()
		if got := JSONResponseID([]byte(body)); got != want {
			t.Fatalf("%s: got %q, want %q", body, got, want)
		}
	}
	f(`{"id":"resp_abc","object":"response"}`, "resp_abc")
	f(" \n{\"id\":\"resp_x\"}", "resp_x")
	f(`{"object":"response","id":"resp_late","output":[{"id":"msg_1"}]}`, "resp_late")
	f(`{"id":"a","id":"b"}`, "a") // the fast path; engines write one id
	f(`{"id":1}`, "")
	f(`not json`, "")
	f(`{"error":{"message":"x"}}`, "")

	g := func(ev, want string, wantSeen bool) {
		t.Helper()
		if got, seen := SSEResponseID([]byte(ev)); got != want || seen != wantSeen {
			t.Fatalf("%q: got %q %v, want %q %v", ev, got, seen, want, wantSeen)
		}
	}
	g("event: response.created\ndata: {\"response\":{\"id\":\"resp_s\",\"status\":\"in_progress\"},\"sequence_number\":0,\"type\":\"response.created\"}\n\n", "resp_s", true)
	g(": keep-alive\n\n", "", false)
	g("data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n", "", true)
	g("data: [DONE]\n\n", "", true)
}

// TestResponseIDParseBounded: an answer that is not vLLM's shape is parsed
// for its id only up to maxAnswerParse bytes (the parse runs on a loop).
func TestResponseIDParseBounded(t *testing.T) {
	t.Parallel()
	small := `{"object":"response","id":"resp_1"}`
	if got := JSONResponseID([]byte(small)); got != "resp_1" {
		t.Fatalf("small answer: id %q", got)
	}
	big := `{"object":"response","junk":[` + strings.Repeat("1,", maxAnswerParse) + `1],"id":"resp_2"}`
	if got := JSONResponseID([]byte(big)); got != "" {
		t.Fatalf("large answer parsed: id %q", got)
	}
	if got := JSONResponseID([]byte(`{"id":"resp_3",` + big[1:])); got != "resp_3" {
		t.Fatalf("vLLM's shape: id %q", got)
	}
	ev := "event: response.created\ndata: " + `{"type":"response.created","junk":[` + strings.Repeat("1,", maxAnswerParse) + `1],"response":{"id":"resp_4"}}` + "\n\n"
	if id, seen := SSEResponseID([]byte(ev)); id != "" || !seen {
		t.Fatalf("large event: id %q seen %v", id, seen)
	}
}

func TestResponsePathID(t *testing.T) {
	t.Parallel()
	f := func(path, wantID, wantAllow string, wantOK bool) {
		t.Helper()
		if id, allow, ok := ResponsePathID(path); id != wantID || allow != wantAllow || ok != wantOK {
			t.Fatalf("%s: got %q %q %v, want %q %q %v", path, id, allow, ok, wantID, wantAllow, wantOK)
		}
	}
	f("/v1/responses/resp_1", "resp_1", "GET, DELETE", true)
	f("/v1/responses/resp_1/cancel", "resp_1", "POST", true)
	f("/v1/responses/resp_1/input_items", "resp_1", "GET", true)
	f("/v1/responses/resp_1/other", "", "", false)
	f("/v1/responses/", "", "", false)
	f("/v1/responses//cancel", "", "", false)
	f("/v1/responses", "", "", false)
}
