package backend

import (
	"fmt"
	"strings"
	"testing"
)

// the loop path parses it (head, Content-Length body).
func BenchmarkRespParser(b *testing.B) {
	body := `{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", 400) + `"}}],"usage":{"prompt_tokens":1000,"completion_tokens":10}}`
	resp := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	p := newRespParser(maxLoopHead, DefaultConfig().MaxResponseBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(resp)))
	for b.Loop() {
		p.reset(false, 3)
		if n, err := p.feed(resp); err != nil || n != len(resp) || !p.done() {
			b.Fatal(n, err)
		}
	}
}
