package jinja

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of one rendering. A template is an operator's file and its data
// a client's request: neither may make a rendering run or grow without
// end.
const (
	// MaxOutput is the most a rendering writes (a block set or macro call
	// counts apart, each bounded so too).
	MaxOutput = 64 << 20
	// MaxSteps is the most loop iterations and macro calls a rendering
	// makes, all loops together: 10M is about a second of the cheapest
	// loop body, far past a chat template's few hundred.
	MaxSteps = 10_000_000
	// MaxWork is the most bytes of strings (and 16 a list item) a
	// rendering's expressions build, all together: a loop appending to a
	// string (ns.s = ns.s ~ x) copies it each time, so within MaxSteps
	// and MaxOutput it could still copy terabytes. 1 GiB is about 0.3 s
	// of copying, a thousand times a chat template's own.
	MaxWork = 1 << 30
	// maxCallDepth bounds macro recursion (Python's own limit is 1,000
	// frames; a template's recursive macro over a tool schema nests as
	// deep as the schema, a few levels).
	maxCallDepth = 100
	// maxRange is jinja2's sandbox MAX_RANGE: range() of more is an error.
	maxRange = 100_000
)

// Template is a compiled template. It is immutable: Render keeps each
// rendering's state in its own values, so one Template renders from any
// number of goroutines at once.
type Template struct {
	body []node
	// maxSteps and maxWork are MaxSteps and MaxWork (tests lower them
	// so a fuzzer's worst template takes milliseconds, not seconds).
	maxSteps, maxWork int
}

// Parse compiles a template source with transformers' settings. Its line
// ends are "\n" to jinja2's lexer ("\r\n" and "\r" become "\n", in the
// text and in string literals alike; a value's own are kept).
func Parse(src string) (*Template, error) {
	if !utf8.ValidString(src) {
		return nil, &SyntaxError{Line: 1, Column: 1, Message: "template is not valid UTF-8"}
	}
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	return &Template{body: body, maxSteps: MaxSteps, maxWork: MaxWork}, nil
}

// Render renders the template with the variables vars (only read: a
// template cannot change them). The error is a *RaisedError when the
// template called raise_exception, else an *Error.
func (t *Template) Render(vars map[string]any) (string, error) {
	return t.RenderAt(vars, time.Now())
}

// RenderAt is Render with strftime_now reading now.
func (t *Template) RenderAt(vars map[string]any, now time.Time) (string, error) {
	out, err := t.Append(make([]byte, 0, 1024), vars, now)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// Append renders as RenderAt onto dst and returns the extended buffer
// (dst sized for the output saves growing it; on an error dst as given).
func (t *Template) Append(dst []byte, vars map[string]any, now time.Time) (out []byte, err error) {
	st := &state{vars: vars, now: now, out: dst, maxSteps: t.maxSteps, maxWork: t.maxWork}
	defer func() {
		// A bug in the engine on some input must not take the process
		// down with it: client input never panics.
		if r := recover(); r != nil {
			out, err = dst, &Error{Message: fmt.Sprintf("BUG: template engine panic: %v\n%s", r, debug.Stack())}
		}
	}()
	ctl, err := st.execBody(t.body, newScope(nil))
	if err != nil {
		return dst, err
	}
	if ctl != ctlNone {
		return dst, errorf("'break' or 'continue' outside a loop")
	}
	return st.out, nil
}

// SyntaxError is a template that does not parse.
type SyntaxError struct {
	Line, Column int
	Message      string
	// Near is the source from the error's position (at most 40 bytes).
	Near string
}

func (e *SyntaxError) Error() string {
	if e.Near == "" {
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Message)
	}
	return fmt.Sprintf("line %d, column %d: %s (near %q)", e.Line, e.Column, e.Message, e.Near)
}

func newSyntaxError(src string, pos int, format string, args ...any) *SyntaxError {
	pos = min(max(pos, 0), len(src))
	line := 1 + strings.Count(src[:pos], "\n")
	col := 1 + utf8.RuneCountInString(src[strings.LastIndexByte(src[:pos], '\n')+1:pos])
	near := src[pos:]
	if len(near) > 40 {
		near = near[:40]
		for len(near) > 0 && !utf8.ValidString(near) {
			near = near[:len(near)-1]
		}
	}
	return &SyntaxError{Line: line, Column: col, Message: fmt.Sprintf(format, args...), Near: near}
}

// Error is a rendering that failed: a type error, an undefined value
// used, a bound exceeded.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

func errorf(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...)}
}

// RaisedError is the template's own refusal: it called
// raise_exception(Message).
type RaisedError struct{ Message string }

func (e *RaisedError) Error() string { return e.Message }
