package openai

import (
	"bytes"
	"fmt"

	"github.com/saltus-lb/saltus/internal/jsonscan"
)

// The structural cap on request bodies (DESIGN.md § Decoding untrusted
// bodies): before a large body is decoded, one pass counts its JSON
// values and nesting depth outside strings, and refuses a body over
// either limit. (A body on the loop too short to hold MaxValues values is
// decoded first, Decode checking its grammar and depth with scanValue,
// and scanned only when it fails, to word a refusal: shard's
// job.prepare.) The cap dates from the fastjson parse, which kept a Value
// (80 bytes) per JSON value and a pointer per array element, so a 15 MB
// body of `1,1,1,…` (7.5 M values) cost ~3 GB of RSS; the decoder now
// keeps nothing per value it skips (decode.go, issue 33), and the cap
// still bounds the work one body asks for.
//
// The same pass checks the JSON grammar, so that a syntax error reads
// "invalid JSON at byte 17: …" with an offset of its own. It is stricter
// than fastjson was in a few places fastjson deferred (escapes, number
// grammar: `\x`, `01`, `1.`, `nan` are refused here, as Python's json and
// pydantic refuse them) and as lenient in one: raw control characters
// inside strings pass, as they passed fastjson. Decode reads exactly this
// grammar (scanValue), on the loop and off it.

// ScanKind says why BodyLimits.Check (scanJSON) refused a body.
type ScanKind uint8

const (
	ScanOK       ScanKind = iota
	ScanSyntax            // not JSON: a 400
	ScanTooMany           // more values than the limit: a 413
	ScanTooDeep           // nested deeper than the limit: a 413
	NumScanKinds          // the refusal counters' size
)

// scanReasons are the reason labels of saltus_request_body_refused_total.
var scanReasons = [NumScanKinds]string{ScanSyntax: "invalid_json", ScanTooMany: "too_many_values", ScanTooDeep: "too_deep"}

// Reason is k's reason label in saltus_request_body_refused_total ("" for
// ScanOK).
func (k ScanKind) Reason() string { return scanReasons[k] }

// scanError is scanJSON's refusal: what, and at which byte.
type scanError struct {
	kind ScanKind
	off  int    // byte offset of the offending byte (len(body) at its end)
	msg  string // for ScanSyntax: what was wrong
}

// MaxScanDepth is the deepest nesting BodyLimits.MaxDepth may allow: the scanner
// keeps one bit per open container in a fixed array (no allocation).
const MaxScanDepth = 256

// scanJSON checks that b is one JSON value with at most maxValues values
// (objects, arrays, strings, numbers, literals; keys are not values) and
// at most maxDepth nested containers, in one pass without allocating. It
// returns the number of values and the deepest nesting, or why not: the
// first refusal found, byte by byte. maxDepth must be at most
// MaxScanDepth. Any goroutine.
func scanJSON(b []byte, maxValues, maxDepth int) (values, deepest int, _ scanError) {
	end, values, deepest, se := scanValue(b, 0, maxValues, maxDepth)
	if se.kind != ScanOK {
		return values, deepest, se
	}
	for end < len(b) && (b[end] == ' ' || b[end] == '\n' || b[end] == '\r' || b[end] == '\t') {
		end++
	}
	if end < len(b) {
		return values, deepest, scanError{kind: ScanSyntax, off: end, msg: fmt.Sprintf("unexpected %s after the top-level value", quoteAt(b, end))}
	}
	return values, deepest, scanError{}
}

