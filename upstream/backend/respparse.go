package backend

import (
	"errors"
	"slices"
	"strings"

	"github.com/saltus-lb/saltus/internal/httplex"
	"github.com/saltus-lb/saltus/reactor"
)

// respParser reads one HTTP/1.1 response incrementally, for the loop path
// (loop.go): bytes arrive in whatever pieces the upstream's reads give, and
// the result is the same however they are split (FuzzRespParser checks it).
// The head is kept as one string (Header's names and values are views into
// it); the body is de-chunked into Body, bounded by maxBody. 1xx heads
// (100 Continue, 103 Early Hints) are skipped; 101 is an error (saltus
// never asks to switch protocols). Body framing follows RFC 9112 §6.3: no
// body for a HEAD request, 1xx, 204 and 304; Transfer-Encoding with
// chunked last → chunked, any other Transfer-Encoding → until the close;
// else Content-Length; else until the close.
//
// Owned by one goroutine (the upstream connection's loop).
type respParser struct {
	maxHead int  // bytes of one head, through its blank line
	maxBody int  // de-chunked body bytes, unless spill
	spill   bool // the caller drains Body after each feed: no bound
	noBody  bool // the request was HEAD
	spare   int  // extra capacity of Header for the caller

	state uint8
	head  []byte // a head not complete yet (copied from the reads)
	line  []byte // a chunk-size or trailer line not complete yet
	total int    // bytes consumed, all heads included

	Status    int
	Proto11   bool
	Header    []reactor.Header // the final head's fields, minus none: views into one string
	ConnClose bool             // Connection: close, or HTTP/1.0 without keep-alive
	Conn      string           // the Connection header's value, for hopByHop
	CT        string           // Content-Type
	mode      uint8
	remain    int64 // Content-Length bytes, or the current chunk's, still to come
	Body      []byte

	// Memory kept from one response to the next on the connection: the
	// caller is done with Header and Body when it feeds the next request
	// (the loop path answers from them at once: RespondLoop copies).
	hdrBuf  []reactor.Header
	bodyBuf []byte
}

// maxKeptBody bounds the body buffer a parser keeps between responses.
const maxKeptBody = 64 << 10

// Parser states.
const (
	psHead       = iota // reading a head
	psLength            // body by Content-Length
	psChunkSize         // a chunk-size line
	psChunkData         // chunk data
	psChunkEnd          // the CRLF after chunk data
	psTrailer           // trailer lines until a blank one
	psUntilClose        // body delimited by the connection's close
	psDone
)

// Body framings.
const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyClose
)

// maxChunkLine bounds a chunk-size line (with extensions) and a trailer
// line.
const maxChunkLine = 4096

// Parser errors. errBodyTooLarge is not final: the parser stopped before
// the body bytes over the bound, and the caller may set spill (it drains
// Body after each feed from then on) and feed the rest.
var (
	errHeadTooLarge    = errors.New("upstream response head too large")
	errBodyTooLarge    = errors.New("upstream response body too large for the loop path")
	errBadResponse     = errors.New("malformed upstream response")
	errUnexpectedEOF   = errors.New("upstream closed the connection before the response ended")
	errSwitchProtocols = errors.New("upstream answered 101 Switching Protocols")
)

func newRespParser(maxHead, maxBody int) respParser {
	return respParser{maxHead: maxHead, maxBody: maxBody}
}

// reset readies p for the next response on the same connection, keeping
// its limits and its scratch buffers' memory.
func (p *respParser) reset(noBody bool, spare int) {
	hdr, body := p.hdrBuf, p.bodyBuf
	if cap(p.Header) > cap(hdr) {
		hdr = p.Header
	}
	clear(hdr[:cap(hdr)]) // let the last response's strings go
	if cap(p.Body) > cap(body) && cap(p.Body) <= maxKeptBody {
		body = p.Body
	}
	*p = respParser{maxHead: p.maxHead, maxBody: p.maxBody, noBody: noBody, spare: spare, head: p.head[:0], line: p.line[:0],
		hdrBuf: hdr[:0], bodyBuf: body[:0]}
	p.Body = p.bodyBuf
}

// headDone reports whether the final (non-1xx) head has been read.
func (p *respParser) headDone() bool { return p.state > psHead }

// done reports whether the whole response has been read.
func (p *respParser) done() bool { return p.state == psDone }

// started reports whether any byte of a response arrived.
func (p *respParser) started() bool { return p.total > 0 || len(p.head) > 0 }

