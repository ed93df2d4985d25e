package backend

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// parseAll feeds resp to a fresh parser in the pieces given by cuts (byte
// offsets), then signals the close if the response is not done, and
// returns a printable summary of the result.
func parseAll(resp []byte, cuts []int, noBody bool) (string, error) {
	return parseWith(resp, cuts, noBody, 4096, false)
}

// parseWith parses resp fed in the pieces cuts makes, with body bound
// maxBody; with spill, a body over it is drained as the loop path's
// spill does (spill set at errBodyTooLarge, Body taken after each feed).
func parseWith(resp []byte, cuts []int, noBody bool, maxBody int, spill bool) (string, error) {
	p := newRespParser(1024, maxBody)
	p.reset(noBody, 0)
	prev, used := 0, 0
	var err error
	var body []byte
	for _, c := range append(cuts, len(resp)) {
		if c < prev || c > len(resp) || err != nil || p.done() {
			continue
		}
		var n int
		n, err = p.feed(resp[prev:c])
		if spill && errors.Is(err, errBodyTooLarge) && !p.spill {
			p.spill = true
			var m int
			m, err = p.feed(resp[prev+n : c])
			n += m
		}
		used += n
		if p.spill {
			body = append(body, p.Body...)
			p.Body = p.Body[:0]
		}
		if !p.done() && err == nil && n != c-prev {
			return "", fmt.Errorf("consumed %d of %d before the end", n, c-prev)
		}
		prev = c
	}
	if err == nil && !p.done() {
		err = p.eof()
	}
	if err != nil {
		return "", err
	}
	if !p.spill {
		body = p.Body
	}
	return fmt.Sprintf("%d %v %q ka=%v used=%d", p.Status, p.Header, body, p.keepAlive(), used), nil
}

func TestRespParser(t *testing.T) {
	t.Parallel()
	f := func(resp string, noBody bool, want string, wantErr error) {
		t.Helper()
		got, err := parseAll([]byte(resp), nil, noBody)
		if !errors.Is(err, wantErr) || got != want {
			t.Errorf("%q:\n got %s, %v\nwant %s, %v", resp, got, err, want, wantErr)
		}
	}
	f("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello", false,
		`200 [{Content-Length 5} {Content-Type application/json}] "hello" ka=true used=75`, nil)
	f("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: v\r\n\r\n", false,
		`200 [{Transfer-Encoding chunked}] "hello world" ka=true used=83`, nil)
	f("HTTP/1.1 200 OK\n\nuntil the close", false, `200 [] "until the close" ka=false used=32`, nil)
	f("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\nX: 1\r\n\r\n", false,
		`204 [{X 1}] "" ka=true used=98`, nil)
	f("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, `200 [{Content-Length 5}] "" ka=true used=38`, nil)
	f("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false,
		`200 [{Connection close} {Content-Length 2}] "ok" ka=false used=59`, nil)
	f("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, `200 [{Content-Length 2}] "ok" ka=false used=40`, nil)
	f("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false,
		`200 [{Connection keep-alive} {Content-Length 2}] "ok" ka=true used=64`, nil)
	f("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx", false, `200 [{Transfer-Encoding gzip}] "xx" ka=false used=46`, nil)
	f("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", false, "", errUnexpectedEOF)
	f("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok", false, "", errBadResponse)
	f("HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n", false, "", errBodyTooLarge)
	f("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1001\r\n", false, "", errBodyTooLarge)
	f("HTTP/1.1 200 OK\r\n\r\n"+string(bytes.Repeat([]byte("x"), 5000)), false, "", errBodyTooLarge)
	f("HTTP/1.1 200 OK\r\nX: "+string(bytes.Repeat([]byte("x"), 2000))+"\r\n\r\n", false, "", errHeadTooLarge)
	f("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, "", errBadResponse)
	f("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n", false, "", errBadResponse)
	f("HTTP/1.1 101 Switching Protocols\r\n\r\n", false, "", errSwitchProtocols)
	f("HTTP/2 200 OK\r\n\r\n", false, "", errBadResponse)
	f("HTTP/1.1 2x0 OK\r\n\r\n", false, "", errBadResponse)
	f("HTTP/1.1 200 OK\r\n folded\r\n\r\n", false, "", errBadResponse)
	f("HTTP/1.1 200 OK\r\nBad\x01: v\r\n\r\n", false, "", errBadResponse)
	f("HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", false, "", errBadResponse)
	f("", false, "", errUnexpectedEOF)
}

// TestRespParserLeftover: bytes after a complete response are left for
// the caller (the connection is then not reused).
func TestRespParserLeftover(t *testing.T) {
	t.Parallel()
	p := newRespParser(1024, 4096)
	in := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1")
	n, err := p.feed(in)
	if err != nil || !p.done() || n != len(in)-len("HTTP/1.1") {
		t.Fatalf("feed = %d, %v, done %v", n, err, p.done())
	}
}

var parserSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: v\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\n\nuntil the close",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"HTTP/1.0 404 Not Found\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
}

// FuzzRespParser: the parser never panics, and the result (or whether it
// fails) is the same however the bytes are split across reads.
func FuzzRespParser(f *testing.F) {
	for _, s := range parserSeeds {
		f.Add([]byte(s), uint16(7), uint16(40), false)
	}
	f.Fuzz(func(t *testing.T, resp []byte, a, b uint16, noBody bool) {
		whole, werr := parseAll(resp, nil, noBody)
		cuts := []int{int(a) % (len(resp) + 1), int(b) % (len(resp) + 1)}
		if cuts[0] > cuts[1] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		split, serr := parseAll(resp, cuts, noBody)
		var bytewise []int
		for i := 1; i < len(resp) && len(resp) < 300; i++ {
			bytewise = append(bytewise, i)
		}
		one, oerr := parseAll(resp, bytewise, noBody)
		if (werr == nil) != (serr == nil) || (werr == nil) != (oerr == nil) || whole != split || whole != one {
			t.Fatalf("whole: %s %v\nsplit at %v: %s %v\nbytewise: %s %v", whole, werr, cuts, split, serr, one, oerr)
		}
		// Spilled (a bound of 3 bytes, drained as the loop path does), the
		// body and the rest are those of an unbounded parse.
		big, berr := parseWith(resp, cuts, noBody, 1<<20, false)
		spilled, perr := parseWith(resp, cuts, noBody, 3, true)
		if (berr == nil) != (perr == nil) || big != spilled {
			t.Fatalf("unbounded: %s %v\nspilled at %v: %s %v", big, berr, cuts, spilled, perr)
		}
	})
}
