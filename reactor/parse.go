package reactor

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/saltus-lb/saltus/internal/httplex"
)

// limits are the framing bounds parse enforces (from Config).
type limits struct {
	maxHead int // bytes of request line + headers + the empty line → 431
	maxBody int // de-chunked body bytes → 413
	// The connection limits (Server only; parse reads the two above).
	maxConns                   int
	headerTimeout, idleTimeout time.Duration
}

// httpError is a framing error: the reactor answers it with status and
// closes the connection.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(msg string) *httpError { return &httpError{http.StatusBadRequest, msg} }

// The messages of 413 and 431 name the limit and the `saltus serve` flag
// that sets it: the person who reads them is the one who can raise it.
func headTooLarge(max int) *httpError {
	return &httpError{http.StatusRequestHeaderFieldsTooLarge,
		fmt.Sprintf("request head (request line and headers) is over the limit of %d bytes (--max-header)", max)}
}

func trailersTooLarge(max int) *httpError {
	return &httpError{http.StatusRequestHeaderFieldsTooLarge,
		fmt.Sprintf("request trailers are over the limit of %d bytes (--max-header)", max)}
}

func bodyTooLarge(n int64, max int) *httpError {
	return &httpError{http.StatusRequestEntityTooLarge,
		fmt.Sprintf("request body of %d bytes is over the limit of %d bytes (--max-body)", n, max)}
}

func chunkedTooLarge(atLeast int64, max int) *httpError {
	return &httpError{http.StatusRequestEntityTooLarge,
		fmt.Sprintf("chunked request body of at least %d bytes is over the limit of %d bytes (--max-body)", atLeast, max)}
}

// progress is what an earlier parse of the same, longer-growing buffer
// learned, so that a request arriving in many small reads is scanned once,
// not once per read (a head trickling in one byte per read would otherwise
// cost O(n²)). The zero value starts from scratch; reset it after a request
// has been consumed. It never changes the result, only the work: parse(buf)
// with a fresh progress and parse(buf) after parses of buf's prefixes give
// the same answer (FuzzParseSplit checks this).
type progress struct {
	need      int // no answer before len(buf) ≥ need
	headScan  int // the head's end-of-head search resumes here (a line start)
	headEnd   int // length of the head incl. its empty line; 0 until known
	chunkPos  int // chunked body: offset of the next chunk-size line; 0 until started
	chunkBody int // chunked body: data bytes before chunkPos
	expect100 bool
}

// parse frames one request at the start of buf. It returns the request and
// the number of bytes it occupies, or a framing error (answer and close), or
// (nil, 0, nil) when buf holds only a prefix of a request: call again with
// more bytes and the same p. The request's fields are copies; nothing in it
// aliases buf. It never panics on any input (FuzzParse).
func parse(buf []byte, lim limits, p *progress) (*Request, int, error) {
	if len(buf) < p.need {
		return nil, 0, nil
	}
	if p.headEnd == 0 {
		// First, so that the answer does not depend on how the bytes
		// were split into reads (FuzzParseSplit): methodStart reads only
		// the first 48.
		if !methodStart(buf) {
			return nil, 0, badRequest("malformed request line")
		}
		end := findHeadEnd(buf, lim.maxHead, p)
		if end < 0 {
			if len(buf) >= lim.maxHead {
				return nil, 0, headTooLarge(lim.maxHead)
			}
			p.need = len(buf) + 1
			return nil, 0, nil
		}
		if end > lim.maxHead {
			return nil, 0, headTooLarge(lim.maxHead)
		}
		p.headEnd = end
	}
	r, bodyLen, chunked, err := parseHead(buf[:p.headEnd])
	if err != nil {
		return nil, 0, err
	}
	p.expect100 = r.expect100
	if chunked {
		return parseChunked(buf, lim, p, r)
	}
	if bodyLen > int64(lim.maxBody) {
		return nil, 0, bodyTooLarge(bodyLen, lim.maxBody)
	}
	total := p.headEnd + int(bodyLen)
	if len(buf) < total {
		p.need = total
		return nil, 0, nil
	}
	if bodyLen > 0 {
		r.Body = r.newBody(int(bodyLen))
		copy(r.Body, buf[p.headEnd:total])
	}
	return r, total, nil
}

// findHeadEnd returns the length of the head (through the empty line that
// ends it), or -1 if buf does not hold it yet. It scans at most max+1
// bytes and remembers in p where the next call resumes.
func findHeadEnd(buf []byte, max int, p *progress) int {
	limit := min(len(buf), max+1)
	pos := p.headScan
	for pos < limit {
		i := bytes.IndexByte(buf[pos:limit], '\n')
		if i < 0 {
			break
		}
		line := buf[pos : pos+i]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		next := pos + i + 1
		if len(line) == 0 && !allBlankLines(buf[:pos]) {
			return next
		}
		pos = next
	}
	p.headScan = pos
	return -1
}