// keepAlive reports whether the connection may carry another request once
// the response is done.
func (p *respParser) keepAlive() bool { return !p.ConnClose && p.mode != bodyClose }

// feed consumes data up to the end of the response and returns how many
// bytes it used; bytes after the end are left (the caller decides: an
// upstream that sends more than one answer is not reused). An error is
// final: the response cannot be read.
func (p *respParser) feed(data []byte) (int, error) {
	used := 0
	for used < len(data) && p.state != psDone {
		n, err := p.step(data[used:])
		used += n
		p.total += n
		if err != nil {
			return used, err
		}
	}
	return used, nil
}

// eof tells p that the connection ended: a body delimited by the close is
// complete, anything else unfinished is errUnexpectedEOF.
func (p *respParser) eof() error {
	switch p.state {
	case psDone:
		return nil
	case psUntilClose:
		p.state = psDone
		return nil
	}
	return errUnexpectedEOF
}

// step consumes some of data (at least one byte unless it errs).
func (p *respParser) step(data []byte) (int, error) {
	switch p.state {
	case psHead:
		return p.stepHead(data)
	case psLength:
		n := int(min(int64(len(data)), p.remain))
		if !p.spill && len(p.Body)+n > p.maxBody {
			return 0, errBodyTooLarge
		}
		p.Body = append(p.Body, data[:n]...)
		p.remain -= int64(n)
		if p.remain == 0 {
			p.state = psDone
		}
		return n, nil
	case psChunkSize:
		line, n, ok, err := p.readLine(data)
		if !ok || err != nil {
			return n, err
		}
		size, ok := httplex.ParseChunkSize(line)
		if !ok {
			return n, errBadResponse
		}
		if size == 0 {
			p.state = psTrailer
			return n, nil
		}
		p.remain, p.state = size, psChunkData
		if !p.spill && int64(len(p.Body))+size > int64(p.maxBody) {
			return n, errBodyTooLarge // resumable: the chunk's data comes next
		}
		return n, nil
	case psChunkData:
		n := int(min(int64(len(data)), p.remain))
		p.Body = append(p.Body, data[:n]...)
		p.remain -= int64(n)
		if p.remain == 0 {
			p.state = psChunkEnd
		}
		return n, nil
	case psChunkEnd, psTrailer:
		line, n, ok, err := p.readLine(data)
		if !ok || err != nil {
			return n, err
		}
		switch {
		case p.state == psChunkEnd && len(line) != 0:
			return n, errBadResponse
		case p.state == psChunkEnd:
			p.state = psChunkSize
		case len(line) == 0:
			p.state = psDone // trailer fields are dropped: Respond has no trailers
		}
		return n, nil
	case psUntilClose:
		if !p.spill && len(p.Body)+len(data) > p.maxBody {
			return 0, errBodyTooLarge
		}
		p.Body = append(p.Body, data...)
		return len(data), nil
	}
	panic("BUG: respParser.step in state done")
}

// readLine returns the next line of data without its LF (and CR), joined
// with the partial line p kept from earlier reads; ok is false when data
// holds no LF (all of it was kept).
func (p *respParser) readLine(data []byte) (line []byte, n int, ok bool, err error) {
	i := indexByte(data, '\n')
	if i < 0 {
		if len(p.line)+len(data) > maxChunkLine {
			return nil, len(data), false, errBadResponse
		}
		p.line = append(p.line, data...)
		return nil, len(data), false, nil
	}
	if len(p.line)+i > maxChunkLine {
		return nil, i + 1, false, errBadResponse
	}
	if len(p.line) > 0 {
		p.line = append(p.line, data[:i]...)
		line = p.line
		p.line = p.line[:0] // line stays valid until the next readLine
	} else {
		line = data[:i]
	}
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, i + 1, true, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// headEnd returns the length of the head in b (through the blank line that
// ends it), or -1. Lines end in LF or CRLF. from is where to start looking
// (bytes before it were scanned already).
func headEnd(b []byte, from int) int {
	for i := max(from, 0); i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		j := i + 1
		if j < len(b) && b[j] == '\r' {
			j++
		}
		if j < len(b) && b[j] == '\n' {
			return j + 1
		}
	}
	return -1
}

