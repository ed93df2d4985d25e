package reactor

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/saltus-lb/saltus/internal/httplex"
)

var testLimits = limits{maxHead: 1024, maxBody: 4096}

func TestParse(t *testing.T) {
	t.Parallel()
	f := func(in string, want *Request, wantN int) {
		t.Helper()
		var p progress
		r, n, err := parse([]byte(in), testLimits, &p)
		if err != nil {
			t.Fatalf("parse(%q): %v", in, err)
		}
		if (r.pooled != nil) != (len(r.Body) > 0) {
			t.Errorf("parse(%q): body %q pooled %v", in, r.Body, r.pooled)
		}
		r.pooled = nil // TestBodyPool checks the pool
		got := *r
		got.hdrArr = [8]Header{} // got.Header still shows r's
		if n != wantN || !reflect.DeepEqual(&got, want) {
			t.Fatalf("parse(%q) = %+v, %d; want %+v, %d", in, r, n, want, wantN)
		}
	}
	f("GET /v1/models?x=1&y HTTP/1.1\r\nHost: a\r\nX-A:  b c \r\n\r\nrest",
		&Request{Method: "GET", Path: "/v1/models", Query: "x=1&y", Header: []Header{{"Host", "a"}, {"X-A", "b c"}}, keepAlive: true}, 54)
	f("\r\nPOST /p HTTP/1.0\nContent-Length: 3\nConnection: keep-alive\n\nabcdef",
		&Request{Method: "POST", Path: "/p", Proto10: true, Header: []Header{{"Content-Length", "3"}, {"Connection", "keep-alive"}}, Body: []byte("abc"), keepAlive: true}, 64)
	f("POST http://h:1/a/b?q HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\nExpect: 100-continue\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n",
		&Request{Method: "POST", Path: "/a/b", Query: "q", Header: []Header{{"Host", "x"}, {"Transfer-Encoding", "Chunked"}, {"Connection", "close"}, {"Expect", "100-continue"}}, Body: []byte("abcde"), expect100: true}, 142)
	f("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", &Request{Method: "OPTIONS", Path: "*", Header: []Header{{"Host", "x"}}, keepAlive: true}, 31)
	// Absolute-form: scheme in any case, an empty path is "/".
	f("GET HTTP://h?q HTTP/1.1\r\nHost: h\r\n\r\n", &Request{Method: "GET", Path: "/", Query: "q", Header: []Header{{"Host", "h"}}, keepAlive: true}, 36)
	// The path is normalized, the query kept as sent.
	f("POST /v1/./x/../chat/%63ompletions?a=%2e%2E HTTP/1.1\r\nHost: h\r\n\r\n",
		&Request{Method: "POST", Path: "/v1/chat/completions", Query: "a=%2e%2E", Header: []Header{{"Host", "h"}}, keepAlive: true}, 65)
	f("GET /?q=\xc3\xa9/../%zz HTTP/1.1\r\nHost: h\r\n\r\n",
		&Request{Method: "GET", Path: "/", Query: "q=\xc3\xa9/../%zz", Header: []Header{{"Host", "h"}}, keepAlive: true}, 39)
	// HTTP/1.0 needs no Host.
	f("GET / HTTP/1.0\r\n\r\n", &Request{Method: "GET", Path: "/", Proto10: true, Header: []Header{}}, 18)
}

func TestParseNeedMore(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "GET", "GET / HTTP/1.1\r\nHost: x\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcd",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nTrailer: x\r\n",
		"\r\n\r\n\r\n",
	} {
		var p progress
		if r, n, err := parse([]byte(in), testLimits, &p); r != nil || n != 0 || err != nil {
			t.Errorf("parse(%q) = %v, %d, %v; want need more", in, r, n, err)
		}
	}
}