// methodStart reports whether the start of buf, an incomplete head, may
// still become a request line: after the blank lines a client may send
// first, a method (a token) up to its space. Bytes that cannot (a TLS
// ClientHello sent to the plain port, binary garbage) are refused at once,
// as nginx refuses them, instead of holding the connection until the
// header timeout while the client waits for an answer.
//
// It reads at most 48 bytes, so a head trickling in a byte per read costs
// O(1) here per read: past 16 bytes of blank lines or 32 of method it
// leaves the verdict to parseHead.
func methodStart(buf []byte) bool {
	i := 0
	for i < len(buf) && (buf[i] == '\r' || buf[i] == '\n') {
		if i++; i == 16 {
			return true
		}
	}
	for j := i; j < min(len(buf), i+32); j++ {
		if buf[j] == ' ' {
			return j > i
		}
		if !httplex.IsTokenByte(buf[j]) {
			return false
		}
	}
	return true
}

// allBlankLines reports whether b is only CRLF/LF line ends: the empty
// lines a client may send before a request line (RFC 9112 §2.2), which the
// request line's parser skips.
func allBlankLines(b []byte) bool {
	for _, c := range b {
		if c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// parseHead parses a complete head (ending in its empty line). bodyLen is
// the Content-Length (0 if absent); chunked says the body is chunked.
func parseHead(head []byte) (r *Request, bodyLen int64, chunked bool, err error) {
	// One copy of the head backs every string of the request.
	s := string(head)
	s = strings.TrimLeft(s, "\r\n")
	nl := strings.IndexByte(s, '\n')
	line := trimCR(s[:nl])
	s = s[nl+1:]

	r = &Request{}
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return nil, 0, false, badRequest("malformed request line")
	}
	r.Method = line[:sp1]
	if !httplex.IsToken(r.Method) {
		return nil, 0, false, badRequest("malformed request method")
	}
	rest := line[sp1+1:]
	sp2 := strings.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return nil, 0, false, badRequest("malformed request line")
	}
	target, version := rest[:sp2], rest[sp2+1:]
	switch version {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.Proto10 = true
	default:
		return nil, 0, false, badRequest("unsupported HTTP version")
	}
	if err := splitTarget(r, target); err != nil {
		return nil, 0, false, err
	}

	if n := strings.Count(s, "\n") - 1; n <= len(r.hdrArr) {
		r.Header = r.hdrArr[:0]
	} else {
		r.Header = make([]Header, 0, n)
	}
	r.keepAlive = !r.Proto10
	bodyLen = -1
	var sawTE bool
	hosts := 0
	for {
		nl := strings.IndexByte(s, '\n')
		line := trimCR(s[:nl])
		s = s[nl+1:]
		if line == "" {
			break
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return nil, 0, false, badRequest("malformed header line")
		}
		name := line[:colon]
		if !httplex.IsToken(name) {
			return nil, 0, false, badRequest("malformed header name")
		}
		value := httplex.TrimOWS(line[colon+1:])
		if !httplex.ValidValue(value) {
			return nil, 0, false, badRequest("invalid character in header value")
		}
		r.Header = append(r.Header, Header{Name: name, Value: value})
		switch {
		case equalFold(name, "Content-Length"):
			n, ok := httplex.ParseDecimal(value)
			if !ok || (bodyLen >= 0 && n != bodyLen) {
				return nil, 0, false, badRequest("invalid Content-Length")
			}
			bodyLen = n
		case equalFold(name, "Transfer-Encoding"):
			if sawTE || !equalFold(value, "chunked") {
				return nil, 0, false, &httpError{http.StatusNotImplemented, "unsupported Transfer-Encoding (only chunked is)"}
			}
			sawTE = true
		case equalFold(name, "Connection"):
			for tok := range strings.SplitSeq(value, ",") {
				tok = httplex.TrimOWS(tok)
				if equalFold(tok, "close") {
					r.keepAlive = false
				} else if equalFold(tok, "keep-alive") && r.Proto10 {
					r.keepAlive = true
				}
			}
		case equalFold(name, "Expect"):
			r.expect100 = equalFold(value, "100-continue")
		case equalFold(name, "Host"):
			// RFC 9112 §3.2: more than one Host, or an invalid one, is a 400.
			if hosts++; hosts > 1 {
				return nil, 0, false, badRequest("more than one Host header")
			}
			if !httplex.ValidHost(value) {
				return nil, 0, false, badRequest("invalid Host header")
			}
		}
	}
	if hosts == 0 && !r.Proto10 {
		// RFC 9112 §3.2: an HTTP/1.1 request must name its host (HTTP/1.0
		// predates Host).
		return nil, 0, false, badRequest("missing Host header (required in HTTP/1.1)")
	}
	if sawTE && bodyLen >= 0 {
		// Both framings at once is how requests are smuggled past a proxy
		// that picks the other one (RFC 9112 §6.3): refuse.
		return nil, 0, false, badRequest("both Content-Length and Transfer-Encoding")
	}
	return r, max(bodyLen, 0), sawTE, nil
}