// stepHead finds the end of a head in the kept bytes plus data, parses it
// and picks the body's framing.
func (p *respParser) stepHead(data []byte) (int, error) {
	var full []byte
	var n int
	if len(p.head) == 0 {
		end := headEnd(data, 0)
		if end < 0 {
			if len(data) > p.maxHead {
				return 0, errHeadTooLarge
			}
			p.head = append(p.head, data...)
			return len(data), nil
		}
		full, n = data[:end], end
	} else {
		old := len(p.head)
		p.head = append(p.head, data...)
		end := headEnd(p.head, old-2) // the blank line may start in the kept bytes
		if end < 0 {
			if len(p.head) > p.maxHead {
				return 0, errHeadTooLarge
			}
			return len(data), nil
		}
		full, n = p.head[:end], end-old
		p.head = p.head[:end]
	}
	if len(full) > p.maxHead {
		return 0, errHeadTooLarge
	}
	err := p.parseHead(string(full)) // one copy: the fields are views into it
	p.head = p.head[:0]
	if err != nil {
		return n, err
	}
	return n, nil
}

// parseHead parses a complete head and sets the state that follows it.
func (p *respParser) parseHead(h string) error {
	line, rest, _ := strings.Cut(h, "\n")
	line = strings.TrimSuffix(line, "\r")
	// "HTTP/1.x SSS[ reason]"
	if len(line) < 12 || line[:7] != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return errBadResponse
	}
	status := 0
	for _, c := range []byte(line[9:12]) {
		if c < '0' || c > '9' {
			return errBadResponse
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 {
		return errBadResponse
	}
	proto11 := line[7] == '1'
	var (
		// One allocation, with room for the few headers the answer adds
		// (loopReq.answerHeaders filters and extends it in place).
		hdr                    = slices.Grow(p.hdrBuf[:0], strings.Count(rest, "\n")+p.spare)
		cl               int64 = -1
		te, conn, ct     string
		haveTE, closeTok bool
		keepAlive        bool
	)
	for {
		var l string
		l, rest, _ = strings.Cut(rest, "\n")
		l = strings.TrimSuffix(l, "\r")
		if l == "" {
			break
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || !httplex.IsToken(name) {
			return errBadResponse // also obs-fold: a line starting with a space
		}
		value = httplex.TrimOWS(value)
		if !httplex.ValidValue(value) {
			return errBadResponse
		}
		switch {
		case equalFold(name, "Content-Length"):
			v, ok := httplex.ParseDecimal(value)
			if !ok || (cl >= 0 && v != cl) {
				return errBadResponse
			}
			cl = v
		case equalFold(name, "Transfer-Encoding"):
			haveTE = true
			if te == "" {
				te = value
			} else {
				te += "," + value
			}
		case equalFold(name, "Connection"):
			if conn == "" {
				conn = value
			} else {
				conn += "," + value
			}
			for tok := range strings.SplitSeq(value, ",") {
				tok = httplex.TrimOWS(tok)
				closeTok = closeTok || equalFold(tok, "close")
				keepAlive = keepAlive || equalFold(tok, "keep-alive")
			}
		case equalFold(name, "Content-Type"):
			if ct == "" {
				ct = value
			}
		}
		hdr = append(hdr, reactor.Header{Name: name, Value: value})
	}
	if status < 200 {
		if status == 101 {
			return errSwitchProtocols
		}
		return nil // 1xx: skipped, the real head follows (state stays psHead)
	}
	p.Status, p.Proto11, p.Header, p.Conn, p.CT = status, proto11, hdr, conn, ct
	p.ConnClose = closeTok || (!proto11 && !keepAlive)
	switch {
	case p.noBody || status == 204 || status == 304:
		p.mode, p.state = bodyNone, psDone
	case haveTE:
		last := te
		if i := strings.LastIndexByte(te, ','); i >= 0 {
			last = te[i+1:]
		}
		if equalFold(httplex.TrimOWS(last), "chunked") {
			p.mode, p.state = bodyChunked, psChunkSize
		} else {
			p.mode, p.state = bodyClose, psUntilClose
		}
	case cl > int64(p.maxBody) && !p.spill:
		p.mode, p.state, p.remain = bodyLength, psLength, cl
		return errBodyTooLarge // resumable, as step's
	case cl == 0:
		p.mode, p.state = bodyLength, psDone
	case cl > 0:
		p.mode, p.state, p.remain = bodyLength, psLength, cl
		p.Body = slices.Grow(p.bodyBuf[:0], int(cl)) // reused by the next response (reset)
	default:
		p.mode, p.state = bodyClose, psUntilClose
	}
	return nil
}