// scanValue is scanJSON for the one value at b[i] (after white space): the
// offset just past it, or the first refusal in it. The decoder checks a
// request's members with it (decode.go), so that they meet scanJSON's
// grammar and depth.
func scanValue(b []byte, i, maxValues, maxDepth int) (end, values, deepest int, _ scanError) {
	if maxDepth > MaxScanDepth {
		panic(fmt.Sprintf("BUG: scanJSON: maxDepth %d over %d", maxDepth, MaxScanDepth))
	}
	const (
		wantValue        = iota // a value: the top level, after ':' or after ',' in an array
		wantValueOrClose        // after '['
		wantKeyOrClose          // after '{'
		wantKey                 // after ',' in an object
		wantColon               // after a key
		wantNext                // after a value: ',' or the container's close (or the end)
	)
	var (
		isObj [MaxScanDepth / 64]uint64 // bit d-1: level d is an object
		inObj bool                      // the innermost open container is an object
		depth int
		st    = wantValue
	)

	syntax := func(off int, format string, args ...any) scanError {
		return scanError{kind: ScanSyntax, off: off, msg: fmt.Sprintf(format, args...)}
	}
	// A value that ends at depth 0 returns where it ends (done), checked
	// where a value ends rather than on every token.
	for {
		for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
			i++
		}
		if i == len(b) {
			if len(b) == 0 {
				return 0, values, deepest, syntax(i, "empty body")
			}
			return 0, values, deepest, syntax(i, "unexpected end of the body")
		}
		c := b[i]
		switch st {
		case wantValue, wantValueOrClose:
			if c == ']' && st == wantValueOrClose {
				depth--
				inObj = depth > 0 && isObj[uint(depth-1)/64]&(1<<(uint(depth-1)%64)) != 0
				i++
				if depth == 0 {
					return i, values, deepest, scanError{}
				}
				st = wantNext
				continue
			}
			values++
			if values > maxValues {
				return 0, values, deepest, scanError{kind: ScanTooMany, off: i}
			}
			switch {
			case c == '{' || c == '[':
				if depth == maxDepth {
					return 0, values, deepest, scanError{kind: ScanTooDeep, off: i}
				}
				depth++
				deepest = max(deepest, depth)
				d := uint(depth - 1)
				inObj = c == '{'
				if inObj {
					isObj[d/64] |= 1 << (d % 64)
					st = wantKeyOrClose
				} else {
					isObj[d/64] &^= 1 << (d % 64)
					st = wantValueOrClose
				}
				i++
				continue
			case c == '"':
				if end := skipString(b, i); end > 0 {
					i = end
					break
				}
				end, e := scanString(b, i)
				if e.kind != ScanOK {
					return 0, values, deepest, e
				}
				i = end
			case c >= '1' && c <= '9':
				// Token ids and the like: a positive integer, then a
				// delimiter. Anything else (a fraction, an exponent, a bad
				// number) takes the whole grammar.
				if j := skipDigits(b, i+1); j < len(b) && (b[j] == ',' || b[j] == ']' || b[j] == '}') {
					i = j
					break
				}
				end, e := scanNumber(b, i)
				if e.kind != ScanOK {
					return 0, values, deepest, e
				}
				i = end
			case c == '-' || c == '0':
				end, e := scanNumber(b, i)
				if e.kind != ScanOK {
					return 0, values, deepest, e
				}
				i = end
			case c == 't' || c == 'f' || c == 'n':
				lit := "null"
				if c == 't' {
					lit = "true"
				} else if c == 'f' {
					lit = "false"
				}
				if string(b[i:min(i+len(lit), len(b))]) != lit {
					return 0, values, deepest, syntax(i, "unexpected %s, want a value (%s?)", quoteAt(b, i), lit)
				}
				i += len(lit)
			default:
				return 0, values, deepest, syntax(i, "unexpected %s, want a value", quoteAt(b, i))
			}
			if depth == 0 {
				return i, values, deepest, scanError{}
			}
			st = wantNext
		case wantKeyOrClose, wantKey:
			if c == '}' && st == wantKeyOrClose {
				depth--
				inObj = depth > 0 && isObj[uint(depth-1)/64]&(1<<(uint(depth-1)%64)) != 0
				i++
				if depth == 0 {
					return i, values, deepest, scanError{}
				}
				st = wantNext
				continue
			}
			if c != '"' {
				return 0, values, deepest, syntax(i, "unexpected %s, want an object key (a string)", quoteAt(b, i))
			}
			if end := skipString(b, i); end > 0 {
				i = end
			} else {
				end, e := scanString(b, i)
				if e.kind != ScanOK {
					return 0, values, deepest, e
				}
				i = end
			}
			if i < len(b) && b[i] == ':' { // the common "key":, in one step
				i++
				st = wantValue
				continue
			}
			st = wantColon
		case wantColon:
			if c != ':' {
				return 0, values, deepest, syntax(i, "unexpected %s, want ':' after an object key", quoteAt(b, i))
			}
			i++
			st = wantValue
		case wantNext: // depth > 0: a value at depth 0 returned where it ended
			obj := inObj
			switch {
			case c == ',' && obj:
				st = wantKey
			case c == ',':
				st = wantValue
			case c == '}' && obj, c == ']' && !obj:
				depth--
				inObj = depth > 0 && isObj[uint(depth-1)/64]&(1<<(uint(depth-1)%64)) != 0
				if depth == 0 {
					return i + 1, values, deepest, scanError{}
				}
			case obj:
				return 0, values, deepest, syntax(i, "unexpected %s, want ',' or '}' in an object", quoteAt(b, i))
			default:
				return 0, values, deepest, syntax(i, "unexpected %s, want ',' or ']' in an array", quoteAt(b, i))
			}
			i++
		}
	}
}

