package jinja

import (
	"strings"
)

// maxParseDepth bounds the nesting of expressions and blocks the parser
// follows: a template is an operator's file, but a fuzzer's or a
// careless one's must not exhaust the stack.
const maxParseDepth = 200

type parser struct {
	src   string
	toks  []token
	i     int
	depth int
}

func (p *parser) cur() *token  { return &p.toks[p.i] }
func (p *parser) peek() *token { return &p.toks[min(p.i+1, len(p.toks)-1)] }
func (p *parser) next() *token {
	t := &p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) fail(t *token, format string, args ...any) error {
	return newSyntaxError(p.src, t.pos, format, args...)
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.fail(p.cur(), "expected '%s', got %s", op, describe(p.cur()))
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.fail(t, "expected a name, got %s", describe(t))
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.fail(p.cur(), "expected end of statement block, got %s", describe(p.cur()))
	}
	p.next()
	return nil
}

func describe(t *token) string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tData:
		return "template data"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "end of print statement"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "end of statement block"
	case tName:
		return "'" + t.val + "'"
	case tString:
		return "string"
	case tInt, tFloat:
		return "number"
	}
	return "'" + t.val + "'"
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.fail(p.cur(), "nesting deeper than %d", maxParseDepth)
	}
	return nil
}

// parseBody parses nodes up to a block tag named in ends (or the
// template's end if ends is empty) and returns that tag's name, its
// "{%" consumed and its name too.
func (p *parser) parseBody(ends ...string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer func() { p.depth-- }()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.fail(t, "unexpected end of template, expected '%s'", strings.Join(ends, "' or '"))
			}
			return body, "", nil
		case tData:
			p.next()
			body = append(body, &textNode{text: t.val})
		case tVarBegin:
			p.next()
			e, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.fail(p.cur(), "expected end of print statement, got %s", describe(p.cur()))
			}
			p.next()
			body = append(body, &outputNode{e: e, pos: t.pos})
		case tBlockBegin:
			p.next()
			nt := p.cur()
			if nt.kind != tName {
				return nil, "", p.fail(nt, "expected a tag name, got %s", describe(nt))
			}
			for _, e := range ends {
				if nt.val == e {
					p.next()
					return body, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			body = append(body, n)
		default:
			return nil, "", p.fail(t, "unexpected %s", describe(t))
		}
	}
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet(t)
	case "macro":
		return p.parseMacro()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "generation":
		// transformers' AssistantTracker extension: the body renders as
		// it is (the tracking only matters for its masks).
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endgeneration")
		if err != nil {
			return nil, err
		}
		return &blockNode{body: body}, p.expectBlockEnd()
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &loopCtlNode{brk: true, pos: t.pos}, nil
		}
		return &loopCtlNode{pos: t.pos}, nil
	case "do":
		e, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &doNode{e: e}, p.expectBlockEnd()
	}
	return nil, p.fail(t, "encountered unknown tag '%s'", t.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		test, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.tests = append(n.tests, test)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			if n.orElse, _, err = p.parseBody("endif"); err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor() (node, error) {
	n := &forNode{}
	var err error
	if n.target, err = p.parseAssignTarget(false); err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.fail(p.cur(), "expected 'in', got %s", describe(p.cur()))
	}
	if n.iter, err = p.parseTuple(false, true); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if n.filter, err = p.parseExpr(); err != nil {
			return nil, err
		}
	}
	if p.skipName("recursive") {
		return nil, p.fail(p.cur(), "recursive loops are not supported")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody("endfor", "else")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.orElse, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

// parseAssignTarget: a name, names separated by commas (optionally in
// parentheses), or with withAttr name.attr (a namespace's attribute).
func (p *parser) parseAssignTarget(withAttr bool) (target, error) {
	var tg target
	paren := p.skipOp("(")
	for {
		t := p.cur()
		name, err := p.expectName()
		if err != nil {
			return tg, err
		}
		if name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None" {
			return tg, p.fail(t, "cannot assign to '%s'", name)
		}
		if withAttr && len(tg.names) == 0 && p.isOp(".") {
			p.next()
			attr, err := p.expectName()
			if err != nil {
				return tg, err
			}
			tg.names, tg.attr = []string{name}, attr
			return tg, nil
		}
		tg.names = append(tg.names, name)
		if !p.skipOp(",") {
			break
		}
		tg.tuple = true
		if paren && p.isOp(")") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return tg, err
		}
	}
	return tg, nil
}