// parseChunked frames a chunked body starting at p.headEnd, resuming at
// p.chunkPos. Chunk extensions are ignored; trailers are skipped.
func parseChunked(buf []byte, lim limits, p *progress, r *Request) (*Request, int, error) {
	pos, body := p.chunkPos, p.chunkBody
	if pos == 0 {
		pos = p.headEnd
	}
	for {
		i := bytes.IndexByte(buf[pos:min(len(buf), pos+1024)], '\n')
		if i < 0 {
			if len(buf)-pos >= 1024 {
				return nil, 0, badRequest("malformed chunk size line")
			}
			return needMore(p, pos, body, len(buf)+1)
		}
		size, ok := chunkSize(buf[pos : pos+i])
		if !ok {
			return nil, 0, badRequest("malformed chunk size line")
		}
		if size > int64(lim.maxBody-body) {
			return nil, 0, chunkedTooLarge(int64(body)+size, lim.maxBody)
		}
		data := pos + i + 1
		if size == 0 {
			end, err := skipTrailers(buf, data, lim.maxHead)
			if err != nil {
				return nil, 0, err
			}
			if end < 0 {
				return needMore(p, pos, body, len(buf)+1)
			}
			r.Body = dechunk(r, buf[p.headEnd:end], body)
			return r, end, nil
		}
		next := data + int(size) + 2
		if len(buf) < next {
			return needMore(p, pos, body, next)
		}
		if buf[next-2] != '\r' || buf[next-1] != '\n' {
			return nil, 0, badRequest("chunk data not followed by CRLF")
		}
		body += int(size)
		pos = next
	}
}

func needMore(p *progress, pos, body, need int) (*Request, int, error) {
	p.chunkPos, p.chunkBody, p.need = pos, body, need
	return nil, 0, nil
}

// skipTrailers returns the offset after the trailer section that starts at
// pos (ending in an empty line), -1 if incomplete.
func skipTrailers(buf []byte, pos, max int) (int, error) {
	start := pos
	for {
		i := bytes.IndexByte(buf[pos:], '\n')
		if i < 0 {
			if len(buf)-start > max {
				return 0, trailersTooLarge(max)
			}
			return -1, nil
		}
		line := buf[pos : pos+i]
		pos += i + 1
		if pos-start > max {
			return 0, trailersTooLarge(max)
		}
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			return pos, nil
		}
		if bytes.IndexByte(line, ':') <= 0 {
			return 0, badRequest("malformed trailer line")
		}
	}
}

// dechunk copies the data of an already validated chunked body into a
// body buffer of r's of size n (nil when n is 0).
func dechunk(r *Request, b []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	out := r.newBody(n)[:0]
	for len(out) < n {
		i := bytes.IndexByte(b, '\n')
		size, _ := chunkSize(b[:i])
		b = b[i+1:]
		out = append(out, b[:size]...)
		b = b[size+2:]
	}
	return out
}

// chunkSize parses a chunk size line without its LF: its CR, if any, is
// cut, the rest is httplex.ParseChunkSize's (shared with the backend's
// response parser).
func chunkSize(line []byte) (int64, bool) {
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return httplex.ParseChunkSize(line)
}

// splitTarget sets r.Path and r.Query from the request target (RFC 9112
// §3.2): origin-form ("/p?q"); absolute-form ("http://h/p?q", scheme in
// any case, §3.2.2), of which only the path and query are kept (the
// backend gets its own Host); asterisk-form ("*") for OPTIONS only. The
// path is normalized (httplex.NormalizePath) before anyone routes on it,
// and it is the normal form that is forwarded; the query is kept as sent.
func splitTarget(r *Request, target string) error {
	// The query is checked for these bytes only, and kept as sent; the
	// path gets NormalizePath's stricter check.
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return badRequest("invalid character in request target")
		}
	}
	if target == "*" {
		if r.Method != "OPTIONS" {
			return badRequest("request target * is for OPTIONS only")
		}
		r.Path = "*"
		return nil
	}
	if target != "" && target[0] != '/' {
		rest, ok := cutScheme(target)
		if !ok {
			return badRequest("malformed request target (want /path, or http://host/path)")
		}
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		if authority := rest[:end]; authority == "" || strings.IndexByte(authority, '@') >= 0 || !httplex.ValidHost(authority) {
			return badRequest("invalid host in absolute-form request target")
		}
		target = rest[end:]
		if target == "" || target[0] == '?' {
			target = "/" + target // an empty path is "/" (RFC 9112 §3.2.4)
		}
	}
	path, query, _ := strings.Cut(target, "?")
	if strings.IndexByte(query, '#') >= 0 || strings.IndexByte(path, '#') >= 0 {
		return badRequest("fragment (#) in request target")
	}
	norm, err := httplex.NormalizePath(path)
	if err != nil {
		return badRequest(err.Error())
	}
	r.Path, r.Query = norm, query
	return nil
}

// cutScheme returns target after "http://" or "https://", in any case.
func cutScheme(target string) (string, bool) {
	for _, scheme := range [...]string{"http://", "https://"} {
		if len(target) >= len(scheme) && equalFold(target[:len(scheme)], scheme) {
			return target[len(scheme):], true
		}
	}
	return "", false
}

func trimCR(s string) string {
	if len(s) > 0 && s[len(s)-1] == '\r' {
		return s[:len(s)-1]
	}
	return s
}