// skipString is scanString's fast path, for a string without escapes:
// the offset after the string starting at b[i] == '"', or -1 when it has
// an escape or no end (scanString then reads it, at most once more).
// Keys and roles are short: 8 bytes at a time over the first 64
// (jsonscan.Special) end them sooner than IndexByte's setup would (a 4 KB
// chat of short turns scanned in 5.0 µs with a byte loop over the first
// 16; with this and a value's end checked where it ends, BenchmarkScanJSON
// went from 310 to 248 ns for chat4K and 690 to 570 µs for messages10k).
func skipString(b []byte, i int) int {
	i++
	n := min(len(b), i+64)
	if j := jsonscan.Special(b[:n], i); j >= 0 {
		if b[j] == '"' {
			return j + 1
		}
		return -1
	}
	i = n
	q := bytes.IndexByte(b[i:], '"')
	if q < 0 || bytes.IndexByte(b[i:i+q], '\\') >= 0 {
		return -1
	}
	return i + q + 1
}

// scanString checks the string starting at b[i] == '"' and returns the
// offset after its closing quote. The common long string has no escape:
// two IndexByte calls (vectorized) find its end, so prompts pass at
// memory speed.
func scanString(b []byte, i int) (int, scanError) {
	start := i
	i++
	q := -1 // the first '"' at or after i, once found; -1: to be found
	for {
		if q < i { // first time, or an escaped quote consumed it
			k := bytes.IndexByte(b[i:], '"')
			if k < 0 {
				return 0, scanError{kind: ScanSyntax, off: len(b), msg: fmt.Sprintf("unterminated string (it opens at byte %d)", start)}
			}
			q = i + k
		}
		// Escapes before q: each is skipped, then the search for the next
		// goes on from it, never back over the string (a prompt with many
		// \n is one pass, not one per escape).
		bs := bytes.IndexByte(b[i:q], '\\')
		if bs < 0 {
			return q + 1, scanError{}
		}
		i += bs + 1 // after the backslash
		if i == len(b) {
			return 0, scanError{kind: ScanSyntax, off: i, msg: fmt.Sprintf("unterminated string (it opens at byte %d)", start)}
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
				return 0, scanError{kind: ScanSyntax, off: i - 1, msg: "invalid \\u escape in a string, want 4 hex digits"}
			}
			i += 5
		default:
			return 0, scanError{kind: ScanSyntax, off: i - 1, msg: fmt.Sprintf("invalid escape \\%s in a string", printable(b[i]))}
		}
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// scanNumber checks the number starting at b[i] (RFC 8259:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?) and returns the offset
// after it.
func scanNumber(b []byte, i int) (int, scanError) {
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	default:
		if i = skipDigits(b, i); i == start || b[i-1] == '-' {
			return badNumber(b, start, i)
		}
	}
	if i < len(b) && b[i] == '.' {
		n := i + 1
		if i = skipDigits(b, n); i == n {
			return badNumber(b, start, i)
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		n := i
		if i = skipDigits(b, n); i == n {
			return badNumber(b, start, i)
		}
	}
	// A number runs into the next token only through a delimiter: "01"
	// or "1x" is one bad number, not two tokens.
	if i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] >= 'a' && b[i] <= 'z' || b[i] >= 'A' && b[i] <= 'Z' || b[i] == '.' || b[i] == '+' || b[i] == '-') {
		return badNumber(b, start, i)
	}
	return i, scanError{}
}

