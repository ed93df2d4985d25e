package bench

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"
)

// TestLoadAgainstUpstream: the load generator and the instant upstream
// work together, stop by count and by time, and frame both answer kinds.
func TestLoadAgainstUpstream(t *testing.T) {
	up, err := StartUpstream("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close(context.Background())
	for _, stream := range []bool{false, true} {
		res, err := Load(context.Background(), LoadConfig{Target: up.Addr, Conns: 4, Duration: 5 * time.Second, Requests: 300,
			Request: ChatRequest(up.Addr, 4096, stream)})
		if err != nil || res.Requests < 300 || res.Requests > 303 || res.Non2xx != 0 || res.Errors != 0 || res.P50 <= 0 || res.P99 < res.P50 {
			t.Fatalf("stream=%v: %v %+v", stream, err, res)
		}
	}
	// By time: a Load without a request count ends at its Duration. The
	// context's 60 s are a bound for one that never ends, not a
	// measurement (a loaded machine stretches any tighter one).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Load(ctx, LoadConfig{Target: up.Addr, Conns: 2, Duration: 300 * time.Millisecond,
		Request: ChatRequest(up.Addr, 100, false)})
	if err != nil || res.Requests == 0 || ctx.Err() != nil {
		t.Fatalf("by time: %v %+v (context: %v)", err, res, ctx.Err())
	}
	// A dead target is an error, not a hang.
	if _, err := Load(context.Background(), LoadConfig{Target: "127.0.0.1:1", Conns: 1, Duration: 200 * time.Millisecond,
		Request: ChatRequest("x", 100, false)}); err == nil {
		t.Fatal("no error for a dead target")
	}
}

func TestChatBodySize(t *testing.T) {
	for _, n := range []int{200, 4096, 10000} {
		if b := ChatBody(n, false); len(b) != n {
			t.Fatalf("ChatBody(%d) is %d bytes", n, len(b))
		}
	}
}

func TestReadAnswerChunked(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno"))
	if st, err := readAnswer(br); st != 201 || err != nil {
		t.Fatalf("%d %v", st, err)
	}
	if st, err := readAnswer(br); st != 404 || err != nil {
		t.Fatalf("%d %v", st, err)
	}
	if _, err := readAnswer(bufio.NewReader(strings.NewReader("garbage\r\n"))); err == nil {
		t.Fatal("no error for garbage")
	}
}

// FuzzReadAnswer: any byte stream is framed or refused with an error;
// never a panic, never a status outside 100-999 on success.
func FuzzReadAnswer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 2xx OK\r\n\r\n",
		"garbage",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := readAnswer(bufio.NewReader(strings.NewReader(string(b))))
		if err == nil && (st < 0 || st > 999) {
			t.Fatalf("status %d from %q", st, b)
		}
	})
}

func TestStreamRequested(t *testing.T) {
	for body, want := range map[string]bool{
		`{"stream":true}`: true, `{"stream" : true}`: true, `{"stream":false}`: false, `{}`: false, `{"stream":`: false,
	} {
		if got := streamRequested([]byte(body)); got != want {
			t.Errorf("streamRequested(%s) = %v", body, got)
		}
	}
}