func (p *parser) parseSet(t *token) (node, error) {
	tg, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		e, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &setNode{target: tg, e: e, pos: t.pos}, p.expectBlockEnd()
	}
	n := &setNode{target: tg, pos: t.pos}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.parseBody("endset"); err != nil {
		return nil, err
	}
	n.block = true
	return n, p.expectBlockEnd()
}

func (p *parser) parseMacro() (node, error) {
	m := &macroDef{}
	var err error
	if m.name, err = p.expectName(); err != nil {
		return nil, err
	}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var def expr
		if p.skipOp("=") {
			if def, err = p.parseExpr(); err != nil {
				return nil, err
			}
		} else if len(m.defaults) > 0 && m.defaults[len(m.defaults)-1] != nil {
			return nil, p.fail(p.cur(), "non-default argument follows default argument")
		}
		m.params = append(m.params, name)
		m.defaults = append(m.defaults, def)
	}
	p.next()
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if m.body, _, err = p.parseBody("endmacro"); err != nil {
		return nil, err
	}
	if p.cur().kind == tName && p.cur().val == m.name {
		p.next()
	}
	return &macroNode{m: m}, p.expectBlockEnd()
}

func (p *parser) parseFilterBlock() (node, error) {
	n := &filterBlockNode{}
	for first := true; first || p.skipOp("|"); first = false {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.parseBody("endfilter"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for !p.isOp("%") && p.cur().kind != tBlockEnd {
		if len(n.names) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		n.names = append(n.names, name)
		n.vals = append(n.vals, e)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.parseBody("endwith"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// parseTuple parses an expression, or a tuple of them separated by
// commas. withCond allows a conditional expression at the top (not in
// an if's test or a for's iterable, where "if" means something else);
// simple stops a for's iterable at "if".
func (p *parser) parseTuple(withCond, simple bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
			if !p.startsExpr() {
				break
			}
		}
		var e expr
		var err error
		if withCond {
			e, err = p.parseExpr()
		} else {
			e, err = p.parseOr()
		}
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !isTuple {
		return items[0], nil
	}
	return &listNode{items: items, isTuple: true}, nil
}

// startsExpr: the current token can begin an expression (a tuple's
// trailing comma is followed by none).
func (p *parser) startsExpr() bool {
	t := p.cur()
	switch t.kind {
	case tName, tString, tInt, tFloat:
		return true
	case tOp:
		switch t.val {
		case "(", "[", "{", "-", "+":
			return true
		}
	}
	return false
}

// parseExpr parses an expression with conditional expressions anywhere:
// `a if c else b`, the else optional (then undefined).
func (p *parser) parseExpr() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var orElse expr
		if p.skipName("else") {
			if orElse, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		e = &condNode{test: test, then: e, orElse: orElse}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	e, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.skipName("or") {
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		e = &orNode{a: e, b: r}
	}
	return e, nil
}

func (p *parser) parseAnd() (expr, error) {
	e, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.skipName("and") {
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		e = &andNode{a: e, b: r}
	}
	return e, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notNode{x: e}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	e, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var c *compareNode
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.peek().kind == tName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		if c == nil {
			c = &compareNode{first: e}
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if c != nil {
		return c, nil
	}
	return e, nil
}

func (p *parser) parseMath1() (expr, error) {
	e, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.next().val
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		if c, ok := e.(*addChain); ok && op == "+" {
			c.xs = append(c.xs, r)
		} else if op == "+" {
			e = &addChain{xs: []expr{e, r}}
		} else {
			e = &binNode{op: op, a: e, b: r}
		}
	}
	if c, ok := e.(*addChain); ok && len(c.xs) == 2 {
		return &binNode{op: "+", a: c.xs[0], b: c.xs[1]}, nil
	}
	return e, nil
}

func (p *parser) parseConcat() (expr, error) {
	e, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	for p.skipOp("~") {
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		e = &binNode{op: "~", a: e, b: r}
	}
	return e, nil
}

func (p *parser) parseMath2() (expr, error) {
	e, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		op := p.next().val
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		e = &binNode{op: op, a: e, b: r}
	}
	return e, nil
}

func (p *parser) parsePow() (expr, error) {
	e, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.skipOp("**") {
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		e = &binNode{op: "**", a: e, b: r}
	}
	return e, nil
}

// parseUnary: jinja2 applies a unary minus to the primary and its
// postfixes, and the filters after to the negation (-x|abs is abs(-x)).
func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	var e expr
	var err error
	switch {
	case p.isOp("-") || p.isOp("+"):
		op := p.next().val
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryNode{neg: op == "-", x: x}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tName:
		switch t.val {
		case "true", "True":
			return &constNode{v: true}, nil
		case "false", "False":
			return &constNode{v: false}, nil
		case "none", "None":
			return &constNode{v: nil}, nil
		}
		return &nameNode{name: t.val}, nil
	case tString:
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constNode{v: s}, nil
	case tInt:
		return &constNode{v: t.num}, nil
	case tFloat:
		return &constNode{v: t.fnum}, nil
	case tOp:
		switch t.val {
		case "(":
			if p.skipOp(")") {
				return &listNode{isTuple: true}, nil
			}
			e, err := p.parseTuple(true, false)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			n := &listNode{}
			for !p.isOp("]") {
				if len(n.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				e, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, e)
			}
			p.next()
			return n, nil
		case "{":
			n := &dictNode{}
			for !p.isOp("}") {
				if len(n.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			p.next()
			return n, nil
		}
	}
	return nil, p.fail(t, "unexpected %s", describe(t))
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.next()
			t := p.next()
			switch t.kind {
			case tName:
				e = &getattrNode{x: e, name: t.val}
			case tInt:
				e = &getitemNode{x: e, key: &constNode{v: t.num}}
			default:
				return nil, p.fail(t, "expected name or number after '.'")
			}
		case p.isOp("["):
			p.next()
			var err error
			if e, err = p.parseSubscript(e); err != nil {
				return nil, err
			}
		case p.isOp("("):
			p.next()
			args, err := p.parseCallArgs()
			if err != nil {
				return nil, err
			}
			e = &callNode{fn: e, args: args}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	var parts [3]expr
	n, colons := 0, 0
	for {
		if p.isOp(":") {
			p.next()
			colons++
			if colons > 2 {
				return nil, p.fail(p.cur(), "too many ':' in a subscript")
			}
			n = colons
			continue
		}
		if p.isOp("]") {
			p.next()
			break
		}
		if parts[n] != nil {
			return nil, p.fail(p.cur(), "expected ']' or ':', got %s", describe(p.cur()))
		}
		e, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		parts[n] = e
	}
	if colons == 0 {
		if parts[0] == nil {
			// x[] is x[()] in jinja2
			return &getitemNode{x: x, key: &listNode{isTuple: true}}, nil
		}
		return &getitemNode{x: x, key: parts[0]}, nil
	}
	return &sliceNode{x: x, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCallArgs() (*callArgs, error) {
	a := &callArgs{}
	for !p.isOp(")") {
		if len(a.pos)+len(a.kwNames) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			a.kwNames = append(a.kwNames, name)
			a.kwVals = append(a.kwVals, e)
			continue
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, p.fail(p.cur(), "*args and **kwargs in calls are not supported")
		}
		if len(a.kwNames) > 0 {
			return nil, p.fail(p.cur(), "positional argument follows keyword argument")
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		a.pos = append(a.pos, e)
	}
	p.next()
	return a, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.next()
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			p.next()
			t, err := p.parseTest(e)
			if err != nil {
				return nil, err
			}
			e = t
		case p.isOp("("):
			p.next()
			args, err := p.parseCallArgs()
			if err != nil {
				return nil, err
			}
			e = &callNode{fn: e, args: args}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseDottedName() (string, *token, error) {
	t := p.cur()
	name, err := p.expectName()
	if err != nil {
		return "", t, err
	}
	for p.isOp(".") {
		p.next()
		part, err := p.expectName()
		if err != nil {
			return "", t, err
		}
		name += "." + part
	}
	return name, t, nil
}

func (p *parser) parseFilter(x expr) (*filterNode, error) {
	name, t, err := p.parseDottedName()
	if err != nil {
		return nil, err
	}
	f := &filterNode{x: x, name: name, pos: t.pos}
	if f.fn = filterByName(name); f.fn == nil {
		return nil, p.fail(t, "no filter named '%s'", name)
	}
	if p.skipOp("(") {
		if f.args, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	} else {
		f.args = &callArgs{}
	}
	return f, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	negate := p.skipName("not")
	name, t, err := p.parseDottedName()
	if err != nil {
		return nil, err
	}
	n := &testNode{x: x, name: name, negate: negate}
	if n.fn = testByName(name); n.fn == nil {
		return nil, p.fail(t, "no test named '%s'", name)
	}
	c := p.cur()
	switch {
	case p.skipOp("("):
		if n.args, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat || c.kind == tOp && (c.val == "(" || c.val == "[" || c.val == "{")) &&
		!(c.kind == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
		if c.kind == tName && c.val == "is" {
			return nil, p.fail(c, "You cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		n.args = &callArgs{pos: []expr{arg}}
	default:
		n.args = &callArgs{}
	}
	return n, nil
}