// TestParseIncompleteMethod: a head that may still become a request
// waits for more bytes, however it begins.
func TestParseIncompleteMethod(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "G", "GET", "GET ", "\r\n", "\r\nPOST /v1", strings.Repeat("\r\n", 20) + "\x16", "M-SEARCH", strings.Repeat("A", 40) + "\x00"} {
		var p progress
		if r, n, err := parse([]byte(in), testLimits, &p); r != nil || n != 0 || err != nil {
			t.Errorf("parse(%q) = %v, %d, %v; want to wait for more", in, r, n, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	f := func(in string, status int) {
		t.Helper()
		var p progress
		_, _, err := parse([]byte(in), testLimits, &p)
		if he, ok := err.(*httpError); !ok || he.status != status {
			t.Fatalf("parse(%q) error %v, want status %d", in, err, status)
		}
	}
	f("GET\r\n\r\n", 400)
	f("GET / HTTP/1.1 x\r\n\r\n", 400)
	f(" GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET nope HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET / HTTP/1.2\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nA : b\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nA: b\x00\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501)
	f("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501)
	f("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nx\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+strings.Repeat("0", 1100), 400)
	f("GET / HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 1100), 431)
	f("GET / HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 1020)+"\r\n\r\n", 431)
	f("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4097\r\n\r\n", 413)
	f("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n"+strings.Repeat("a", 2048)+"\r\n801\r\n", 413)
	f("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n", 413)
	f("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400)
	// Bytes that cannot start a request line are refused before the
	// head is complete (a TLS ClientHello on the plain port; garbage).
	f("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400)
	f("\r\n\x00", 400)
	f(" GET", 400)
	f("GE(T", 400)
	// Host (RFC 9112 §3.2): exactly one, valid, in HTTP/1.1.
	f("GET / HTTP/1.1\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400)
	f("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400)
	f("GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", 400)
	// Request targets.
	f("GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET ftp://h/ HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET http://u@h/ HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET http:///x HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET /a#f HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	f("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	for _, target := range []string{"/v1/%2e%2e/tokenize", "/v1/..%2ftokenize", "/../tokenize", "/v1/..%5Ctokenize",
		"/v1/%00", "http://h/v1/../../tokenize", "/v1/%2E%2e/tokenize?x"} {
		f("POST "+target+" HTTP/1.1\r\nHost: x\r\n\r\n", 400)
	}
}

// TestParseMessages: 413 and 431 name the limit, for the person who can
// raise it.
func TestParseMessages(t *testing.T) {
	t.Parallel()
	f := func(in, want string) {
		t.Helper()
		var p progress
		_, _, err := parse([]byte(in), testLimits, &p)
		if err == nil || err.Error() != want {
			t.Fatalf("parse(%q) error %v, want %q", in, err, want)
		}
	}
	f("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
		"request body of 5000 bytes is over the limit of 4096 bytes (--max-body)")
	f("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n"+strings.Repeat("a", 2048)+"\r\n801\r\n",
		"chunked request body of at least 4097 bytes is over the limit of 4096 bytes (--max-body)")
	f("GET / HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 1100),
		"request head (request line and headers) is over the limit of 1024 bytes (--max-header)")
	f("GET /v1/%2e%2e/tokenize HTTP/1.1\r\nHost: x\r\n\r\n",
		"percent-encoded dot segment (%2E) in request path")
	f("GET / HTTP/1.1\r\n\r\n", "missing Host header (required in HTTP/1.1)")
}

func TestHeaderValue(t *testing.T) {
	t.Parallel()
	r := &Request{Header: []Header{{"Content-Type", "a"}, {"X-K", "b"}, {"content-type", "c"}}}
	f := func(name, want string) {
		t.Helper()
		if got := r.HeaderValue(name); got != want {
			t.Fatalf("HeaderValue(%q) = %q, want %q", name, got, want)
		}
	}
	f("content-TYPE", "a")
	f("x-k", "b")
	f("X-Missing", "")
	f("\u212a-K", "") // Kelvin sign: not ASCII-equal to "X-K"
}

// TestParseCopies: nothing in a request aliases the buffer it came from.
func TestParseCopies(t *testing.T) {
	t.Parallel()
	buf := []byte("POST /a?b HTTP/1.1\r\nHost: x\r\nH: v\r\nContent-Length: 2\r\n\r\nxy")
	var p progress
	r, _, err := parse(buf, testLimits, &p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = '#'
	}
	if r.Method != "POST" || r.Path != "/a" || r.Query != "b" || r.Header[1].Value != "v" || string(r.Body) != "xy" {
		t.Fatalf("request changed with its buffer: %+v", r)
	}
}

// parseStream frames stream as a connection would when its bytes arrive
// in the pieces cuts gives (ascending offsets): it returns the requests,
// and the status of the framing error that ended it (0 if none).
func parseStream(stream []byte, cuts []int, lim limits) ([]*Request, int) {
	var reqs []*Request
	var p progress
	start := 0 // bytes consumed
	for _, end := range append(cuts, len(stream)) {
		for {
			r, n, err := parse(stream[start:end], lim, &p)
			if err != nil {
				return reqs, err.(*httpError).status
			}
			if r == nil {
				break
			}
			if n <= 0 || start+n > end {
				panic("BUG: parse consumed a bad count")
			}
			reqs = append(reqs, r)
			start += n
			p = progress{}
		}
	}
	return reqs, 0
}

func FuzzParseSplit(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /b?c HTTP/1.0\r\n\r\n",
		"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcPOST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;e\r\nabc\r\n0\r\nX: y\r\n\r\n",
		"\r\nGET / HTTP/1.1\nA: b\n\n",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"BAD\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 300),
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9999\r\n\r\n",
		"POST /v1/./a/../%63hat?q=%2e HTTP/1.1\r\nHost: x\r\n\r\nGET http://h/v1/%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s), []byte{3, 17, 40})
	}
	lim := limits{maxHead: 256, maxBody: 512}
	f.Fuzz(func(t *testing.T, stream, cutBytes []byte) {
		want, wantErr := parseStream(stream, nil, lim)
		// Cuts: ascending offsets from the fuzzer's bytes.
		var cuts []int
		off := 0
		for _, c := range cutBytes {
			off += int(c)
			if off >= len(stream) {
				break
			}
			cuts = append(cuts, off)
		}
		got, gotErr := parseStream(stream, cuts, lim)
		for _, r := range want {
			// Every request's path is in normal form before anyone routes on it.
			if norm, err := httplex.NormalizePath(r.Path); r.Path != "*" && (err != nil || norm != r.Path) {
				t.Fatalf("parsed path %q is not normal: %q, %v", r.Path, norm, err)
			}
		}
		if gotErr != wantErr || !reflect.DeepEqual(got, want) {
			t.Fatalf("split at %v: %d requests, error %d; in one read: %d requests, error %d", cuts, len(got), gotErr, len(want), wantErr)
		}
		// Byte by byte too: the worst split there is.
		every := make([]int, 0, len(stream))
		for i := 1; i < len(stream); i++ {
			every = append(every, i)
		}
		got, gotErr = parseStream(stream, every, lim)
		if gotErr != wantErr || !reflect.DeepEqual(got, want) {
			t.Fatalf("byte by byte: %d requests, error %d; in one read: %d requests, error %d", len(got), gotErr, len(want), wantErr)
		}
		for _, r := range want {
			if len(r.Body) > lim.maxBody {
				t.Fatalf("body of %d bytes over the limit", len(r.Body))
			}
			if bytes.Contains([]byte(r.Method+r.Path+r.Query), []byte{' '}) {
				t.Fatalf("space in method or target: %+v", r)
			}
		}
	})
}