// skipDigits returns the offset of the first non-digit at or after i.
func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i]-'0' <= 9 {
		i++
	}
	return i
}

func badNumber(b []byte, start, at int) (int, scanError) {
	return 0, scanError{kind: ScanSyntax, off: at, msg: fmt.Sprintf("invalid number %s", quoteSpan(b, start, at))}
}

// quoteAt names the byte at b[i] for an error message.
func quoteAt(b []byte, i int) string {
	if c := b[i]; c < 0x20 || c >= 0x7f {
		return printable(c)
	}
	return "'" + printable(b[i]) + "'"
}

// printable is c as an error message shows it.
func printable(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	return fmt.Sprintf("byte %#02x", c)
}

// quoteSpan quotes b[start:end+1] (clipped to b and to 32 bytes).
func quoteSpan(b []byte, start, end int) string {
	end = min(end+1, len(b), start+32)
	return fmt.Sprintf("%q", b[start:end])
}

// BodyLimits are the structural caps on a request body, checked before it
// is decoded. shard's Config.Body carries them.
type BodyLimits struct {
	// MaxValues is the most JSON values (objects, arrays, strings,
	// numbers, true/false/null; not keys) a body may hold; more is a 413.
	// Default 1,100,000: a completion with 1 M (or 2^20)
	// prompt_token_ids passes. The fastjson parse this was sized for held
	// ~400-450 bytes per value (406 MB for 1 M values); Decode keeps
	// nothing per value (issue 33), and the limit bounds the work one body
	// asks for; the decode workers and Explain decode at most MaxValues
	// values at once between them (shard's valueBudget).
	MaxValues int
	// MaxDepth is the deepest nesting of objects and arrays a body may
	// have; deeper is a 413. Default 64: an OpenAI request nests at most
	// ~6 levels (messages, content parts, tool schemas go deeper, rarely
	// past 20). At most 256.
	MaxDepth int
}

// DefaultBodyLimits returns the defaults documented on BodyLimits.
func DefaultBodyLimits() BodyLimits { return BodyLimits{MaxValues: 1_100_000, MaxDepth: 64} }

// Validate names the invalid fields.
func (l BodyLimits) Validate() error {
	switch {
	case l.MaxValues < 1:
		return fmt.Errorf("MaxValues must be positive, got %d", l.MaxValues)
	case l.MaxDepth < 1 || l.MaxDepth > MaxScanDepth:
		return fmt.Errorf("MaxDepth must be between 1 and %d, got %d", MaxScanDepth, l.MaxDepth)
	}
	return nil
}

// Check scans body against the limits: the number of JSON values, or the
// refusal as the answer's Error (413 over a limit, 400 for bad JSON) and
// why (the refusal counter's index). Any goroutine.
func (l BodyLimits) Check(body []byte) (values int, _ *Error, _ ScanKind) {
	values, _, se := scanJSON(body, l.MaxValues, l.MaxDepth)
	switch se.kind {
	case ScanOK:
		return values, nil, ScanOK
	case ScanTooMany:
		return values, &Error{Status: 413, Type: "invalid_request_error", Code: "too_many_json_values",
			Message: fmt.Sprintf("request body has more than %d JSON values (max-body-values %d; counting stopped at byte %d)", l.MaxValues, l.MaxValues, se.off)}, se.kind
	case ScanTooDeep:
		return values, &Error{Status: 413, Type: "invalid_request_error", Code: "json_too_deep",
			Message: fmt.Sprintf("request body nests JSON deeper than %d levels (max-body-depth %d; at byte %d)", l.MaxDepth, l.MaxDepth, se.off)}, se.kind
	default:
		return values, BadRequest("", "invalid JSON at byte %d: %s", se.off, se.msg), se.kind
	}
}
